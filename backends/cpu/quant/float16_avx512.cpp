// float16_avx512.cpp: AVX-512 f16 and bf16 mul_mat kernels in the orders of float16.h (bit-identical to the scalar
// ones in float16.cpp and to the AVX2 ones), for CPUs with AVX-512 F/BW/VL (cpu_has_avx512vnni). A 16-lane
// accumulator is one zmm register, so a prompt tile makes one pass over k instead of two halves, and with 32
// registers it holds 4 weight rows x 6 activation rows (24 accumulators) against the AVX2 kernels' 4 x 3.
// Measured (AMD EPYC VM with AVX-512 + BF16, 2 threads, SmolLM2 f16 / bf16, llama-bench in the same runs,
// 2026-11-28), pp512 / tg128 t/s: f16 1260-1467 / 190-191 vs 1268-1451 / 152-153 (the AVX2 kernels: 1003-1010 /
// 131), bf16 1247-1453 / 187-188 vs 1698-2208 / 152-172 (AVX2: 970-973 / 133-134). bf16 takes these kernels only
// where the CPU lacks AVX512_BF16 (else bf16_avx512bf16.cpp, llama.cpp's vdpbf16ps orders).
#include "backends/cpu/quant/avx512.h"
#include "backends/cpu/quant/float16.h"

#include "backends/cpu/quant/avx2.h"

#include <algorithm>
#include <vector>

namespace tessera::cpu::avx512 {

namespace {

struct f16_t {
    static __m512 load(const uint16_t* p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static float load1(uint16_t h) { return _cvtsh_ss(h); }
};
struct bf16_t {
    // bf16 -> f32 is the 16 bits moved to the top
    static __m512 load(const uint16_t* p) {
        const __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
    }
    static float load1(uint16_t h) { return bf16_to_fp32(h); }
};

// The prompt GEMM, tinyBLAS<16>'s order: 4 weight rows x RN activation rows, one 16-lane accumulator an output, one
// pass over k. f16 weights are read from their rows; bf16 ones from a panel of 4 rows converted once to f32:
// panel[(s * 4 + r) * 16 + c] = w[r][16 s + c].
struct rows_f16 {
    const uint16_t* w;
    size_t ws;
    __m512 load(int i, int64_t s) const { return f16_t::load(w + size_t(i) * ws + 16 * s); }
};
struct panel_f32 {
    const float* p;
    __m512 load(int i, int64_t s) const { return _mm512_loadu_ps(p + (s * 4 + i) * 16); }
};

template <class T, int RN, class W>
inline void tile(const W& w, const uint16_t* a, size_t as, int64_t k, float* y, size_t ys) {
    const int64_t steps = k / 16;
    __m512 acc[RN][4];
    for (int j = 0; j < RN; j++)
        for (int i = 0; i < 4; i++) acc[j][i] = _mm512_setzero_ps();
    for (int64_t s = 0; s < steps; s++) {
        __m512 b[RN];
        for (int j = 0; j < RN; j++) b[j] = T::load(a + size_t(j) * as + 16 * s);
        for (int i = 0; i < 4; i++) {
            const __m512 wv = w.load(i, s);
            for (int j = 0; j < RN; j++) acc[j][i] = _mm512_fmadd_ps(wv, b[j], acc[j][i]);
        }
    }
    for (int j = 0; j < RN; j++)
        _mm_storeu_ps(y + size_t(j) * ys, reduce16x4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]));
}

// activation rows 0 .. n_a of the job in tiles of RN_MAX, then the rest in one smaller tile
template <class T, class W>
inline void tiles(const W& w, const uint16_t* a, size_t as, int64_t n_a, int64_t k, float* y, size_t ys) {
    activation_tiles(n_a, [&](int64_t j, auto rn) {
        tile<T, decltype(rn)::value>(w, a + size_t(j) * as, as, k, y + size_t(j) * ys, ys);
    });
}

void gemm_f16(const uint16_t* w, size_t ws, int64_t n_w, const uint16_t* a, size_t as, int64_t n_a, int64_t k, float* y,
              size_t ys) {
    // activation groups outer, the weight rows inner: the job's weight rows and the tile's activations stay in L1
    int64_t j = 0;
    for (; j + RN_MAX <= n_a; j += RN_MAX)
        for (int64_t i = 0; i < n_w; i += 4)
            tile<f16_t, RN_MAX>(rows_f16{w + size_t(i) * ws, ws}, a + size_t(j) * as, as, k, y + size_t(j) * ys + i,
                                ys);
    for (int64_t i = 0; i < n_w; i += 4)
        tiles<f16_t>(rows_f16{w + size_t(i) * ws, ws}, a + size_t(j) * as, as, n_a - j, k, y + size_t(j) * ys + i, ys);
}

void gemm_bf16(const uint16_t* w, size_t ws, int64_t n_w, const uint16_t* a, size_t as, int64_t n_a, int64_t k,
               float* y, size_t ys) {
    thread_local std::vector<float> panel; // 4 * k floats a thread, kept between calls
    if (panel.size() < size_t(4 * k)) panel.resize(size_t(4 * k));
    const int64_t steps = k / 16;
    for (int64_t i = 0; i < n_w; i += 4) {
        for (int64_t s = 0; s < steps; s++)
            for (int r = 0; r < 4; r++)
                _mm512_storeu_ps(panel.data() + (s * 4 + r) * 16, bf16_t::load(w + size_t(i + r) * ws + 16 * s));
        tiles<bf16_t>(panel_f32{panel.data()}, a, as, n_a, k, y + i, ys);
    }
}

// ggml_vec_dot_f16 (AVX-512): 4 x 16 lanes over 64-element steps, (s0 + s2) + (s1 + s3), reduced; the rest in double
inline float dot_f16(const uint16_t* w, const float* a, int64_t k, const uint16_t* next) {
    __m512 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
    const int64_t np = k - k % 64;
    for (int64_t i = 0; i < np; i += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(next + i + 32), _MM_HINT_T0);
        for (int r = 0; r < 4; r++)
            acc[r] = _mm512_fmadd_ps(f16_t::load(w + i + 16 * r), _mm512_loadu_ps(a + i + 16 * r), acc[r]);
    }
    const __m512 v = _mm512_add_ps(_mm512_add_ps(acc[0], acc[2]), _mm512_add_ps(acc[1], acc[3]));
    double sum = avx2::hsum8(fold16(v));
    for (int64_t i = np; i < k; i++) sum += double(f16_t::load1(w[i]) * a[i]);
    return float(sum);
}

