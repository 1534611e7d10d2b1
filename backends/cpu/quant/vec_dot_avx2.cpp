// vec_dot_avx2.cpp: AVX2/FMA/F16C row kernels for the CPU backend (compiled with -mavx2 -mfma -mf16c, called only
// after cpu_has_avx2()). Each matches its scalar reference in quant/ up to float summation order; test_quant checks.
#include "quant/q4_0.h"
#include "quant/q4_1.h"
#include "quant/q5_0.h"
#include "quant/q5_1.h"
#include "quant/q8_0.h"
#include "quant/q8_1.h"

#include "backends/cpu/quant/vec_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

// The same source is compiled a second time as vec_dot_vnni.cpp (namespace avx512vnni, with AVX-512 VNNI + VL): the
// byte dot then uses vpdpbusd instead of maddubs + madd. Integer sums are identical, so the results are too.
#ifndef TS_SIMD_NS
#define TS_SIMD_NS avx2
#endif

namespace tessera::cpu::TS_SIMD_NS {

namespace {

inline float hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v);
    __m128 hi = _mm256_extractf128_ps(v, 1);
    lo = _mm_add_ps(lo, hi);
    lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
    lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
    return _mm_cvtss_f32(lo);
}

// 16 bytes of nibbles -> 32 bytes: elements 0..15 (low nibbles) then 16..31 (high nibbles)
inline __m256i unpack_nibbles(const uint8_t* qs) {
    const __m128i tmp = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m256i bytes = _mm256_set_m128i(_mm_srli_epi16(tmp, 4), tmp);
    return _mm256_and_si256(bytes, _mm256_set1_epi8(0x0f));
}

// sum of products of 32 unsigned (u) x signed (s) bytes, as 8 int32 lanes converted to float
inline __m256 dot_us(__m256i u, __m256i s) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s));
#else
    const __m256i p16 = _mm256_maddubs_epi16(u, s); // no int16 saturation: |pair sums| <= 2 * 127 * 127
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
#endif
}

// signed x signed: |x| * (y with x's sign)
inline __m256 dot_ss(__m256i x, __m256i y) {
    return dot_us(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

inline float h2f(f16 h) {
    return _cvtsh_ss(h.bits);
}

// q5_0 / q5_1: the 32 5-bit values (0..31) in element order: the nibbles with the fifth bits of qh (ggml's
// bytes_from_bits_32: byte j = 0xff where bit j is set) as bit 4
inline __m256i unpack_q5(const uint8_t* qs, const uint8_t* qh) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32(int(h)),
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
    const __m256i bits =
        _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)), _mm256_set1_epi64x(-1));
    return _mm256_or_si256(unpack_nibbles(qs), _mm256_and_si256(bits, _mm256_set1_epi8(0x10)));
}

inline int hsum_i32_8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

} // namespace

float vec_dot_q4_0_q8_0(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q4_0*>(w);
    auto* y = static_cast<const block_q8_0*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        const __m256i q4 = _mm256_sub_epi8(unpack_nibbles(x[i].qs), _mm256_set1_epi8(8));
        const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
        acc = _mm256_fmadd_ps(d, dot_ss(q4, q8), acc);
    }
    return hsum(acc);
}

float vec_dot_q4_1_q8_1(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q4_1*>(w);
    auto* y = static_cast<const block_q8_1*>(a);
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        summs += h2f(x[i].m) * h2f(y[i].s);
        const __m256i q4 = unpack_nibbles(x[i].qs);
        const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
        acc = _mm256_fmadd_ps(d, dot_us(q4, q8), acc);
    }
    return hsum(acc) + summs;
}

// ggml_vec_dot_q5_0_q8_0 (x86): fma(d_w d_a, lanes of the signed byte dot, acc) a block, hsum_float_8; the values
// q - 16 as signed bytes (its andnot / or of the fifth bits gives the same integers)
float vec_dot_q5_0_q8_0(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q5_0*>(w);
    auto* y = static_cast<const block_q8_0*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        const __m256i q5 = _mm256_sub_epi8(unpack_q5(x[i].qs, x[i].qh), _mm256_set1_epi8(16));
        const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
        acc = _mm256_fmadd_ps(d, dot_ss(q5, q8), acc);
    }
    return hsum(acc);
}

