// test_sampler.cpp: the sampling chain (llm/sampler.h): greedy, seeding, each filter, the repeat penalty, and the drawn
// frequencies against softmax.
#include "helpers.h"

#include "ggml-like/error.h"
#include "llm/sampler.h"

#include <algorithm>
#include <cmath>
#include <set>

namespace tessera {
namespace {

// Every filter off; only temperature and the draw remain.
sampler_params plain(float temp, uint32_t seed = 1234) {
    sampler_params sp;
    sp.temp = temp;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sp.seed = seed;
    return sp;
}

int32_t argmax(const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin()); // first of equal maxima
}

std::vector<int32_t> draw_sequence(sampler& s, int n, int32_t n_vocab) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) {
        const auto logits = test::random_normal(n_vocab, 100 + i, 2.0f);
        out.push_back(s.sample(logits));
        s.accept(out.back());
    }
    return out;
}

TEST(sampler, greedy_is_argmax_lowest_id_on_tie) {
    sampler_params sp;
    sp.temp = 0.0f;
    sampler s(sp, 6);
    const std::vector<float> logits = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, 3.0f};
    EXPECT_EQ(s.sample(logits), 1);
    sampler big(sp, 1000);
    for (uint32_t seed = 0; seed < 20; ++seed) {
        const auto r = test::random_normal(1000, seed);
        EXPECT_EQ(big.sample(r), argmax(r));
    }
}

TEST(sampler, same_seed_same_sequence) {
    sampler_params sp;
    sp.seed = 42;
    sampler a(sp, 500), b(sp, 500);
    EXPECT_EQ(draw_sequence(a, 200, 500), draw_sequence(b, 200, 500));
}

TEST(sampler, different_seeds_differ) {
    sampler_params sp = plain(1.0f, 1);
    sampler a(sp, 500);
    sp.seed = 2;
    sampler b(sp, 500);
    EXPECT_NE(draw_sequence(a, 200, 500), draw_sequence(b, 200, 500));
}

TEST(sampler, reset_repeats_and_random_seed_is_reported) {
    sampler_params sp; // seed 0xFFFFFFFF: random
    sp.repeat_penalty = 1.3f;
    sampler a(sp, 300);
    const auto first = draw_sequence(a, 100, 300);
    a.reset();
    EXPECT_EQ(draw_sequence(a, 100, 300), first);

    sp.seed = a.seed();
    sampler b(sp, 300);
    EXPECT_EQ(draw_sequence(b, 100, 300), first);
}

TEST(sampler, top_k_1_equals_greedy) {
    sampler_params sp;
    sp.temp = 1.5f;
    sp.top_k = 1;
    sp.top_p = 1.0f;
    sp.min_p = 0.0f;
    sampler s(sp, 1000);
    for (uint32_t seed = 0; seed < 200; ++seed) {
        const auto r = test::random_normal(1000, seed);
        EXPECT_EQ(s.sample(r), argmax(r));
    }
}

TEST(sampler, tiny_top_p_equals_greedy) {
    sampler_params sp = plain(1.0f);
    sp.top_p = 1e-6f;
    sampler s(sp, 1000);
    for (uint32_t seed = 0; seed < 200; ++seed) {
        const auto r = test::random_normal(1000, seed, 3.0f);
        EXPECT_EQ(s.sample(r), argmax(r));
    }
}

TEST(sampler, top_p_keeps_the_prefix_that_reaches_p) {
    // softmax = {0.5, 0.25, 0.125, 0.125}: top_p 0.7 keeps {0, 1}; token 1 then has probability 1/3.
    const std::vector<float> logits = {std::log(4.0f), std::log(2.0f), 0.0f, 0.0f};
    sampler_params sp = plain(1.0f);
    sp.top_p = 0.7f;
    sampler s(sp, 4);
    int n1 = 0;
    const int n = 6000;
    for (int i = 0; i < n; ++i) {
        const int32_t t = s.sample(logits);
        ASSERT_TRUE(t == 0 || t == 1) << "top_p 0.7 drew token " << t;
        n1 += t == 1;
    }
    EXPECT_NEAR(n1 / double(n), 1.0 / 3.0, 5 * std::sqrt((1.0 / 3) * (2.0 / 3) / n)); // 5 sigma
}

TEST(sampler, top_p_without_top_k_sorts_past_256) {
    // 2000 equal logits: ties go to the lower id, so top_p 0.5 keeps ids 0..999 (1000 with rounding).
    const std::vector<float> logits(2000, 1.0f);
    sampler_params sp = plain(1.0f);
    sp.top_p = 0.5f;
    sampler s(sp, 2000);
    int32_t hi = 0;
    for (int i = 0; i < 4000; ++i) hi = std::max(hi, s.sample(logits));
    EXPECT_LE(hi, 1000);
    EXPECT_GT(hi, 900); // drawn past the first 256-token sorted block
}

