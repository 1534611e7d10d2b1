// fuzz_kld_base.cpp: libFuzzer target for the KL-divergence base-file reader (llm/perplexity.cpp, kld_base_reader).
// The input is the file. The model it is checked against has 7 tokens (records of 8 codes + 4 header u16), small
// enough for the fuzzer to reach the records; every chunk is read and compared with fixed logits.
#include "ggml-like/error.h"
#include "llm/perplexity.h"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    constexpr int64_t n_vocab = 7;
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
    try {
        kld_base_reader base(in, size, "fuzz.kld", n_vocab);
        const float logits[n_vocab] = {0.5f, -1.0f, 2.0f, 0.0f, 3.5f, -7.0f, 1.0f};
        std::vector<uint16_t> records;
        kld_stats k;
        const int64_t nv = kld_record_size(n_vocab);
        for (int32_t c = 0; c < base.n_chunk; c++) {
            base.read_chunk(records);
            for (int64_t j = 0; j < base.n_scored(); j++) {
                const int32_t target = base.tokens[size_t(c) * size_t(base.n_ctx) + size_t(base.n_ctx / 2 + j + 1)];
                compare_log_probs(logits, n_vocab, records.data() + j * nv, target, k);
            }
        }
    } catch (const error&) {
    }
    return 0;
}