// ggml_vec_dot_q5_1_q8_1 (x86): as q4_1's (fma(d_w d_a, unsigned x signed lanes, acc), summs += m_w s_a)
float vec_dot_q5_1_q8_1(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q5_1*>(w);
    auto* y = static_cast<const block_q8_1*>(a);
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        summs += h2f(x[i].m) * h2f(y[i].s);
        const __m256i q5 = unpack_q5(x[i].qs, x[i].qh);
        const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
        acc = _mm256_fmadd_ps(d, dot_us(q5, q8), acc);
    }
    return hsum(acc) + summs;
}

// ---- 4 x 4 register blocks for prompt processing: each weight block is unpacked once for 4 activation rows and each
// activation block loaded once for 4 weight rows; every output keeps its own accumulator with the vec_dot's order ----

namespace {

template <class W, class A, int NA, class Body>
inline void gemm4_loop(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys,
                       Body&& body) {
    const W* wr[4];
    const A* ar[NA];
    for (int i = 0; i < 4; i++) wr[i] = reinterpret_cast<const W*>(static_cast<const uint8_t*>(w) + i * ws);
    for (int j = 0; j < NA; j++) ar[j] = reinterpret_cast<const A*>(static_cast<const uint8_t*>(a) + j * as);
    __m256 acc[4][NA];
    float extra[4][NA] = {};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < NA; j++) acc[i][j] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) body(wr, ar, b, acc, extra);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < NA; j++) y[j * ys + i] = hsum(acc[i][j]) + extra[i][j];
}

// block b of each of the NA activation rows: its 32 int8 values and its scale
template <int NA, class A>
inline void load_acts(const A* const (&ar)[NA], int64_t b, __m256i (&q8)[NA], float (&da)[NA]) {
    for (int j = 0; j < NA; j++) {
        q8[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ar[j][b].qs));
        da[j] = h2f(ar[j][b].d);
    }
}

} // namespace

template <int NA>
void gemm_q4_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm4_loop<block_q4_1, block_q8_1, NA>(
        w, ws, a, as, n, y, ys, [](auto& wr, auto& ar, int64_t b, auto& acc, auto& ex) {
            __m256i q8[NA];
            float da[NA], sa[NA];
            load_acts<NA>(ar, b, q8, da);
            for (int j = 0; j < NA; j++) sa[j] = h2f(ar[j][b].s);
            for (int i = 0; i < 4; i++) {
                const __m256i q4 = unpack_nibbles(wr[i][b].qs);
                const float dw = h2f(wr[i][b].d), mw = h2f(wr[i][b].m);
                for (int j = 0; j < NA; j++) {
                    acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da[j]), dot_us(q4, q8[j]), acc[i][j]);
                    ex[i][j] += mw * sa[j];
                }
            }
        });
}

template <int NA>
void gemm_q4_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm4_loop<block_q4_0, block_q8_0, NA>(w, ws, a, as, n, y, ys, [](auto& wr, auto& ar, int64_t b, auto& acc, auto&) {
        __m256i q8[NA];
        float da[NA];
        load_acts<NA>(ar, b, q8, da);
        for (int i = 0; i < 4; i++) {
            const __m256i q4 = _mm256_sub_epi8(unpack_nibbles(wr[i][b].qs), _mm256_set1_epi8(8));
            const __m256i ax = _mm256_sign_epi8(q4, q4);
            const float dw = h2f(wr[i][b].d);
            for (int j = 0; j < NA; j++)
                acc[i][j] =
                    _mm256_fmadd_ps(_mm256_set1_ps(dw * da[j]), dot_us(ax, _mm256_sign_epi8(q8[j], q4)), acc[i][j]);
        }
    });
}

template <int NA>
void gemm_q8_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm4_loop<block_q8_0, block_q8_0, NA>(w, ws, a, as, n, y, ys, [](auto& wr, auto& ar, int64_t b, auto& acc, auto&) {
        __m256i q8[NA];
        float da[NA];
        load_acts<NA>(ar, b, q8, da);
        for (int i = 0; i < 4; i++) {
            const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[i][b].qs));
            const __m256i ax = _mm256_sign_epi8(qx, qx);
            const float dw = h2f(wr[i][b].d);
            for (int j = 0; j < NA; j++)
                acc[i][j] =
                    _mm256_fmadd_ps(_mm256_set1_ps(dw * da[j]), dot_us(ax, _mm256_sign_epi8(q8[j], qx)), acc[i][j]);
        }
    });
}

