// perplexity.h: llama-perplexity's method (FORMATS.md §8): fixed chunks of n_ctx tokens, the first replaced by BOS
// when the vocabulary adds one, the second half of each chunk scored; and its KL-divergence mode, with the base
// log-probabilities in llama.cpp's file format byte for byte, so bases written by either tool work in both.
#pragma once

#include "ggml-like/score.h"
#include "llm/model.h"

#include <cstdint>
#include <functional>
#include <istream>
#include <string>
#include <vector>

namespace tessera {

struct perplexity_params {
    int64_t n_ctx = 512;    // tokens per chunk
    int64_t n_chunks = -1;  // -1: every whole chunk of the text
    int64_t n_seq = 1;      // chunks evaluated in one batch (the session's context must hold n_seq * n_ctx)
    std::string kld_base_out; // write base log-probs here (--kl-divergence-base without --kl-divergence)
    std::string kld_base_in;  // compare against this base (--kl-divergence)
};

// Running sums of llama-perplexity's KL-divergence mode (per scored token).
struct kld_stats {
    double sum_nll = 0, sum_nll2 = 0, sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
    double sum_kld = 0, sum_kld2 = 0, sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
    float max_p_diff = 0;
    uint64_t n_same_top = 0, count = 0;
    std::vector<float> kld_values, p_diff_values; // per token, for percentiles
};

struct perplexity_result {
    int64_t n_tokens = 0;            // tokens in the text (or the base file)
    int64_t n_chunks = 0;
    int64_t count = 0;               // scored tokens
    double nll = 0, nll2 = 0;        // sums of the negative log-likelihood and its square
    std::vector<double> running_ppl; // after each chunk
    double ppl() const;
    double ppl_error() const;        // PPL * sqrt((mean(nll^2) - mean(nll)^2) / (count - 1))
    bool has_kld = false;
    kld_stats kld;
};

// Called after each chunk with (chunks done, total, result so far).
using perplexity_progress = std::function<void(int64_t done, int64_t total, const perplexity_result&)>;

// Runs the evaluation on `s` (its context must hold n_ctx tokens). `text` is ignored in KL-divergence mode (the base
// file carries the tokens). Throws tessera::error on too little text or a base file that does not fit the model.
perplexity_result run_perplexity(session& s, const std::string& text, const perplexity_params& p,
                                 const perplexity_progress& progress = {});

// ---- the pieces, exposed for tests ----

// NLL of `target` under softmax(logits) (max-subtracted, f32 exps summed in double).
double token_nll(const float* logits, int64_t n_vocab, int32_t target);
// One record of the base file: `nv = 2*ceil(n_vocab/2) + 4` u16 (f32 scale, f32 min_log_prob, n_vocab codes, pad).
// Returns the NLL of target, as llama.cpp does while writing.
double encode_log_probs(const float* logits, int64_t n_vocab, int32_t target, uint16_t* record);
// Updates `k` with one token's comparison; returns (KLD, Δp).
std::pair<double, float> compare_log_probs(const float* logits, int64_t n_vocab, const uint16_t* base_record,
                                           int32_t target, kld_stats& k);

// Reads a KL-divergence base file: "_logits_", i32 n_ctx, i32 n_vocab, i32 n_chunk, i32 tokens[n_chunk * n_ctx], then
// per chunk (n_ctx - 1 - n_ctx/2) records of kld_record_size(n_vocab) u16. The constructor reads the header and the
// tokens and checks them, and that the `size` bytes of the stream hold every record, before it allocates anything;
// it throws tessera::error("NAME: ...") on a file that is not a base file, is truncated, or was made with another
// vocabulary than the model's `model_vocab` tokens.
class kld_base_reader {
  public:
    kld_base_reader(std::istream& in, uint64_t size, std::string name, int64_t model_vocab);
    int32_t n_ctx = 0, n_vocab = 0, n_chunk = 0;
    std::vector<int32_t> tokens; // (n_chunk * n_ctx), each in [0, n_vocab)
    int64_t n_scored() const { return n_ctx - 1 - n_ctx / 2; } // records per chunk
    // The next chunk's records into `records` (resized to n_scored() * kld_record_size(n_vocab)).
    void read_chunk(std::vector<uint16_t>& records);

  private:
    std::istream& in_;
    std::string name_;
};

} // namespace tessera
