// avx2.h: small AVX2 building blocks shared by the <format>_avx2.cpp row kernels. Include only from files compiled
// with -mavx2 -mfma -mf16c (backends/cpu/CMakeLists.txt), whose functions run only after cpu_has_avx2().
#pragma once

#include "ggml-like/fp16.h"

#include <immintrin.h>

#include <cstdint>

namespace tessera::cpu::avx2 {

// lanes summed as ggml's hsum_float_8: (hi + lo) 4-wide, then (0 + 2, 1 + 3), then the two
inline float hsum8(__m256 v) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

inline int hsum8_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

inline float max8(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

inline __m256 abs8(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// 4 x 8 int32 (each in int8 range) -> 32 int8 in element order (packs interleave 128-bit lanes; undo it)
inline __m256i pack_i32_to_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
    const __m256i a = _mm256_packs_epi32(i0, i1), b = _mm256_packs_epi32(i2, i3);
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// sum over pairs of int16 lanes -> 8 int32 lanes
inline __m256i madd1(__m256i v) { return _mm256_madd_epi16(v, _mm256_set1_epi16(1)); }

inline float h2f(f16 h) { return _cvtsh_ss(h.bits); }

// x as it is, rounded: the compiler cannot fuse the product that made it into a following add (GCC contracts a * b + c
// into an fma in C++ by default; ggml's C code, built without contraction, rounds the product first)
inline float rounded(float x) {
    asm("" : "+x"(x));
    return x;
}

} // namespace tessera::cpu::avx2