template <int NA>
void gemm_q5_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm4_loop<block_q5_1, block_q8_1, NA>(
        w, ws, a, as, n, y, ys, [](auto& wr, auto& ar, int64_t b, auto& acc, auto& ex) {
            __m256i q8[NA];
            float da[NA], sa[NA];
            load_acts<NA>(ar, b, q8, da);
            for (int j = 0; j < NA; j++) sa[j] = h2f(ar[j][b].s);
            for (int i = 0; i < 4; i++) {
                const __m256i q5 = unpack_q5(wr[i][b].qs, wr[i][b].qh);
                const float dw = h2f(wr[i][b].d), mw = h2f(wr[i][b].m);
                for (int j = 0; j < NA; j++) {
                    acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(dw * da[j]), dot_us(q5, q8[j]), acc[i][j]);
                    ex[i][j] += mw * sa[j];
                }
            }
        });
}

template <int NA>
void gemm_q5_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm4_loop<block_q5_0, block_q8_0, NA>(w, ws, a, as, n, y, ys, [](auto& wr, auto& ar, int64_t b, auto& acc, auto&) {
        __m256i q8[NA];
        float da[NA];
        load_acts<NA>(ar, b, q8, da);
        for (int i = 0; i < 4; i++) {
            const __m256i q5 = _mm256_sub_epi8(unpack_q5(wr[i][b].qs, wr[i][b].qh), _mm256_set1_epi8(16));
            const __m256i ax = _mm256_sign_epi8(q5, q5);
            const float dw = h2f(wr[i][b].d);
            for (int j = 0; j < NA; j++)
                acc[i][j] =
                    _mm256_fmadd_ps(_mm256_set1_ps(dw * da[j]), dot_us(ax, _mm256_sign_epi8(q8[j], q5)), acc[i][j]);
        }
    });
}

void gemm4_q5_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q5_0_q8_0<4>(w, ws, a, as, n, y, ys);
}
void gemv4_q5_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q5_0_q8_0<1>(w, ws, a, as, n, y, ys);
}
void gemm4_q5_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q5_1_q8_1<4>(w, ws, a, as, n, y, ys);
}
void gemv4_q5_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q5_1_q8_1<1>(w, ws, a, as, n, y, ys);
}
void gemm4_q4_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q4_1_q8_1<4>(w, ws, a, as, n, y, ys);
}
void gemv4_q4_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q4_1_q8_1<1>(w, ws, a, as, n, y, ys);
}
void gemm4_q4_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q4_0_q8_0<4>(w, ws, a, as, n, y, ys);
}
void gemv4_q4_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q4_0_q8_0<1>(w, ws, a, as, n, y, ys);
}
void gemm4_q8_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q8_0_q8_0<4>(w, ws, a, as, n, y, ys);
}
void gemv4_q8_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q8_0_q8_0<1>(w, ws, a, as, n, y, ys);
}

// ---- q4_0 in the order of llama.cpp's repacked q4_0_8x8 kernels: per output, block by block,
// acc = fma(float(sum_j (q4_j - 8) q8_j), d_w * d_a, acc) ----

namespace {

// the 8 int32 partial sums of one q4_0 x q8_0 block
inline __m256i block_sums_q4_0(const block_q4_0& x, const __m256i q8) {
    const __m256i q4 = _mm256_sub_epi8(unpack_nibbles(x.qs), _mm256_set1_epi8(8));
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(q4, q4), _mm256_sign_epi8(q8, q4));
#else
    const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(q4, q4), _mm256_sign_epi8(q8, q4));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
#endif
}

// four vectors of 8 int32 -> their four totals (exact integer sums)
inline __m128i hsum4_i32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i ab = _mm256_hadd_epi32(a, b), cd = _mm256_hadd_epi32(c, d);
    const __m256i abcd = _mm256_hadd_epi32(ab, cd); // per 128-bit half: a, b, c, d partials
    return _mm_add_epi32(_mm256_castsi256_si128(abcd), _mm256_extracti128_si256(abcd, 1));
}

} // namespace

float vec_dot_q4_0_q8_0_blockwise(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q4_0*>(w);
    auto* y = static_cast<const block_q8_0*>(a);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
        const int sumi = hsum_i32_8(block_sums_q4_0(x[i], q8));
        acc = std::fma(float(sumi), h2f(x[i].d) * h2f(y[i].d), acc);
    }
    return acc;
}

