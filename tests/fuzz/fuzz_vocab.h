// fuzz_vocab.h: the vocabularies the tokenizer and chat fuzz targets use, loaded once per process from the test
// vocabularies in TESSERA_FUZZ_DATA/vocab (llama.cpp's ggml-vocab-*.gguf; override with $TESSERA_FUZZ_DATA). The BPE
// vocabulary is loaded once per pre-tokenizer name below, so each regex set gets fuzzed.
#pragma once

#include "ggml-like/error.h"
#include "ggml-like/gguf.h"
#include "llm/vocab.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace tessera::fuzz {

inline std::string vocab_path(const char* file) {
    const char* dir = std::getenv("TESSERA_FUZZ_DATA");
    return std::string(dir ? dir : TESSERA_FUZZ_DATA) + "/vocab/" + file;
}

inline gguf_file open_or_die(const std::string& path) {
    try {
        return gguf_file::open(path);
    } catch (const error& e) {
        std::fprintf(stderr, "fuzz: %s (set TESSERA_FUZZ_DATA to the folder holding vocab/)\n", e.what());
        std::exit(77); // "skipped" for the corpus replay tests (tests/CMakeLists.txt)
    }
}

inline const vocab& spm_vocab() {
    static const vocab v = vocab::from_gguf(open_or_die(vocab_path("ggml-vocab-llama-spm.gguf")));
    return v;
}

// Pre-tokenizer names covering every distinct regex family in llm/tokenizer_bpe.cpp.
inline const std::vector<std::string>& bpe_pre_names() {
    static const std::vector<std::string> names = {"gpt-2",    "default",      "llama-bpe",      "qwen2",
                                                   "smollm",   "deepseek-llm", "deepseek-coder", "deepseek-v3",
                                                   "falcon",   "gpt-4o",       "tekken",         "chameleon",
                                                   "jais-2",   "poro-chat",    "bailingmoe",     "exaone-moe",
                                                   "qwen35",   "seed-coder",   "minicpm5",       "laguna"};
    return names;
}

// The gpt-2 test vocabulary relabelled with another pre-tokenizer name.
inline vocab bpe_vocab(const std::string& pre) {
    static const gguf_file f = open_or_die(vocab_path("ggml-vocab-gpt-2.gguf"));
    gguf_writer w = gguf_writer::copy_of(f);
    w.set("tokenizer.ggml.pre", gguf_value::of_string(pre));
    return vocab::from_gguf(gguf_file::from_memory(w.to_bytes(), "gpt-2/" + pre));
}

// One BPE vocabulary per name in bpe_pre_names().
inline const std::vector<vocab>& bpe_vocabs() {
    static const std::vector<vocab> vs = [] {
        std::vector<vocab> out;
        for (const std::string& pre : bpe_pre_names()) out.push_back(bpe_vocab(pre));
        return out;
    }();
    return vs;
}

// WordPiece: the SPM test vocabulary relabelled "bert" (its "▁word" / "piece" texts are the converter's WordPiece
// spelling; BERT's default ids 100-103 are ordinary tokens there), lowercasing and not.
inline const std::vector<vocab>& wpm_vocabs() {
    static const std::vector<vocab> vs = [] {
        static const gguf_file f = open_or_die(vocab_path("ggml-vocab-llama-spm.gguf"));
        std::vector<vocab> out;
        for (bool lowercase : {true, false}) {
            gguf_writer w = gguf_writer::copy_of(f);
            w.set("tokenizer.ggml.model", gguf_value::of_string("bert"));
            w.set("tokenizer.ggml.normalizer.lowercase", gguf_value::of_bool(lowercase));
            out.push_back(vocab::from_gguf(gguf_file::from_memory(w.to_bytes(), "llama-spm/bert")));
        }
        return out;
    }();
    return vs;
}

} // namespace tessera::fuzz
