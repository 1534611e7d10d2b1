// test_quant.cpp: typed tests over every block format in TS_BLOCK_FORMATS: quantize -> dequantize error bounds on
// Gaussian and heavy-tailed data, exact round trips of representable values, vec_dot against a double dot product of
// the dequantized values, the CPU fast kernels against the references, and hand-built blocks decoded per FORMATS.md.
#include "helpers.h"

#include "backends/cpu/quant/repack.h"
#include "backends/cpu/quant/vec_dot.h"
#include "quant/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace tessera;
using tessera::test::random_heavy;
using tessera::test::random_normal;
using tessera::test::rel_rmse;

namespace {

// A whole row of x through the reference quantizer: the blocks, then the type's tail (i2_s: its scale). As bytes, so
// a tensor-scaled format carries its tail along.
template <class F> std::vector<uint8_t> quantize_all(const std::vector<float>& x) {
    std::vector<uint8_t> b(tensor_bytes(F::id, int64_t(x.size())));
    EXPECT_TRUE(quantize_tensor_ref(F::id, x.data(), b.data(), int64_t(x.size()), 1));
    return b;
}
template <class F> std::vector<float> dequantize_all(const std::vector<uint8_t>& b) {
    std::vector<float> y((b.size() - type_info(F::id).tail_bytes) / F::type_size * F::block_size);
    EXPECT_TRUE(dequantize_tensor_ref(F::id, b.data(), y.data(), int64_t(y.size()), 1));
    return y;
}
// Round-trip error bounds (relative RMSE) per format, measured values in brackets (normal, heavy-tailed):
// 8-bit ~ step/sqrt(12) with step = amax/127 of 32 values (~2.5 sigma) [q8_0 0.0054, 0.0082]; 4-bit ~ 16x that
// [q4_0 0.087, 0.127]. q8_K / i8_s take one scale per 256 values / per row (65536 values here), so amax and the step
// grow with the tail [q8_K 0.0070, 0.017; i8_s 0.010, 0.056]. awq4: 16 levels over max - min of 128 (64) values
// [0.100, 0.165; g64 0.092, 0.131]. nvfp4: E2M1 has 2 significant bits and a per-16 scale [0.096, 0.091]; mxfp4 the
// same values with a power-of-two scale per 32 [0.114, 0.140].
// tq2_0 / i2_s are ternary: Gaussian weights keep only about half their energy whatever the scale (absmean is near
// optimal for i2_s [0.513, 0.702]; tq2_0's per-block absmax, ggml's quantizer, zeroes everything below amax/2
// [0.809, 0.804]): they are meant for BitNet weights, already ternary, which round-trip exactly (next test).
template <class F> struct bounds;
template <> struct bounds<q8_0> { static constexpr double normal = 0.01, heavy = 0.02; };
template <> struct bounds<q8_1> { static constexpr double normal = 0.01, heavy = 0.02; };
template <> struct bounds<q4_0> { static constexpr double normal = 0.12, heavy = 0.2; };
template <> struct bounds<q4_1> { static constexpr double normal = 0.10, heavy = 0.2; };
// 5-bit: half q4's step [q5_0 0.043, 0.065; q5_1 0.038, 0.047]
template <> struct bounds<q5_0> { static constexpr double normal = 0.06, heavy = 0.09; };
template <> struct bounds<q5_1> { static constexpr double normal = 0.05, heavy = 0.07; };
// K super-blocks: sub-block scales (6-bit, q6_K's 8-bit) against one f16 scale, searched as llama-quantize does
// [q4_K 0.071, 0.093; q5_K 0.036, 0.047; q6_K 0.018, 0.025].
// q2_K / q3_K: 4 / 8 levels a sub-block of 16 (4-bit scale and min / 6-bit scale) [q2_K 0.296, 0.353; q3_K 0.151,
// 0.191].
template <> struct bounds<q2_k> { static constexpr double normal = 0.33, heavy = 0.39; };
template <> struct bounds<q3_k> { static constexpr double normal = 0.18, heavy = 0.23; };
template <> struct bounds<q4_k> { static constexpr double normal = 0.085, heavy = 0.11; };
template <> struct bounds<q5_k> { static constexpr double normal = 0.045, heavy = 0.06; };
template <> struct bounds<q6_k> { static constexpr double normal = 0.022, heavy = 0.032; };
// iq4_nl / iq4_xs: 16 non-uniform levels (denser near 0) a block of 32 / sub-block of 32 with a 6-bit scale
// [iq4_nl 0.077, 0.101; iq4_xs 0.077, 0.103].
template <> struct bounds<iq4_nl> { static constexpr double normal = 0.09, heavy = 0.12; };
template <> struct bounds<iq4_xs> { static constexpr double normal = 0.09, heavy = 0.12; };
// iq3_xxs / iq3_s: 4 values a point of a 256 / 512-point grid of 8 levels, signs apart, 4-bit sub-block scales
// [iq3_xxs 0.213, 0.284; iq3_s 0.166, 0.218].
template <> struct bounds<iq3_xxs> { static constexpr double normal = 0.24, heavy = 0.31; };
template <> struct bounds<iq3_s> { static constexpr double normal = 0.19, heavy = 0.24; };
template <> struct bounds<q8_k> { static constexpr double normal = 0.01, heavy = 0.025; };
template <> struct bounds<i8_s> { static constexpr double normal = 0.015, heavy = 0.08; };
template <> struct bounds<awq4> { static constexpr double normal = 0.12, heavy = 0.2; };
template <> struct bounds<awq4_g64> { static constexpr double normal = 0.11, heavy = 0.16; };
template <> struct bounds<nvfp4> { static constexpr double normal = 0.11, heavy = 0.11; };
template <> struct bounds<mxfp4> { static constexpr double normal = 0.13, heavy = 0.16; };
template <> struct bounds<tq2_0> { static constexpr double normal = 0.85, heavy = 0.85; };
template <> struct bounds<i2_s> { static constexpr double normal = 0.55, heavy = 0.75; };

template <class F> class quant_format : public ::testing::Test {};
// TS_BLOCK_FORMATS -> ::testing::Types<...>, so a new format is tested without touching this file
template <class... Ts> struct type_list {};
template <class... A, class... B> type_list<A..., B...> operator+(type_list<A...>, type_list<B...>) { return {}; }
template <class L> struct to_gtest;
template <class... Ts> struct to_gtest<type_list<Ts...>> { using type = ::testing::Types<Ts...>; };
#define TS_TYPE_ITEM(F) +type_list<F>{}
using all_formats = to_gtest<decltype(type_list<>{} TS_BLOCK_FORMATS(TS_TYPE_ITEM))>::type;
#undef TS_TYPE_ITEM
TYPED_TEST_SUITE(quant_format, all_formats);

} // namespace

TYPED_TEST(quant_format, round_trip_error_bounded) {
    using F = TypeParam;
    for (int kind = 0; kind < 2; kind++) {
        auto x = kind == 0 ? random_normal(F::block_size * 512, 1) : random_heavy(F::block_size * 512, 2);
        auto y = dequantize_all<F>(quantize_all<F>(x));
        const double e = rel_rmse(y, x);
        EXPECT_LT(e, kind == 0 ? bounds<F>::normal : bounds<F>::heavy) << F::name << (kind ? " heavy" : " normal");
        EXPECT_GT(e, 0.0) << F::name; // a lossy format that is exact on random data is suspicious
        if (std::getenv("TS_PRINT_BOUNDS")) std::printf("%s %s %.5f\n", F::name, kind ? "heavy" : "normal", e);
    }
}

// Block b of a row of values on format F's grid (scale d = 2^(b-4), or one scale for the whole row where the format
// has a per-row or per-tensor scale), with the extremes the quantizer derives its scales from pinned.
template <class F> void representable_block(float* v, int b, std::mt19937& rng) {
    const float d = std::ldexp(1.0f, b - 4);
    const int n = F::block_size;
    if constexpr (F::id == type::q8_0 || F::id == type::q8_1 || F::id == type::q8_k) {
        for (int j = 0; j < n; j++) v[j] = d * float(int(rng() % 255) - 127);
        v[0] = 127 * d;
    } else if constexpr (F::id == type::i8_s) { // one scale per row: every block on the same grid
        for (int j = 0; j < n; j++) v[j] = 0.25f * float(int(rng() % 255) - 127);
        v[0] = 127 * 0.25f;
    } else if constexpr (F::id == type::q4_0) {
        for (int j = 0; j < n; j++) v[j] = d * float(int(rng() % 16) - 8);
        v[0] = -8 * d;
    } else if constexpr (F::id == type::q4_1) {
        for (int j = 0; j < n; j++) v[j] = d * float(int(rng() % 16)) - 3 * d;
        v[0] = -3 * d;
        v[1] = 12 * d;
    } else if constexpr (F::id == type::q5_0) {
        for (int j = 0; j < n; j++) v[j] = d * float(int(rng() % 32) - 16);
        v[0] = -16 * d;
    } else if constexpr (F::id == type::q5_1) {
        for (int j = 0; j < n; j++) v[j] = d * float(int(rng() % 32)) - 5 * d;
        v[0] = -5 * d;
        v[1] = 26 * d;
    } else if constexpr (F::id == type::q4_k || F::id == type::q5_k) {
        // D q - D z, q = 0..nmax with both ends in every sub-block of 32; D = 63 2^k so that the super-scale d = D / 63
        // is a power of two and each sub-block's 6-bit scale is 63 (likewise the min's, z the same in every one)
        const int nmax = F::id == type::q4_k ? 15 : 31, z = b % 4;
        const float D = 63.0f * std::ldexp(1.0f, b - 10);
        for (int j = 0; j < n; j++) v[j] = D * float(int(rng() % unsigned(nmax + 1)) - z);
        for (int s = 0; s < 8; s++) {
            v[32 * s + int(rng() % 16)] = D * float(0 - z);
            v[32 * s + 16 + int(rng() % 16)] = D * float(nmax - z);
        }
    } else if constexpr (F::id == type::q2_k) {
        // D q - D z, q = 0..3 with every level in every sub-block of 16 (with fewer, another scale can fit them
        // exactly too); D = 15 2^k so that d = D / 15 is a power of two and each 4-bit scale is 15 (the min's too: z
        // the same in every sub-block, dmin = z 2^k)
        const int z = b % 4;
        const float D = 15.0f * std::ldexp(1.0f, b - 8);
        for (int j = 0; j < n; j++) v[j] = D * float(int(rng() % 4) - z);
        for (int s = 0; s < 16; s++)
            for (int q = 0; q < 4; q++) v[16 * s + 4 * q + int(rng() % 4)] = D * float(q - z);
    } else if constexpr (F::id == type::q3_k) {
        // d (q - 4), q = 0..7, with q = 0 (the sub-block's largest magnitude, negative) in every sub-block of 16
        for (int j = 0; j < n; j++) v[j] = d * float(int(rng() % 8) - 4);
        for (int s = 0; s < 16; s++) v[16 * s + int(rng() % 16)] = -4 * d;
    } else if constexpr (F::id == type::q6_k) {
        // D (q - 32), q = 0..63, with q = 0 (the sub-block's largest magnitude, negative) in every sub-block of 16
        for (int j = 0; j < n; j++) v[j] = d * float(int(rng() % 64) - 32);
        for (int s = 0; s < 16; s++) v[16 * s + int(rng() % 16)] = -32 * d;
    } else if constexpr (F::id == type::iq4_nl) { // d level[q], the lowest level (-127 d, the largest magnitude) pinned
        for (int j = 0; j < n; j++) v[j] = d * float(iq4::levels[rng() % 16]);
        v[int(rng() % 32)] = -127 * d;
    } else if constexpr (F::id == type::iq4_xs) {
        // m_s D level[q] with m_s = 1..32 (32 in one sub-block) and D = 2^k: d = -D, every scale code exact; each
        // sub-block has its lowest level pinned
        const float D = std::ldexp(1.0f, b - 10);
        const int top = int(rng() % 8);
        for (int s = 0; s < 8; s++) {
            const float m = s == top ? 32.0f : float(1 + rng() % 32);
            for (int j = 0; j < 32; j++) v[32 * s + j] = m * D * float(iq4::levels[rng() % 16]);
            v[32 * s + int(rng() % 32)] = -127 * m * D;
        }
    } else if constexpr (F::id == type::tq2_0) {
        for (int j = 0; j < n; j++) v[j] = d * float(int(rng() % 3) - 1);
        v[0] = d;
    } else if constexpr (F::id == type::i2_s) { // one scale per tensor, not a power of two
        for (int j = 0; j < n; j++) v[j] = 0.75f * float(int(rng() % 3) - 1);
        v[0] = -0.75f;
    } else if constexpr (F::id == type::mxfp4) { // D * E2M1 with D = 2^k (its E8M0 scale), amax pinned to 6 D
        const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        const float D = std::ldexp(1.0f, 2 * b - 9);
        for (int j = 0; j < n; j++) v[j] = D * e2m1[rng() % 8] * (rng() % 2 ? -1.0f : 1.0f);
        v[int(rng() % 32)] = 6 * D * (b % 2 ? -1.0f : 1.0f);
    } else if constexpr (F::id == type::nvfp4) { // per sub-block: D * E2M1 with D = 2^k, amax pinned to 6 D
        const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        for (int s = 0; s < 4; s++) {
            const float D = std::ldexp(1.0f, b + s - 6);
            for (int j = 0; j < 16; j++) v[16 * s + j] = D * e2m1[rng() % 8] * (rng() % 2 ? -1.0f : 1.0f);
            v[16 * s + int(rng() % 16)] = 6 * D * (s % 2 ? -1.0f : 1.0f);
        }
    } else { // awq4: s (q - z), z = 3..7, with q = 0 and q = 15 present so that max - min = 15 s
        const int z = 3 + b % 5;
        for (int j = 0; j < n; j++) v[j] = d * float(int(rng() % 16) - z);
        v[0] = d * float(0 - z);
        v[n - 1] = d * float(15 - z);
    }
}

