// test_float16.cpp: the CPU's f16 / bf16 mul_mat (backends/cpu/quant/float16*, mul_mat_float16 in mul_mat.cpp).
//   1. The AVX2, and (where the CPU has them) AVX-512 and AVX512_BF16 kernels give exactly the bits of the scalar
//      ones of their order (llama.cpp's float orders written out, float16.h), subnormal bf16 values included.
//   2. The whole op gives exactly the bits of the order this CPU takes, picked the way llama.cpp picks them (tinyBLAS
//      for m >= 2, k % 16 (dpbf16: 32) == 0, rows % 4 == 0; ggml's row dots otherwise): odd shapes, broadcast over
//      dims 2 and 3, a fused scalar mul, 1 and 2 threads, outputs poisoned with NaN beforehand.
//   3. It agrees with the reference path (TESSERA_CPU_REFERENCE=1: row dots in double) within a stated bound.
// Inputs are seeded random values, never zeros.
#include "helpers.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/quant/float16.h"
#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/alloc.h"
#include "ggml-like/fp16.h"
#include "ggml-like/ops.h"
#include "quant/format.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

using namespace tessera;
using tessera::test::nmse;
using tessera::test::random_normal;

namespace {

float round_to(type t, float x) {
    return t == type::f16 ? fp16_to_fp32(fp32_to_fp16(x)) : bf16_to_fp32(fp32_to_bf16(x));
}
std::vector<uint16_t> to_halves(type t, const std::vector<float>& v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); i++) h[i] = t == type::f16 ? fp32_to_fp16(v[i]) : fp32_to_bf16(v[i]);
    return h;
}
float from_half(type t, uint16_t h) {
    return t == type::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
}

// the fast kernels; without AVX2 there are none (mul_mat then takes the reference row dots) and the tests skip
#define TS_FAST_KERNELS(t, fast)                                                                                       \
    const cpu::float16_kernels* fast = cpu::find_float16_kernels(t);                                                   \
    if (!fast) {                                                                                                       \
        GTEST_SKIP() << "no AVX2 on this CPU: f16 / bf16 mul_mat takes the reference row dots";                        \
    }                                                                                                                  \
    static_assert(true)

// every fast kernel set this CPU can run: the AVX2 one, the AVX-512 one where it has AVX-512, the AVX512_BF16 one
// (bf16) where it has that; parts 1 check each against the scalar kernels of its order
std::vector<const cpu::float16_kernels*> fast_kernel_sets(type t) {
    std::vector<const cpu::float16_kernels*> v;
    if (cpu::cpu_has_avx2()) v.push_back(cpu::avx2::float16_kernels_for(t));
    if (cpu::cpu_has_avx512vnni()) v.push_back(cpu::avx512::float16_kernels_for(t));
    if (t == type::bf16 && cpu::cpu_has_avx512bf16()) v.push_back(cpu::avx512bf16::float16_kernels_for(t));
    return v;
}
const cpu::float16_kernels* scalar_twin(type t, const cpu::float16_kernels* fast) {
    return cpu::scalar_float16_kernels(t, fast->order);
}

} // namespace

// from_float: every float (normal, subnormal, huge, inf, nan, halfway cases) rounds as ggml's conversion. Bound: bits.
TEST(float16_kernels, from_float_same_bits) {
    for (type t : {type::f16, type::bf16}) {
        TS_FAST_KERNELS(t, widest);
        (void)widest;
        for (const cpu::float16_kernels* fast : fast_kernel_sets(t)) {
            const cpu::float16_kernels* ref = scalar_twin(t, fast);
            std::vector<float> x = random_normal(1003, 1, 100.0f);
            constexpr float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
            // infinities, nans (one signalling), f16's largest and its overflow, out of range both ways, halfway cases
            const uint32_t special_bits[] = {0x7f800001u, 0x3f808000u, 0x3f818000u, 0x3f801000u, 0x00000001u};
            std::vector<float> specials = {inf, -inf, nan, -nan, 65504.0f, 65520.0f, 1e30f, -1e-30f, 1e-7f};
            for (uint32_t b : special_bits) specials.push_back(std::bit_cast<float>(b));
            for (size_t i = 0; i < std::size(specials); i++) x[7 * i + 3] = specials[i];
            std::vector<uint16_t> a(x.size()), b(x.size());
            fast->from_float(x.data(), a.data(), int64_t(x.size()));
            ref->from_float(x.data(), b.data(), int64_t(x.size()));
            const std::vector<uint16_t> want = to_halves(t, x); // ggml-like/fp16.h: ggml's conversions
            for (size_t i = 0; i < x.size(); i++) {
                ASSERT_EQ(a[i], b[i]) << type_name(t) << " at " << i;
                ASSERT_EQ(a[i], want[i]) << type_name(t) << " at " << i;
            }
        }
    }
}

