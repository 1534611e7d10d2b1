// iq3_avx2.cpp: AVX2 row dots of IQ3_XXS and IQ3_S against q8_K in the orders of llama.cpp's x86 CPU, so the f32
// results are its bits. Grid values are unsigned (at most 62) and the signs go onto the q8 values, so maddubs' pair
// sums (at most 2 x 62 x 127) are exact; every integer below is exact.
//   vec_dot (fewer than 8 activation rows): ggml_vec_dot_iq3_{xxs,s}_q8_K's, 8 int32 lanes a super-block, lane t the
//     sum over sub-blocks s of (2 ls_s + 1) x (the dot of elements 32s + 4t .. + 3), acc_t = fma(d_w d_a, float(lane
//     t), acc_t), folded as hsum_float_8 (iq3_xxs: then times 0.25);
//   tiled (8 or more activation rows): ggml's tiled kernels', S = the lanes' sum, acc = fma(float(S) d_w', d_a, acc)
//     with d_w' = d_w / 4 for iq3_xxs, d_w for iq3_s.
// The panels (row_panel) decode a weight row once, then dot it with each activation row: vec_dot's from signed bytes
// (grid value x sign; the same lanes), the tiled order's from unsigned ones (value + 64, the offset taken back through
// q8_K's bsums: that order needs only each super-block's exact total). The same bits as the row kernels.
#include "backends/cpu/quant/avx2.h"
#include "quant/iq3_s.h"
#include "quant/iq3_xxs.h"

#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

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

inline __m256i points(const uint32_t (&grid)[8]) {
    return _mm256_setr_epi32(int(grid[0]), int(grid[1]), int(grid[2]), int(grid[3]), int(grid[4]), int(grid[5]),
                             int(grid[6]), int(grid[7]));
}
// one sub-block's 8 lanes: lane t = scale x the dot of elements 4t .. 4t + 3 (g: the grid points, unsigned; q8s: the
// activations with the weights' signs)
inline __m256i sub_lanes(__m256i g, __m256i q8s, int scale) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(g, q8s), _mm256_set1_epi16(int16_t(scale)));
}

// sub-block s: its grid points, sign word (bit j: element j negative) and scale 2 ls + 1
inline __m256i grid_of(const block_iq3_xxs& x, int s, uint32_t& signs, int& scale) {
    const uint32_t w = iq3_xxs::word(x, s);
    uint32_t grid[8];
    for (int k = 0; k < 8; k++) grid[k] = iq3::xxs_grid[x.qs[8 * s + k]];
    signs = 0;
    for (int l = 0; l < 4; l++) signs |= uint32_t(sign_bytes[w >> (7 * l) & 127]) << (8 * l);
    scale = int(2 * (w >> 28) + 1);
    return points(grid);
}
inline __m256i grid_of(const block_iq3_s& x, int s, uint32_t& signs, int& scale) {
    uint32_t grid[8];
    for (int k = 0; k < 8; k++) grid[k] = iq3::s_grid[iq3_s::index(x, s, k)];
    std::memcpy(&signs, x.signs + 4 * s, 4);
    scale = 2 * iq3_s::scale(x, s) + 1;
    return points(grid);
}

template <class B> inline __m256i lanes(const B& x, const block_q8_k& y) {
    __m256i sum = _mm256_setzero_si256();
    for (int s = 0; s < 8; s++) {
        uint32_t signs;
        int scale;
        const __m256i g = grid_of(x, s, signs, scale);
        sum = _mm256_add_epi32(sum, sub_lanes(g, signed_q8(load32(y.qs + 32 * s), signs), scale));
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

// A decoded super-block: the values grid x sign as bytes (|v| <= 62), the 8 scales 2 ls + 1, f32 d
struct alignas(32) decoded {
    int8_t v[256];
    int16_t scale[8];
    float d;
};

template <class B> void decode_row(const B* x, int64_t nb, decoded* out) {
    for (int64_t i = 0; i < nb; i++) {
        for (int s = 0; s < 8; s++) {
            uint32_t signs;
            int scale;
            const __m256i g = grid_of(x[i], s, signs, scale);
            _mm256_store_si256(reinterpret_cast<__m256i*>(out[i].v + 32 * s), signed_q8(g, signs));
            out[i].scale[s] = int16_t(scale);
        }
        out[i].d = h2f(x[i].d);
    }
}

// the lanes of a decoded super-block against q8_K values: |v| x (q8 with v's sign), the row kernels' integers
inline __m256i decoded_lanes(const decoded& x, const block_q8_k& y) {
    __m256i sum = _mm256_setzero_si256();
    for (int s = 0; s < 8; s++) {
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(x.v + 32 * s));
        const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(load32(y.qs + 32 * s), v));
        sum = _mm256_add_epi32(sum, _mm256_madd_epi16(p, _mm256_set1_epi16(x.scale[s])));
    }
    return sum;
}

