// float16_avx2.cpp: AVX2/FMA/F16C f16 and bf16 mul_mat kernels, bit-identical to the scalar ones in float16.cpp (the
// orders: float16.h). A 16-lane accumulator is two 8-lane halves; as lanes never mix before the final reduction, the
// halves can be summed apart (one after the other, or side by side) and only meet in the reduction.
#include "backends/cpu/quant/float16.h"

#include "backends/cpu/quant/avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

namespace tessera::cpu::avx2 {

namespace {

struct f16_t {
    static __m256 load(const uint16_t* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    static float load1(uint16_t h) { return _cvtsh_ss(h); }
    static __m128i from(__m256 x) { return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT); }
    static uint16_t from1(float x) { return fp32_to_fp16(x); }
};
struct bf16_t {
    // bf16 -> f32 is the 16 bits moved to the top
    static __m256 load(const uint16_t* p) {
        const __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
    }
    static float load1(uint16_t h) { return bf16_to_fp32(h); }
    // ggml_compute_fp32_to_bf16: (u + 0x7fff + bit 16 of u) >> 16; a nan keeps its top bits, quieted
    static __m128i from(__m256 x) {
        const __m256i u = _mm256_castps_si256(x);
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff))), 16);
        const __m256i nan =
            _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
        const __m256i q = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
        const __m256i h = _mm256_blendv_epi8(r, q, nan); // 8 x 32 bits, each < 2^16
        return _mm_packus_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    }
    static uint16_t from1(float x) { return fp32_to_bf16(x); }
};

template <class T> void from_float(const float* x, uint16_t* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), T::from(_mm256_loadu_ps(x + i)));
    for (; i < n; i++) y[i] = T::from1(x[i]);
}

// _mm512_reduce_add_ps of 4 accumulators at once, v[i] = lanes 0..7 + lanes 8..15 of accumulator i: each lane of the
// result takes the steps of hsum8 (4..7 + 0..3, then (0 + 2) + (1 + 3)), so each output has reduce16's bits
inline __m128 reduce16x4(const __m256 (&v)[4]) {
    __m128 r[4];
    for (int i = 0; i < 4; i++) r[i] = _mm_add_ps(_mm256_extractf128_ps(v[i], 1), _mm256_castps256_ps128(v[i]));
    _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]); // r[l] = lane l of each accumulator
    return _mm_add_ps(_mm_add_ps(r[0], r[2]), _mm_add_ps(r[1], r[3]));
}

// The prompt GEMM, tinyBLAS<16>'s order: 4 weight rows x RN activation rows, per 8-lane half h of the 16-lane
// accumulators a pass over k (the halves never mix before the reduction), 4 * RN accumulators; each weight vector
// feeds RN fmas, each activation vector 4. RN = 3 uses all 16 registers (12 accumulators, 3 activations, 1 weight).
// Activations stay halves and are converted in the loop. Kernels tried (one thread, jobs of 16 x 84 rows at k = 576
// and 1536, GFLOP/s per CPU-second of ~100 peak; AMD EPYC Zen 3 VM shared with other work, so ranges; 2026-11-25):
//   f16 weights and activations converted in the loop          80-90 (llama.cpp's tinyBLAS<8> on AVX2: the same)
//   f16 activations, weights converted once into an f32 panel   75-85
//   f32 activations (either weights)                            55-79 (twice the bytes from L2)
//   outer products (16 rows x 6 columns, broadcast activations) 64-80 (and another order)
//   bf16 both converted in the loop (zero-extend + shift)       50-55 (integer ops share the FMA pipes; llama.cpp's
//                                                                      tinyBLAS<8>: 50-53 in ggml's mul_mat)
//   bf16 activations converted, weights as an f32 panel         57-74 (used for bf16)
// f16 weights are read from their rows; bf16 weights are converted once per 4 rows into a panel laid out as the tile
// reads it: panel[((h * steps + s) * 4 + r) * 8 + c] = w[r][16 s + 8 h + c] (h: the half, s: the 16-element step).
struct rows_f16 {
    const uint16_t* w;
    size_t ws;
    __m256 load(int i, int64_t s, int h) const { return f16_t::load(w + size_t(i) * ws + 16 * s + 8 * h); }
};
struct panel_f32 {
    const float* p;
    int64_t steps;
    __m256 load(int i, int64_t s, int h) const { return _mm256_loadu_ps(p + ((h * steps + s) * 4 + i) * 8); }
};

