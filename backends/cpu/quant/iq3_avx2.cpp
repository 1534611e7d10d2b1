// iq3_avx2.cpp: AVX2 row dots of IQ3_XXS and IQ3_S against q8_K in the orders of llama.cpp's x86 CPU, so the f32
// results are its bits. Grid values are unsigned (at most 62) and the signs go onto the q8 values, so maddubs' pair
// sums (at most 2 x 62 x 127) are exact; every integer below is exact.
//   vec_dot (fewer than 8 activation rows): ggml_vec_dot_iq3_{xxs,s}_q8_K's, 8 int32 lanes a super-block, lane t the
//     sum over sub-blocks s of (2 ls_s + 1) x (the dot of elements 32s + 4t .. + 3), acc_t = fma(d_w d_a, float(lane
//     t), acc_t), folded as hsum_float_8 (iq3_xxs: then times 0.25);
//   tiled (8 or more activation rows): ggml's tiled kernels', S = the lanes' sum, acc = fma(float(S) d_w', d_a, acc)
//     with d_w' = d_w / 4 for iq3_xxs, d_w for iq3_s.
#include "backends/cpu/quant/avx2.h"
#include "quant/iq3_s.h"
#include "quant/iq3_xxs.h"

#include <array>
#include <cmath>
#include <cstring>

namespace tessera::cpu::avx2 {

namespace {

// the 8 sign bytes of each 7-bit group, all 128
constexpr auto sign_bytes = [] {
    std::array<uint8_t, 128> t{};
    for (uint32_t i = 0; i < 128; i++) t[i] = iq3::sign_byte(i);
    return t;
}();

inline __m256i load32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// q8 values 0..31 with the signs of a 32-bit word (bit j: element j negative) applied
inline __m256i signed_q8(__m256i q8, uint32_t signs) {
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                          3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(signs)), pick); // byte j: sign byte j / 8
    const __m256i neg = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
    return _mm256_sub_epi8(_mm256_xor_si256(q8, neg), neg);
}

// one sub-block's 8 lanes: lane t = (2 ls + 1) x the dot of elements 4t .. 4t + 3 (grid: the 8 points' 4 bytes each)
inline __m256i sub_lanes(const uint32_t (&grid)[8], uint32_t signs, const int8_t* q8, int scale) {
    const __m256i g = _mm256_setr_epi32(int(grid[0]), int(grid[1]), int(grid[2]), int(grid[3]), int(grid[4]),
                                        int(grid[5]), int(grid[6]), int(grid[7]));
    const __m256i dot = _mm256_maddubs_epi16(g, signed_q8(load32(q8), signs));
    return _mm256_madd_epi16(dot, _mm256_set1_epi16(int16_t(scale)));
}

inline __m256i lanes(const block_iq3_xxs& x, const block_q8_k& y) {
    __m256i sum = _mm256_setzero_si256();
    for (int s = 0; s < 8; s++) {
        const uint32_t w = iq3_xxs::word(x, s);
        uint32_t grid[8];
        for (int k = 0; k < 8; k++) grid[k] = iq3::xxs_grid[x.qs[8 * s + k]];
        uint32_t signs = 0;
        for (int l = 0; l < 4; l++) signs |= uint32_t(sign_bytes[w >> (7 * l) & 127]) << (8 * l);
        sum = _mm256_add_epi32(sum, sub_lanes(grid, signs, y.qs + 32 * s, int(2 * (w >> 28) + 1)));
    }
    return sum;
}

inline __m256i lanes(const block_iq3_s& x, const block_q8_k& y) {
    __m256i sum = _mm256_setzero_si256();
    for (int s = 0; s < 8; s++) {
        uint32_t grid[8];
        for (int k = 0; k < 8; k++) grid[k] = iq3::s_grid[iq3_s::index(x, s, k)];
        uint32_t signs;
        std::memcpy(&signs, x.signs + 4 * s, 4);
        sum = _mm256_add_epi32(sum, sub_lanes(grid, signs, y.qs + 32 * s, 2 * iq3_s::scale(x, s) + 1));
    }
    return sum;
}

template <class B> float dot_lanes(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const B*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(h2f(x[i].d) * y[i].d), _mm256_cvtepi32_ps(lanes(x[i], y[i])), acc);
    return hsum8(acc);
}

template <class B> float dot_tiled(const void* w, const void* a, int64_t n, float d_factor) {
    auto* x = static_cast<const B*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++)
        acc = std::fma(float(hsum8_i32(lanes(x[i], y[i]))) * (h2f(x[i].d) * d_factor), y[i].d, acc);
    return acc;
}

} // namespace

float vec_dot_iq3_xxs_q8_k(const void* w, const void* a, int64_t n) {
    return 0.25f * dot_lanes<block_iq3_xxs>(w, a, n);
}
float vec_dot_iq3_xxs_q8_k_tiled(const void* w, const void* a, int64_t n) {
    return dot_tiled<block_iq3_xxs>(w, a, n, 0.25f);
}
float vec_dot_iq3_s_q8_k(const void* w, const void* a, int64_t n) { return dot_lanes<block_iq3_s>(w, a, n); }
float vec_dot_iq3_s_q8_k_tiled(const void* w, const void* a, int64_t n) {
    return dot_tiled<block_iq3_s>(w, a, n, 1.0f);
}

} // namespace tessera::cpu::avx2