template <int NA>
void gemm_q4_0_blockwise(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    const block_q4_0* wr[4];
    const block_q8_0* ar[NA];
    for (int i = 0; i < 4; i++) wr[i] = reinterpret_cast<const block_q4_0*>(static_cast<const uint8_t*>(w) + i * ws);
    for (int j = 0; j < NA; j++) ar[j] = reinterpret_cast<const block_q8_0*>(static_cast<const uint8_t*>(a) + j * as);
    __m128 acc[NA]; // lane i: weight row i
    for (int j = 0; j < NA; j++) acc[j] = _mm_setzero_ps();
    for (int64_t b = 0; b < n / 32; b++) {
        const __m128 dw = _mm_setr_ps(h2f(wr[0][b].d), h2f(wr[1][b].d), h2f(wr[2][b].d), h2f(wr[3][b].d));
        for (int j = 0; j < NA; j++) {
            const __m256i q8 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ar[j][b].qs));
            const __m128i s = hsum4_i32(block_sums_q4_0(wr[0][b], q8), block_sums_q4_0(wr[1][b], q8),
                                        block_sums_q4_0(wr[2][b], q8), block_sums_q4_0(wr[3][b], q8));
            acc[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_mul_ps(dw, _mm_set1_ps(h2f(ar[j][b].d))), acc[j]);
        }
    }
    for (int j = 0; j < NA; j++) _mm_storeu_ps(y + j * ys, acc[j]);
}

void gemm4_q4_0_q8_0_blockwise(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q4_0_blockwise<4>(w, ws, a, as, n, y, ys);
}
void gemv4_q4_0_q8_0_blockwise(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    gemm_q4_0_blockwise<1>(w, ws, a, as, n, y, ys);
}

float vec_dot_q8_0_q8_0(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q8_0*>(w);
    auto* y = static_cast<const block_q8_0*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 32; i++) {
        const __m256 d = _mm256_set1_ps(h2f(x[i].d) * h2f(y[i].d));
        const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
        const __m256i qy = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs));
        acc = _mm256_fmadd_ps(d, dot_ss(qx, qy), acc);
    }
    return hsum(acc);
}

float vec_dot_f16_f16(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
        const __m256 y0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
        const __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i + 8)));
        const __m256 y1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i + 8)));
        acc0 = _mm256_fmadd_ps(x0, y0, acc0);
        acc1 = _mm256_fmadd_ps(x1, y1, acc1);
    }
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s += _cvtsh_ss(x[i]) * _cvtsh_ss(y[i]);
    return s;
}

float vec_dot_f32_f32(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const float*>(w);
    auto* y = static_cast<const float*>(a);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    float s = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++) s += x[i] * y[i];
    return s;
}

namespace {

// 32 floats -> 32 int8 (x * id rounded to nearest), returned in element order; also their sum when asked
inline __m256i quantize32(const float* x, float& d_out, bool& zero) {
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16),
           v3 = _mm256_loadu_ps(x + 24);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_andnot_ps(sign, v0);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v1));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v2));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v3));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float max_scalar = _mm_cvtss_f32(m4);
    d_out = max_scalar / 127.0f;
    zero = max_scalar == 0.0f;
    const __m256 mul = _mm256_set1_ps(zero ? 0.0f : 127.0f / max_scalar);
    constexpr int round = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), round));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), round));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), round));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), round));
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    // packs interleave 128-bit lanes; restore element order
    return _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

inline int hsum_i8(__m256i q) {
    const __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
    const __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s32), _mm256_extracti128_si256(s32, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

} // namespace

void quantize_row_q8_0(const float* x, void* y, int64_t n) {
    auto* b = static_cast<block_q8_0*>(y);
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        bool zero;
        const __m256i q = quantize32(x + i * 32, d, zero);
        b[i].d = to_f16(d);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs), q);
    }
}

void quantize_row_q8_1(const float* x, void* y, int64_t n) {
    auto* b = static_cast<block_q8_1*>(y);
    for (int64_t i = 0; i < n / 32; i++) {
        float d;
        bool zero;
        const __m256i q = quantize32(x + i * 32, d, zero);
        b[i].d = to_f16(d);
        b[i].s = to_f16(d * float(hsum_i8(q)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs), q);
    }
}

void f32_to_f16_row(const float* x, void* y, int64_t n) {
    auto* h = static_cast<uint16_t*>(y);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), 0));
    for (; i < n; i++) h[i] = fp32_to_fp16(x[i]);
}

void f16_to_f32_row(const void* x, float* y, int64_t n) {
    auto* h = static_cast<const uint16_t*>(x);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    for (; i < n; i++) y[i] = fp16_to_fp32(h[i]);
}

// ---- float kernels with ggml's rounding (see vec_dot.h); bit-identical to the scalar references ----