TEST(sampler, top_k_keeps_the_k_largest) {
    const std::vector<float> logits = {0.1f, 0.9f, 0.3f, 0.8f, 0.2f};
    sampler_params sp = plain(5.0f);
    sp.top_k = 2;
    sampler s(sp, 5);
    std::set<int32_t> seen;
    for (int i = 0; i < 2000; ++i) seen.insert(s.sample(logits));
    EXPECT_EQ(seen, (std::set<int32_t>{1, 3}));
}

TEST(sampler, min_p_filters) {
    // p relative to the top: {1, e^-1, e^-2, e^-4}. min_p 0.1 keeps tokens with p >= 0.1 p_max: {0, 1, 2}.
    const std::vector<float> logits = {4.0f, 3.0f, 2.0f, 0.0f};
    sampler_params sp = plain(1.0f);
    sp.min_p = 0.1f;
    sampler s(sp, 4);
    std::set<int32_t> seen;
    for (int i = 0; i < 20000; ++i) seen.insert(s.sample(logits));
    EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2})); // without the filter token 3 is drawn ~1.2% of the time

    sp.min_p = 0.0f;
    sampler off(sp, 4);
    seen.clear();
    for (int i = 0; i < 20000; ++i) seen.insert(off.sample(logits));
    EXPECT_EQ(seen, (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(sampler, repeat_penalty_moves_the_argmax) {
    sampler_params sp;
    sp.temp = 0.0f;
    sp.repeat_penalty = 1.1f;
    sp.repeat_last_n = 2;
    sampler s(sp, 8);

    // positive logit: 2.0 / 1.1 = 1.82 < 1.9
    const std::vector<float> pos = {2.0f, 1.9f, -1.0f, 0, 0, 0, 0, 0};
    EXPECT_EQ(s.sample(pos), 0);
    s.accept(0);
    EXPECT_EQ(s.sample(pos), 1);
    s.accept(0); // counted twice, still penalized once
    EXPECT_EQ(s.sample(pos), 1);

    // the window holds the last 2 tokens: after 5 and 6, token 0 is forgotten
    s.accept(5);
    s.accept(6);
    EXPECT_EQ(s.sample(pos), 0);

    // negative logit: -1.0 * 1.1 = -1.1 < -1.05
    const std::vector<float> neg = {-1.0f, -1.05f, -5, -5, -5, -5, -5, -5};
    s.accept(0);
    EXPECT_EQ(s.sample(neg), 1);

    s.reset();
    EXPECT_EQ(s.sample(neg), 0);
    EXPECT_EQ(s.sample(pos), 0);
}

TEST(sampler, repeat_penalty_off_by_default) {
    sampler_params sp;
    sp.temp = 0.0f;
    sampler s(sp, 3);
    s.accept(0);
    EXPECT_EQ(s.sample(std::vector<float>{2.0f, 1.9f, 0.0f}), 0);
}

// N draws at temperature T from fixed logits: each frequency must lie within 5 binomial sigmas,
// 5 * sqrt(p (1 - p) / N) <= 0.018 for N = 20000, of softmax(logits / T).
void expect_softmax_frequencies(const std::vector<float>& logits, float temp) {
    const int n = 20000;
    sampler s(plain(temp, 7), static_cast<int32_t>(logits.size()));
    std::vector<int> hits(logits.size(), 0);
    for (int i = 0; i < n; ++i) hits[s.sample(logits)]++;

    double sum = 0;
    std::vector<double> p(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(logits[i] / temp);
    for (size_t i = 0; i < logits.size(); ++i) {
        p[i] /= sum;
        const double bound = 5 * std::sqrt(p[i] * (1 - p[i]) / n);
        EXPECT_NEAR(hits[i] / double(n), p[i], bound) << "token " << i << " at temp " << temp;
    }
}

TEST(sampler, frequencies_match_softmax) {
    const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f}; // softmax {0.23, 0.63, 0.14, 0.03}
    expect_softmax_frequencies(logits, 1.0f);
    expect_softmax_frequencies(logits, 0.5f);
    expect_softmax_frequencies(logits, 2.0f);
}

TEST(sampler, rejects_bad_parameters) {
    sampler_params sp;
    sp.repeat_penalty = 0.0f;
    EXPECT_THROW(sampler(sp, 10), error);
    EXPECT_THROW(sampler(sampler_params{}, 0), error);
    sampler s(sampler_params{}, 3);
    EXPECT_THROW(s.sample(std::vector<float>{0.0f, NAN, 1.0f}), error);
}

} // namespace
} // namespace tessera
