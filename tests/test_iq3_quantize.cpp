// test_iq3_quantize.cpp: the IQ3_XXS / IQ3_S quantizers (quant/iq3_quantize.cpp): bytes pinned to libggml's, the
// round-trip error, all-zero blocks and sub-blocks (IQ3_S's moved indices), signs, every grid point found again, and
// the same bytes from several threads.
#include "helpers.h"

#include "quant/iq3_s.h"
#include "quant/iq3_xxs.h"

#include <cstring>
#include <thread>

namespace tessera {
namespace {

using test::random_heavy;
using test::random_normal;
using test::rel_rmse;

// Reproducible data without <random>: an LCG's uniform values, sums of 4 of them for a bell shape, and per block a
// regime: scale 2^(b % 9 - 6), an all-zero sub-block, one below IQ3_XXS's 1e-8, an outlier, all negative.
std::vector<float> pinned_data(int n_blocks) {
    std::vector<float> x(size_t(n_blocks) * 256);
    uint32_t s = 12345;
    auto uniform = [&s] { // in [-1, 1)
        s = s * 1664525u + 1013904223u;
        return float(int32_t(s >> 8) - (1 << 23)) / float(1 << 23);
    };
    for (int b = 0; b < n_blocks; b++) {
        float* v = x.data() + 256 * b;
        const float scale = std::ldexp(1.0f, b % 9 - 6);
        for (int i = 0; i < 256; i++) v[i] = scale * (uniform() + uniform() + uniform() + uniform());
        if (b % 3 == 1)
            for (int i = 0; i < 32; i++) v[32 * (b % 8) + i] = 0.0f;
        if (b % 4 == 2)
            for (int i = 0; i < 32; i++) v[32 * ((b + 3) % 8) + i] *= 1e-9f;
        if (b % 5 == 3) v[(b * 37) % 256] = 40.0f * scale;
        if (b % 7 == 4)
            for (int i = 0; i < 256; i++) v[i] = -std::fabs(v[i]);
    }
    return x;
}

uint64_t fnv1a(const uint8_t* p, size_t n) {
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

template <class F> std::vector<typename F::block> quantize_blocks(const std::vector<float>& x) {
    std::vector<typename F::block> q(x.size() / 256);
    for (size_t b = 0; b < q.size(); b++) F::quantize(x.data() + 256 * b, q[b]);
    return q;
}

template <class F> std::vector<float> round_trip(const std::vector<float>& x) {
    std::vector<float> y(x.size());
    const auto q = quantize_blocks<F>(x);
    for (size_t b = 0; b < q.size(); b++) F::dequantize(q[b], y.data() + 256 * b);
    return y;
}

template <class F> uint64_t hash_of(const std::vector<typename F::block>& q) {
    return fnv1a(reinterpret_cast<const uint8_t*>(q.data()), q.size() * sizeof(typename F::block));
}

// First, while nothing has built the neighbour lists yet: threads that start quantizing together (building them
// concurrently, once) give the bytes of one thread.
TEST(iq3_quantize, threads_give_the_same_bytes) {
    const std::vector<float> x = random_normal(256 * 64, 17, 0.02f);
    std::vector<block_iq3_xxs> a[4];
    std::vector<block_iq3_s> b[4];
    std::vector<std::thread> pool;
    for (int t = 0; t < 4; t++)
        pool.emplace_back([&, t] {
            a[t] = quantize_blocks<iq3_xxs>(x);
            b[t] = quantize_blocks<iq3_s>(x);
        });
    for (auto& th : pool) th.join();
    for (int t = 1; t < 4; t++) {
        EXPECT_EQ(hash_of<iq3_xxs>(a[t]), hash_of<iq3_xxs>(a[0])) << t;
        EXPECT_EQ(hash_of<iq3_s>(b[t]), hash_of<iq3_s>(b[0])) << t;
    }
    EXPECT_EQ(hash_of<iq3_xxs>(quantize_blocks<iq3_xxs>(x)), hash_of<iq3_xxs>(a[0])); // and again, deterministic
    EXPECT_EQ(hash_of<iq3_s>(quantize_blocks<iq3_s>(x)), hash_of<iq3_s>(b[0]));
}

// The bytes of libggml's quantize_iq3_xxs / quantize_iq3_s without an importance matrix (llama.cpp's ggml at the
// version /tmp/lsrc holds, through ggml_quantize_chunk) on 64 blocks of pinned_data: FNV-1a of all of them.
// Checked besides on 96,000 random blocks of each type (Gaussian, uniform, Cauchy, zero / tiny sub-blocks, outliers,
// negative-only, ties, f16 values, ...) and on every tensor of random llama / qwen3moe files and SmolLM2.
TEST(iq3_quantize, bytes_pinned_to_ggml) {
    const std::vector<float> x = pinned_data(64);
    EXPECT_EQ(hash_of<iq3_xxs>(quantize_blocks<iq3_xxs>(x)), 0x905aec9e3d073416ull);
    EXPECT_EQ(hash_of<iq3_s>(quantize_blocks<iq3_s>(x)), 0xdacf1e3e8b7a1755ull);
    // block 0 in full, for a reader who wants to see what differs
    const uint8_t xxs0[8] = {0x00, 0x07, 0x6c, 0xbb, 0x86, 0x23, 0x97, 0x99}; // d, then the first indices
    const uint8_t s0[8] = {0x3a, 0x07, 0x82, 0xb5, 0x55, 0xa7, 0x3f, 0xef};
    block_iq3_xxs a;
    block_iq3_s b;
    iq3::quantize_xxs(x.data(), a);
    iq3::quantize_s(x.data(), b);
    EXPECT_EQ(std::memcmp(&a, xxs0, 8), 0);
    EXPECT_EQ(std::memcmp(&b, s0, 8), 0);
}

// Relative RMSE of the round trip (sum of squared errors over sum of squares, square root), 512 blocks. Measured:
// Gaussian iq3_xxs 0.213, iq3_s 0.166 (at most 0.216 / 0.169 over 39 seeds of 64 blocks); heavy-tailed (Student-t
// like) 0.284 / 0.218.
TEST(iq3_quantize, round_trip_error_bounded) {
    for (uint32_t seed : {1u, 5u}) {
        const std::vector<float> x = random_normal(256 * 512, seed, 0.02f), h = random_heavy(256 * 512, seed + 1);
        EXPECT_LT(rel_rmse(round_trip<iq3_xxs>(x), x), 0.24) << seed;
        EXPECT_LT(rel_rmse(round_trip<iq3_s>(x), x), 0.19) << seed;
        EXPECT_LT(rel_rmse(round_trip<iq3_xxs>(h), h), 0.31) << seed;
        EXPECT_LT(rel_rmse(round_trip<iq3_s>(h), h), 0.25) << seed;
        // the larger grid and a sign a value do better
        EXPECT_LT(rel_rmse(round_trip<iq3_s>(x), x), rel_rmse(round_trip<iq3_xxs>(x), x));
    }
}

TEST(iq3_quantize, zero_block_is_all_zero) {
    std::vector<float> x(256, 0.0f);
    block_iq3_xxs a;
    block_iq3_s b;
    std::memset(&a, 0xff, sizeof a);
    std::memset(&b, 0xff, sizeof b);
    iq3::quantize_xxs(x.data(), a);
    iq3::quantize_s(x.data(), b);
    const block_iq3_xxs za{};
    const block_iq3_s zb{};
    EXPECT_EQ(std::memcmp(&a, &za, sizeof a), 0);
    EXPECT_EQ(std::memcmp(&b, &zb, sizeof b), 0);
    // IQ3_XXS: a sub-block max below 1e-8 counts as zero too (ggml's GROUP_MAX_EPS_IQ3_XXS)
    for (size_t i = 0; i < x.size(); i++) x[i] = i % 2 ? 9e-9f : -5e-9f;
    iq3::quantize_xxs(x.data(), a);
    EXPECT_EQ(std::memcmp(&a, &za, sizeof a), 0);
}

// An all-zero sub-block among others: IQ3_XXS leaves its indices, signs and scale code 0; IQ3_S writes nothing for
// it and the next sub-blocks' indices and signs move up into its place (ggml's loop does not advance its pointers
// for it), while the high index bits and scales stay where they belong.
TEST(iq3_quantize, zero_sub_block) {
    std::vector<float> x = random_normal(256, 3, 0.02f), z = x;
    for (int i = 0; i < 32; i++) z[32 + i] = 0.0f; // sub-block 1
    block_iq3_xxs a, za;
    iq3::quantize_xxs(x.data(), a);
    iq3::quantize_xxs(z.data(), za);
    for (int k = 0; k < 8; k++) EXPECT_EQ(za.qs[8 + k], 0) << k;
    EXPECT_EQ(iq3_xxs::word(za, 1), 0u);
    float y[256]; // which decode to grid point 0 (4, 4, 4, 4) at the smallest scale d / 4: d, not 0 (as ggml's)
    iq3_xxs::dequantize(za, y);
    for (int i = 0; i < 32; i++) EXPECT_EQ(y[32 + i], to_f32(za.d)) << i;
    // the other sub-blocks' searches do not depend on it (only the scale codes, through the largest scale)
    EXPECT_EQ(std::memcmp(a.qs, za.qs, 8), 0);
    EXPECT_EQ(std::memcmp(a.qs + 16, za.qs + 16, 48), 0);

    block_iq3_s b, zb;
    iq3::quantize_s(x.data(), b);
    iq3::quantize_s(z.data(), zb);
    EXPECT_EQ(std::memcmp(zb.qs, b.qs, 8), 0);           // sub-block 0 in place
    EXPECT_EQ(std::memcmp(zb.qs + 8, b.qs + 16, 48), 0); // sub-blocks 2..7 one slot up
    EXPECT_EQ(std::memcmp(zb.signs + 4, b.signs + 8, 24), 0);
    for (int k = 0; k < 8; k++) EXPECT_EQ(zb.qs[56 + k], 0) << k; // the last slot unused
    for (int k = 0; k < 4; k++) EXPECT_EQ(zb.signs[28 + k], 0) << k;
    EXPECT_EQ(zb.qh[1], 0);
    for (int s : {0, 2, 3, 4, 5, 6, 7}) EXPECT_EQ(zb.qh[s], b.qh[s]) << s;
    EXPECT_EQ(iq3_s::scale(zb, 1), 0);
}

// Signs: IQ3_S keeps each value's; IQ3_XXS a group of 8's when its count of negatives is even, else all but the one
// of least |x| (the first of equals), which comes back with the other sign.
TEST(iq3_quantize, signs_follow_the_data) {
    const std::vector<float> x = random_normal(256 * 32, 11, 0.02f);
    for (int b = 0; b < 32; b++) {
        const float* xb = x.data() + 256 * b;
        block_iq3_xxs a;
        block_iq3_s s;
        iq3::quantize_xxs(xb, a);
        iq3::quantize_s(xb, s);
        for (int sb = 0; sb < 8; sb++) {
            int va[32], vs[32];
            iq3_xxs::values(a, sb, va);
            iq3_s::values(s, sb, vs);
            for (int g = 0; g < 4; g++) {
                const float* xg = xb + 32 * sb + 8 * g;
                int n_neg = 0, least = 0;
                for (int i = 0; i < 8; i++) {
                    n_neg += xg[i] < 0;
                    if (std::fabs(xg[i]) < std::fabs(xg[least])) least = i;
                }
                for (int i = 0; i < 8; i++) {
                    const bool flipped = n_neg % 2 == 1 && i == least;
                    EXPECT_EQ(va[8 * g + i] < 0, (xg[i] < 0) != flipped) << b << " " << sb << " " << g << " " << i;
                    EXPECT_EQ(vs[8 * g + i] < 0, xg[i] < 0) << b << " " << sb << " " << g << " " << i;
                }
            }
        }
    }
}

// Every grid point, laid out as the values 2l + 1 of its levels (the quantizer's scale of both grids) with one point
// holding level 7 first in each sub-block (so the sub-block max is 15), comes back as its own index.
template <class F, size_t N> void every_point_found(const std::array<uint16_t, N>& codes) {
    int top = 0; // the first point whose value 0 is at level 7 (both grids have one)
    while ((codes[size_t(top)] & 7) != 7) top++;
    std::vector<int> want;
    for (int i = 0; i < int(N); i++) {
        if (want.size() % 8 == 0) want.push_back(top);
        want.push_back(i);
    }
    while (want.size() % 256 != 0) want.push_back(top); // 4 values a point, 64 points a block
    std::vector<float> x(want.size() * 4);
    for (size_t p = 0; p < want.size(); p++)
        for (int k = 0; k < 4; k++) x[4 * p + size_t(k)] = float(2 * (codes[size_t(want[p])] >> (3 * k) & 7) + 1);
    const auto q = quantize_blocks<F>(x);
    for (size_t p = 0; p < want.size(); p++) {
        const auto& b = q[p / 64];
        const int s = int(p % 64) / 8, k = int(p % 8);
        int got;
        if constexpr (F::id == type::iq3_xxs)
            got = b.qs[8 * s + k];
        else
            got = iq3_s::index(b, s, k);
        ASSERT_EQ(got, want[p]) << F::name << " point " << p;
    }
}

TEST(iq3_quantize, every_grid_point_found) {
    every_point_found<iq3_xxs>(iq3::xxs_codes);
    every_point_found<iq3_s>(iq3::s_codes);
}

} // namespace
} // namespace tessera