TYPED_TEST(quant_format, representable_values_round_trip_exactly) {
    using F = TypeParam;
    if constexpr (F::id == type::iq3_xxs || F::id == type::iq3_s)
        GTEST_SKIP() << F::name << ": ggml's quantizer stores d x 1.0125 (iq3_s: x 1.033; its fudge factor), so no "
                        "value but 0 comes back exactly; quant_known_blocks.iq3_layouts and test_iq3_quantize cover them";
    std::vector<float> x(F::block_size * 8);
    std::mt19937 rng(3);
    for (int b = 0; b < 8; b++) representable_block<F>(x.data() + b * F::block_size, b, rng);
    auto y = dequantize_all<F>(quantize_all<F>(x));
    for (size_t i = 0; i < x.size(); i++) ASSERT_EQ(y[i], x[i]) << F::name << " element " << i;
}

TYPED_TEST(quant_format, vec_dot_matches_double_dot_of_dequantized) {
    using F = TypeParam;
    using A = typename format_of<F::dot_type>::type;
    const int64_t n = F::block_size * 37;
    auto w = random_normal(size_t(n), 4);
    auto a = random_heavy(size_t(n), 5);
    std::vector<uint8_t> wb(row_size(F::id, n)), ab(row_size(A::id, n));
    quantize_row_ref<F>(w.data(), wb.data(), n); // unit scale for i2_s: vec_dot is at unit weight scale
    quantize_row_ref<A>(a.data(), ab.data(), n);
    std::vector<float> wd(static_cast<size_t>(n)), ad(static_cast<size_t>(n));
    dequantize_row_ref<F>(wb.data(), wd.data(), n);
    dequantize_row_ref<A>(ab.data(), ad.data(), n);
    double exact = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        exact += double(wd[size_t(i)]) * ad[size_t(i)];
        mag += std::fabs(double(wd[size_t(i)]) * ad[size_t(i)]);
    }
    const float got = vec_dot_row_ref<F>(wb.data(), ab.data(), n);
    // bound: f32 products of f16 scales (2^-24 each) plus, for q8_1 partners, the f16-rounded s term (2^-11 of m*s)
    const double bound = (F::dot_type == type::q8_1 ? 2e-3 : 1e-5) * mag;
    EXPECT_NEAR(got, exact, bound) << F::name;
}