namespace {
inline __m256 load8(const float* p) {
    return _mm256_loadu_ps(p);
}
inline __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float at1(const float* p, int64_t i) {
    return p[i];
}
inline float at1(const uint16_t* p, int64_t i) {
    return fp16_to_fp32(p[i]);
}

// ggml's f32 / f16 dot up to the last multiple of 64 elements: the partial sum as a double (the tail's start)
template <class Y> double dot_ggml_head(const float* x, const Y* y, int64_t np) {
    // 4 "registers" of 16 lanes, each held as two 8-lane halves (lo, hi)
    __m256 lo[4], hi[4];
    for (int j = 0; j < 4; j++) lo[j] = hi[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++) {
            lo[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16 * j), load8(y + i + 16 * j), lo[j]);
            hi[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16 * j + 8), load8(y + i + 16 * j + 8), hi[j]);
        }
    // v = (s0 + s2) + (s1 + s3) per lane; h8 = v[8..15] + v[0..7]; h4 = h8[4..7] + h8[0..3]
    const __m256 vlo = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
    const __m256 vhi = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
    const __m256 h8 = _mm256_add_ps(vhi, vlo);
    const __m128 h4 = _mm_add_ps(_mm256_extractf128_ps(h8, 1), _mm256_castps256_ps128(h8));
    const __m128 t = _mm_add_ps(h4, _mm_shuffle_ps(h4, h4, _MM_SHUFFLE(1, 0, 3, 2))); // (0+2, 1+3, ...)
    return double(_mm_cvtss_f32(t) + _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1)));
}

template <class Y> float dot_ggml_order_t(const float* x, const Y* y, int64_t n) {
    const int64_t np = n - n % 64;
    double total = dot_ggml_head(x, y, np);
    for (int64_t i = np; i < n; i++) total += double(x[i] * at1(y, i)); // the leftovers in double, in order
    return float(total);
}

// dot_ggml_order_t of x with rows y + row[r] stride, r < nr (at most attend_rows), into out: the same bits. The
// leftovers past the last multiple of 64 (head size 96: 32 of them) are a chain of dependent double adds per row, so
// four rows' chains run side by side; their f32 products are formed 8 at a time first.
void dots_ggml_order(const float* x, const uint16_t* y, int64_t stride, const int64_t* row, int nr, int64_t n,
                     float* out) {
    const int64_t np = n - n % 64, tail = n - np;
    for (int r0 = 0; r0 < nr; r0 += 4) {
        const int u_n = std::min(4, nr - r0);
        double t[4];
        alignas(32) float prod[4][64];
        for (int u = 0; u < u_n; u++) {
            const uint16_t* yr = y + row[r0 + u] * stride;
            t[u] = dot_ggml_head(x, yr, np);
            int64_t i = 0;
            for (; i + 8 <= tail; i += 8)
                _mm256_store_ps(prod[u] + i, _mm256_mul_ps(_mm256_loadu_ps(x + np + i), load8(yr + np + i)));
            for (; i < tail; i++) prod[u][i] = x[np + i] * at1(yr, np + i);
        }
        if (u_n == 4)
            for (int64_t i = 0; i < tail; i++) {
                t[0] += double(prod[0][i]);
                t[1] += double(prod[1][i]);
                t[2] += double(prod[2][i]);
                t[3] += double(prod[3][i]);
            }
        else
            for (int u = 0; u < u_n; u++)
                for (int64_t i = 0; i < tail; i++) t[u] += double(prod[u][i]);
        for (int u = 0; u < u_n; u++) out[r0 + u] = float(t[u]);
    }
}
} // namespace

float dot_ggml_order(const float* x, const float* y, int64_t n) {
    return dot_ggml_order_t(x, y, n);
}
float dot_f16(const float* x, const uint16_t* y, int64_t n) {
    return dot_ggml_order_t(x, y, n);
}

namespace {
inline __m256 round_f16(__m256 v) {
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

template <class Y> void mad_t(float* acc, const Y* v, float s, int64_t n, bool f16) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_fmadd_ps(load8(v + i), vs, _mm256_loadu_ps(acc + i));
        _mm256_storeu_ps(acc + i, f16 ? round_f16(a) : a);
    }
    for (; i < n; i++) {
        const float a = std::fma(at1(v, i), s, acc[i]);
        acc[i] = f16 ? fp16_to_fp32(fp32_to_fp16(a)) : a;
    }
}
} // namespace

