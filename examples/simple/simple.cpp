// simple: greedy text generation through the library alone (no CLI code).
//   simple MODEL.gguf "PROMPT" [N_TOKENS]
#include "ggml-like/error.h"
#include "llm/model.h"
#include "llm/sampler.h"

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL.gguf \"PROMPT\" [N_TOKENS]\n", argv[0]);
        return 2;
    }
    const int n_predict = argc > 3 ? std::atoi(argv[3]) : 32;
    try {
        auto m = tessera::model::load(argv[1]);
        tessera::session s(*m, tessera::session_params{});
        tessera::sampler greedy(tessera::sampler_params{.temp = 0.0f}, int32_t(m->hp.n_vocab));

        auto tokens = m->voc.tokenize(argv[2], /*add_special=*/true, /*parse_special=*/true);
        std::printf("%s", argv[2]);
        auto logits = s.decode(tokens);
        for (int i = 0; i < n_predict; i++) {
            const tessera::token t = greedy.sample(logits);
            if (m->voc.is_eog(t)) break;
            std::printf("%s", m->voc.token_to_piece(t, false).c_str());
            std::fflush(stdout);
            const tessera::token next[1] = {t};
            logits = s.decode(next);
        }
        std::printf("\n");
    } catch (const tessera::error& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
