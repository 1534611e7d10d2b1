// tokenize.cpp: `tessera tokenize`: text -> token ids with a model's vocabulary, like llama.cpp's llama-tokenize.
// Only the GGUF metadata is read; the weights stay untouched on disk.
#include "commands.h"
#include "options.h"

#include "ggml-like/error.h"
#include "ggml-like/gguf.h"
#include "llm/vocab.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>

namespace tessera::cli {

namespace {

struct tokenize_options {
    std::string model;
    std::string prompt;
    std::string file;
    bool ids = false;
    bool no_bos = false;
    bool no_parse_special = false;
    bool json = false;
};

void tokenize_main(const tokenize_options& o, bool has_prompt, bool has_file) {
    if (has_prompt == has_file) throw error("tokenize: give the text with exactly one of -p/--prompt or -f/--file");
    const std::string text = has_file ? read_text_file(o.file) : o.prompt;
    const vocab voc = vocab::from_gguf(gguf_file::open(o.model));

    // As llama-tokenize: add_special only when the model adds BOS and --no-bos is absent (EOS then follows the
    // model's add_eos too); special-token text is parsed unless --no-parse-special.
    const bool add_special = voc.add_bos() && !o.no_bos;
    const std::vector<token> ids = voc.tokenize(text, add_special, !o.no_parse_special);

    if (o.json) {
        nlohmann::json pieces = nlohmann::json::array();
        for (token id : ids) pieces.push_back(voc.token_to_piece(id, true));
        const nlohmann::json out = {{"n_tokens", ids.size()}, {"ids", ids}, {"pieces", pieces}};
        // pieces can be partial UTF-8 sequences (byte tokens); replace those bytes rather than fail
        fmt::print("{}\n", out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    } else if (o.ids) {
        std::string line = "[";
        for (size_t i = 0; i < ids.size(); i++) line += (i ? ", " : "") + std::to_string(ids[i]);
        fmt::print("{}]\n", line);
    } else {
        for (token id : ids) {
            const std::string piece = voc.token_to_piece(id, true);
            std::printf("%6d -> '", id);
            std::fwrite(piece.data(), 1, piece.size(), stdout); // raw bytes, as llama-tokenize prints them
            std::printf("'\n");
        }
    }
    std::fflush(stdout);
}

} // namespace

void add_tokenize(CLI::App& app) {
    auto o = std::make_shared<tokenize_options>();
    CLI::App* cmd = app.add_subcommand("tokenize", "Show the token ids of a text (reads only the model's vocabulary)");
    cmd->add_option("-m,--model", o->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    CLI::Option* p = cmd->add_option("-p,--prompt", o->prompt, "Text to tokenize, taken literally (no escapes)");
    CLI::Option* f =
        cmd->add_option("-f,--file", o->file, "Tokenize the bytes of this file exactly (no newline added)");
    p->excludes(f);
    cmd->add_flag("--ids", o->ids, "Print only the ids, as a list like [1, 2, 3]");
    cmd->add_flag("--no-bos", o->no_bos, "Do not add the BOS token even if the model adds one");
    cmd->add_flag("--no-parse-special", o->no_parse_special,
                  "Tokenize special-token text such as <|im_start|> as plain text");
    cmd->add_flag("--json", o->json, "Print {\"n_tokens\", \"ids\", \"pieces\"} as one JSON object");
    cmd->footer("Example:\n  tessera tokenize -m models/SmolLM2-135M-Instruct.Q4_1.gguf -p \"Hello world\" --ids\n"
                "  [19556, 905]");
    cmd->callback([o, p, f] { tokenize_main(*o, p->count() > 0, f->count() > 0); });
}

} // namespace tessera::cli