// gemv (one row for every k from 1 to 200 and model sizes; many strided rows) and gemm (tiles of 3, 2 and 1
// activation rows, 4 to 16 weight rows, strided rows and outputs). Bound: bits.
TEST(float16_kernels, dot_and_gemm_same_bits) {
    for (type t : {type::f16, type::bf16}) {
        TS_FAST_KERNELS(t, widest);
        (void)widest;
        for (const cpu::float16_kernels* fast : fast_kernel_sets(t)) {
            const cpu::float16_kernels* ref = scalar_twin(t, fast);
            std::vector<int64_t> ks;
            for (int64_t k = 1; k <= 200; k++) ks.push_back(k);
            for (int64_t k : {576, 1000, 1536}) ks.push_back(k);
            for (int64_t k : ks) {
                const auto w = to_halves(t, random_normal(size_t(k), uint32_t(k)));
                const auto a = to_halves(t, random_normal(size_t(k), uint32_t(k + 1000)));
                float f = 0, r = 0;
                fast->gemv(w.data(), size_t(k), 1, a.data(), k, &f, 1);
                ref->gemv(w.data(), size_t(k), 1, a.data(), k, &r, 1);
                ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(r)) << type_name(t) << " k=" << k;
            }
            for (int64_t k : {33, 64, 576})
                for (int64_t n : {2, 3, 5, 8, 17, 64}) { // gemv over many rows (4 interleaved streams), strided
                    const size_t ws = size_t(k) + 8, ys = 3;
                    const auto w = to_halves(t, random_normal(ws * size_t(n), uint32_t(k * n)));
                    const auto a = to_halves(t, random_normal(size_t(k), uint32_t(k + n)));
                    std::vector<float> yf(ys * size_t(n), std::nanf("")), yr = yf;
                    fast->gemv(w.data(), ws, n, a.data(), k, yf.data(), ys);
                    ref->gemv(w.data(), ws, n, a.data(), k, yr.data(), ys);
                    for (int64_t i = 0; i < n; i++)
                        ASSERT_EQ(std::bit_cast<uint32_t>(yf[size_t(i) * ys]),
                                  std::bit_cast<uint32_t>(yr[size_t(i) * ys]))
                            << type_name(t) << " k=" << k << " n=" << n << " at " << i;
                }
            for (int64_t k : {16, 48, 64, 576, 1536})
                for (int64_t n_w : {4, 8, 16})
                    for (int64_t n_a : {1, 2, 3, 4, 5, 6, 7, 11, 13}) {
                        if (k % fast->gemm_k != 0) continue;
                        const size_t ws = size_t(k) + 24, as = size_t(k) + 40, ys = size_t(n_w) + 3;
                        const auto w = to_halves(t, random_normal(ws * size_t(n_w), uint32_t(k * n_w)));
                        const auto a = to_halves(t, random_normal(as * size_t(n_a), uint32_t(k + n_a)));
                        std::vector<float> yf(ys * size_t(n_a), std::nanf("")), yr = yf;
                        fast->gemm(w.data(), ws, n_w, a.data(), as, n_a, k, yf.data(), ys);
                        ref->gemm(w.data(), ws, n_w, a.data(), as, n_a, k, yr.data(), ys);
                        for (int64_t j = 0; j < n_a; j++)
                            for (int64_t i = 0; i < n_w; i++) {
                                const size_t o = size_t(j) * ys + size_t(i);
                                ASSERT_EQ(std::bit_cast<uint32_t>(yf[o]), std::bit_cast<uint32_t>(yr[o]))
                                    << type_name(t) << " k=" << k << " n_w=" << n_w << " n_a=" << n_a << " at " << i
                                    << "," << j;
                            }
                    }
        }
    }
}