// The fast CPU kernels (AVX2 when present) against the references, on the same quantized inputs.
TYPED_TEST(quant_format, cpu_fast_kernels_match_reference) {
    using F = TypeParam;
    const cpu::cpu_type_ops* fast = cpu::find_cpu_ops(F::id);
    const cpu::cpu_type_ops* ref = cpu::find_cpu_ops(F::id, true);
    ASSERT_NE(fast, nullptr);
    if (!cpu::cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU: the fast kernels are the references";
    for (int64_t nb : {1, 3, 18, 48}) {
        const int64_t n = nb * F::block_size;
        auto w = random_heavy(size_t(n), uint32_t(6 + nb));
        auto a = random_normal(size_t(n), uint32_t(7 + nb));
        std::vector<uint8_t> wq(row_size(F::id, n)), aq_ref(row_size(ref->dot_type, n)), aq_fast(aq_ref.size());
        quantize_row_ref<F>(w.data(), wq.data(), n);
        ref->act_from_float(a.data(), aq_ref.data(), n);
        fast->act_from_float(a.data(), aq_fast.data(), n);
        // activation quantizers: same scale, ints within 1 (ties round to even in SIMD, away from zero in ref)
        std::vector<float> da(static_cast<size_t>(n)), db(static_cast<size_t>(n));
        find_row_ops(ref->dot_type)->to_float(aq_ref.data(), da.data(), n);
        find_row_ops(ref->dot_type)->to_float(aq_fast.data(), db.data(), n);
        double worst = 0, amax = 0;
        for (int64_t i = 0; i < n; i++) {
            worst = std::max(worst, std::fabs(double(da[size_t(i)]) - db[size_t(i)]));
            amax = std::max(amax, std::fabs(double(a[size_t(i)])));
        }
        EXPECT_LE(worst, amax / 127.0 * 1.001) << F::name;
        const float r = ref->vec_dot(wq.data(), aq_ref.data(), n);
        const float f = fast->vec_dot(wq.data(), aq_ref.data(), n);
        double mag = 0;
        std::vector<float> wd(static_cast<size_t>(n));
        find_row_ops(F::id)->to_float(wq.data(), wd.data(), n);
        for (int64_t i = 0; i < n; i++) mag += std::fabs(double(wd[size_t(i)]) * da[size_t(i)]);
        EXPECT_NEAR(f, r, 1e-5 * mag + 1e-6) << F::name << " n=" << n; // bound: f32 summation order only
    }
}

TYPED_TEST(quant_format, block_size_and_type_table_agree) {
    using F = TypeParam;
    EXPECT_EQ(type_info(F::id).block_size, F::block_size);
    EXPECT_EQ(type_info(F::id).type_size, size_t(F::type_size));
    EXPECT_STREQ(type_info(F::id).name, F::name);
}

// Hand-built blocks decoded to the values FORMATS.md §2 says they hold.
TEST(quant_known_blocks, q4_0_nibble_order) {
    block_q4_0 b{};
    b.d = to_f16(0.5f);
    for (int j = 0; j < 16; j++) b.qs[j] = uint8_t(j | ((15 - j) << 4)); // low: element j = j, high: element j+16 = 15-j
    float y[32];
    q4_0::dequantize(b, y);
    for (int j = 0; j < 16; j++) {
        EXPECT_EQ(y[j], (j - 8) * 0.5f);
        EXPECT_EQ(y[j + 16], (15 - j - 8) * 0.5f);
    }
}

TEST(quant_known_blocks, q4_1_scale_and_min) {
    block_q4_1 b{};
    b.d = to_f16(0.25f);
    b.m = to_f16(-1.0f);
    for (int j = 0; j < 16; j++) b.qs[j] = uint8_t((j % 16) | (3 << 4));
    float y[32];
    q4_1::dequantize(b, y);
    for (int j = 0; j < 16; j++) {
        EXPECT_EQ(y[j], j * 0.25f - 1.0f);
        EXPECT_EQ(y[j + 16], 3 * 0.25f - 1.0f);
    }
}

// q5_0 / q5_1 as a GGUF file holds them: f16 d (q5_1: then f16 m), the little-endian word of fifth bits (bit j =
// element j), then the nibbles (byte j: element j low, element j + 16 high)
TEST(quant_known_blocks, q5_0_and_q5_1_fifth_bits) {
    uint8_t raw0[22] = {0x00, 0x38}; // d = 0.5
    uint8_t raw1[24] = {0x00, 0x34, 0x00, 0xbc}; // d = 0.25, m = -1
    const uint32_t qh = 0xA5C3F00Fu;
    std::memcpy(raw0 + 2, &qh, 4);
    std::memcpy(raw1 + 4, &qh, 4);
    for (int j = 0; j < 16; j++) raw0[6 + j] = raw1[8 + j] = uint8_t(j | (15 - j) << 4);
    block_q5_0 b0;
    block_q5_1 b1;
    std::memcpy(&b0, raw0, sizeof(b0));
    std::memcpy(&b1, raw1, sizeof(b1));
    float y0[32], y1[32];
    q5_0::dequantize(b0, y0);
    q5_1::dequantize(b1, y1);
    for (int j = 0; j < 32; j++) {
        const int q = (j < 16 ? j : 15 - (j - 16)) | int((qh >> j) & 1) << 4;
        EXPECT_EQ(y0[j], float(q - 16) * 0.5f) << j;
        EXPECT_EQ(y1[j], float(q) * 0.25f - 1.0f) << j;
    }
}

TEST(quant_known_blocks, q8_0_bytes) {
    // raw bytes as in a GGUF file: f16 2.0 = 0x4000 little-endian, then qs
    uint8_t raw[34] = {0x00, 0x40};
    for (int j = 0; j < 32; j++) raw[2 + j] = uint8_t(int8_t(j - 16));
    block_q8_0 b;
    std::memcpy(&b, raw, sizeof(b));
    float y[32];
    q8_0::dequantize(b, y);
    for (int j = 0; j < 32; j++) EXPECT_EQ(y[j], 2.0f * float(j - 16));
}

TEST(quant_known_blocks, q8_1_sum_term) {
    std::vector<float> x(32);
    for (int j = 0; j < 32; j++) x[size_t(j)] = float(j) - 10.0f;
    block_q8_1 b;
    q8_1::quantize(x.data(), b);
    int sum = 0;
    for (int j = 0; j < 32; j++) sum += b.qs[j];
    const float d = 21.0f / 127.0f; // amax / 127, before rounding to f16
    EXPECT_EQ(b.s.bits, to_f16(d * float(sum)).bits); // s = d * sum(qs) with the unrounded d, stored as f16
    EXPECT_EQ(b.d.bits, to_f16(d).bits);
}

TEST(quant_known_blocks, q8_k_bytes_and_sums) {
    // f32 d = 0.5 (0x3f000000 little-endian), qs[j] = j - 128 except qs[0] = -127, bsums as ggml fills them
    uint8_t raw[292] = {0x00, 0x00, 0x00, 0x3f};
    for (int j = 0; j < 256; j++) raw[4 + j] = uint8_t(int8_t(j == 0 ? -127 : j - 128));
    block_q8_k b;
    std::memcpy(&b, raw, sizeof(b));
    float y[256];
    q8_k::dequantize(b, y);
    for (int j = 0; j < 256; j++) EXPECT_EQ(y[j], 0.5f * float(j == 0 ? -127 : j - 128));
    // quantizing: the first element of largest |x| sets d = -max / 127 (negative for a positive max)
    std::vector<float> x(256);
    for (int j = 0; j < 256; j++) x[size_t(j)] = float(j % 17) - 8.0f;
    x[5] = 12.7f;
    x[9] = -12.7f; // same |x|, later: not the one
    q8_k::quantize(x.data(), b);
    EXPECT_EQ(b.d, 1.0f / (-127.0f / 12.7f));
    EXPECT_EQ(b.qs[5], -127);
    EXPECT_EQ(b.qs[9], 127);
    for (int g = 0; g < 16; g++) {
        int sum = 0;
        for (int i = 0; i < 16; i++) sum += b.qs[16 * g + i];
        EXPECT_EQ(b.bsums[g], sum);
    }
}

TEST(quant_known_blocks, q4_k_scales_and_nibble_order) {
    // FORMATS.md §2: sub-blocks 0..3 take scales[j] & 63 and scales[j + 4] & 63; 4..7 the nibbles of scales[j + 4]
    // with the top two bits of scales[j - 4] (scale) and scales[j] (min); qs[32c + l] low = element 64c + l, high =
    // element 64c + 32 + l
    block_q4_k b{};
    b.d = to_f16(0.5f);
    b.dmin = to_f16(0.25f);
    const uint8_t sc[8] = {1, 2, 3, 63, 17, 40, 5, 33}, mn[8] = {0, 7, 63, 9, 48, 1, 20, 62};
    for (int j = 0; j < 4; j++) {
        b.scales[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
        b.scales[j + 4] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
        b.scales[j + 8] = uint8_t((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
    }
    for (int i = 0; i < 128; i++) b.qs[i] = uint8_t((i % 16) | ((15 - i % 16) << 4));
    float y[256];
    q4_k::dequantize(b, y);
    for (int e = 0; e < 256; e++) {
        const int c = e / 64, l = e % 32, s = e / 32;
        const int q = e % 64 < 32 ? (32 * c + l) % 16 : 15 - (32 * c + l) % 16;
        EXPECT_EQ(y[e], 0.5f * float(sc[s]) * float(q) - 0.25f * float(mn[s])) << "element " << e;
    }
    // the quantizer packs the same way
    uint8_t packed[12];
    kq::pack_scale_mins(sc, mn, packed);
    EXPECT_EQ(0, std::memcmp(packed, b.scales, 12));
}

TEST(quant_known_blocks, q5_k_high_bits) {
    // the fifth bit of element 64c + l is bit 2c of qh[l]; of element 64c + 32 + l bit 2c + 1
    block_q5_k b{};
    b.d = to_f16(1.0f);
    for (int j = 0; j < 4; j++) b.scales[j] = 1; // sub-blocks 0..3 scale 1, 4..7 scale 0, mins 0
    b.qh[3] = 0x05; // elements 3 (bit 0) and 64 + 3 (bit 2) get +16
    b.qh[7] = 0x02; // element 32 + 7 (bit 1)
    b.qs[3] = 0x21; // element 3 low nibble 1, element 35 high nibble 2
    float y[256];
    q5_k::dequantize(b, y);
    EXPECT_EQ(y[3], 17.0f);
    EXPECT_EQ(y[35], 2.0f);
    EXPECT_EQ(y[39], 16.0f);
    EXPECT_EQ(y[67], 16.0f);
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[128 + 3], 0.0f); // sub-block 4: scale 0
}

TEST(quant_known_blocks, q6_k_layout) {
    // FORMATS.md §2: for half h and l = 0..31, element 128h + l: low nibble of ql[64h + l], bits 0-1 of qh[32h + l];
    // + 32: ql[64h + 32 + l] low, bits 2-3; + 64: ql[64h + l] high, bits 4-5; + 96: ql[64h + 32 + l] high, bits 6-7
    uint8_t raw[210] = {};
    block_q6_k b;
    std::memcpy(&b, raw, sizeof(b));
    for (int s = 0; s < 16; s++) b.scales[s] = int8_t(s - 8);
    b.d = to_f16(0.5f);
    for (int i = 0; i < 128; i++) b.ql[i] = 0x88; // every level 8 + 16 hi
    for (int i = 0; i < 64; i++) b.qh[i] = 0x55;  // every 2-bit field 1: level 8 + 16 = 24
    b.ql[64 + 5] = 0x3F;                          // element 128 + 5: low 15; element 128 + 64 + 5: high 3
    b.qh[32 + 5] = 0xE7;                          // fields 3, 1, 2, 3: elements 133, 165, 197, 229
    float y[256];
    q6_k::dequantize(b, y);
    auto want = [&](int e, int q) { return 0.5f * float(b.scales[e / 16]) * float(q - 32); };
    EXPECT_EQ(y[0], want(0, 24));
    EXPECT_EQ(y[128 + 5], want(133, 15 + 48));
    EXPECT_EQ(y[128 + 32 + 5], want(165, 8 + 16));
    EXPECT_EQ(y[128 + 64 + 5], want(197, 3 + 32));
    EXPECT_EQ(y[128 + 96 + 5], want(229, 8 + 48));
    EXPECT_EQ(y[255], want(255, 24));
}

TEST(quant_known_blocks, q2_k_layout) {
    // FORMATS.md §2: qs[32h + l] bits 2n..2n+1 = element 128h + 32n + l; scales[s]: scale low nibble, min high nibble
    uint8_t raw[84] = {};
    block_q2_k b;
    std::memcpy(&b, raw, sizeof(b));
    for (int s = 0; s < 16; s++) b.scales[s] = uint8_t((s % 16) | ((15 - s) << 4));
    for (int i = 0; i < 64; i++) b.qs[i] = 0xE4; // fields 0, 1, 2, 3: elements +0 -> 0, +32 -> 1, +64 -> 2, +96 -> 3
    b.qs[32 + 7] = 0x1B;                         // fields 3, 2, 1, 0: elements 135, 167, 199, 231
    b.d = to_f16(0.5f);
    b.dmin = to_f16(0.25f);
    float y[256];
    q2_k::dequantize(b, y);
    auto want = [&](int e, int q) { return 0.5f * float(e / 16) * float(q) - 0.25f * float(15 - e / 16); };
    EXPECT_EQ(y[0], want(0, 0));
    EXPECT_EQ(y[33], want(33, 1));
    EXPECT_EQ(y[70], want(70, 2));
    EXPECT_EQ(y[127], want(127, 3));
    EXPECT_EQ(y[135], want(135, 3));
    EXPECT_EQ(y[167], want(167, 2));
    EXPECT_EQ(y[199], want(199, 1));
    EXPECT_EQ(y[231], want(231, 0));
    EXPECT_EQ(y[230], want(230, 3));
}

TEST(quant_known_blocks, q3_k_high_bits_and_scales) {
    // FORMATS.md §2: low 2 bits as q2_K; the high bit of element 128h + 32n + l in bit 4h + n of hmask[l] (value
    // q - 4 with q = low | high << 2); 6-bit scale codes: low nibble of scales[s] (s < 8) or high nibble of
    // scales[s - 8], high 2 bits at 2 (s / 4) of scales[8 + s % 4], the scale code - 32
    uint8_t raw[110] = {};
    block_q3_k b;
    std::memcpy(&b, raw, sizeof(b));
    const int code[16] = {0, 1, 17, 31, 32, 33, 40, 63, 5, 48, 20, 62, 16, 47, 32, 9};
    for (int s = 0; s < 16; s++) {
        if (s < 8) b.scales[s] = uint8_t(b.scales[s] | (code[s] & 0xF));
        else b.scales[s - 8] = uint8_t(b.scales[s - 8] | ((code[s] & 0xF) << 4));
        b.scales[8 + s % 4] = uint8_t(b.scales[8 + s % 4] | ((code[s] >> 4) << (2 * (s / 4))));
    }
    for (int i = 0; i < 64; i++) b.qs[i] = 0xE4; // low bits 0, 1, 2, 3 by n
    b.hmask[3] = 0x21;                           // elements 3 (h 0, n 0) and 128 + 32 + 3 (h 1, n 1) get + 4
    b.d = to_f16(0.5f);
    float y[256];
    q3_k::dequantize(b, y);
    auto want = [&](int e, int q) { return 0.5f * float(code[e / 16] - 32) * float(q - 4); };
    EXPECT_EQ(y[3], want(3, 4));
    EXPECT_EQ(y[4], want(4, 0));
    EXPECT_EQ(y[35], want(35, 1));
    EXPECT_EQ(y[128 + 32 + 3], want(163, 5));
    EXPECT_EQ(y[128 + 32 + 4], want(164, 1));
    EXPECT_EQ(y[255], want(255, 3));
    for (int s = 0; s < 16; s++) EXPECT_EQ(q3_k::scale(b, s), code[s] - 32) << s;
}

TEST(quant_known_blocks, tq2_0_lsb_first) {
    // FORMATS.md §2: qs[32h + m] bits 2n..2n+1 = element 128h + 32n + m; codes 0, 1, 2 = -1, 0, +1; f16 d last
    uint8_t raw[66] = {};
    for (int i = 0; i < 64; i++) raw[i] = 0x55; // every code 1: value 0
    raw[0] = 0x18;                              // 00 01 10 00: elements 96 = -1, 64 = 0, 32 = +1, 0 = -1
    raw[33] = 0x96;                             // 10 01 01 10: elements 128+97 = +1, +65 = 0, +33 = 0, +1 = +1
    raw[64] = 0x00;
    raw[65] = 0x34; // f16 0.25
    block_tq2_0 b;
    std::memcpy(&b, raw, sizeof(b));
    float y[256];
    tq2_0::dequantize(b, y);
    std::vector<float> want(256, 0.0f);
    want[0] = -0.25f;
    want[32] = 0.25f;
    want[96] = -0.25f;
    want[129] = 0.25f;
    want[225] = 0.25f;
    for (int j = 0; j < 256; j++) EXPECT_EQ(y[j], want[size_t(j)]) << "element " << j;
}

TEST(quant_known_blocks, i2_s_msb_first_and_tail_scale) {
    // FORMATS.md §4.3: byte j bits 7:6 = element j, 5:4 = j+32, 3:2 = j+64, 1:0 = j+96; the f32 scale in a 32-byte
    // tail after all rows (2 rows of 128 here: 64 bytes of codes + 32)
    ASSERT_EQ(tensor_bytes(type::i2_s, 256), size_t(64 + 32));
    std::vector<uint8_t> raw(96, 0x55); // code 1 everywhere: 0
    raw[0] = 0x92;                      // 10 01 00 10: element 0 = +1, 32 = 0, 64 = -1, 96 = +1
    raw[32 + 31] = 0x27;                // 00 10 01 11: row 1 elements 31 = -1, 63 = +1, 95 = 0, 127 = code 3 (+2)
    std::fill(raw.begin() + 64, raw.end(), 0);
    const float scale = 1.5f;
    std::memcpy(raw.data() + 64, &scale, 4);
    std::vector<float> y(256);
    ASSERT_TRUE(dequantize_tensor_ref(type::i2_s, raw.data(), y.data(), 128, 2));
    std::vector<float> want(256, 0.0f);
    want[0] = 1.5f;
    want[64] = -1.5f;
    want[96] = 1.5f;
    want[128 + 31] = -1.5f;
    want[128 + 63] = 1.5f;
    want[128 + 127] = 3.0f;
    for (int j = 0; j < 256; j++) EXPECT_EQ(y[size_t(j)], want[size_t(j)]) << "element " << j;
    EXPECT_EQ(read_tensor_scale(type::i2_s, raw.data(), 256), 1.5f);
    EXPECT_EQ(read_tensor_scale(type::q8_0, raw.data(), 256), 1.0f);
}

TEST(quant_known_blocks, i2_s_absmean_quantizer) {
    // sum |W| = 64 over 128 weights: s = mean|W| = 0.5 exactly; code = clamp(round(W / s), -1, 1), ties to even
    std::vector<float> w(128, 0.5f);                            // 1 -> +1
    const float head[6] = {0.125f, -0.4375f, 1.25f, 0.25f, -0.75f, 0.1875f}; // W / s = 0.25, -0.875, 2.5, 0.5, -1.5, 0.375
    const float want[6] = {0.0f, -0.5f, 0.5f, 0.0f, -0.5f, 0.0f};            // 0, -1, +1 (clamped), 0 (tie), -1 (tie, clamped), 0
    std::copy(head, head + 6, w.begin());
    std::vector<uint8_t> q(tensor_bytes(type::i2_s, 128));
    ASSERT_TRUE(quantize_tensor_ref(type::i2_s, w.data(), q.data(), 128, 1));
    EXPECT_EQ(read_tensor_scale(type::i2_s, q.data(), 128), 0.5f);
    std::vector<float> y(128);
    dequantize_tensor_ref(type::i2_s, q.data(), y.data(), 128, 1);
    for (int j = 0; j < 6; j++) EXPECT_EQ(y[size_t(j)], want[j]) << j;
    for (int j = 6; j < 128; j++) EXPECT_EQ(y[size_t(j)], 0.5f) << j;
    for (int j = 4; j < 32; j++) EXPECT_EQ(q[128 / 4 + size_t(j)], 0) << "tail byte " << j; // the tail after the scale
}

TEST(quant_known_blocks, i8_s_one_scale_per_row) {
    std::vector<float> x(256);
    for (int j = 0; j < 256; j++) x[size_t(j)] = float(j % 7) - 3.0f;
    x[200] = 6.35f; // the row's max lives in block 1; block 0 still takes d = 6.35 / 127
    block_i8_s b[2];
    quantize_row_ref<i8_s>(x.data(), b, 256);
    const float d = float(double(6.35f) / 127.0);
    const float s = float(127.0 / double(6.35f));
    for (int k = 0; k < 2; k++) {
        EXPECT_EQ(b[k].d, d);
        int sum = 0;
        for (int j = 0; j < 128; j++) {
            EXPECT_EQ(b[k].qs[j], int8_t(std::round(x[size_t(128 * k + j)] * s)));
            sum += b[k].qs[j];
        }
        EXPECT_EQ(b[k].sum, sum);
    }
    EXPECT_EQ(b[1].qs[200 - 128], 127);
}

TEST(quant_known_blocks, nvfp4_split_halves) {
    // FORMATS.md §2: d[s] UE4M3 then qs; sub-block s byte j: low nibble = element 16s + j, high = 16s + j + 8
    const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    const uint8_t d[4] = {0x38, 0x40, 0x01, 0x7e}; // 1.0, 2.0, 2^-9 (subnormal), 448
    const float dv[4] = {1.0f, 2.0f, std::ldexp(1.0f, -9), 448.0f};
    uint8_t raw[36];
    std::memcpy(raw, d, 4);
    for (int s = 0; s < 4; s++)
        for (int j = 0; j < 8; j++) raw[4 + 8 * s + j] = uint8_t(((j + s) % 16) | (((15 - j - s) & 15) << 4));
    block_nvfp4 b;
    std::memcpy(&b, raw, sizeof(b));
    float y[64];
    nvfp4::dequantize(b, y);
    for (int s = 0; s < 4; s++)
        for (int j = 0; j < 8; j++) {
            EXPECT_EQ(y[16 * s + j], e2m1[(j + s) % 16] * dv[s]) << s << " " << j;
            EXPECT_EQ(y[16 * s + j + 8], e2m1[(15 - j - s) & 15] * dv[s]) << s << " " << j;
        }
}

// IQ3 blocks as a GGUF file holds them (iq3_grid.h): grid point 0 is code 0 (every value at the lowest level: 4 for
// IQ3_XXS, 1 for IQ3_S), the last points are ggml's (its tables' last entries); IQ3_XXS's 7 sign bits a group of 8
// with the 8th making the minus count even, its scale in a word's top nibble (d (2 ls + 1) / 4); IQ3_S's 9th index
// bit in qh, a sign bit a value, scales in nibbles (low: the even sub-block).
TEST(quant_known_blocks, iq3_layouts) {
    EXPECT_EQ(iq3::xxs_grid[0], 0x04040404u);
    EXPECT_EQ(iq3::s_grid[0], 0x01010101u);
    EXPECT_EQ(iq3::s_grid[511], 0x0f0f0101u);
    EXPECT_EQ(iq3::xxs_grid[255], 0x3e341c04u);
    for (int i = 1; i < 256; i++) ASSERT_LT(iq3::xxs_codes[size_t(i - 1)], iq3::xxs_codes[size_t(i)]);
    for (int i = 1; i < 512; i++) ASSERT_LT(iq3::s_codes[size_t(i - 1)], iq3::s_codes[size_t(i)]);
    block_iq3_xxs x{};
    x.d = to_f16(2.0f);
    x.qs[0] = 0;  // values 0..3: point 0 (4, 4, 4, 4)
    x.qs[1] = 255; // values 4..7: the last point
    const uint32_t word = 0x1u | 3u << 28; // group 0: value 0 negative, so value 7 too (even count); ls = 3
    std::memcpy(x.qs + 64, &word, 4);
    float y[256];
    iq3_xxs::dequantize(x, y);
    const float db = 2.0f * 3.5f * 0.5f; // d (0.5 + ls) 0.5
    EXPECT_EQ(y[0], -4 * db);
    for (int j = 1; j < 4; j++) EXPECT_EQ(y[j], 4 * db) << j;
    for (int j = 4; j < 8; j++) {
        const float v = float(iq3::xxs_grid[255] >> (8 * (j - 4)) & 0xff) * db;
        EXPECT_EQ(y[j], j == 7 ? -v : v) << j;
    }
    EXPECT_EQ(y[32], 4 * 2.0f * 0.5f * 0.5f); // sub-block 1: ls 0, point 0, no signs
    block_iq3_s s{};
    s.d = to_f16(0.5f);
    s.qs[8 + 2] = 7;           // sub-block 1, point 2 (values 40..43): index 7 | 256
    s.qh[1] = 1 << 2;
    s.signs[4 + 1] = 1 << 1;   // sub-block 1, value 8 + 1 = 41 negative
    s.scales[0] = 0x52;        // sub-block 0: ls 2, sub-block 1: ls 5
    iq3_s::dequantize(s, y);
    EXPECT_EQ(y[0], 0.5f * 5 * 1);
    for (int j = 0; j < 4; j++) {
        const float v = float(iq3::s_grid[256 + 7] >> (8 * j) & 0xff) * 0.5f * 11;
        EXPECT_EQ(y[40 + j], j == 1 ? -v : v) << j;
    }
    EXPECT_EQ(y[64], 0.5f * 1 * 1); // sub-block 2: ls 0, point 0
}

TEST(quant_known_blocks, mxfp4_layout_and_e8m0_scale) {
    // FORMATS.md: e (E8M0) then qs; byte j: low nibble = element j, high = element j + 16; x = E2M1 * 2^(e - 127),
    // e = 0 and 1 the subnormal scales 2^-127 and 2^-126, e = 254 2^127
    const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int e : {0, 1, 2, 100, 127, 130, 254}) {
        uint8_t raw[17];
        raw[0] = uint8_t(e);
        for (int j = 0; j < 16; j++) raw[1 + j] = uint8_t((j % 16) | (((15 - j) & 15) << 4));
        block_mxfp4 b;
        std::memcpy(&b, raw, sizeof(b));
        float y[32];
        mxfp4::dequantize(b, y);
        const float scale = std::ldexp(1.0f, e - 127);
        for (int j = 0; j < 16; j++) {
            EXPECT_EQ(y[j], e2m1[j] * scale) << e << " " << j;
            EXPECT_EQ(y[j + 16], e2m1[15 - j] * scale) << e << " " << j;
        }
    }
    // ggml's quantizer: e = floor(log2 amax) - 2 + 127; ties to the first (smaller) code; all zeros -> e = 0, +0
    float x[32] = {};
    block_mxfp4 b;
    mxfp4::quantize(x, b);
    EXPECT_EQ(b.e, 0);
    for (uint8_t q : b.qs) EXPECT_EQ(q, 0);
    x[0] = 5.0f;  // amax 5: e = 2 - 2 + 127 = 127, scale 1: 5 is halfway between 4 and 6 -> 4 (code 6)
    x[16] = -0.25f; // halfway between 0 and -0.5 -> +0 (code 0, first index)
    x[1] = 2.6f;  // -> 3 (code 5)
    mxfp4::quantize(x, b);
    EXPECT_EQ(b.e, 127);
    EXPECT_EQ(b.qs[0], 6);
    EXPECT_EQ(b.qs[1], 5);
}

TEST(quant_known_blocks, awq4_nibble_order) {
    // FORMATS.md §3: word c slot i (bits 4i..4i+3) = element 8c + {0,2,4,6,1,3,5,7}[i]; as bytes of a word:
    // e0 | e2 << 4, e4 | e6 << 4, e1 | e3 << 4, e5 | e7 << 4. Codes here: element j has code j % 16.
    std::vector<uint8_t> raw = {0x00, 0x38, 5, 0}; // f16 s = 0.5, z = 5, pad
    for (int c = 0; c < 16; c++) {
        const int e = 8 * (c % 2); // codes 8c .. 8c + 7, mod 16
        raw.insert(raw.end(), {uint8_t(e | (e + 2) << 4), uint8_t((e + 4) | (e + 6) << 4),
                               uint8_t((e + 1) | (e + 3) << 4), uint8_t((e + 5) | (e + 7) << 4)});
    }
    EXPECT_EQ(raw[4], 0x20); // word 0 = 0x75316420
    EXPECT_EQ(raw[7], 0x75);
    block_awq4<128> b;
    ASSERT_EQ(raw.size(), sizeof(b));
    std::memcpy(&b, raw.data(), sizeof(b));
    float y[128];
    awq4::dequantize(b, y);
    for (int j = 0; j < 128; j++) EXPECT_EQ(y[j], 0.5f * float(j % 16 - 5)) << "element " << j;
    // the g64 variant: same words, half as many
    block_awq4<64> b64;
    std::memcpy(&b64, raw.data(), sizeof(b64));
    float y64[64];
    awq4_g64::dequantize(b64, y64);
    for (int j = 0; j < 64; j++) EXPECT_EQ(y64[j], 0.5f * float(j % 16 - 5)) << "element " << j;
}

TEST(quant_known_blocks, awq4_quantizer_follows_autoawq) {
    // min = -0.3, max = 1.2: s = 1.5 / 15 = 0.1 (f16 0.0999755859375), z = round(0.3 / s) = 3, q = round(x / s) + z
    std::vector<float> x(128);
    for (int j = 0; j < 128; j++) x[size_t(j)] = -0.3f + 1.5f * float(j) / 127.0f;
    block_awq4<128> b;
    awq4::quantize(x.data(), b);
    const float s = to_f32(to_f16(1.5f / 15.0f));
    EXPECT_EQ(b.s.bits, to_f16(0.1f).bits);
    EXPECT_EQ(b.z, 3);
    EXPECT_EQ(b.pad, 0);
    for (int j = 0; j < 128; j++)
        EXPECT_EQ(awq4::code(b, j), std::clamp(int(std::nearbyint(x[size_t(j)] / s)) + 3, 0, 15)) << j;
}

TEST(fp16, ue4m3_as_ggml) {
    // decode: e = 0: m * 2^-9; else (1 + m/8) 2^(e-7); 0x7f reads 0; helper returns half, as ggml's
    for (int c = 0; c < 128; c++) {
        const int e = c >> 3, m = c & 7;
        const float full = c == 0x7f ? 0.0f : e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
        EXPECT_EQ(ue4m3_to_fp32_half(uint8_t(c)), full / 2) << c;
        // every finite code encodes to itself, except that ggml's encoder maps all of [256, 448] to 448 (0x7e)
        if (c != 0 && c != 0x7f) {
            EXPECT_EQ(fp32_to_ue4m3(full), e == 15 ? 0x7e : c) << c;
        }
    }
    EXPECT_EQ(ue4m3_to_fp32_half(0x7e), 224.0f);      // 448 / 2
    EXPECT_EQ(fp32_to_ue4m3(1000.0f), 0x7e);           // saturates
    EXPECT_EQ(fp32_to_ue4m3(-1.0f), 0);                // unsigned: negatives and NaN are 0
    EXPECT_EQ(fp32_to_ue4m3(std::nanf("")), 0);
    EXPECT_EQ(fp32_to_ue4m3(1.0625f), 0x39);           // tie between 1.0 and 1.125 goes up
    EXPECT_EQ(fp32_to_ue4m3(std::ldexp(2.5f, -9)), 3); // subnormal: round(x * 512) = 2.5 -> 3
}

TEST(fp16, conversions_exact_and_round_to_nearest_even) {
    for (uint32_t h = 0; h < 0x10000; h++) {
        const float f = fp16_to_fp32(uint16_t(h));
        if (std::isnan(f)) continue;
        ASSERT_EQ(fp32_to_fp16(f), uint16_t(h)) << h; // every f16 survives the round trip
    }
    EXPECT_EQ(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);                         // tie -> even (down)
    EXPECT_EQ(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);                     // tie -> even (up)
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);                                               // overflow -> inf
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);                                  // tie -> 0
    EXPECT_EQ(fp32_to_fp16(std::ldexp(1.5f, -25)), 0x0001);                                  // smallest subnormal
    EXPECT_EQ(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);                            // bf16 tie -> even
    EXPECT_EQ(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
}

// The 4 x 4 prompt-processing kernels must give the vec_dot's bits for every output (bound: exact equality).
TEST(cpu_gemm4, equals_vec_dot_bit_for_bit) {
    for (type t : {type::q4_0, type::q4_1, type::q5_0, type::q5_1, type::q8_0}) {
        const cpu::cpu_type_ops* ops = cpu::find_cpu_ops(t);
        if (!ops->gemm4) GTEST_SKIP() << "no 4x4 kernel on this CPU";
        const int64_t k = 32 * 19;
        const row_ops* wr = find_row_ops(t);
        const row_ops* ar = find_row_ops(ops->dot_type);
        const size_t wrow = row_size(t, k), arow = row_size(ops->dot_type, k);
        std::vector<uint8_t> w(4 * wrow), a(4 * arow);
        for (int i = 0; i < 4; i++) {
            auto x = random_heavy(size_t(k), uint32_t(40 + i));
            auto z = random_normal(size_t(k), uint32_t(50 + i));
            wr->from_float(x.data(), w.data() + i * wrow, k);
            ops->act_from_float(z.data(), a.data() + i * arow, k);
        }
        (void)ar;
        float y[4 * 6];
        std::fill(std::begin(y), std::end(y), std::nanf(""));
        ops->gemm4(w.data(), wrow, a.data(), arow, k, y, 6);
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 4; i++)
                EXPECT_EQ(y[j * 6 + i], ops->vec_dot(w.data() + i * wrow, a.data() + j * arow, k))
                    << type_name(t) << " w" << i << " a" << j;
        if (!ops->gemv4) continue; // the type uses its row dot for decode
        float v[4];
        std::fill(std::begin(v), std::end(v), std::nanf(""));
        ops->gemv4(w.data(), wrow, a.data() + 2 * arow, arow, k, v, 1);
        for (int i = 0; i < 4; i++)
            EXPECT_EQ(v[i], ops->vec_dot(w.data() + i * wrow, a.data() + 2 * arow, k)) << type_name(t) << " gemv4 " << i;
    }
}