void mad(float* acc, const float* v, float s, int64_t n, bool f16) {
    mad_t(acc, v, s, n, f16);
}
void mad_f16(float* acc, const uint16_t* v, float s, int64_t n, bool f16) {
    mad_t(acc, v, s, n, f16);
}

namespace {
// attend_f16's accumulator update for 8 R lanes at acc: per row, scale(acc, ms) where a new maximum came, then
// mad_f16(acc, v_row, vs), each element rounded to f16 as those calls do, with the lanes in registers
template <int R>
inline void attend_lanes(float* acc, const uint16_t* v, int64_t stride, const int64_t* row, const float* ms,
                         const float* vs, const bool* scaled, int nr) {
    __m256 a[R];
    for (int i = 0; i < R; i++) a[i] = _mm256_loadu_ps(acc + 8 * i);
    for (int r = 0; r < nr; r++) {
        if (scaled[r]) {
            const __m256 f = _mm256_set1_ps(ms[r]);
            for (int i = 0; i < R; i++) a[i] = round_f16(_mm256_mul_ps(a[i], f));
        }
        const __m256 f = _mm256_set1_ps(vs[r]);
        const uint16_t* vr = v + row[r] * stride;
        for (int i = 0; i < R; i++) a[i] = round_f16(_mm256_fmadd_ps(load8(vr + 8 * i), f, a[i]));
    }
    for (int i = 0; i < R; i++) _mm256_storeu_ps(acc + 8 * i, a[i]);
}
} // namespace

void attend_f16(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, const float* mask, int64_t n,
                float scale, int64_t hd, float& M, float& S, float* acc) {
    // the rows' softmax steps first (scalars only), then the accumulator 64 lanes at a time (then 32, 16, 8), in
    // registers; the last hd % 8 elements one by one as scale's and mad_t's tails
    float ms[attend_rows], vs[attend_rows];
    int64_t row[attend_rows];
    bool scaled[attend_rows];
    int nr = 0;
    float m = M, sum = S;
    for (int64_t j = 0; j < n; j++)
        if (!mask || mask[j] != -std::numeric_limits<float>::infinity()) row[nr++] = j;
    float dots[attend_rows];
    dots_ggml_order(q, k, stride, row, nr, hd, dots);
    for (int r = 0; r < nr; r++) {
        const float s = dots[r] * scale + (mask ? mask[row[r]] : 0.0f);
        ms[r] = 1.0f, vs[r] = 1.0f;
        scaled[r] = s > m;
        if (s > m) {
            ms[r] = std::exp(m - s);
            m = s;
        } else {
            vs[r] = std::exp(s - m);
        }
        sum = std::fma(sum, ms[r], vs[r]);
    }
    int64_t c = 0;
    for (; c + 64 <= hd; c += 64) attend_lanes<8>(acc + c, v + c, stride, row, ms, vs, scaled, nr);
    if (c + 32 <= hd) attend_lanes<4>(acc + c, v + c, stride, row, ms, vs, scaled, nr), c += 32;
    if (c + 16 <= hd) attend_lanes<2>(acc + c, v + c, stride, row, ms, vs, scaled, nr), c += 16;
    if (c + 8 <= hd) attend_lanes<1>(acc + c, v + c, stride, row, ms, vs, scaled, nr), c += 8;
    for (; c < hd; c++) {
        float a = acc[c];
        for (int r = 0; r < nr; r++) {
            if (scaled[r]) a = fp16_to_fp32(fp32_to_fp16(a * ms[r]));
            a = fp16_to_fp32(fp32_to_fp16(std::fma(fp16_to_fp32(v[row[r] * stride + c]), vs[r], a)));
        }
        acc[c] = a;
    }
    M = m;
    S = sum;
}

void scale(float* acc, float s, int64_t n, bool f16) {
    const __m256 vs = _mm256_set1_ps(s);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_mul_ps(_mm256_loadu_ps(acc + i), vs);
        _mm256_storeu_ps(acc + i, f16 ? round_f16(a) : a);
    }
    for (; i < n; i++) acc[i] = f16 ? fp16_to_fp32(fp32_to_fp16(acc[i] * s)) : acc[i] * s;
}

namespace {

// e^x for 8 lanes, the steps of expf_ggml; false if some lane needs 2^n outside the normal range (caller falls back)
inline bool expf8(__m256 x, __m256& out) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b =
        _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    if (_mm256_movemask_ps(_mm256_cmp_ps(an, _mm256_set1_ps(126.0f), _CMP_GT_OQ))) return false;
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    // 2^n is a normal float for |n| <= 126, so j * 2^n rounds once, as ggml's scalef does
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    out = _mm256_mul_ps(j, _mm256_castsi256_ps(e));
    return true;
}