// Values near and below the smallest normal: weights with subnormal and small exponents against activations near 1,
// so that products, partial sums and results are subnormal or just above. vdpbf16ps flushes subnormal inputs and
// results to zero, the f32 orders keep them: each kernel set against the scalar kernels of its order (the dpbf16
// kernels without the flushing fail it). Bound: bits.
TEST(float16_kernels, subnormal_bf16_same_bits) {
    TS_FAST_KERNELS(type::bf16, widest);
    (void)widest;
    uint32_t state = 7;
    auto next = [&] { return state = state * 1664525u + 1013904223u; };
    // exponent field 0 (subnormal) a quarter of the time, else lo + [0, span)
    auto halves = [&](size_t n, uint32_t lo, uint32_t span, bool subnormals) {
        std::vector<uint16_t> v(n);
        for (uint16_t& h : v) {
            const uint32_t r = next();
            const uint32_t sign = (r >> 31) << 15, mant = (r >> 8) & 0x7f;
            const uint32_t expo = subnormals && (r >> 16) % 4 == 0 ? 0 : lo + (r >> 20) % span;
            h = uint16_t(sign | (expo << 7) | (mant ? mant : 1));
        }
        return v;
    };
    for (const cpu::float16_kernels* fast : fast_kernel_sets(type::bf16)) {
        const cpu::float16_kernels* ref = scalar_twin(type::bf16, fast);
        for (int64_t k : {32, 64, 96, 576}) {
            const int64_t n_w = 8, n_a = 7;
            const auto w = halves(size_t(k * n_w), 1, 12, true);    // 2^-126 .. 2^-115 and subnormals
            const auto a = halves(size_t(k * n_a), 122, 10, false); // 2^-5 .. 2^4
            std::vector<float> yf(size_t(n_w * n_a), std::nanf("")), yr = yf;
            fast->gemv(w.data(), size_t(k), n_w, a.data(), k, yf.data(), 1);
            ref->gemv(w.data(), size_t(k), n_w, a.data(), k, yr.data(), 1);
            for (int64_t i = 0; i < n_w; i++)
                ASSERT_EQ(std::bit_cast<uint32_t>(yf[size_t(i)]), std::bit_cast<uint32_t>(yr[size_t(i)]))
                    << "gemv k=" << k << " at " << i;
            if (k % fast->gemm_k != 0) continue;
            fast->gemm(w.data(), size_t(k), n_w, a.data(), size_t(k), n_a, k, yf.data(), size_t(n_w));
            ref->gemm(w.data(), size_t(k), n_w, a.data(), size_t(k), n_a, k, yr.data(), size_t(n_w));
            for (size_t o = 0; o < yf.size(); o++)
                ASSERT_EQ(std::bit_cast<uint32_t>(yf[o]), std::bit_cast<uint32_t>(yr[o]))
                    << "gemm k=" << k << " at " << o;
        }
    }
}

namespace {

struct mm_shape {
    int64_t k, n, m;
    int64_t w2 = 1, w3 = 1, x2 = 1, x3 = 1; // weight and activation dims 2, 3 (weights broadcast over them)
};

struct mm_result {
    std::vector<float> y;    // (n, m, x2, x3)
    std::vector<uint16_t> w; // the weights' halves (k, n, w2, w3)
    std::vector<float> x;    // the activations (k, m, x2, x3)
};

// mul_mat (optionally times a one-element tensor, fused by the backend) on a CPU backend; every computed tensor is
// poisoned with NaN before the run
mm_result run_mul_mat(type t, const mm_shape& s, int n_threads, bool reference, float out_scale) {
    mm_result r;
    r.w = to_halves(t, random_normal(size_t(s.k * s.n * s.w2 * s.w3), uint32_t(s.k * 7 + s.n), 0.5f));
    r.x = random_normal(size_t(s.k * s.m * s.x2 * s.x3), uint32_t(s.m * 13 + s.k));
    context ctx;
    tensor* w = ctx.new_tensor(t, {s.k, s.n, s.w2, s.w3});
    w->data = r.w.data();
    w->flags |= flag_param;
    tensor* x = ctx.new_tensor(type::f32, {s.k, s.m, s.x2, s.x3});
    x->data = r.x.data();
    float sc_value = out_scale;
    tensor* y = mul_mat(ctx, w, x);
    if (out_scale != 1.0f) {
        tensor* sc = ctx.new_tensor(type::f32, {1});
        sc->data = &sc_value;
        y = mul(ctx, y, sc);
    }
    y->flags |= flag_output;
    graph g;
    g.expand(y);
    memory_plan plan = plan_memory(g);
    std::vector<uint8_t> mem(plan.size + 64);
    bind_memory(g, plan, mem.data());
    for (tensor* node : g.nodes)
        if (!node->view_src) std::fill_n(static_cast<float*>(node->data), node->n_bytes() / 4, std::nanf(""));
    cpu::cpu_backend be(cpu::cpu_options{n_threads, reference});
    be.compute(g);
    const float* out = static_cast<const float*>(y->data);
    r.y.assign(out, out + y->n_elements());
    return r;
}

// llama.cpp's result written out with the scalar kernels of this CPU's order: activations rounded to the weight's
// type, then tinyBLAS where llama.cpp takes it (m >= 2, k % 16 (dpbf16: 32) == 0, n % 4 == 0), else the row dot;
// times the scale (one rounding)
std::vector<float> expected_bits(type t, const mm_shape& s, const mm_result& r, float out_scale) {
    const cpu::float16_kernels* ref = cpu::find_float16_kernels(t, true);
    std::vector<uint16_t> a(r.x.size());
    std::vector<float> y(size_t(s.n * s.m * s.x2 * s.x3));
    ref->from_float(r.x.data(), a.data(), int64_t(a.size()));
    const bool tiny = s.m >= 2 && s.k % ref->gemm_k == 0 && s.n % 4 == 0;
    for (int64_t i3 = 0; i3 < s.x3; i3++)
        for (int64_t i2 = 0; i2 < s.x2; i2++) {
            const uint16_t* w = r.w.data() + size_t(((i3 / (s.x3 / s.w3)) * s.w2 + i2 / (s.x2 / s.w2)) * s.n * s.k);
            const uint16_t* ab = a.data() + size_t((i3 * s.x2 + i2) * s.m * s.k);
            float* yb = y.data() + size_t((i3 * s.x2 + i2) * s.m * s.n);
            if (tiny) {
                ref->gemm(w, size_t(s.k), s.n, ab, size_t(s.k), s.m, s.k, yb, size_t(s.n));
            } else {
                for (int64_t j = 0; j < s.m; j++)
                    for (int64_t i = 0; i < s.n; i++) {
                        float* yi = yb + j * s.n + i;
                        ref->gemv(w + size_t(i * s.k), size_t(s.k), 1, ab + size_t(j * s.k), s.k, yi, 1);
                    }
            }
        }
    if (out_scale != 1.0f)
        for (float& v : y) v *= out_scale;
    return y;
}

const mm_shape mm_shapes[] = {
    {16, 4, 1},
    {16, 4, 2},
    {32, 8, 3},
    {48, 8, 4}, // k % 32 == 16: dpbf16 takes the row dots
    {40, 6, 3},
    {72, 17, 7},
    {64, 64, 64},
    {576, 48, 1},
    {576, 20, 2},
    {576, 36, 3},
    {200, 12, 300},
    {1000, 8, 7},
    {1536, 16, 64},
    {96, 10, 300},
    {48, 8, 5, 2, 3, 4, 3},
    {100, 7, 1, 1, 2, 1, 4},
    {64, 12, 3, 2, 1, 2, 1},
};

} // namespace