// q4_0 in llama.cpp's repacked order: the 4x4 / 4x1 kernels equal the row kernel bit for bit, and the row kernel is
// the reference dot up to f32 summation order (bound 1e-5 of the sum of |terms|).
TEST(cpu_gemm4, q4_0_repacked_order) {
    const cpu::cpu_type_ops* ops = cpu::find_cpu_ops(type::q4_0);
    if (!ops->vec_dot_rows8) GTEST_SKIP() << "no AVX2: llama.cpp does not repack q4_0 there either";
    const int64_t k = 32 * 23;
    const size_t wrow = row_size(type::q4_0, k), arow = row_size(type::q8_0, k);
    std::vector<uint8_t> w(4 * wrow), a(4 * arow);
    for (int i = 0; i < 4; i++) {
        auto x = random_heavy(size_t(k), uint32_t(60 + i));
        auto z = random_normal(size_t(k), uint32_t(70 + i));
        quantize_row_ref<q4_0>(x.data(), w.data() + i * wrow, k);
        ops->act_from_float(z.data(), a.data() + i * arow, k);
    }
    float y[4 * 4], v[4];
    ops->gemm4_rows8(w.data(), wrow, a.data(), arow, k, y, 4);
    ops->gemv4_rows8(w.data(), wrow, a.data() + arow, arow, k, v, 1);
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 4; i++) {
            const float r = ops->vec_dot_rows8(w.data() + i * wrow, a.data() + j * arow, k);
            EXPECT_EQ(y[j * 4 + i], r) << i << "," << j;
            if (j == 1) {
                EXPECT_EQ(v[i], r) << i;
            }
            const float ref = vec_dot_row_ref<q4_0>(w.data() + i * wrow, a.data() + j * arow, k);
            EXPECT_NEAR(r, ref, 1e-4f * (std::fabs(ref) + 1.0f));
        }
}

