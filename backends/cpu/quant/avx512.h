// avx512.h: small AVX-512 building blocks shared by the AVX-512 kernel files. Include only from files compiled with
// the AVX-512 flags (backends/cpu/CMakeLists.txt), whose functions run only after cpu_has_avx512vnni().
#pragma once

// GCC 12's AVX-512 intrinsics fill their unused merge operands from _mm512_undefined_*(), which -Wuninitialized
// reports (a false positive); silenced for the intrinsic headers only
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif

#include <cstdint>
#include <type_traits>

namespace tessera::cpu::avx512 {

// The prompt kernels' tiles of RN_MAX activation rows: tile(j, std::integral_constant<int, RN_MAX>) for rows j .. of
// n_a in steps of RN_MAX, then tile(j, std::integral_constant<int, rest>) once for the 1 .. 5 rows left
constexpr int RN_MAX = 6;
template <class Tile> inline void activation_tiles(int64_t n_a, Tile&& tile) {
    int64_t j = 0;
    for (; j + RN_MAX <= n_a; j += RN_MAX) tile(j, std::integral_constant<int, RN_MAX>{});
    switch (n_a - j) {
    case 5:
        tile(j, std::integral_constant<int, 5>{});
        break;
    case 4:
        tile(j, std::integral_constant<int, 4>{});
        break;
    case 3:
        tile(j, std::integral_constant<int, 3>{});
        break;
    case 2:
        tile(j, std::integral_constant<int, 2>{});
        break;
    case 1:
        tile(j, std::integral_constant<int, 1>{});
        break;
    default:
        break;
    }
}

// lanes 8..15 + lanes 0..7 of a 16-lane accumulator: the first step of _mm512_reduce_add_ps
inline __m256 fold16(__m512 v) {
    return _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), _mm512_castps512_ps256(v));
}

// _mm512_reduce_add_ps of 4 accumulators at once (each lane of the result takes reduce16's steps)
inline __m128 reduce16x4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m128 r[4];
    const __m256 v[4] = {fold16(a), fold16(b), fold16(c), fold16(d)};
    for (int i = 0; i < 4; i++) r[i] = _mm_add_ps(_mm256_extractf128_ps(v[i], 1), _mm256_castps256_ps128(v[i]));
    _MM_TRANSPOSE4_PS(r[0], r[1], r[2], r[3]); // r[l] = lane l of each accumulator
    return _mm_add_ps(_mm_add_ps(r[0], r[2]), _mm_add_ps(r[1], r[3]));
}

} // namespace tessera::cpu::avx512
