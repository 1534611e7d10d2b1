// score.h: what perplexity and the KL-divergence mode need of one row of logits, computed where the logits are (the
// score op, ops.h: every backend runs it, so only these few words per token leave the device). One definition of the
// arithmetic for the CPU op, the host-side helpers of llm/perplexity.h and the reference of the CUDA kernel's tests:
//   nll     -log softmax(logits)[target]: max-subtracted, f32 exps summed in double (llama-perplexity's log_softmax);
//   encode  that, and the token's record of llama.cpp's KL-divergence base file (FORMATS.md §8): f32 scale, f32 min
//           log-prob, then n_vocab u16 codes of the log-probs clamped 16 below the max, padded to an even count;
//   compare that, and the KL divergence of the logits from a base record, and whether both put the same token first.
#pragma once

#include <cstdint>

namespace tessera {

enum class score_mode : int32_t { nll = 0, encode = 1, compare = 2 };

// A scored row as 32-bit words: [0, 2) the NLL as a double (as the mode computes it), [2, 4) the KL divergence
// (double, compare), [4] the NLL as llama.cpp's KL-divergence mode keeps it (f32 bits, compare), [5] 1 when the argmax
// of the logits and of the base record agree (compare); then, in encode mode, the base-file record.
constexpr int64_t score_header_words = 6;

// u16 values in one base-file record: scale, min log-prob (two each), the codes, padding.
inline int64_t kld_record_size(int64_t n_vocab) {
    return 2 * ((n_vocab + 1) / 2) + 4;
}

inline int64_t score_row_words(score_mode m, int64_t n_vocab) {
    return score_header_words + (m == score_mode::encode ? kld_record_size(n_vocab) / 2 : 0);
}

// NLL of `target` under softmax(logits).
double score_nll(const float* logits, int64_t n_vocab, int32_t target);
// Writes the base-file record of `logits` (kld_record_size(n_vocab) u16); returns the NLL as llama.cpp computes it
// while writing (from the f32 log of the sum).
double score_encode(const float* logits, int64_t n_vocab, int32_t target, uint16_t* record);

struct kld_row {
    float nll;     // as llama.cpp's KL-divergence mode: f32 max + log(sum) - logit
    double kld;    // sum_i p_base,i (log p_base,i - log q_i) over base log-probs above -16
    bool same_top; // argmax of the logits == argmax of the base (first index on ties)
};
kld_row score_compare(const float* logits, int64_t n_vocab, const uint16_t* base_record, int32_t target);

// One row in `mode` into `out` (score_row_words(mode, n_vocab) words); `base_record` is read in compare mode only.
void score_row(score_mode mode, const float* logits, int64_t n_vocab, int32_t target, const uint16_t* base_record,
               int32_t* out);

} // namespace tessera