// vec_dot's order; F: d_w's factor (iq3_xxs: 1/4, after the fold)
template <class B> void panel(const void* w, const void* a, size_t as, int64_t na, int64_t n, float* y, size_t ys) {
    constexpr float F = std::is_same_v<B, block_iq3_xxs> ? 0.25f : 1.0f;
    const int64_t nb = n / 256;
    thread_local std::vector<decoded> buf;
    if (int64_t(buf.size()) < nb) buf.resize(size_t(nb));
    decode_row(static_cast<const B*>(w), nb, buf.data());
    for (int64_t j = 0; j < na; j++) {
        auto* q = reinterpret_cast<const block_q8_k*>(static_cast<const uint8_t*>(a) + size_t(j) * as);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < nb; i++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(buf[size_t(i)].d * q[i].d),
                                  _mm256_cvtepi32_ps(decoded_lanes(buf[size_t(i)], q[i])), acc);
        y[size_t(j) * ys] = F * hsum8(acc); // x 1 for iq3_s: exact
    }
}

// For the tiled order only each super-block's total S counts, so the weights go unsigned, u = v + 64 (0..126: a
// maddubs pair stays below 2 x 126 x 127), and S = sum_s sc_s (u . q) - 64 sum_s sc_s (sum of q over sub-block s),
// the second from q8_K's bsums (two a sub-block: the scales come twice). No sign op a pair; R activation rows share
// each load of u.
struct alignas(32) decoded_u {
    uint8_t u[256];
    int16_t scale16[16]; // sub-block s's scale at 2s and 2s + 1
    float d;             // d_w as the tiled kernels scale it (iq3_xxs: d / 4)
};

template <class B> void decode_row_u(const B* x, int64_t nb, decoded_u* out, float factor) {
    const __m256i off = _mm256_set1_epi8(64);
    for (int64_t i = 0; i < nb; i++) {
        for (int s = 0; s < 8; s++) {
            uint32_t signs;
            int scale;
            const __m256i g = grid_of(x[i], s, signs, scale);
            _mm256_store_si256(reinterpret_cast<__m256i*>(out[i].u + 32 * s),
                               _mm256_add_epi8(signed_q8(g, signs), off));
            out[i].scale16[2 * s] = out[i].scale16[2 * s + 1] = int16_t(scale);
        }
        out[i].d = h2f(x[i].d) * factor;
    }
}

// R activation rows q[0..R) (each a row of q8_K blocks) against a decoded row: acc[j] in the tiled order
template <int R> void tiled_rows(const decoded_u* x, int64_t nb, const block_q8_k* const* q, float* acc) {
    for (int j = 0; j < R; j++) acc[j] = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        __m256i sum[R];
        for (int j = 0; j < R; j++) {
            const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[j][i].bsums));
            const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(x[i].scale16));
            sum[j] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bs, sc), 6));
        }
        for (int s = 0; s < 8; s++) {
            const __m256i u = _mm256_load_si256(reinterpret_cast<const __m256i*>(x[i].u + 32 * s));
            const __m256i sc = _mm256_set1_epi16(x[i].scale16[2 * s]);
            for (int j = 0; j < R; j++)
                sum[j] = _mm256_add_epi32(
                    sum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(u, load32(q[j][i].qs + 32 * s)), sc));
        }
        for (int j = 0; j < R; j++) acc[j] = std::fma(float(hsum8_i32(sum[j])) * x[i].d, q[j][i].d, acc[j]);
    }
}

template <class B>
void panel_tiled(const void* w, const void* a, size_t as, int64_t na, int64_t n, float* y, size_t ys) {
    const int64_t nb = n / 256;
    thread_local std::vector<decoded_u> buf;
    if (int64_t(buf.size()) < nb) buf.resize(size_t(nb));
    decode_row_u(static_cast<const B*>(w), nb, buf.data(), std::is_same_v<B, block_iq3_xxs> ? 0.25f : 1.0f);
    auto row = [&](int64_t j) {
        return reinterpret_cast<const block_q8_k*>(static_cast<const uint8_t*>(a) + size_t(j) * as);
    };
    int64_t j = 0;
    for (; j + 4 <= na; j += 4) {
        const block_q8_k* q[4] = {row(j), row(j + 1), row(j + 2), row(j + 3)};
        float acc[4];
        tiled_rows<4>(buf.data(), nb, q, acc);
        for (int r = 0; r < 4; r++) y[size_t(j + r) * ys] = acc[r];
    }
    for (; j < na; j++) {
        const block_q8_k* q[1] = {row(j)};
        tiled_rows<1>(buf.data(), nb, q, y + size_t(j) * ys);
    }
}

} // namespace

void row_panel_iq3_xxs_q8_k(const void* w, const void* a, size_t as, int64_t na, int64_t n, float* y, size_t ys) {
    panel<block_iq3_xxs>(w, a, as, na, n, y, ys);
}
void row_panel_iq3_xxs_q8_k_tiled(const void* w, const void* a, size_t as, int64_t na, int64_t n, float* y,
                                  size_t ys) {
    panel_tiled<block_iq3_xxs>(w, a, as, na, n, y, ys);
}
void row_panel_iq3_s_q8_k(const void* w, const void* a, size_t as, int64_t na, int64_t n, float* y, size_t ys) {
    panel<block_iq3_s>(w, a, as, na, n, y, ys);
}
void row_panel_iq3_s_q8_k_tiled(const void* w, const void* a, size_t as, int64_t na, int64_t n, float* y, size_t ys) {
    panel_tiled<block_iq3_s>(w, a, as, na, n, y, ys);
}

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
