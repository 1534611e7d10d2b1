// nvfp4_avx2.cpp: AVX2 row dot of nvfp4 weights with q8_0 activations (ggml's CPU pairing), in the lane order of
// ggml's AVX2 kernel so the f32 result is the same bits as llama.cpp's on x86. The activations come from
// vec_dot_avx2.cpp's quantize_row_q8_0, which matches ggml's.
#include "backends/cpu/quant/avx2.h"
#include "quant/nvfp4.h"

namespace tessera::cpu::avx2 {

namespace {

// UE4M3 byte -> half its value (ggml's convention), looked up as ggml's CPU code does
struct ue4m3_table {
    float v[256];
    ue4m3_table() {
        for (int i = 0; i < 256; i++) v[i] = ue4m3_to_fp32_half(uint8_t(i));
    }
};
const ue4m3_table ue4m3;

// 16 bytes of nibbles (two 16-element sub-blocks) -> 32 int8 doubled E2M1 values in element order:
// sub-block 0 (bytes 0..7: low nibbles = elements 0..7, high = 8..15) in lane 0, sub-block 1 in lane 1
inline __m256i decode_pair(const uint8_t* qs) {
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    const __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(q, m4));
    const __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
    return _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi));
}

// signed x signed bytes -> 8 int32 lanes of 4 products each (|x| <= 12, so the int16 pairs cannot saturate)
inline __m256i dot_i8(__m256i x, __m256i y) {
    return madd1(_mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)));
}

} // namespace

// acc += (UE4M3(d_s) * d8) * sum_j 2E2M1[q_j] q8_j, lanes 0..3 = sub-block 2k, lanes 4..7 = 2k + 1
float vec_dot_nvfp4_q8_0(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_nvfp4*>(w);
    auto* y = static_cast<const block_q8_0*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 64; i++) {
        const block_q8_0& y0 = y[2 * i];
        const block_q8_0& y1 = y[2 * i + 1];
        const __m256i p01 = dot_i8(decode_pair(x[i].qs), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y0.qs)));
        const __m256i p23 = dot_i8(decode_pair(x[i].qs + 16), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y1.qs)));
        const float d0 = h2f(y0.d), d1 = h2f(y1.d);
        const __m256 s01 = _mm256_set_m128(_mm_set1_ps(ue4m3.v[x[i].d[1]] * d0), _mm_set1_ps(ue4m3.v[x[i].d[0]] * d0));
        const __m256 s23 = _mm256_set_m128(_mm_set1_ps(ue4m3.v[x[i].d[3]] * d1), _mm_set1_ps(ue4m3.v[x[i].d[2]] * d1));
        acc = _mm256_fmadd_ps(s01, _mm256_cvtepi32_ps(p01), acc);
        acc = _mm256_fmadd_ps(s23, _mm256_cvtepi32_ps(p23), acc);
    }
    return hsum8(acc);
}

} // namespace tessera::cpu::avx2
