// mxfp4_avx2.cpp: AVX2 row dots of mxfp4 weights with q8_0 activations (ggml's CPU pairing), so the f32 result is the
// same bits as llama.cpp's on x86. vec_dot_mxfp4_q8_0 in the order of ggml's AVX2 kernel (ggml_vec_dot_mxfp4_q8_0):
// blocks in pairs, block 2i into accumulator 1 and 2i + 1 into accumulator 2 (fma of the block's scale into 8 int32
// lane sums), the two added and folded by hsum_float_8, then an odd last block in scalar code. The blockwise one in
// the order of the repacked mxfp4_8x8 kernels llama.cpp uses for matrices of 8k rows (gpt-oss's experts): per block,
// acc = fma(float(integer block dot), 2^(e - 128) * d_a, acc).
#include "backends/cpu/quant/avx2.h"
#include "quant/mxfp4.h"

#include <cmath>

namespace tessera::cpu::avx2 {

namespace {

// 16 bytes of nibbles -> 32 int8 doubled E2M1 values in element order (low nibbles = elements 0..15 in lane 0, high
// nibbles = 16..31 in lane 1)
inline __m256i decode(const uint8_t* qs) {
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    return _mm256_set_m128i(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4)),
                            _mm_shuffle_epi8(lut, _mm_and_si128(q, m4)));
}

// signed x signed bytes -> 8 int32 lanes of 4 products each (|x| <= 12: the int16 pairs cannot saturate)
inline __m256i dot_i8(__m256i x, __m256i y) {
    return madd1(_mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)));
}

} // namespace

float vec_dot_mxfp4_q8_0(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_mxfp4*>(w);
    auto* y = static_cast<const block_q8_0*>(a);
    const int64_t nb = n / 32;
    __m256 acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
    int64_t ib = 0;
    for (; ib + 1 < nb; ib += 2) {
        const __m256i p1 = dot_i8(decode(x[ib].qs), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[ib].qs)));
        const __m256i p2 =
            dot_i8(decode(x[ib + 1].qs), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[ib + 1].qs)));
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(y[ib].d) * e8m0_to_fp32_half(x[ib].e)), _mm256_cvtepi32_ps(p1), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(y[ib + 1].d) * e8m0_to_fp32_half(x[ib + 1].e)),
                               _mm256_cvtepi32_ps(p2), acc2);
    }
    float sum = hsum8(_mm256_add_ps(acc1, acc2));
    for (; ib < nb; ib++) sum += mxfp4::vec_dot(x[ib], y[ib]);
    return sum;
}

float vec_dot_mxfp4_q8_0_blockwise(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_mxfp4*>(w);
    auto* y = static_cast<const block_q8_0*>(a);
    float acc = 0.0f;
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const __m256i p = dot_i8(decode(x[ib].qs), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[ib].qs)));
        const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
        const __m128i q = _mm_add_epi32(h, _mm_shuffle_epi32(h, _MM_SHUFFLE(1, 0, 3, 2)));
        const int32_t sumi = _mm_cvtsi128_si32(_mm_add_epi32(q, _mm_shuffle_epi32(q, _MM_SHUFFLE(2, 3, 0, 1))));
        acc = std::fma(float(sumi), e8m0_to_fp32_half(x[ib].e) * h2f(y[ib].d), acc);
    }
    return acc;
}

} // namespace tessera::cpu::avx2