inline __m256 silu8(__m256 x, const float* xs) {
    __m256 e;
    if (!expf8(_mm256_sub_ps(_mm256_setzero_ps(), x), e)) {
        alignas(32) float t[8];
        for (int l = 0; l < 8; l++) t[l] = expf_ggml(0.0f - xs[l]);
        e = _mm256_load_ps(t);
    }
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

} // namespace

void swiglu(const float* g, const float* u, float* y, int64_t n) {
    const int64_t nv = n - n % 16; // ggml: vector expf over 16-element groups, libm's expf for the tail
    int64_t i = 0;
    for (; i < nv; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(g + i), g + i), _mm256_loadu_ps(u + i)));
    for (; i < n; i++) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void silu(const float* x, float* y, int64_t n) {
    const int64_t nv = n - n % 16;
    int64_t i = 0;
    for (; i < nv; i += 8) _mm256_storeu_ps(y + i, silu8(_mm256_loadu_ps(x + i), x + i));
    for (; i < n; i++) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

namespace {

// one query row: 8 chains (the 64 keys), enough to cover the FMA latency
inline void kq_row(const float* q, const float* kt, int64_t hd, float* s) {
    __m256 acc[8];
    for (int r = 0; r < 8; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; d++) {
        const __m256 qd = _mm256_set1_ps(q[d]);
        for (int r = 0; r < 8; r++) acc[r] = _mm256_fmadd_ps(qd, _mm256_loadu_ps(kt + d * 64 + 8 * r), acc[r]);
    }
    for (int r = 0; r < 8; r++) _mm256_storeu_ps(s + 8 * r, acc[r]);
}

// R query rows x 32 keys a pass (4 R chains): each key vector loaded feeds R FMAs
template <int R> inline void kq_rows(const float* const* q, const float* kt, int64_t hd, float* s) {
    for (int half = 0; half < 64; half += 32) {
        __m256 acc[R][4];
        for (int i = 0; i < R; i++)
            for (int c = 0; c < 4; c++) acc[i][c] = _mm256_setzero_ps();
        for (int64_t d = 0; d < hd; d++) {
            __m256 qd[R];
            for (int i = 0; i < R; i++) qd[i] = _mm256_broadcast_ss(q[i] + d);
            for (int c = 0; c < 4; c++) {
                const __m256 k = _mm256_loadu_ps(kt + d * 64 + half + 8 * c);
                for (int i = 0; i < R; i++) acc[i][c] = _mm256_fmadd_ps(qd[i], k, acc[i][c]);
            }
        }
        for (int i = 0; i < R; i++)
            for (int c = 0; c < 4; c++) _mm256_storeu_ps(s + i * 64 + half + 8 * c, acc[i][c]);
    }
}

} // namespace

void kq_tile(const float* const* q, int nr, const float* kt, int64_t hd, float* s) {
    int i = 0;
    for (; i + 3 <= nr; i += 3) kq_rows<3>(q + i, kt, hd, s + i * 64);
    if (nr - i == 2) kq_rows<2>(q + i, kt, hd, s + i * 64);
    if (nr - i == 1) kq_row(q[i], kt, hd, s + i * 64);
}

double softmax_tile(float* s, float m) {
    double sum = 0.0;
    const __m256 vm = _mm256_set1_ps(m);
    for (int g = 0; g < 64; g += 16) {
        __m256 lo = _mm256_setzero_ps(), hi = lo; // expf8 leaves them unset where it fails (then scalar, below)
        const __m256 xlo = _mm256_sub_ps(_mm256_loadu_ps(s + g), vm),
                     xhi = _mm256_sub_ps(_mm256_loadu_ps(s + g + 8), vm);
        // masked scores (-inf) give exactly 0 (as expf_ggml): computed at 0 and cleared, so that a causal mask's
        // diagonal tiles stay on the vector path
        const __m256 ninf = _mm256_set1_ps(-INFINITY);
        const __m256 mlo = _mm256_cmp_ps(xlo, ninf, _CMP_EQ_OQ), mhi = _mm256_cmp_ps(xhi, ninf, _CMP_EQ_OQ);
        const bool ok = expf8(_mm256_andnot_ps(mlo, xlo), lo) && expf8(_mm256_andnot_ps(mhi, xhi), hi);
        lo = _mm256_andnot_ps(mlo, lo);
        hi = _mm256_andnot_ps(mhi, hi);
        if (!ok) { // a lane outside the fast range: scalar
            alignas(32) float t[16];
            _mm256_store_ps(t, xlo);
            _mm256_store_ps(t + 8, xhi);
            for (int l = 0; l < 16; l++) t[l] = expf_ggml(t[l]);
            lo = _mm256_load_ps(t);
            hi = _mm256_load_ps(t + 8);
        }
        _mm256_storeu_ps(s + g, lo);
        _mm256_storeu_ps(s + g + 8, hi);
        // the 16 values folded as _mm512_reduce_add_ps does: halves, quarters, then (0+2) + (1+3)
        const __m256 h8 = _mm256_add_ps(hi, lo);
        const __m128 h4 = _mm_add_ps(_mm256_extractf128_ps(h8, 1), _mm256_castps256_ps128(h8));
        const __m128 t = _mm_add_ps(h4, _mm_shuffle_ps(h4, h4, _MM_SHUFFLE(1, 0, 3, 2)));
        sum += double(_mm_cvtss_f32(t) + _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1)));
    }
    return sum;
}