// mxfp4 in the order of llama.cpp's repacked mxfp4_8x8 kernels (gpt-oss's experts): the row kernel equals plain code
// summing block by block, acc = fma(float(integer dot), 2^(e - 128) * d_a, acc), bit for bit.
TEST(cpu_gemm4, mxfp4_repacked_order) {
    const cpu::cpu_type_ops* ops = cpu::find_cpu_ops(type::mxfp4);
    if (!ops->vec_dot_rows8) GTEST_SKIP() << "no AVX2: llama.cpp does not repack mxfp4 there either";
    for (int64_t k : {int64_t(32), int64_t(32 * 23), int64_t(2880)}) {
        const size_t wrow = row_size(type::mxfp4, k), arow = row_size(type::q8_0, k);
        std::vector<uint8_t> w(wrow), a(arow);
        auto x = random_heavy(size_t(k), uint32_t(80 + k));
        auto z = random_normal(size_t(k), uint32_t(81 + k));
        quantize_row_ref<mxfp4>(x.data(), w.data(), k);
        ops->act_from_float(z.data(), a.data(), k);
        const auto* wb = reinterpret_cast<const block_mxfp4*>(w.data());
        const auto* ab = reinterpret_cast<const block_q8_0*>(a.data());
        float acc = 0.0f;
        for (int64_t b = 0; b < k / 32; b++) {
            int32_t sumi = 0;
            for (int j = 0; j < 16; j++)
                sumi += int32_t(ab[b].qs[j]) * e2m1_doubled(wb[b].qs[j] & 0xf) +
                        int32_t(ab[b].qs[j + 16]) * e2m1_doubled(wb[b].qs[j] >> 4);
            acc = std::fma(float(sumi), e8m0_to_fp32_half(wb[b].e) * to_f32(ab[b].d), acc);
        }
        EXPECT_EQ(ops->vec_dot_rows8(w.data(), a.data(), k), acc) << k;
    }
}

// The IQ4 formats in the orders llama.cpp's x86 CPU sums them in (checked against libggml-cpu's mul_mat, plain and
// repacked buffers): iq4_nl's vec_dot (blocks in pairs into two 8-lane accumulators, lane g = elements 4g..4g+3, fma of
// d_a d_w; added, folded as hsum_float_8; an odd last block's product rounded, then added), its tinyBLAS lanes (one
// accumulator) and its repacked blockwise order (acc = fma(float(block dot), d_w d_a, acc)); iq4_xs's vec_dot (lane t =
// sum of ls_s x the dot of elements 32s + 4t..+3, fma of d_w d_a, hsum_float_8) and tiled order (acc = fma(float(S)
// d_w, d_a, acc)). Scalar twins; bound: exact equality. Sizes: one block, an odd count of blocks, many.
TEST(cpu_gemm4, iq4_orders) {
    const cpu::cpu_type_ops* nl = cpu::find_cpu_ops(type::iq4_nl);
    const cpu::cpu_type_ops* xs = cpu::find_cpu_ops(type::iq4_xs);
    if (!nl->vec_dot_rows8) GTEST_SKIP() << "no AVX2: the scalar reference kernels only";
    auto hsum8 = [](const float (&v)[8]) {
        float h[4];
        for (int l = 0; l < 4; l++) h[l] = v[l + 4] + v[l];
        return (h[0] + h[2]) + (h[1] + h[3]);
    };
    for (int64_t k : {int64_t(32), int64_t(32 * 17), int64_t(2304)}) {
        const size_t wrow = row_size(type::iq4_nl, k), arow = row_size(type::q8_0, k);
        std::vector<uint8_t> w(wrow), a(arow);
        auto x = random_heavy(size_t(k), uint32_t(90 + k));
        auto z = random_normal(size_t(k), uint32_t(91 + k));
        quantize_row_ref<iq4_nl>(x.data(), w.data(), k);
        nl->act_from_float(z.data(), a.data(), k);
        const auto* wb = reinterpret_cast<const block_iq4_nl*>(w.data());
        const auto* ab = reinterpret_cast<const block_q8_0*>(a.data());
        const int64_t nb = k / 32;
        auto lane = [&](int64_t b, int g) { // elements 4g..4g+3 of block b
            int32_t s = 0;
            for (int e = 4 * g; e < 4 * g + 4; e++)
                s += iq4::level(e < 16 ? wb[b].qs[e] & 0xf : wb[b].qs[e - 16] >> 4) * ab[b].qs[e];
            return s;
        };
        float acc[2][8] = {}, one[8] = {}, blockwise = 0.0f;
        int64_t b = 0;
        for (; b + 1 < nb; b += 2)
            for (int h = 0; h < 2; h++)
                for (int g = 0; g < 8; g++)
                    acc[h][g] = std::fma(to_f32(ab[b + h].d) * to_f32(wb[b + h].d), float(lane(b + h, g)), acc[h][g]);
        float sum8[8];
        for (int g = 0; g < 8; g++) sum8[g] = acc[0][g] + acc[1][g];
        float vd = hsum8(sum8);
        for (; b < nb; b++) {
            int32_t s = 0;
            for (int g = 0; g < 8; g++) s += lane(b, g);
            const volatile float p = to_f32(ab[b].d) * to_f32(wb[b].d) * float(s);
            vd += p;
        }
        for (b = 0; b < nb; b++) {
            int32_t s = 0;
            for (int g = 0; g < 8; g++) {
                one[g] = std::fma(to_f32(wb[b].d) * to_f32(ab[b].d), float(lane(b, g)), one[g]);
                s += lane(b, g);
            }
            blockwise = std::fma(float(s), to_f32(wb[b].d) * to_f32(ab[b].d), blockwise);
        }
        EXPECT_EQ(nl->vec_dot(w.data(), a.data(), k), vd) << k;
        EXPECT_EQ(nl->vec_dot_sgemm(w.data(), a.data(), k), hsum8(one)) << k;
        EXPECT_EQ(nl->vec_dot_rows8(w.data(), a.data(), k), blockwise) << k;
    }
    for (int64_t k : {int64_t(256), int64_t(256 * 9)}) {
        const size_t wrow = row_size(type::iq4_xs, k), arow = row_size(type::q8_k, k);
        std::vector<uint8_t> w(wrow), a(arow);
        auto x = random_heavy(size_t(k), uint32_t(92 + k));
        auto z = random_normal(size_t(k), uint32_t(93 + k));
        quantize_row_ref<iq4_xs>(x.data(), w.data(), k);
        xs->act_from_float(z.data(), a.data(), k);
        const auto* wb = reinterpret_cast<const block_iq4_xs*>(w.data());
        const auto* ab = reinterpret_cast<const block_q8_k*>(a.data());
        float acc[8] = {}, tiled = 0.0f;
        for (int64_t b = 0; b < k / 256; b++) {
            int32_t lanes[8] = {}, S = 0;
            for (int s = 0; s < 8; s++)
                for (int e = 0; e < 32; e++) {
                    const uint8_t q = wb[b].qs[16 * s + e % 16];
                    const int32_t p = iq4_xs::scale(wb[b], s) * iq4::level(e < 16 ? q & 0xf : q >> 4) *
                                      ab[b].qs[32 * s + e];
                    lanes[e / 4] += p, S += p;
                }
            for (int t = 0; t < 8; t++) acc[t] = std::fma(to_f32(wb[b].d) * ab[b].d, float(lanes[t]), acc[t]);
            tiled = std::fma(float(S) * to_f32(wb[b].d), ab[b].d, tiled);
        }
        EXPECT_EQ(xs->vec_dot(w.data(), a.data(), k), hsum8(acc)) << k;
        EXPECT_EQ(xs->vec_dot_batch8(w.data(), a.data(), k), tiled) << k;
    }
}

