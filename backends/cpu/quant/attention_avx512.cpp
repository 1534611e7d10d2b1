// attention_avx512.cpp: the prefill attention tile kernels of float_kernels (kq_tile, score_tile, softmax_tile,
// pv_tile) with 16-lane AVX-512, for CPUs with AVX-512 F/BW/VL (cpu_has_avx512vnni); the AVX2 ones are in
// vec_dot_avx2.cpp, the scalar references in vec_dot.cpp. Every score is one FMA chain over the head dimension in a
// lane of its own (lanes run over the keys), every output element one chain over the keys (lanes run over the head
// dimension), so 16 lanes compute the very chains of the 8-lane and scalar kernels: the same bits. What 16 lanes and
// 32 registers buy is fewer instructions and more rows a pass: 6 query rows x 64 keys (or 64 dimensions), 24
// accumulators. Measured (AMD EPYC VM with AVX-512, 2 threads, SmolLM2 pp512, 7 alternated rounds, medians,
// 2026-11-28): bf16 1618 -> 1799 t/s, q4_0 2028 -> 2289; attention's share of a bf16 pp512 22% -> 16% (perf).
#include "backends/cpu/quant/avx512.h"
#include "backends/cpu/quant/vec_dot.h"

#include <algorithm>
#include <cmath>

