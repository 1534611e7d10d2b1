// tq2_0_avx2.cpp: AVX2 row kernels for tq2_0 weights and their q8_K activations. The quantizer gives the same bytes as
// the reference (quant/q8_k.h), which x86 ggml also runs; the dot gives the same bits as ggml's AVX2 kernel (its
// integer sums are exact and its f32 steps come in ggml's lane order; checked against libggml, 2026-11-22) and
// matches the scalar reference up to f32 summation order.
#include "backends/cpu/quant/avx2.h"
#include "quant/tq2_0.h"

#include <cstring>

namespace tessera::cpu::avx2 {

// q8_K: x -> nearest_int(-127 / max * x), max = the first element of largest |x|; bsums of 16
void quantize_row_q8_k(const float* x, void* y, int64_t n) {
    auto* b = static_cast<block_q8_k*>(y);
    for (int64_t i = 0; i < n / 256; i++, x += 256) {
        __m256 vmax = _mm256_setzero_ps();
        for (int j = 0; j < 256; j += 8) vmax = _mm256_max_ps(vmax, abs8(_mm256_loadu_ps(x + j)));
        const float amax = max8(vmax);
        if (amax == 0.0f) {
            std::memset(&b[i], 0, sizeof(b[i]));
            continue;
        }
        int first = 0; // first index with |x| == amax, as the scalar scan's strict '>' picks
        for (int j = 0; j < 256; j += 8) {
            const int m = _mm256_movemask_ps(_mm256_cmp_ps(abs8(_mm256_loadu_ps(x + j)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (m) {
                first = j + __builtin_ctz(unsigned(m));
                break;
            }
        }
        const float iscale = -127.0f / x[first];
        const __m256 vs = _mm256_set1_ps(iscale);
        constexpr int round = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC; // = ggml's nearest_int (half to even)
        for (int j = 0; j < 256; j += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++) {
                const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vs), round);
                q[k] = _mm256_min_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(127));
            }
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(b[i].qs + j), pack_i32_to_i8(q[0], q[1], q[2], q[3]));
            b[i].bsums[j / 16] = int16_t(hsum8_i32(_mm256_add_epi32(q[0], q[1])));
            b[i].bsums[j / 16 + 1] = int16_t(hsum8_i32(_mm256_add_epi32(q[2], q[3])));
        }
        b[i].d = 1.0f / iscale;
    }
}

// sum_j (code_j - 1) q8_j per block: sum code * q8 in int16 lanes (|lane| <= 4 * 2 * 2 * 127 before the bsums come
// off), minus the q8 sums, widened to 8 int32 lanes, times d8 * d: ggml's lanes, so ggml's f32 result
float vec_dot_tq2_0_q8_k(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_tq2_0*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        __m256i s01 = _mm256_setzero_si256(), s23 = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            // byte m of half h: bits 2n..2n+1 = element 128h + 32n + m
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * h));
            const int8_t* qy = y[i].qs + 128 * h;
            const __m256i c0 = _mm256_and_si256(q, m3);
            const __m256i c1 = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
            const __m256i c2 = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
            const __m256i c3 = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
            const __m256i p0 = _mm256_maddubs_epi16(c0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qy)));
            const __m256i p1 = _mm256_maddubs_epi16(c1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qy + 32)));
            const __m256i p2 = _mm256_maddubs_epi16(c2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qy + 64)));
            const __m256i p3 = _mm256_maddubs_epi16(c3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qy + 96)));
            s01 = _mm256_add_epi16(s01, _mm256_add_epi16(p0, p1));
            s23 = _mm256_add_epi16(s23, _mm256_add_epi16(p2, p3));
        }
        const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].bsums));
        const __m256i sumi = madd1(_mm256_sub_epi16(_mm256_add_epi16(s01, s23), bsums));
        const __m256 d = _mm256_set1_ps(y[i].d * h2f(x[i].d));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), d, acc);
    }
    return hsum8(acc);
}

} // namespace tessera::cpu::avx2
