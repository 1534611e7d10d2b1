// bf16_avx512bf16.cpp: bf16 mul_mat kernels in order dpbf16 (float16.h: llama.cpp's orders on a CPU with
// AVX512_BF16), through vdpbf16ps, bit-identical to the scalar ones in float16.cpp; chosen where
// cpu_has_avx512bf16(). An instruction multiplies 32 pairs of halves straight from memory (the f32 orders convert 16
// and fma them), so prompts need neither a converted weight panel nor half the instructions. Prompts in tiles of 4
// weight rows x 6 activation rows (24 accumulators of 32 registers), decode row after row.
#include "backends/cpu/quant/avx512.h"
#include "backends/cpu/quant/float16.h"

#include "backends/cpu/quant/avx2.h"

#include <algorithm>

namespace tessera::cpu::avx512bf16 {

namespace {

using avx512::activation_tiles;
using avx512::fold16;
using avx512::reduce16x4;
using avx512::RN_MAX;

inline __m512bh load32(const uint16_t* p) {
    return (__m512bh)_mm512_loadu_si512(p);
}

// tinyBLAS<32>: 4 weight rows (w, ws) x RN activation rows, one accumulator an output over 32-element steps
template <int RN>
inline void tile(const uint16_t* w, size_t ws, const uint16_t* a, size_t as, int64_t k, float* y, size_t ys) {
    __m512 acc[RN][4];
    for (int j = 0; j < RN; j++)
        for (int i = 0; i < 4; i++) acc[j][i] = _mm512_setzero_ps();
    for (int64_t l = 0; l < k; l += 32) {
        __m512bh b[RN];
        for (int j = 0; j < RN; j++) b[j] = load32(a + size_t(j) * as + size_t(l));
        for (int i = 0; i < 4; i++) {
            const __m512bh wv = load32(w + size_t(i) * ws + size_t(l));
            for (int j = 0; j < RN; j++) acc[j][i] = _mm512_dpbf16_ps(acc[j][i], wv, b[j]);
        }
    }
    for (int j = 0; j < RN; j++)
        _mm_storeu_ps(y + size_t(j) * ys, reduce16x4(acc[j][0], acc[j][1], acc[j][2], acc[j][3]));
}

// activation rows 0 .. n_a in tiles of RN_MAX, then the rest in one smaller tile
void tiles(const uint16_t* w, size_t ws, const uint16_t* a, size_t as, int64_t n_a, int64_t k, float* y, size_t ys) {
    activation_tiles(n_a, [&](int64_t j, auto rn) {
        tile<decltype(rn)::value>(w, ws, a + size_t(j) * as, as, k, y + size_t(j) * ys, ys);
    });
}

void gemm(const uint16_t* w, size_t ws, int64_t n_w, const uint16_t* a, size_t as, int64_t n_a, int64_t k, float* y,
          size_t ys) {
    // activation groups outer, the weight rows inner: the job's weight rows and the tile's activations stay in L1
    int64_t j = 0;
    for (; j + RN_MAX <= n_a; j += RN_MAX)
        for (int64_t i = 0; i < n_w; i += 4)
            tile<RN_MAX>(w + size_t(i) * ws, ws, a + size_t(j) * as, as, k, y + size_t(j) * ys + size_t(i), ys);
    for (int64_t i = 0; i < n_w; i += 4)
        tiles(w + size_t(i) * ws, ws, a + size_t(j) * as, as, n_a - j, k, y + size_t(j) * ys + size_t(i), ys);
}

// ggml_vec_dot_bf16 with vdpbf16ps: elements i .. i + 31 and i + 32 .. i + 63 into two accumulators, each reduced and
// added in double, the rest in double; prefetching the row after next
inline float dot(const uint16_t* w, const uint16_t* a, int64_t k, const uint16_t* next) {
    __m512 c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps();
    const int64_t np = k - k % 64;
    for (int64_t i = 0; i < np; i += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next + i), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(next + i + 32), _MM_HINT_T0);
        c1 = _mm512_dpbf16_ps(c1, load32(w + i), load32(a + i));
        c2 = _mm512_dpbf16_ps(c2, load32(w + i + 32), load32(a + i + 32));
    }
    double sum = 0.0;
    sum += double(avx2::hsum8(fold16(c1)));
    sum += double(avx2::hsum8(fold16(c2)));
    for (int64_t i = np; i < k; i++) sum += double(bf16_to_fp32(w[i]) * bf16_to_fp32(a[i]));
    return float(sum);
}

void gemv(const uint16_t* w, size_t ws, int64_t n, const uint16_t* a, int64_t k, float* y, size_t ys) {
    for (int64_t r = 0; r < n; r++)
        y[size_t(r) * ys] = dot(w + size_t(r) * ws, a, k, w + size_t(std::min(r + 2, n - 1)) * ws);
}

} // namespace

// from_float stays the AVX2 kernels' (ggml rounds activations to bf16 the same way on every CPU)
const float16_kernels* float16_kernels_for(type t) {
    static const float16_kernels bf16 = [] {
        float16_kernels k = *avx2::float16_kernels_for(type::bf16);
        k.gemm = gemm;
        k.gemv = gemv;
        k.order = float16_order::dpbf16;
        k.gemm_k = 32;
        return k;
    }();
    return t == type::bf16 ? &bf16 : nullptr;
}

} // namespace tessera::cpu::avx512bf16