template <class T, int RN, class W>
inline void tile(const W& w, const uint16_t* a, size_t as, int64_t k, float* y, size_t ys) {
    const int64_t steps = k / 16;
    __m256 lo[RN][4];
    for (int h = 0; h < 2; h++) {
        __m256 acc[RN][4];
        for (int j = 0; j < RN; j++)
            for (int i = 0; i < 4; i++) acc[j][i] = _mm256_setzero_ps();
        for (int64_t s = 0; s < steps; s++) {
            __m256 b[RN];
            for (int j = 0; j < RN; j++) b[j] = T::load(a + size_t(j) * as + 16 * s + 8 * h);
            for (int i = 0; i < 4; i++) {
                const __m256 wv = w.load(i, s, h);
                for (int j = 0; j < RN; j++) acc[j][i] = _mm256_fmadd_ps(wv, b[j], acc[j][i]);
            }
        }
        if (h == 0) {
            for (int j = 0; j < RN; j++)
                for (int i = 0; i < 4; i++) lo[j][i] = acc[j][i];
        } else {
            for (int j = 0; j < RN; j++) {
                const __m256 v[4] = {_mm256_add_ps(acc[j][0], lo[j][0]), _mm256_add_ps(acc[j][1], lo[j][1]),
                                     _mm256_add_ps(acc[j][2], lo[j][2]), _mm256_add_ps(acc[j][3], lo[j][3])};
                _mm_storeu_ps(y + size_t(j) * ys, reduce16x4(v));
            }
        }
    }
}

template <class T, class W>
inline void tiles(const W& w, const uint16_t* a, size_t as, int64_t n_a, int64_t k, float* y, size_t ys) {
    int64_t j = 0;
    for (; j + 3 <= n_a; j += 3) tile<T, 3>(w, a + size_t(j) * as, as, k, y + size_t(j) * ys, ys);
    if (n_a - j == 2) tile<T, 2>(w, a + size_t(j) * as, as, k, y + size_t(j) * ys, ys);
    if (n_a - j == 1) tile<T, 1>(w, a + size_t(j) * as, as, k, y + size_t(j) * ys, ys);
}

void gemm_f16(const uint16_t* w, size_t ws, int64_t n_w, const uint16_t* a, size_t as, int64_t n_a, int64_t k, float* y,
              size_t ys) {
    // activation triples outer, the weight rows inner: the job's weight rows and the tile's activations both stay in L1
    int64_t j = 0;
    for (; j + 3 <= n_a; j += 3)
        for (int64_t i = 0; i < n_w; i += 4)
            tile<f16_t, 3>(rows_f16{w + size_t(i) * ws, ws}, a + size_t(j) * as, as, k, y + size_t(j) * ys + i, ys);
    for (int64_t i = 0; i < n_w; i += 4)
        tiles<f16_t>(rows_f16{w + size_t(i) * ws, ws}, a + size_t(j) * as, as, n_a - j, k, y + size_t(j) * ys + i, ys);
}

void gemm_bf16(const uint16_t* w, size_t ws, int64_t n_w, const uint16_t* a, size_t as, int64_t n_a, int64_t k,
               float* y, size_t ys) {
    thread_local std::vector<float> panel; // 4 * k floats a thread, kept between calls
    if (panel.size() < size_t(4 * k)) panel.resize(size_t(4 * k));
    const int64_t steps = k / 16;
    for (int64_t i = 0; i < n_w; i += 4) {
        for (int h = 0; h < 2; h++)
            for (int64_t s = 0; s < steps; s++)
                for (int r = 0; r < 4; r++)
                    _mm256_storeu_ps(panel.data() + ((h * steps + s) * 4 + r) * 8,
                                     bf16_t::load(w + size_t(i + r) * ws + 16 * s + 8 * h));
        tiles<bf16_t>(panel_f32{panel.data(), steps}, a, as, n_a, k, y + i, ys);
    }
}

