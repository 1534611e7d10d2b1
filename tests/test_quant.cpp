// test_quant.cpp: typed tests over every block format in TS_BLOCK_FORMATS: quantize -> dequantize error bounds on
// Gaussian and heavy-tailed data, exact round trips of representable values, vec_dot against a double dot product of
// the dequantized values, the CPU fast kernels against the references, and hand-built blocks decoded per FORMATS.md.
#include "helpers.h"

#include "backends/cpu/quant/vec_dot.h"
#include "quant/format.h"

#include <cmath>
#include <cstring>

using namespace tessera;
using tessera::test::random_heavy;
using tessera::test::random_normal;

namespace {

template <class F> std::vector<typename F::block> quantize_all(const std::vector<float>& x) {
    std::vector<typename F::block> b(x.size() / F::block_size);
    quantize_row_ref<F>(x.data(), b.data(), int64_t(x.size()));
    return b;
}
template <class F> std::vector<float> dequantize_all(const std::vector<typename F::block>& b) {
    std::vector<float> y(b.size() * F::block_size);
    dequantize_row_ref<F>(b.data(), y.data(), int64_t(y.size()));
    return y;
}
double rel_rmse(const std::vector<float>& a, const std::vector<float>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
        den += double(ref[i]) * ref[i];
    }
    return std::sqrt(num / den);
}

// Round-trip error bounds (relative RMSE), per format: 8-bit ~ 1/(127*sqrt(3)) of amax-scale; 4-bit ~ 16x that.
template <class F> struct bounds;
template <> struct bounds<q8_0> { static constexpr double normal = 0.01, heavy = 0.02; };
template <> struct bounds<q8_1> { static constexpr double normal = 0.01, heavy = 0.02; };
template <> struct bounds<q4_0> { static constexpr double normal = 0.12, heavy = 0.2; };
template <> struct bounds<q4_1> { static constexpr double normal = 0.10, heavy = 0.2; };

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
    }
}

TYPED_TEST(quant_format, representable_values_round_trip_exactly) {
    using F = TypeParam;
    // values on the format's grid with a power-of-two scale: quantizing them must give them back bit for bit
    std::vector<float> x(F::block_size * 8);
    std::mt19937 rng(3);
    for (size_t b = 0; b < x.size() / F::block_size; b++) {
        const float d = std::ldexp(1.0f, int(b) - 4);
        float* v = x.data() + b * F::block_size;
        for (int j = 0; j < F::block_size; j++) {
            if constexpr (F::id == type::q8_0 || F::id == type::q8_1)
                v[j] = d * float(int(rng() % 255) - 127);
            else if constexpr (F::id == type::q4_0)
                v[j] = d * float(int(rng() % 16) - 8);
            else
                v[j] = d * float(int(rng() % 16)) - 3 * d;
        }
        // pin the extremes the quantizer derives its scale from
        if constexpr (F::id == type::q8_0 || F::id == type::q8_1)
            v[0] = 127 * d;
        else if constexpr (F::id == type::q4_0)
            v[0] = -8 * d;
        else {
            v[0] = -3 * d;
            v[1] = 12 * d;
        }
    }
    auto y = dequantize_all<F>(quantize_all<F>(x));
    for (size_t i = 0; i < x.size(); i++) ASSERT_EQ(y[i], x[i]) << F::name << " element " << i;
}

TYPED_TEST(quant_format, vec_dot_matches_double_dot_of_dequantized) {
    using F = TypeParam;
    using A = std::conditional_t<F::dot_type == type::q8_0, q8_0, q8_1>;
    const int64_t n = F::block_size * 37;
    auto w = random_normal(size_t(n), 4);
    auto a = random_heavy(size_t(n), 5);
    auto wb = quantize_all<F>(w);
    auto ab = quantize_all<A>(a);
    auto wd = dequantize_all<F>(wb);
    auto ad = dequantize_all<A>(ab);
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
