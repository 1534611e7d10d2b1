// sampler.h: picks the next token from a row of logits. The chain and its semantics follow llama.cpp's default
// (common/sampling.cpp, src/llama-sampler.cpp): repeat penalty -> top_k -> top_p -> min_p -> temperature -> softmax ->
// a draw from a seeded std::mt19937. The logits themselves come from llm/model.cpp.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace tessera {

struct sampler_params {
    float temp = 0.8f;           // <= 0: greedy (argmax of the penalized logits, lowest id on ties)
    int32_t top_k = 40;          // keep the k largest logits; <= 0: off
    float top_p = 0.95f;         // keep the smallest prefix whose probability reaches top_p; >= 1: off
    float min_p = 0.05f;         // keep tokens with p >= min_p * p_max; <= 0: off
    float repeat_penalty = 1.0f; // divides positive, multiplies negative logits of recent tokens; 1: off
    int32_t repeat_last_n = 64;  // how many accepted tokens the penalty looks back; 0: off, < 0: all
    uint32_t seed = 0xFFFFFFFF;  // 0xFFFFFFFF: a random seed, reported by sampler::seed()
};

class sampler {
  public:
    // Throws tessera::error on parameters no chain can use (n_vocab <= 0, repeat_penalty <= 0 or not finite, NaN).
    sampler(const sampler_params& params, int32_t n_vocab);

    // logits (n_vocab) -> a token id. Does not accept the token: call accept() with the one actually used.
    int32_t sample(std::span<const float> logits);
    // Remembers a token for the repeat penalty (prompt tokens included, as in llama.cpp).
    void accept(int32_t tok);
    // Forgets the accepted tokens and restarts the random stream from seed(), so a reset sampler repeats itself.
    void reset();
    // The seed in use: params.seed, or the random one drawn for 0xFFFFFFFF.
    uint32_t seed() const { return seed_; }
    const sampler_params& params() const { return params_; }

  private:
    struct candidate {
        int32_t id;
        float logit;
        float p; // unnormalized exp(logit - max) while drawing
    };

    void apply_repeat_penalty();
    void apply_top_k(int32_t k);
    void apply_top_p(float p);
    void apply_min_p(float p);
    void sort_prefix(size_t n);
    int32_t draw();

    sampler_params params_;
    int32_t n_vocab_;
    uint32_t seed_;
    std::mt19937 rng_;

    std::vector<candidate> cand_; // (n_vocab) working set; the first n_cand_ are alive
    size_t n_cand_ = 0;
    size_t n_sorted_ = 0; // cand_[0, n_sorted_) is in descending order (ties: lower id first) and >= the rest

    // Repeat-penalty window. Counting per token makes the penalty O(distinct recent tokens), not O(n_vocab).
    std::vector<int32_t> count_;    // (n_vocab) occurrences of each token in the window
    std::vector<int32_t> distinct_; // the tokens with count_ > 0, in no particular order
    std::vector<int32_t> window_;   // ring of the last repeat_last_n accepted tokens (unused when < 0: no eviction)
    size_t window_head_ = 0;        // oldest slot once the ring is full
};

} // namespace tessera
