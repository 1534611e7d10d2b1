// iq4_avx2.cpp: AVX2 row dots of the IQ4 formats (levels from iq4_nl.h's table) in the orders of llama.cpp's x86 CPU,
// so the f32 results are its bits. Levels and q8 values both lie in -127..127, so a signed byte product pair sums to
// at most 2 x 127 x 127 in magnitude: |level| x (q8 with the level's sign) through maddubs is exact.
//   iq4_nl x q8_0, three orders, as llama.cpp picks them:
//     vec_dot (one activation row, matrices it does not repack): ggml_vec_dot_iq4_nl_q8_0's: blocks in pairs, block
//       2i into accumulator 1 and 2i + 1 into accumulator 2 (8 float lanes, lane g = elements 4g..4g+3 of the block,
//       acc = fma(d_a d_w, float(lane), acc)), the two added and folded as hsum_float_8, an odd last block after it:
//       sum += (d_a d_w) float(its integer dot), not fused (checked against libggml-cpu);
//     lanes (two or more activation rows, not repacked): tinyBLAS_Q0_AVX's, vec_dot's lanes with one accumulator;
//     blockwise (matrices of 8k rows, which it repacks as iq4_nl_8x8): acc = fma(float(block dot), d_w d_a, acc).
//   iq4_xs x q8_K, two orders:
//     vec_dot (fewer than 8 activation rows): ggml_vec_dot_iq4_xs_q8_K's, 8 int32 lanes a super-block, lane t the sum
//       over sub-blocks s of ls_s x (the dot of elements 32s + 4t .. + 3), acc_t = fma(d_w d_a, float(lane t), acc_t),
//       folded as hsum_float_8;
//     tiled (8 or more activation rows): ggml's tiled kernels', S = sum of ls_s x dot exact, acc = fma(float(S) d_w,
//       d_a, acc).
#include "backends/cpu/quant/avx2.h"
#include "quant/iq4_xs.h"

#include <cmath>

namespace tessera::cpu::avx2 {

namespace {

// 16 index bytes -> the 32 levels in element order (low nibbles: elements 0..15 in lane 0, high: 16..31 in lane 1)
inline __m256i levels32(const uint8_t* qs) {
    const __m128i lut = _mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4::levels));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
    return _mm256_set_m128i(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4)),
                            _mm_shuffle_epi8(lut, _mm_and_si128(q, m4)));
}

inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// signed x signed bytes -> 16 int16 pair sums, exact (see the top)
inline __m256i pairs(__m256i x, __m256i y) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

// a block's 8 int32 lanes (lane g: elements 4g..4g+3)
inline __m256i lanes_nl(const block_iq4_nl& x, const block_q8_0& y) {
    return madd1(pairs(levels32(x.qs), load32(y.qs)));
}

} // namespace

float vec_dot_iq4_nl_q8_0(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_iq4_nl*>(w);
    auto* y = static_cast<const block_q8_0*>(a);
    const int64_t nb = n / 32;
    __m256 acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
    int64_t ib = 0;
    for (; ib + 1 < nb; ib += 2) {
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(y[ib].d) * h2f(x[ib].d)), _mm256_cvtepi32_ps(lanes_nl(x[ib], y[ib])),
                               acc1);
        acc2 = _mm256_fmadd_ps(_mm256_set1_ps(h2f(y[ib + 1].d) * h2f(x[ib + 1].d)),
                               _mm256_cvtepi32_ps(lanes_nl(x[ib + 1], y[ib + 1])), acc2);
    }
    float sum = hsum8(_mm256_add_ps(acc1, acc2));
    for (; ib < nb; ib++) sum += rounded(h2f(y[ib].d) * h2f(x[ib].d) * float(hsum8_i32(lanes_nl(x[ib], y[ib]))));
    return sum;
}

float vec_dot_iq4_nl_q8_0_lanes(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_iq4_nl*>(w);
    auto* y = static_cast<const block_q8_0*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / 32; ib++)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[ib].d) * h2f(y[ib].d)), _mm256_cvtepi32_ps(lanes_nl(x[ib], y[ib])),
                              acc);
    return hsum8(acc);
}

float vec_dot_iq4_nl_q8_0_blockwise(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_iq4_nl*>(w);
    auto* y = static_cast<const block_q8_0*>(a);
    float acc = 0.0f;
    for (int64_t ib = 0; ib < n / 32; ib++)
        acc = std::fma(float(hsum8_i32(lanes_nl(x[ib], y[ib]))), h2f(x[ib].d) * h2f(y[ib].d), acc);
    return acc;
}

namespace {

// a super-block's 8 int32 lanes: lane t = sum over s of ls_s x (the dot of elements 32s + 4t .. + 3)
inline __m256i lanes_xs(const block_iq4_xs& x, const block_q8_k& y) {
    __m256i sum = _mm256_setzero_si256();
    for (int s = 0; s < 8; s++) {
        const __m256i p = pairs(levels32(x.qs + 16 * s), load32(y.qs + 32 * s));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, _mm256_set1_epi16(int16_t(iq4_xs::scale(x, s)))));
    }
    return sum;
}

} // namespace

float vec_dot_iq4_xs_q8_k(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_iq4_xs*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y[i].d), _mm256_cvtepi32_ps(lanes_xs(x[i], y[i])), acc);
    return hsum8(acc);
}

float vec_dot_iq4_xs_q8_k_tiled(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_iq4_xs*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++)
        acc = std::fma(float(hsum8_i32(lanes_xs(x[i], y[i]))) * h2f(x[i].d), y[i].d, acc);
    return acc;
}

} // namespace tessera::cpu::avx2
