// i2_s_avx2.cpp: AVX2 row kernels for i2_s weights and their i8_s activations (BitNet's per-token int8). The dot is
// at unit weight scale, like the reference (quant/i2_s.h): mul_mat multiplies by the tensor's scale.
#include "backends/cpu/quant/avx2.h"
#include "quant/i2_s.h"

#include <cmath>

namespace tessera::cpu::avx2 {

// i8_s: one scale per row, s = 127 / max(max|x|, 1e-5), q = round(x * s) half away from zero: bit-identical to the
// reference (ties are found exactly: x * s - trunc(x * s) is exact in f32)
void quantize_row_i8_s(const float* x, void* y, int64_t n) {
    auto* b = static_cast<block_i8_s*>(y);
    __m256 vmax = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 8) vmax = _mm256_max_ps(vmax, abs8(_mm256_loadu_ps(x + i)));
    const double amax = std::fmax(1e-5, double(max8(vmax)));
    const __m256 vs = _mm256_set1_ps(float(127.0 / amax));
    const float d = float(amax / 127.0);
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    const __m256 lo = _mm256_set1_ps(-128.0f), hi = _mm256_set1_ps(127.0f);
    for (int64_t i = 0; i < n / 128; i++) {
        __m256i sum = _mm256_setzero_si256();
        for (int j = 0; j < 128; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 128 * i + j + 8 * k), vs);
                const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
                const __m256 tie = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(v, t)), half, _CMP_EQ_OQ);
                const __m256 away = _mm256_add_ps(t, _mm256_or_ps(one, _mm256_and_ps(sign, v))); // t + copysign(1, v)
                __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
                r = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_blendv_ps(r, away, tie)));
                q[k] = _mm256_cvtps_epi32(r);
                sum = _mm256_add_epi32(sum, q[k]);
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs + j), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
        }
        b[i].d = d;
        b[i].sum = hsum8_i32(sum);
    }
}

// BitNet's order: the exact integer sum over the row of code * q (int16 lanes per block, |lane| <= 4 * 2 * 3 * 128,
// widened and summed in int32), minus the row's sum of q (the code offset), converted once and times the row's d
// (the same in every block); the repacked kernel (repack.h) gives the same bits
float vec_dot_i2_s_i8_s(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_i2_s*>(w);
    auto* y = static_cast<const block_i8_s*>(a);
    if (n < 128) return 0.0f;
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i acc = _mm256_setzero_si256();
    int32_t total = 0;
    for (int64_t i = 0; i < n / 128; i++) {
        // byte j: bits 7:6 = element j, 5:4 = j + 32, 3:2 = j + 64, 1:0 = j + 96
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs));
        const int8_t* qy = y[i].qs;
        const __m256i c0 = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
        const __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
        const __m256i c2 = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
        const __m256i c3 = _mm256_and_si256(q, m3);
        const __m256i p0 = _mm256_maddubs_epi16(c0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qy)));
        const __m256i p1 = _mm256_maddubs_epi16(c1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qy + 32)));
        const __m256i p2 = _mm256_maddubs_epi16(c2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qy + 64)));
        const __m256i p3 = _mm256_maddubs_epi16(c3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qy + 96)));
        acc = _mm256_add_epi32(acc, madd1(_mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3))));
        total += y[i].sum;
    }
    return float(hsum8_i32(acc) - total) * y[0].d;
}

} // namespace tessera::cpu::avx2
