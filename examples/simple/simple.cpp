// simple: greedy text generation through the library alone (no CLI code).
//   simple [--ids] [--cuda] MODEL.gguf PROMPT [N_TOKENS]
// PROMPT "@FILE" reads the prompt from FILE (its bytes exactly). --ids prints the prompt's token ids, the N generated
// ids (not stopping at end of generation) and their text with newlines as \n, one line each ("prompt: ...",
// "gen: ...", "text: ..."), for comparing with llama.cpp's greedy tokens. --cuda runs on the GPU.
#include "ggml-like/error.h"
#include "llm/model.h"
#include "llm/sampler.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    bool ids = false, cuda = false;
    std::vector<std::string> args;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--ids") ids = true;
        else if (a == "--cuda") cuda = true;
        else args.push_back(a);
    }
    if (args.size() < 2 || args.size() > 3) {
        std::fprintf(stderr, "usage: %s [--ids] [--cuda] MODEL.gguf PROMPT|@FILE [N_TOKENS]\n", argv[0]);
        return 2;
    }
    const int n_predict = args.size() > 2 ? std::atoi(args[2].c_str()) : 32;
    try {
        std::string prompt = args[1];
        if (prompt.starts_with("@")) {
            std::ifstream in(prompt.substr(1), std::ios::binary);
            if (!in) throw tessera::error("cannot read " + prompt.substr(1));
            prompt.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        }
        auto m = tessera::model::load(args[0]);
        tessera::session_params sp;
        if (cuda) sp.device = tessera::device_type::cuda;
        tessera::session s(*m, sp);
        tessera::sampler greedy(tessera::sampler_params{.temp = 0.0f}, int32_t(m->hp.n_vocab));

        const auto tokens = m->voc.tokenize(prompt, /*add_special=*/true, /*parse_special=*/!ids);
        if (ids) {
            std::printf("prompt:");
            for (tessera::token t : tokens) std::printf(" %d", int(t));
            std::printf("\ngen:");
        } else {
            std::printf("%s", prompt.c_str());
        }
        std::string text;
        auto logits = s.decode(tokens);
        for (int i = 0; i < n_predict; i++) {
            const tessera::token t = greedy.sample(logits);
            if (ids) {
                std::printf(" %d", int(t));
                text += m->voc.token_to_piece(t, false);
            } else {
                if (m->voc.is_eog(t)) break;
                std::printf("%s", m->voc.token_to_piece(t, false).c_str());
                std::fflush(stdout);
            }
            const tessera::token next[1] = {t};
            logits = s.decode(next);
        }
        if (ids) {
            std::string esc;
            for (char c : text) esc += c == '\n' ? std::string("\\n") : std::string(1, c);
            std::printf("\ntext: %s", esc.c_str());
        }
        std::printf("\n");
    } catch (const tessera::error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