// ggml_vec_dot_bf16 (AVX-512F): 2 x 16 lanes over 32-element steps, each reduced and added in double; the rest too
inline float dot_bf16(const uint16_t* w, const float* a, int64_t k, const uint16_t* next) {
    __m512 acc[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
    const int64_t np = k - k % 32;
    for (int64_t i = 0; i < np; i += 32) {
        _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T0);
        for (int r = 0; r < 2; r++)
            acc[r] = _mm512_fmadd_ps(bf16_t::load(w + i + 16 * r), _mm512_loadu_ps(a + i + 16 * r), acc[r]);
    }
    double sum = 0.0;
    sum += double(avx2::hsum8(fold16(acc[0])));
    sum += double(avx2::hsum8(fold16(acc[1])));
    for (int64_t i = np; i < k; i++) sum += double(bf16_t::load1(w[i]) * a[i]);
    return float(sum);
}

// Decode: the rows in order, each row's dot prefetching the row after next; the activation row widened to f32 once
// per call. The AVX2 kernels' 4 interleaved streams (faster on the AVX2 VM they were measured on) were slower on
// an AVX-512 EPYC VM (2026-11-28, SmolLM2 f16 tg128, 2 threads): 131.5 t/s against 190-194 in order (llama.cpp
// 143-154 in the same runs).
template <class T, float (*dot)(const uint16_t*, const float*, int64_t, const uint16_t*)>
void gemv(const uint16_t* w, size_t ws, int64_t n, const uint16_t* a, int64_t k, float* y, size_t ys) {
    thread_local std::vector<float> af;
    if (af.size() < size_t(k)) af.resize(size_t(k));
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) _mm512_storeu_ps(af.data() + i, T::load(a + i));
    for (; i < k; i++) af[size_t(i)] = T::load1(a[i]);
    for (int64_t r = 0; r < n; r++)
        y[size_t(r) * ys] = dot(w + size_t(r) * ws, af.data(), k, w + size_t(std::min(r + 2, n - 1)) * ws);
}

} // namespace

// from_float stays the AVX2 kernels' (the conversion is a small part of a mul_mat)
const float16_kernels* float16_kernels_for(type t) {
    static const float16_kernels f16 = [] {
        float16_kernels k = *avx2::float16_kernels_for(type::f16);
        k.gemm = gemm_f16;
        k.gemv = gemv<f16_t, dot_f16>;
        return k;
    }();
    static const float16_kernels bf16 = [] {
        float16_kernels k = *avx2::float16_kernels_for(type::bf16);
        k.gemm = gemm_bf16;
        k.gemv = gemv<bf16_t, dot_bf16>;
        return k;
    }();
    return t == type::f16 ? &f16 : t == type::bf16 ? &bf16 : nullptr;
}

} // namespace tessera::cpu::avx512