namespace tessera::cpu::avx512 {

namespace {

// S = Q K^T for R query rows and the tile's 64 keys (kt: transposed, kt[d * 64 + j]); lane l of acc[i][c] is key
// 16 c + l of row i, s = fma(q[d], k[d], s) for d = 0 .. hd - 1; each key vector loaded feeds R FMAs
template <int R> inline void kq_rows(const float* const* q, const float* kt, int64_t hd, float* s) {
    __m512 acc[R][4];
    for (int i = 0; i < R; i++)
        for (int c = 0; c < 4; c++) acc[i][c] = _mm512_setzero_ps();
    for (int64_t d = 0; d < hd; d++) {
        __m512 k[4];
        for (int c = 0; c < 4; c++) k[c] = _mm512_loadu_ps(kt + d * 64 + 16 * c);
        for (int i = 0; i < R; i++) {
            const __m512 qd = _mm512_set1_ps(q[i][d]);
            for (int c = 0; c < 4; c++) acc[i][c] = _mm512_fmadd_ps(qd, k[c], acc[i][c]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int c = 0; c < 4; c++) _mm512_storeu_ps(s + i * 64 + 16 * c, acc[i][c]);
}

// O += P V for R rows over C x 16 dimensions from d; lane l of a[i][c] is dimension d + 16 c + l of row i,
// o = fma(v[j], p[j], o) for j = 0 .. n - 1; each V vector feeds R FMAs. Tail: C = 1 and the lanes below hd - d only.
// The tail is a template flag, not a lane mask on every pass: with masked loads in the full passes GCC kept the 24
// accumulators in memory, a store each key (pv 6.2% -> 11.3% of a bf16 pp512).
template <int R, int C, bool Tail = false>
inline void pv_pass(float* const* acc, const float* const* p, const float* v, int64_t n, int64_t hd, int64_t d) {
    static_assert(!Tail || C == 1, "a tail pass is one vector");
    const __mmask16 lanes = Tail ? __mmask16((1u << (hd - d)) - 1) : __mmask16(0xffff);
    auto load = [&](const float* x) { return Tail ? _mm512_maskz_loadu_ps(lanes, x) : _mm512_loadu_ps(x); };
    __m512 a[R][C];
    for (int i = 0; i < R; i++)
        for (int c = 0; c < C; c++) a[i][c] = load(acc[i] + d + 16 * c);
    for (int64_t j = 0; j < n; j++) {
        __m512 vv[C];
        for (int c = 0; c < C; c++) vv[c] = load(v + j * hd + d + 16 * c);
        for (int i = 0; i < R; i++) {
            const __m512 pj = _mm512_set1_ps(p[i][j]);
            for (int c = 0; c < C; c++) a[i][c] = _mm512_fmadd_ps(vv[c], pj, a[i][c]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int c = 0; c < C; c++) {
            if constexpr (Tail)
                _mm512_mask_storeu_ps(acc[i] + d, lanes, a[i][c]);
            else
                _mm512_storeu_ps(acc[i] + d + 16 * c, a[i][c]);
        }
}

template <int R> inline void pv_rows(float* const* acc, const float* const* p, const float* v, int64_t n, int64_t hd) {
    int64_t d = 0;
    for (; d + 64 <= hd; d += 64) pv_pass<R, 4>(acc, p, v, n, hd, d);
    if (d + 32 <= hd) pv_pass<R, 2>(acc, p, v, n, hd, d), d += 32;
    if (d + 16 <= hd) pv_pass<R, 1>(acc, p, v, n, hd, d), d += 16;
    if (d < hd) pv_pass<R, 1, true>(acc, p, v, n, hd, d);
}

// e^x for 16 lanes, ggml's AVX-512 ggml_v_expf step for step (expf_ggml is its scalar form): j * 2^n by scalef,
// rounded once as ldexp rounds; |n| > 192 gives 0 or infinity (a masked score's -inf gives 0)
inline __m512 expf16(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b =
        _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    const __m512 res = _mm512_scalef_ps(j, n);
    if (!big) return res;
    const __mmask16 neg = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    return _mm512_mask_blend_ps(big, res, _mm512_mask_blend_ps(neg, _mm512_set1_ps(INFINITY), _mm512_setzero_ps()));
}

} // namespace

void kq_tile(const float* const* q, int nr, const float* kt, int64_t hd, float* s) {
    activation_tiles(nr,
                     [&]<int R>(int64_t i, std::integral_constant<int, R>) { kq_rows<R>(q + i, kt, hd, s + i * 64); });
}

// S = scale * S + mask, 16 keys a vector; the product by mul_round, a builtin the compiler cannot contract with the
// add into an FMA (the scalar code rounds it first). max_ps skips a NaN score as std::max(mx, s) does, and the max of
// the other values does not depend on the order, but for the sign of a zero: a zero maximum is taken again in order.
float score_tile(float* s, const float* mask, float scale, int64_t n) {
    const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    __m512 mx = ninf;
    for (int c = 0; c < 64; c += 16) {
        const int64_t left = n - c;
        const __mmask16 live = left >= 16 ? __mmask16(0xffff) : left <= 0 ? __mmask16(0) : __mmask16((1u << left) - 1);
        __m512 x = _mm512_mul_round_ps(_mm512_loadu_ps(s + c), vs, _MM_FROUND_CUR_DIRECTION);
        x = _mm512_add_ps(x, mask ? _mm512_maskz_loadu_ps(live, mask + c) : _mm512_setzero_ps());
        x = _mm512_mask_blend_ps(live, ninf, x);
        _mm512_storeu_ps(s + c, x);
        mx = _mm512_max_ps(x, mx);
    }
    float m = _mm512_reduce_max_ps(mx);
    if (m == 0.0f) {
        m = -INFINITY;
        for (int j = 0; j < 64; j++) m = std::max(m, s[j]);
    }
    return m;
}

// P = expf_ggml(S - m) in place; the sum of each 16 values folded as _mm512_reduce_add_ps does (halves, quarters,
// then (0 + 2) + (1 + 3)), added in double
double softmax_tile(float* s, float m) {
    double sum = 0.0;
    const __m512 vm = _mm512_set1_ps(m);
    for (int g = 0; g < 64; g += 16) {
        const __m512 e = expf16(_mm512_sub_ps(_mm512_loadu_ps(s + g), vm));
        _mm512_storeu_ps(s + g, e);
        const __m256 h8 = fold16(e);
        const __m128 h4 = _mm_add_ps(_mm256_extractf128_ps(h8, 1), _mm256_castps256_ps128(h8));
        const __m128 t = _mm_add_ps(h4, _mm_shuffle_ps(h4, h4, _MM_SHUFFLE(1, 0, 3, 2)));
        sum += double(_mm_cvtss_f32(t) + _mm_cvtss_f32(_mm_shuffle_ps(t, t, 1)));
    }
    return sum;
}

void pv_tile(float* const* acc, const float* const* p, int nr, const float* v, int64_t n, int64_t hd) {
    activation_tiles(nr,
                     [&]<int R>(int64_t i, std::integral_constant<int, R>) { pv_rows<R>(acc + i, p + i, v, n, hd); });
}

} // namespace tessera::cpu::avx512