namespace {

// one row: 64 dimensions at a time, their 8 chains over the keys interleaved (one chain alone waits on each FMA's
// latency)
inline void pv_row(float* acc, const float* p, const float* v, int64_t n, int64_t hd, int64_t stride) {
    int64_t d = 0;
    for (; d + 64 <= hd; d += 64) {
        __m256 a[8];
        for (int r = 0; r < 8; r++) a[r] = _mm256_loadu_ps(acc + d + 8 * r);
        for (int64_t j = 0; j < n; j++) {
            const __m256 pj = _mm256_set1_ps(p[j]);
            for (int r = 0; r < 8; r++) a[r] = _mm256_fmadd_ps(_mm256_loadu_ps(v + j * stride + d + 8 * r), pj, a[r]);
        }
        for (int r = 0; r < 8; r++) _mm256_storeu_ps(acc + d + 8 * r, a[r]);
    }
    for (; d + 8 <= hd; d += 8) {
        __m256 a = _mm256_loadu_ps(acc + d);
        for (int64_t j = 0; j < n; j++)
            a = _mm256_fmadd_ps(_mm256_loadu_ps(v + j * stride + d), _mm256_set1_ps(p[j]), a);
        _mm256_storeu_ps(acc + d, a);
    }
    for (; d < hd; d++)
        for (int64_t j = 0; j < n; j++) acc[d] = std::fma(v[j * stride + d], p[j], acc[d]);
}

// R rows x 32 dimensions a pass (4 R chains): each V vector loaded feeds R FMAs
template <int R> inline void pv_rows(float* const* acc, const float* const* p, const float* v, int64_t n, int64_t hd) {
    int64_t d = 0;
    for (; d + 32 <= hd; d += 32) {
        __m256 a[R][4];
        for (int i = 0; i < R; i++)
            for (int c = 0; c < 4; c++) a[i][c] = _mm256_loadu_ps(acc[i] + d + 8 * c);
        for (int64_t j = 0; j < n; j++) {
            __m256 pj[R];
            for (int i = 0; i < R; i++) pj[i] = _mm256_broadcast_ss(p[i] + j);
            for (int c = 0; c < 4; c++) {
                const __m256 vv = _mm256_loadu_ps(v + j * hd + d + 8 * c);
                for (int i = 0; i < R; i++) a[i][c] = _mm256_fmadd_ps(vv, pj[i], a[i][c]);
            }
        }
        for (int i = 0; i < R; i++)
            for (int c = 0; c < 4; c++) _mm256_storeu_ps(acc[i] + d + 8 * c, a[i][c]);
    }
    if (d < hd) // the rest of the dimensions row by row
        for (int i = 0; i < R; i++) pv_row(acc[i] + d, p[i], v + d, n, hd - d, hd);
}

} // namespace

void pv_tile(float* const* acc, const float* const* p, int nr, const float* v, int64_t n, int64_t hd) {
    int i = 0;
    for (; i + 3 <= nr; i += 3) pv_rows<3>(acc + i, p + i, v, n, hd);
    if (nr - i == 2) pv_rows<2>(acc + i, p + i, v, n, hd);
    if (nr - i == 1) pv_row(acc[i], p[i], v, n, hd, hd);
}

} // namespace tessera::cpu::TS_SIMD_NS