// The IQ3 formats in the orders llama.cpp's x86 CPU sums them in: vec_dot (lane t = sum of (2 ls_s + 1) x the dot of
// elements 32s + 4t..+3, fma of d_w d_a, hsum_float_8; iq3_xxs then x 0.25) and tiled (acc = fma(float(S) d_w', d_a,
// acc), d_w' = d_w / 4 for iq3_xxs). Blocks of random bytes (every byte pattern is a valid block) with small random
// d; scalar twins; the panels (row_panel, row_panel_batch8) equal the row kernels; bound: exact equality. Sizes: one
// super-block, an odd count, many.
TEST(cpu_gemm4, iq3_orders) {
    const cpu::cpu_type_ops* xxs = cpu::find_cpu_ops(type::iq3_xxs);
    const cpu::cpu_type_ops* s3 = cpu::find_cpu_ops(type::iq3_s);
    if (!xxs->vec_dot_batch8) GTEST_SKIP() << "no AVX2: the scalar reference kernels only";
    auto hsum8 = [](const float (&v)[8]) {
        float h[4];
        for (int l = 0; l < 4; l++) h[l] = v[l + 4] + v[l];
        return (h[0] + h[2]) + (h[1] + h[3]);
    };
    std::mt19937 rng(41);
    for (int64_t k : {int64_t(256), int64_t(256 * 9), int64_t(256 * 16)}) {
        auto z = random_normal(size_t(k), uint32_t(94 + k));
        std::vector<uint8_t> a(row_size(type::q8_k, k));
        xxs->act_from_float(z.data(), a.data(), k);
        const auto* ab = reinterpret_cast<const block_q8_k*>(a.data());
        for (type t : {type::iq3_xxs, type::iq3_s}) {
            const cpu::cpu_type_ops* ops = t == type::iq3_xxs ? xxs : s3;
            const int64_t nb = k / 256;
            const size_t bs = type_info(t).type_size;
            std::vector<uint8_t> w(row_size(t, k));
            for (auto& byte : w) byte = uint8_t(rng());
            for (int64_t b = 0; b < nb; b++) { // d in [2^-10, 2^-6), either sign
                const f16 d = to_f16(std::ldexp(1.0f + float(rng() % 1024) / 1024.0f, -10 + int(rng() % 4)) *
                                     (rng() % 2 ? -1.0f : 1.0f));
                std::memcpy(w.data() + b * int64_t(bs), &d, 2);
            }
            float acc[8] = {}, tiled = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                int32_t lanes[8] = {}, S = 0;
                for (int sb = 0; sb < 8; sb++) {
                    int v[32], scale;
                    if (t == type::iq3_xxs) {
                        const auto& x = reinterpret_cast<const block_iq3_xxs*>(w.data())[b];
                        iq3_xxs::values(x, sb, v);
                        scale = int(2 * (iq3_xxs::word(x, sb) >> 28) + 1);
                    } else {
                        const auto& x = reinterpret_cast<const block_iq3_s*>(w.data())[b];
                        iq3_s::values(x, sb, v);
                        scale = 2 * iq3_s::scale(x, sb) + 1;
                    }
                    for (int e = 0; e < 32; e++) {
                        const int32_t p = scale * v[e] * ab[b].qs[32 * sb + e];
                        lanes[e / 4] += p, S += p;
                    }
                }
                f16 d;
                std::memcpy(&d, w.data() + b * int64_t(bs), 2);
                for (int l = 0; l < 8; l++) acc[l] = std::fma(to_f32(d) * ab[b].d, float(lanes[l]), acc[l]);
                tiled = std::fma(float(S) * (to_f32(d) * (t == type::iq3_xxs ? 0.25f : 1.0f)), ab[b].d, tiled);
            }
            const float vd = t == type::iq3_xxs ? 0.25f * hsum8(acc) : hsum8(acc);
            EXPECT_EQ(ops->vec_dot(w.data(), a.data(), k), vd) << type_info(t).name << " " << k;
            EXPECT_EQ(ops->vec_dot_batch8(w.data(), a.data(), k), tiled) << type_info(t).name << " " << k;
            // the panels (a weight row decoded once, then dotted with several activation rows): the same bits, row
            // by row, on 6 rows (4 at once, then one by one; this one second)
            {
                std::vector<uint8_t> a6(6 * a.size());
                auto z6 = random_normal(size_t(6 * k), uint32_t(95 + k));
                for (int j = 0; j < 6; j++)
                    if (j == 1) std::memcpy(a6.data() + a.size(), a.data(), a.size());
                    else xxs->act_from_float(z6.data() + j * k, a6.data() + size_t(j) * a.size(), k);
                float y[2][12];
                ops->row_panel(w.data(), a6.data(), a.size(), 6, k, y[0], 2);
                ops->row_panel_batch8(w.data(), a6.data(), a.size(), 6, k, y[1], 2);
                for (int j = 0; j < 6; j++) {
                    const uint8_t* aj = a6.data() + size_t(j) * a.size();
                    EXPECT_EQ(y[0][2 * j], ops->vec_dot(w.data(), aj, k)) << type_info(t).name << " panel " << j;
                    EXPECT_EQ(y[1][2 * j], ops->vec_dot_batch8(w.data(), aj, k)) << type_info(t).name << " panel " << j;
                }
                EXPECT_EQ(y[0][2], vd);
            }
            // and the reference dot, within f32 summation-order error
            double mag = 0;
            std::vector<float> wd(static_cast<size_t>(k)), ad(static_cast<size_t>(k));
            find_row_ops(t)->to_float(w.data(), wd.data(), k);
            find_row_ops(type::q8_k)->to_float(a.data(), ad.data(), k);
            for (int64_t i = 0; i < k; i++) mag += std::fabs(double(wd[size_t(i)]) * ad[size_t(i)]);
            EXPECT_NEAR(cpu::find_cpu_ops(t, true)->vec_dot(w.data(), a.data(), k), vd, 1e-5 * mag)
                << type_info(t).name;
        }
    }
}

// q4_K in the order of llama.cpp's repacked q4_K_8x8 kernels (rows in groups of 8 on x86): per super-block one exact
// integer for the scaled dot and one for the min term, each fma'd into its own accumulator, subtracted at the end.
TEST(cpu_gemm4, q4_k_repacked_order) {
    const cpu::cpu_type_ops* ops = cpu::find_cpu_ops(type::q4_k);
    if (!ops->vec_dot_rows8) GTEST_SKIP() << "no AVX2: llama.cpp does not repack q4_K there either";
    for (int64_t k : {int64_t(256), int64_t(256 * 11), int64_t(4096)}) {
        const size_t wrow = row_size(type::q4_k, k), arow = row_size(type::q8_k, k);
        std::vector<uint8_t> w(wrow), a(arow);
        auto x = random_heavy(size_t(k), uint32_t(90 + k));
        auto z = random_normal(size_t(k), uint32_t(91 + k));
        quantize_row_ref<q4_k>(x.data(), w.data(), k);
        ops->act_from_float(z.data(), a.data(), k);
        const auto* wb = reinterpret_cast<const block_q4_k*>(w.data());
        const auto* ab = reinterpret_cast<const block_q8_k*>(a.data());
        float acc = 0.0f, acc_min = 0.0f;
        for (int64_t b = 0; b < k / 256; b++) {
            int32_t sumi = 0, summ = 0;
            for (int j = 0; j < 8; j++) {
                int sc, m;
                kq::scale_min(wb[b].scales, j, sc, m);
                int32_t t = 0;
                for (int l = 0; l < 32; l++) t += q4_k::level(wb[b], 32 * j + l) * int32_t(ab[b].qs[32 * j + l]);
                sumi += sc * t;
                summ += m * (ab[b].bsums[2 * j] + ab[b].bsums[2 * j + 1]);
            }
            acc = std::fma(float(sumi), to_f32(wb[b].d) * ab[b].d, acc);
            acc_min = std::fma(float(summ), to_f32(wb[b].dmin) * ab[b].d, acc_min);
        }
        EXPECT_EQ(ops->vec_dot_rows8(w.data(), a.data(), k), acc - acc_min) << k;
    }
    // 4 rows at once (decode): row i's bits
    const int64_t k = 256 * 6;
    const size_t wrow = row_size(type::q4_k, k), arow = row_size(type::q8_k, k);
    std::vector<uint8_t> w(4 * wrow), a(arow);
    for (int r = 0; r < 4; r++) {
        auto x = random_heavy(size_t(k), uint32_t(130 + r));
        quantize_row_ref<q4_k>(x.data(), w.data() + r * wrow, k);
    }
    auto z = random_normal(size_t(k), 135);
    ops->act_from_float(z.data(), a.data(), k);
    ASSERT_NE(ops->gemv4_rows8, nullptr);
    float y[4];
    ops->gemv4_rows8(w.data(), wrow, a.data(), arow, k, y, 1);
    for (int i = 0; i < 4; i++) EXPECT_EQ(y[i], ops->vec_dot_rows8(w.data() + i * wrow, a.data(), k)) << i;
}

// ... and its gemm, which takes 4 activation rows at a time: the integers of each 64 elements (two sub-blocks) in turn
TEST(cpu_gemm4, q4_k_repacked_gemm_order) {
    const cpu::cpu_type_ops* ops = cpu::find_cpu_ops(type::q4_k);
    if (!ops->gemm4_rows8) GTEST_SKIP() << "no AVX2: llama.cpp does not repack q4_K there either";
    const int64_t k = 256 * 5;
    const size_t wrow = row_size(type::q4_k, k), arow = row_size(type::q8_k, k);
    std::vector<uint8_t> w(4 * wrow), a(4 * arow);
    for (int r = 0; r < 4; r++) {
        auto x = random_heavy(size_t(k), uint32_t(100 + r));
        auto z = random_normal(size_t(k), uint32_t(110 + r));
        quantize_row_ref<q4_k>(x.data(), w.data() + r * wrow, k);
        ops->act_from_float(z.data(), a.data() + r * arow, k);
    }
    float y[16];
    ops->gemm4_rows8(w.data(), wrow, a.data(), arow, k, y, 4);
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 4; i++) {
            const auto* wb = reinterpret_cast<const block_q4_k*>(w.data() + i * wrow);
            const auto* ab = reinterpret_cast<const block_q8_k*>(a.data() + j * arow);
            float acc = 0.0f, acc_min = 0.0f;
            for (int64_t b = 0; b < k / 256; b++)
                for (int g = 0; g < 4; g++) { // 64 elements: sub-blocks 2g, 2g + 1
                    int32_t sumi = 0, summ = 0;
                    for (int j2 = 2 * g; j2 < 2 * g + 2; j2++) {
                        int sc, m;
                        kq::scale_min(wb[b].scales, j2, sc, m);
                        int32_t t = 0;
                        for (int l = 0; l < 32; l++)
                            t += q4_k::level(wb[b], 32 * j2 + l) * int32_t(ab[b].qs[32 * j2 + l]);
                        sumi += sc * t;
                        summ += m * (ab[b].bsums[2 * j2] + ab[b].bsums[2 * j2 + 1]);
                    }
                    acc = std::fma(float(sumi), to_f32(wb[b].d) * ab[b].d, acc);
                    acc_min = std::fma(float(summ), to_f32(wb[b].dmin) * ab[b].d, acc_min);
                }
            EXPECT_EQ(y[j * 4 + i], acc - acc_min) << "weight row " << i << ", activation row " << j;
        }
}