// The op: llama.cpp's orders (bound: bits) and the reference path (bound below), fast kernels with 1 and 2 threads.
TEST(float16_mul_mat, llama_cpp_bits_and_reference_agreement) {
    for (type t : {type::f16, type::bf16}) {
        TS_FAST_KERNELS(t, fast);
        (void)fast;
        for (const mm_shape& s : mm_shapes)
            for (float out_scale : {1.0f, 0.7f}) {
                const mm_result ref = run_mul_mat(t, s, 2, true, out_scale);
                const std::vector<float> want = expected_bits(t, s, ref, out_scale);
                for (int n_threads : {1, 2}) {
                    const mm_result got = run_mul_mat(t, s, n_threads, false, out_scale);
                    ASSERT_EQ(got.y.size(), want.size());
                    for (size_t i = 0; i < want.size(); i++)
                        ASSERT_EQ(std::bit_cast<uint32_t>(got.y[i]), std::bit_cast<uint32_t>(want[i]))
                            << type_name(t) << " k=" << s.k << " n=" << s.n << " m=" << s.m << " dims " << s.x2 << "x"
                            << s.x3 << " scale=" << out_scale << " threads=" << n_threads << " at " << i;
                }
                // bound against the double-precision reference: both see the same halves (products exact in f32),
                // so the difference is the f32 sums: |y - y_ref| <= (k + 2) * 2^-24 * sum |w_i a_i| * |scale|
                // (a sum of k terms in f32 has error <= (k - 1) u sum |terms|, plus the final roundings)
                const mm_result got = run_mul_mat(t, s, 2, false, out_scale);
                for (int64_t i3 = 0; i3 < s.x3; i3++)
                    for (int64_t i2 = 0; i2 < s.x2; i2++)
                        for (int64_t j = 0; j < s.m; j++)
                            for (int64_t i = 0; i < s.n; i++) {
                                const int64_t wb = (i3 / (s.x3 / s.w3)) * s.w2 + i2 / (s.x2 / s.w2);
                                const uint16_t* w = ref.w.data() + size_t((wb * s.n + i) * s.k);
                                const float* x = ref.x.data() + size_t(((i3 * s.x2 + i2) * s.m + j) * s.k);
                                double mag = 0;
                                for (int64_t l = 0; l < s.k; l++)
                                    mag += std::fabs(double(from_half(t, w[l])) * double(round_to(t, x[l])));
                                const size_t o = size_t(((i3 * s.x2 + i2) * s.m + j) * s.n + i);
                                const double bound = double(s.k + 2) * 0x1p-24 * mag * std::fabs(out_scale);
                                ASSERT_LE(std::fabs(double(got.y[o]) - double(ref.y[o])), bound)
                                    << type_name(t) << " k=" << s.k << " n=" << s.n << " m=" << s.m << " at " << o;
                            }
                EXPECT_LT(nmse(got.y.data(), ref.y.data(), ref.y.size()), 1e-12)
                    << type_name(t) << " k=" << s.k << " n=" << s.n << " m=" << s.m;
            }
    }
}
