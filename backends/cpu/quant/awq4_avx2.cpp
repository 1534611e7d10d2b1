// awq4_avx2.cpp: AVX2 row dot of awq4 / awq4_g64 weights with q8_1 activations, in the order of the repacked kernels
// (repack.h) and of the reference (quant/awq4.h) up to fma: per group, per q8_1 block b, the exact integer
// I_b = sum (q - z) q8, acc_g = fma(float(I_b), d8_b, acc_g) from 0, then acc = fma(s, acc_g, acc).
#include "backends/cpu/quant/avx2.h"
#include "quant/awq4.h"

#include <cmath>

namespace tessera::cpu::avx2 {

// Per 64 elements (8 words, q8_1 blocks 2c and 2c + 1): the low and high nibbles interleaved byte by byte give each
// word's elements in AWQ slot order (e0,e2,e4,e6,e1,e3,e5,e7); a byte shuffle puts them in natural order. Per 128-bit
// lane, unpacklo takes words 0,1 and unpackhi words 2,3 of that lane, so lane 0 holds q8 block 2c's elements and
// lane 1 block 2c + 1's: the activations are loaded in the same halves. z sum q8 comes off as maddubs(z, q8).
template <int G> float vec_dot_awq4_q8_1(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_awq4<G>*>(w);
    auto* y = static_cast<const block_q8_1*>(a);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i natural = _mm256_setr_epi8(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15, //
                                             0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
    float acc = 0.0f;
    for (int64_t g = 0; g < n / G; g++) {
        const block_awq4<G>& b = x[g];
        const block_q8_1* q8 = y + g * (G / 32);
        const __m256i z = _mm256_set1_epi8(char(b.z));
        float accg = 0.0f;
        for (int c = 0; c < G / 64; c++) {
            const block_q8_1& y0 = q8[2 * c];
            const block_q8_1& y1 = q8[2 * c + 1];
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 8 * c));
            const __m256i lo = _mm256_and_si256(raw, m4), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            const __m256i wa = _mm256_shuffle_epi8(_mm256_unpacklo_epi8(lo, hi), natural); // elements 0..15 | 32..47
            const __m256i wb = _mm256_shuffle_epi8(_mm256_unpackhi_epi8(lo, hi), natural); // elements 16..31 | 48..63
            const __m256i aa = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(y1.qs),
                                                   reinterpret_cast<const __m128i*>(y0.qs));
            const __m256i ab = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(y1.qs + 16),
                                                   reinterpret_cast<const __m128i*>(y0.qs + 16));
            // unsigned codes (and z) x signed q8: pairs <= 2 * 15 * 128, sums of two and their difference fit int16
            const __m256i qq = _mm256_add_epi16(_mm256_maddubs_epi16(wa, aa), _mm256_maddubs_epi16(wb, ab));
            const __m256i zq = _mm256_add_epi16(_mm256_maddubs_epi16(z, aa), _mm256_maddubs_epi16(z, ab));
            const __m256i p = madd1(_mm256_sub_epi16(qq, zq)); // lanes 0..3: block 2c, 4..7: block 2c + 1
            __m128i h = _mm_hadd_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
            h = _mm_hadd_epi32(h, h);
            accg = std::fma(float(_mm_cvtsi128_si32(h)), h2f(y0.d), accg);
            accg = std::fma(float(_mm_extract_epi32(h, 1)), h2f(y1.d), accg);
        }
        acc = std::fma(h2f(b.s), accg, acc);
    }
    return acc;
}

template float vec_dot_awq4_q8_1<128>(const void* w, const void* a, int64_t n);
template float vec_dot_awq4_q8_1<64>(const void* w, const void* a, int64_t n);

} // namespace tessera::cpu::avx2