// The K formats in a batch of >= 8 activation rows, as llama.cpp's tiled kernels sum them: per super-block the exact
// integers s1 = sum_j sc_j sum q q_a (q6_K: of q - 32, q3_K: of q - 4) and s2 = sum_j m_j sum q_a, r = fma(-dmin, s2, s1 d), then
// acc = fma(r, d_a, acc).
template <class F> void check_tiled_order(const cpu::cpu_type_ops* ops) {
    for (int64_t k : {int64_t(256), int64_t(256 * 7)}) {
        std::vector<uint8_t> w(row_size(F::id, k)), a(row_size(type::q8_k, k));
        auto x = random_heavy(size_t(k), uint32_t(120 + k));
        auto z = random_normal(size_t(k), uint32_t(121 + k));
        quantize_row_ref<F>(x.data(), w.data(), k);
        ops->act_from_float(z.data(), a.data(), k);
        const auto* wb = reinterpret_cast<const typename F::block*>(w.data());
        const auto* ab = reinterpret_cast<const block_q8_k*>(a.data());
        float acc = 0.0f;
        for (int64_t b = 0; b < k / 256; b++) {
            int32_t s1 = 0, s2 = 0;
            float dmin = 0.0f;
            if constexpr (F::id == type::q6_k) {
                for (int s = 0; s < 16; s++) {
                    int32_t t = 0;
                    for (int i = 0; i < 16; i++) t += (q6_k::level(wb[b], 16 * s + i) - 32) * ab[b].qs[16 * s + i];
                    s1 += wb[b].scales[s] * t;
                }
            } else if constexpr (F::id == type::q3_k) {
                for (int s = 0; s < 16; s++) {
                    int32_t t = 0;
                    for (int i = 0; i < 16; i++) t += (q3_k::level(wb[b], 16 * s + i) - 4) * ab[b].qs[16 * s + i];
                    s1 += q3_k::scale(wb[b], s) * t;
                }
            } else if constexpr (F::id == type::q2_k) {
                dmin = to_f32(wb[b].dmin);
                for (int s = 0; s < 16; s++) {
                    int32_t t = 0;
                    for (int i = 0; i < 16; i++) t += q2_k::level(wb[b], 16 * s + i) * ab[b].qs[16 * s + i];
                    s1 += (wb[b].scales[s] & 0xF) * t;
                    s2 += (wb[b].scales[s] >> 4) * ab[b].bsums[s];
                }
            } else {
                dmin = to_f32(wb[b].dmin);
                for (int j = 0; j < 8; j++) {
                    int sc, m;
                    kq::scale_min(wb[b].scales, j, sc, m);
                    int32_t t = 0;
                    for (int l = 0; l < 32; l++) t += F::level(wb[b], 32 * j + l) * int32_t(ab[b].qs[32 * j + l]);
                    s1 += sc * t;
                    s2 += m * (ab[b].bsums[2 * j] + ab[b].bsums[2 * j + 1]);
                }
            }
            acc = std::fma(std::fma(-dmin, float(s2), float(s1) * to_f32(wb[b].d)), ab[b].d, acc);
        }
        EXPECT_EQ(ops->vec_dot_batch8(w.data(), a.data(), k), acc) << F::name << " k=" << k;
    }
}
TEST(cpu_gemm4, k_formats_tiled_order) {
    if (!cpu::cpu_has_avx2()) GTEST_SKIP() << "no AVX2: llama.cpp's tiled kernels need it";
    check_tiled_order<q4_k>(cpu::find_cpu_ops(type::q4_k));
    check_tiled_order<q5_k>(cpu::find_cpu_ops(type::q5_k));
    check_tiled_order<q6_k>(cpu::find_cpu_ops(type::q6_k));
    check_tiled_order<q2_k>(cpu::find_cpu_ops(type::q2_k));
    check_tiled_order<q3_k>(cpu::find_cpu_ops(type::q3_k));
}

// q2_K / q3_K's row dot (decode) as ggml's AVX2 vec_dot sums it: per super-block 8 int32 lanes, lane t the exact sum
// of sc (q - z) q_a over bytes 4t..4t+3 of each 32-byte step (z = 4 for q3_K, 0 for q2_K); q2_K first adds its min
// lanes m_2t bsum_2t + m_2t+1 bsum_2t+1 times -d_a dmin; acc_t = fma(d_a d, float(lane t), acc_t); the lanes folded
// as hsum_float_8. Planted: a run of activations at q8_K's extreme -127 and, in q3_K, its scale code 0 (-32).
template <class F> void check_low_bit_lanes(const cpu::cpu_type_ops* ops) {
    for (int64_t k : {int64_t(256), int64_t(256 * 9)}) {
        std::vector<uint8_t> w(row_size(F::id, k)), a(row_size(type::q8_k, k));
        auto x = random_heavy(size_t(k), uint32_t(140 + k));
        auto z = random_normal(size_t(k), uint32_t(141 + k));
        for (int i = 0; i < 16; i++) z[size_t(32 + i)] = -40.0f; // sub-block 2 of block 0 at -127
        quantize_row_ref<F>(x.data(), w.data(), k);
        ops->act_from_float(z.data(), a.data(), k);
        auto* wb = reinterpret_cast<typename F::block*>(w.data());
        const auto* ab = reinterpret_cast<const block_q8_k*>(a.data());
        if constexpr (F::id == type::q3_k) wb[0].scales[1] = uint8_t(wb[0].scales[1] & 0xF0), wb[0].scales[9] &= 0xFC;
        float acc[8] = {};
        for (int64_t b = 0; b < k / 256; b++) {
            int32_t lane[8] = {}, mins[8] = {};
            for (int e = 0; e < 256; e++) {
                const int t = (e % 32) / 4;
                if constexpr (F::id == type::q3_k)
                    lane[t] += q3_k::scale(wb[b], e / 16) * (q3_k::level(wb[b], e) - 4) * ab[b].qs[e];
                else
                    lane[t] += (wb[b].scales[e / 16] & 0xF) * q2_k::level(wb[b], e) * ab[b].qs[e];
            }
            const float d = ab[b].d * to_f32(wb[b].d);
            for (int t = 0; t < 8; t++) {
                if constexpr (F::id == type::q2_k) {
                    mins[t] = (wb[b].scales[2 * t] >> 4) * ab[b].bsums[2 * t] +
                              (wb[b].scales[2 * t + 1] >> 4) * ab[b].bsums[2 * t + 1];
                    acc[t] = std::fma(-ab[b].d * to_f32(wb[b].dmin), float(mins[t]), acc[t]);
                }
                acc[t] = std::fma(d, float(lane[t]), acc[t]);
            }
        }
        float r[4];
        for (int i = 0; i < 4; i++) r[i] = acc[i + 4] + acc[i];
        const float want = (r[0] + r[2]) + (r[1] + r[3]);
        EXPECT_EQ(ops->vec_dot(w.data(), a.data(), k), want) << F::name << " k=" << k;
    }
}
TEST(cpu_gemm4, q2_k_q3_k_vec_dot_lanes) {
    if (!cpu::cpu_has_avx2()) GTEST_SKIP() << "no AVX2: the reference kernels are in use";
    check_low_bit_lanes<q2_k>(cpu::find_cpu_ops(type::q2_k));
    check_low_bit_lanes<q3_k>(cpu::find_cpu_ops(type::q3_k));
}

