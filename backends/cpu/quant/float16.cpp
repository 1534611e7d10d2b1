// float16.cpp: the scalar f16 / bf16 mul_mat kernels, llama.cpp's float orders written out one lane at a time (the
// orders: float16.h), and the choice between them and the SIMD versions.
#include "backends/cpu/quant/float16.h"

#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/fp16.h"

#include <cmath>

namespace tessera::cpu {

namespace {

struct f16_t {
    static float load(uint16_t h) { return fp16_to_fp32(h); }
    static uint16_t from(float x) { return fp32_to_fp16(x); }
};
struct bf16_t {
    static float load(uint16_t h) { return bf16_to_fp32(h); }
    static uint16_t from(float x) { return fp32_to_bf16(x); }
};

template <class T> void from_float(const float* x, uint16_t* y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = T::from(x[i]);
}

// _mm512_reduce_add_ps: lanes 8..15 + 0..7, then 4..7 + 0..3, then (0 + 2) + (1 + 3)
float reduce16(const float* v) {
    float h8[8], h4[4];
    for (int l = 0; l < 8; l++) h8[l] = v[l + 8] + v[l];
    for (int l = 0; l < 4; l++) h4[l] = h8[l + 4] + h8[l];
    return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

// tinyBLAS<16>: one 16-lane fma chain per output
template <class T>
void gemm(const uint16_t* w, size_t ws, int64_t n_w, const uint16_t* a, size_t as, int64_t n_a, int64_t k, float* y,
          size_t ys) {
    for (int64_t j = 0; j < n_a; j++)
        for (int64_t i = 0; i < n_w; i++) {
            float acc[16] = {};
            for (int64_t l = 0; l < k; l += 16)
                for (int64_t c = 0; c < 16; c++)
                    acc[c] = std::fma(T::load(w[size_t(i) * ws + l + c]), T::load(a[size_t(j) * as + l + c]), acc[c]);
            y[size_t(j) * ys + i] = reduce16(acc);
        }
}

// ggml_vec_dot_f16: 4 x 16 lanes, (s0 + s2) + (s1 + s3), reduced; the rest in double
float dot_f16(const uint16_t* w, const uint16_t* a, int64_t k) {
    float s[4][16] = {};
    const int64_t np = k - k % 64;
    for (int64_t i = 0; i < np; i += 64)
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 16; c++)
                s[r][c] = std::fma(fp16_to_fp32(w[i + 16 * r + c]), fp16_to_fp32(a[i + 16 * r + c]), s[r][c]);
    float v[16];
    for (int c = 0; c < 16; c++) v[c] = (s[0][c] + s[2][c]) + (s[1][c] + s[3][c]);
    double sum = reduce16(v);
    for (int64_t i = np; i < k; i++) sum += double(fp16_to_fp32(w[i]) * fp16_to_fp32(a[i]));
    return float(sum);
}

// ggml_vec_dot_bf16 (AVX-512F): 2 x 16 lanes over 32-element steps, each reduced and added in double; the rest too
float dot_bf16(const uint16_t* w, const uint16_t* a, int64_t k) {
    float s[2][16] = {};
    const int64_t np = k - k % 32;
    for (int64_t i = 0; i < np; i += 32)
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 16; c++)
                s[r][c] = std::fma(bf16_to_fp32(w[i + 16 * r + c]), bf16_to_fp32(a[i + 16 * r + c]), s[r][c]);
    double sum = 0.0;
    sum += double(reduce16(s[0]));
    sum += double(reduce16(s[1]));
    for (int64_t i = np; i < k; i++) sum += double(bf16_to_fp32(w[i]) * bf16_to_fp32(a[i]));
    return float(sum);
}

// vdpbf16ps on one lane (order dpbf16, float16.h): acc += w1 a1, then += w0 a0, each one rounding (the products are
// exact), subnormal inputs and results flushed to zero
float flush(float x) {
    return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}
float dpbf16_lane(float acc, const uint16_t* w, const uint16_t* a) {
    acc = flush(std::fma(flush(bf16_to_fp32(w[1])), flush(bf16_to_fp32(a[1])), flush(acc)));
    return flush(std::fma(flush(bf16_to_fp32(w[0])), flush(bf16_to_fp32(a[0])), acc));
}
// 16 lanes over the 32 elements at w, a
void dpbf16(float (&acc)[16], const uint16_t* w, const uint16_t* a) {
    for (int l = 0; l < 16; l++) acc[l] = dpbf16_lane(acc[l], w + 2 * l, a + 2 * l);
}

// tinyBLAS<32> with vdpbf16ps: one accumulator an output over 32-element steps, reduced
void gemm_dpbf16(const uint16_t* w, size_t ws, int64_t n_w, const uint16_t* a, size_t as, int64_t n_a, int64_t k,
                 float* y, size_t ys) {
    for (int64_t j = 0; j < n_a; j++)
        for (int64_t i = 0; i < n_w; i++) {
            float acc[16] = {};
            for (int64_t l = 0; l < k; l += 32) dpbf16(acc, w + size_t(i) * ws + l, a + size_t(j) * as + l);
            y[size_t(j) * ys + i] = reduce16(acc);
        }
}

// ggml_vec_dot_bf16 with vdpbf16ps: 2 accumulators over 64-element steps, each reduced and added in double; the
// rest in double
float dot_dpbf16(const uint16_t* w, const uint16_t* a, int64_t k) {
    float s[2][16] = {};
    const int64_t np = k - k % 64;
    for (int64_t i = 0; i < np; i += 64)
        for (int r = 0; r < 2; r++) dpbf16(s[r], w + i + 32 * r, a + i + 32 * r);
    double sum = 0.0;
    sum += double(reduce16(s[0]));
    sum += double(reduce16(s[1]));
    for (int64_t i = np; i < k; i++) sum += double(bf16_to_fp32(w[i]) * bf16_to_fp32(a[i]));
    return float(sum);
}

// row after row (the AVX2 version's order of rows does not change any row's result)
template <float (*dot)(const uint16_t*, const uint16_t*, int64_t)>
void gemv(const uint16_t* w, size_t ws, int64_t n, const uint16_t* a, int64_t k, float* y, size_t ys) {
    for (int64_t i = 0; i < n; i++) y[size_t(i) * ys] = dot(w + size_t(i) * ws, a, k);
}

const float16_kernels scalar_f16{from_float<f16_t>, gemm<f16_t>, gemv<dot_f16>};
const float16_kernels scalar_bf16{from_float<bf16_t>, gemm<bf16_t>, gemv<dot_bf16>};
const float16_kernels scalar_bf16_dp{from_float<bf16_t>, gemm_dpbf16, gemv<dot_dpbf16>, float16_order::dpbf16, 32};

} // namespace

const float16_kernels* scalar_float16_kernels(type t, float16_order order) {
    if (t != type::f16 && t != type::bf16) return nullptr;
    if (order == float16_order::dpbf16) return t == type::bf16 ? &scalar_bf16_dp : nullptr;
    return t == type::f16 ? &scalar_f16 : &scalar_bf16;
}

const float16_kernels* find_float16_kernels(type t, bool reference) {
    if (t != type::f16 && t != type::bf16) return nullptr;
    const bool dp = t == type::bf16 && cpu_has_avx512bf16();
    if (reference) return scalar_float16_kernels(t, dp ? float16_order::dpbf16 : float16_order::avx512);
    if (dp) return avx512bf16::float16_kernels_for(t);
    if (cpu_has_avx512vnni()) return avx512::float16_kernels_for(t);
    return cpu_has_avx2() ? avx2::float16_kernels_for(t) : nullptr;
}

} // namespace tessera::cpu