// ggml_vec_dot_f16 (AVX-512): 4 x 16 lanes over 64-element steps, (s0 + s2) + (s1 + s3), reduced; the rest in double
inline float dot_f16(const uint16_t* w, const float* a, int64_t k, const uint16_t* next) {
    __m256 lo[4], hi[4];
    for (int r = 0; r < 4; r++) lo[r] = hi[r] = _mm256_setzero_ps();
    const int64_t np = k - k % 64;
    for (int64_t i = 0; i < np; i += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(next + i + 32), _MM_HINT_T0);
        for (int r = 0; r < 4; r++) {
            lo[r] = _mm256_fmadd_ps(f16_t::load(w + i + 16 * r), _mm256_loadu_ps(a + i + 16 * r), lo[r]);
            hi[r] = _mm256_fmadd_ps(f16_t::load(w + i + 16 * r + 8), _mm256_loadu_ps(a + i + 16 * r + 8), hi[r]);
        }
    }
    const __m256 vlo = _mm256_add_ps(_mm256_add_ps(lo[0], lo[2]), _mm256_add_ps(lo[1], lo[3]));
    const __m256 vhi = _mm256_add_ps(_mm256_add_ps(hi[0], hi[2]), _mm256_add_ps(hi[1], hi[3]));
    double sum = hsum8(_mm256_add_ps(vhi, vlo));
    for (int64_t i = np; i < k; i++) sum += double(f16_t::load1(w[i]) * a[i]);
    return float(sum);
}

// ggml_vec_dot_bf16 (AVX-512F): 2 x 16 lanes over 32-element steps, each reduced and added in double; the rest too
inline float dot_bf16(const uint16_t* w, const float* a, int64_t k, const uint16_t* next) {
    __m256 lo[2], hi[2];
    for (int r = 0; r < 2; r++) lo[r] = hi[r] = _mm256_setzero_ps();
    const int64_t np = k - k % 32;
    for (int64_t i = 0; i < np; i += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T0);
        for (int r = 0; r < 2; r++) {
            lo[r] = _mm256_fmadd_ps(bf16_t::load(w + i + 16 * r), _mm256_loadu_ps(a + i + 16 * r), lo[r]);
            hi[r] = _mm256_fmadd_ps(bf16_t::load(w + i + 16 * r + 8), _mm256_loadu_ps(a + i + 16 * r + 8), hi[r]);
        }
    }
    double sum = 0.0;
    sum += double(hsum8(_mm256_add_ps(hi[0], lo[0])));
    sum += double(hsum8(_mm256_add_ps(hi[1], lo[1])));
    for (int64_t i = np; i < k; i++) sum += double(bf16_t::load1(w[i]) * a[i]);
    return float(sum);
}

// Decode: the rows as 4 streams (rows i, i + q, i + 2q, i + 3q, then i + 1, ...; q = n / 4): each stream reads on in
// memory order while the dot of its current row prefetches the stream's next row. A read test (2 threads, 256 MB,
// this 2-core EPYC VM, 2026-11-25) gave 14-21 GB/s with one stream a thread, 22-27 with 4; on SmolLM2's mul_mats
// (rows of 1.1-3 KB) one thread read 17-18 GB/s with 4 streams and the prefetch, 13-16 without it, 15-16 with 8.
// The activation row (halves) is widened to f32 once per call, not once per weight row (exact: the same products).
template <class T, float (*dot)(const uint16_t*, const float*, int64_t, const uint16_t*)>
void gemv(const uint16_t* w, size_t ws, int64_t n, const uint16_t* a, int64_t k, float* y, size_t ys) {
    thread_local std::vector<float> af;
    if (af.size() < size_t(k)) af.resize(size_t(k));
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) _mm256_storeu_ps(af.data() + i, T::load(a + i));
    for (; i < k; i++) af[size_t(i)] = T::load1(a[i]);
    const int64_t q = (n + 3) / 4;
    for (int64_t s = 0; s < q; s++)
        for (int64_t r = s; r < n; r += q)
            y[size_t(r) * ys] = dot(w + size_t(r) * ws, af.data(), k, w + size_t(std::min(r + 1, n - 1)) * ws);
}

const float16_kernels kernels_f16{from_float<f16_t>, gemm_f16, gemv<f16_t, dot_f16>};
const float16_kernels kernels_bf16{from_float<bf16_t>, gemm_bf16, gemv<bf16_t, dot_bf16>};

} // namespace

const float16_kernels* float16_kernels_for(type t) {
    return t == type::f16 ? &kernels_f16 : t == type::bf16 ? &kernels_bf16 : nullptr;
}

} // namespace tessera::cpu::avx2