// Weights repacked in 16-row groups (backends/cpu/quant/repack.h): every kind, both instruction-set builds, any
// number of activation rows, against the row kernels they stand in for. Bound: exact equality (same bits), since the
// lanes keep the row kernels' accumulators; that is what keeps tessera's output identical to llama.cpp's (q4_0, q4_1,
// q8_0, nvfp4, tq2_0 follow ggml's order). Weights are heavy-tailed, with the legal corner cases of each file format
// planted in: q8_0's -128, nvfp4 sub-scales 0x7f (reads 0), with bit 7 set (ignored) and subnormal, the 2-bit code 3.
TEST(cpu_repack_x16, equals_row_kernels_bit_for_bit) {
    if (!cpu::cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU: weights are not repacked";
    struct isa {
        const char* name;
        cpu::x16_kernels (*get)(cpu::x16_kind);
    };
    std::vector<isa> isas{{"avx2", cpu::avx2::x16_kernels_for}};
    if (cpu::cpu_has_avx512vnni()) isas.push_back({"avx512vnni", cpu::avx512vnni::x16_kernels_for});
    using cpu::x16_kind;
    const std::pair<x16_kind, type> kinds[] = {
        {x16_kind::q4_0_blockwise, type::q4_0}, {x16_kind::q4_0, type::q4_0},
        {x16_kind::q4_1, type::q4_1},           {x16_kind::q8_0, type::q8_0},
        {x16_kind::nvfp4, type::nvfp4},         {x16_kind::awq4, type::awq4},
        {x16_kind::awq4_g64, type::awq4_g64},   {x16_kind::tq2_0, type::tq2_0},
        {x16_kind::i2_s, type::i2_s},           {x16_kind::mxfp4_blockwise, type::mxfp4},
        {x16_kind::q5_0, type::q5_0},           {x16_kind::q5_1, type::q5_1},
        {x16_kind::iq4_nl_blockwise, type::iq4_nl}};
    for (int64_t blocks : {int64_t(1), int64_t(19)})
        for (auto [kind, t] : kinds) {
            const int64_t k = blocks * cpu::x16_block_elems(kind);
            const int64_t n = 32, m = 19; // two groups; 19 activation rows: chunks of 4 / 2 and a remainder
            const cpu::cpu_type_ops* ops = cpu::find_cpu_ops(t);
            const bool blockwise = kind == x16_kind::q4_0_blockwise || kind == x16_kind::mxfp4_blockwise ||
                                   kind == x16_kind::iq4_nl_blockwise;
            const size_t wrow = row_size(t, k), arow = row_size(ops->dot_type, k);
            std::vector<uint8_t> w(size_t(n) * wrow), a(size_t(m) * arow);
            for (int64_t i = 0; i < n; i++) {
                auto x = random_heavy(size_t(k), uint32_t(300 + i));
                find_row_ops(t)->from_float(x.data(), w.data() + i * wrow, k); // i2_s: at unit scale
            }
            if (t == type::q8_0) reinterpret_cast<block_q8_0*>(w.data())[0].qs[3] = -128; // legal in a file
            if (t == type::nvfp4) {
                auto* b = reinterpret_cast<block_nvfp4*>(w.data() + 5 * wrow);
                b[0].d[1] = 0x7f;               // reads as 0
                b[0].d[2] = uint8_t(0x80 | 0x3a); // bit 7 ignored
                b[0].d[3] = 0x05;               // subnormal
            }
            if (t == type::tq2_0) reinterpret_cast<block_tq2_0*>(w.data() + 7 * wrow)[0].qs[9] |= 0xc3; // code 3 (+2)
            if (t == type::i2_s) reinterpret_cast<block_i2_s*>(w.data() + 7 * wrow)[0].qs[9] |= 0xc3;
            if (t == type::iq4_nl) { // every index, both extreme levels among them, in one block
                auto& b = reinterpret_cast<block_iq4_nl*>(w.data() + 11 * wrow)[0];
                for (int j = 0; j < 16; j++) b.qs[j] = uint8_t(j | ((15 - j) << 4));
            }
            if (t == type::mxfp4) { // the subnormal scales 2^-128, 2^-127 and the largest, 2^127
                auto* b = reinterpret_cast<block_mxfp4*>(w.data() + 9 * wrow);
                b[0].e = 0;
                if (blocks > 1) b[1].e = 1, b[2].e = 255;
            }
            for (int64_t j = 0; j < m; j++) {
                auto z = random_normal(size_t(k), uint32_t(400 + j));
                ops->act_from_float(z.data(), a.data() + j * arow, k);
            }
            const size_t gb = cpu::x16_group_bytes(kind, k);
            std::vector<uint8_t> packed(2 * gb);
            for (int g = 0; g < 2; g++)
                cpu::repack_x16(kind, w.data() + g * 16 * wrow, wrow, k, packed.data() + g * gb);
            for (const isa& is : isas) {
                const cpu::x16_kernels kern = is.get(kind);
                ASSERT_NE(kern.gemm, nullptr);
                const int64_t ns = cpu::x16_act_sums_count(kind, k);
                std::vector<int32_t> sums(size_t(m * ns) + 1);
                if (kern.sums)
                    for (int64_t j = 0; j < m; j++) kern.sums(a.data() + j * arow, sums.data() + j * ns, k);
                std::vector<float> y(size_t(m * n), std::nanf(""));
                for (int g = 0; g < 2; g++)
                    kern.gemm(packed.data() + g * gb, k / 32, a.data(), arow, kern.sums ? sums.data() : nullptr,
                              kern.sums ? size_t(ns) : 0, m, y.data() + 16 * g, size_t(n));
                for (int64_t j = 0; j < m; j++)
                    for (int64_t i = 0; i < n; i++) {
                        const float r = blockwise ? ops->vec_dot_rows8(w.data() + i * wrow, a.data() + j * arow, k)
                                                  : ops->vec_dot(w.data() + i * wrow, a.data() + j * arow, k);
                        ASSERT_EQ(y[size_t(j * n + i)], r) << is.name << " " << type_name(t) << " kind " << int(kind)
                                                           << " k " << k << " row " << i << " act " << j;
                    }
            }
        }
}

// The K formats repacked (q4_K in llama.cpp's repacked q4_K_8x8 orders; q3_K / q5_K / q6_K in ggml_vec_dot's and, for
// batches, ggml's tiled order), both instruction-set builds, 1 to 19 activation rows, against the row kernels: gemm
// vs q4_K's vec_dot_rows8 (its gemv) / the others' vec_dot, gemm_batch vs q4_K's gemm4_rows8 (its gemm, 4 x 4) /
// vec_dot_batch8. Planted: a 16-element run of activations at q8_K's extreme -127 (bsum -2032), q6_K's scale -128,
// q3_K's -32 and 31, and the extreme levels. Bound: exact equality.
TEST(cpu_repack_x16, k_formats_equal_row_kernels_bit_for_bit) {
    if (!cpu::cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU: weights are not repacked";
    std::vector<std::pair<const char*, cpu::x16_kernels (*)(cpu::x16_kind)>> isas{{"avx2", cpu::avx2::x16_kernels_for}};
    if (cpu::cpu_has_avx512vnni()) isas.push_back({"avx512vnni", cpu::avx512vnni::x16_kernels_for});
    using cpu::x16_kind;
    const std::pair<x16_kind, type> kinds[] = {
        {x16_kind::q4_k, type::q4_k}, {x16_kind::q5_k, type::q5_k}, {x16_kind::q6_k, type::q6_k},
        {x16_kind::q3_k, type::q3_k}, {x16_kind::q2_k, type::q2_k}, {x16_kind::iq4_xs, type::iq4_xs}};
    for (int64_t blocks : {int64_t(1), int64_t(3)})
        for (auto [kind, t] : kinds) {
            const int64_t k = 256 * blocks, n = 32, m = 19;
            const cpu::cpu_type_ops* ops = cpu::find_cpu_ops(t);
            const size_t wrow = row_size(t, k), arow = row_size(type::q8_k, k);
            std::vector<uint8_t> w(size_t(n) * wrow), a(size_t(m) * arow);
            for (int64_t i = 0; i < n; i++) {
                auto x = random_heavy(size_t(k), uint32_t(700 + i));
                if (i == 3) // every level 0 .. top of a sub-block: a ramp
                    for (int64_t e = 0; e < k; e++) x[size_t(e)] = float(e % 64) - 31.5f;
                find_row_ops(t)->from_float(x.data(), w.data() + i * wrow, k);
            }
            if (t == type::q6_k) reinterpret_cast<block_q6_k*>(w.data() + 5 * wrow)[0].scales[7] = -128;
            if (t == type::q3_k) { // scale codes 0 and 63 (-32, 31)
                auto& b = reinterpret_cast<block_q3_k*>(w.data() + 5 * wrow)[0];
                b.scales[1] &= 0xF0, b.scales[9] &= 0xFC;  // sub-block 1: 0
                b.scales[2] |= 0x0F, b.scales[10] |= 0x03; // sub-block 2: 63
            }
            if (t == type::iq4_xs) { // scale codes 0 and 63 (-32, 31), every index in one sub-block
                auto& b = reinterpret_cast<block_iq4_xs*>(w.data() + 5 * wrow)[0];
                b.scales_l[0] &= 0xF0, b.scales_h = uint16_t(b.scales_h & ~0x3u);             // sub-block 0: 0
                b.scales_l[1] |= 0xF0, b.scales_h = uint16_t(b.scales_h | (0x3u << 6));       // sub-block 3: 63
                for (int j = 0; j < 16; j++) b.qs[16 * 3 + j] = uint8_t(j | ((15 - j) << 4)); // all of them
            }
            for (int64_t j = 0; j < m; j++) {
                auto z = random_normal(size_t(k), uint32_t(800 + j));
                if (j == 2) // sub-block 5 all at the most negative value: q8_K's -127 sixteen times
                    for (int e = 80; e < 96; e++) z[size_t(e)] = -40.0f;
                ops->act_from_float(z.data(), a.data() + j * arow, k);
            }
            ASSERT_EQ(reinterpret_cast<const block_q8_k*>(a.data() + 2 * arow)[0].bsums[5], -2032);
            const size_t gb = cpu::x16_group_bytes(kind, k);
            std::vector<uint8_t> packed(2 * gb);
            for (int g = 0; g < 2; g++)
                cpu::repack_x16(kind, w.data() + g * 16 * wrow, wrow, k, packed.data() + g * gb);
            // the row kernels' answers: plain (gemv / lanes) and batch (per-64 gemm / tiled)
            std::vector<float> plain(size_t(m * n)), batch(size_t(m * n));
            for (int64_t j = 0; j < m; j++)
                for (int64_t i = 0; i < n; i++) {
                    const uint8_t *wi = w.data() + i * wrow, *aj = a.data() + j * arow;
                    plain[size_t(j * n + i)] =
                        t == type::q4_k ? ops->vec_dot_rows8(wi, aj, k) : ops->vec_dot(wi, aj, k);
                    if (t != type::q4_k) batch[size_t(j * n + i)] = ops->vec_dot_batch8(wi, aj, k);
                }
            if (t == type::q4_k)
                for (int64_t j = 0; j + 4 <= m; j += 4)
                    for (int64_t i = 0; i < n; i += 4)
                        ops->gemm4_rows8(w.data() + i * wrow, wrow, a.data() + j * arow, arow, k,
                                         batch.data() + j * n + i, size_t(n));
            for (const auto& [name, get] : isas) {
                const cpu::x16_kernels kern = get(kind);
                ASSERT_TRUE(kern.gemm && kern.gemm_batch);
                for (int form = 0; form < 2; form++)
                    for (int64_t na = 1; na <= m; na++) {
                        if (form == 1 && t == type::q4_k && na > 16) continue; // whole groups of 4 only
                        const int64_t rows = form == 1 && t == type::q4_k ? na / 4 * 4 : na;
                        if (rows == 0) continue;
                        std::vector<float> y(size_t(rows * n), std::nanf(""));
                        for (int g = 0; g < 2; g++)
                            (form ? kern.gemm_batch : kern.gemm)(packed.data() + g * gb, k / 32, a.data(), arow,
                                                                 nullptr, 0, rows, y.data() + 16 * g, size_t(n));
                        const std::vector<float>& want = form ? batch : plain;
                        for (int64_t j = 0; j < rows; j++)
                            for (int64_t i = 0; i < n; i++)
                                ASSERT_EQ(y[size_t(j * n + i)], want[size_t(j * n + i)])
                                    << name << " " << type_name(t) << (form ? " batch" : " plain") << " k " << k
                                    << " rows " << rows << " row " << i << " act " << j;
                    }
            }
        }
}

// q8_0 repacked, every instruction-set build and every form (VNNI two activation rows at a time, AVX2's prompt kernel
// four at a time over stretches of 32 blocks, the one-row and decode forms), against a scalar twin of
// ggml_vec_dot_q8_0_q8_0's order, which is also tinyBLAS_Q0_AVX's (llama.cpp's prompt path for q8_0 on x86): per row
// and activation row 8 lanes, lane g = elements 4g..4g+3 of every block, acc_g = fma(d_w * d_a, float(their integer
// dot), acc_g), folded as hsum_float_8. Bound: exact equality. Sizes: one block, fewer than a stretch, two stretches
// and a part; 1 to 19 activation rows (whole chunks and remainders); weight -128 planted.
TEST(cpu_repack_x16, q8_0_equals_scalar_lane_order) {
    if (!cpu::cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU: weights are not repacked";
    std::vector<std::pair<const char*, cpu::x16_kernels (*)(cpu::x16_kind)>> isas{{"avx2", cpu::avx2::x16_kernels_for}};
    if (cpu::cpu_has_avx512vnni()) isas.push_back({"avx512vnni", cpu::avx512vnni::x16_kernels_for});
    const cpu::cpu_type_ops* ops = cpu::find_cpu_ops(type::q8_0);
    auto dot_ref = [](const block_q8_0* w, const block_q8_0* a, int64_t nb) {
        float acc[8] = {};
        for (int64_t b = 0; b < nb; b++) {
            const float d = to_f32(w[b].d) * to_f32(a[b].d);
            for (int g = 0; g < 8; g++) {
                int32_t sumi = 0;
                for (int e = 4 * g; e < 4 * g + 4; e++) sumi += int32_t(w[b].qs[e]) * int32_t(a[b].qs[e]);
                acc[g] = std::fma(d, float(sumi), acc[g]);
            }
        }
        return ((acc[4] + acc[0]) + (acc[6] + acc[2])) + ((acc[5] + acc[1]) + (acc[7] + acc[3]));
    };
    for (int64_t blocks : {int64_t(1), int64_t(19), int64_t(70)}) {
        const int64_t k = 32 * blocks, n = 32, m = 19;
        const size_t row = row_size(type::q8_0, k);
        std::vector<uint8_t> w(size_t(n) * row), a(size_t(m) * row);
        for (int64_t i = 0; i < n; i++) {
            auto x = random_heavy(size_t(k), uint32_t(500 + i));
            find_row_ops(type::q8_0)->from_float(x.data(), w.data() + i * row, k);
        }
        reinterpret_cast<block_q8_0*>(w.data() + 17 * row)[blocks - 1].qs[30] = -128; // legal in a file
        for (int64_t j = 0; j < m; j++) {
            auto z = random_normal(size_t(k), uint32_t(600 + j));
            ops->act_from_float(z.data(), a.data() + j * row, k);
        }
        const size_t gb = cpu::x16_group_bytes(cpu::x16_kind::q8_0, k);
        std::vector<uint8_t> packed(2 * gb);
        for (int g = 0; g < 2; g++)
            cpu::repack_x16(cpu::x16_kind::q8_0, w.data() + g * 16 * row, row, k, packed.data() + g * gb);
        for (const auto& [name, get] : isas) {
            const cpu::x16_kernels kern = get(cpu::x16_kind::q8_0);
            const int64_t ns = cpu::x16_act_sums_count(cpu::x16_kind::q8_0, k);
            std::vector<int32_t> sums(size_t(m * ns) + 1);
            if (kern.sums)
                for (int64_t j = 0; j < m; j++) kern.sums(a.data() + j * row, sums.data() + j * ns, k);
            for (int64_t na = 1; na <= m; na++) {
                std::vector<float> y(size_t(na * n), std::nanf(""));
                for (int g = 0; g < 2; g++)
                    kern.gemm(packed.data() + g * gb, blocks, a.data(), row, kern.sums ? sums.data() : nullptr,
                              kern.sums ? size_t(ns) : 0, na, y.data() + 16 * g, size_t(n));
                for (int64_t j = 0; j < na; j++)
                    for (int64_t i = 0; i < n; i++)
                        ASSERT_EQ(y[size_t(j * n + i)],
                                  dot_ref(reinterpret_cast<const block_q8_0*>(w.data() + i * row),
                                          reinterpret_cast<const block_q8_0*>(a.data() + j * row), blocks))
                            << name << " k " << k << " rows " << na << " row " << i << " act " << j;
            }
        }
    }
}
