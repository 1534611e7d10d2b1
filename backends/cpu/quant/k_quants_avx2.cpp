// k_quants_avx2.cpp: AVX2 row kernels for the K super-block formats (q2_K .. q6_K) against q8_K activations
// (quantize_row_q8_k, tq2_0_avx2.cpp). Each gives the bits llama.cpp's x86 CPU backend gives for the same rows: the
// integer sums are exact, so what has to match is where they are converted and in which order the f32 steps run.
//   - q2_K, q3_K, q5_K, q6_K (ggml's vec_dot on x86): per super-block the integer dot in 8 int32 lanes (lane t holds bytes
//     4t..4t+3 of every 32-byte step), one fma(d_a d, float(lane), acc) a lane, lanes summed as hsum_float_8; q4_K /
//     q5_K's min term in 4 int32 lanes (pairs of sub-blocks), fma'd and summed apart, added last (q4_K) or summed per
//     block in f32 (q5_K).
//   - q4_K on rows whose count is a multiple of 8 (llama.cpp repacks those, q4_K_8x8): one exact integer for the
//     scaled dot and one for the min term, acc = fma(float(int), d d_a, acc) for each, the result acc - acc_min; its
//     gemv takes the integers per super-block (vec_dot_q4_k_q8_k_rows8: decode, and a batch's last rows % 4), its
//     gemm per 64 elements (gemm4_q4_k_q8_k_rows8: a batch's rows in groups of 4).
//   - a matmul of >= 8 activation rows on the other K weights (ggml's tiled kernels): per super-block s1 (and s2,
//     the min term) exact, r = fma(-dmin, float(s2), float(s1) d), acc = fma(r, d_a, acc) (vec_dot_*_tiled).
#include "backends/cpu/quant/avx2.h"
#include "quant/q2_k.h"
#include "quant/q3_k.h"
#include "quant/q4_k.h"
#include "quant/q5_k.h"
#include "quant/q6_k.h"

#include <cmath>
#include <cstring>

namespace tessera::cpu::avx2 {

namespace {

// The 12 packed bytes as 8 scales (bytes 0..7) then 8 mins (8..15), each below 64
inline void unpack_scale_mins(const uint8_t* s, uint32_t (&u)[4]) {
    std::memcpy(u, s, 12);
    const uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
    u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
    const uint32_t mins_lo = u[1] & m1;
    u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
    u[2] = mins_lo;
    u[0] &= m1;
}

// int16 lanes of v all set to 16-bit lane i of the 8 scales (broadcast within each 128-bit half, both halves alike)
inline __m256i splat_scale(__m256i scales16, int i) {
    const __m256i idx = _mm256_set1_epi16(int16_t((2 * i) | ((2 * i + 1) << 8)));
    return _mm256_shuffle_epi8(scales16, idx);
}

// q8_K's 16 sums of 16 as 8 sums of 32 (int16)
inline __m128i sums32(const int16_t* bsums) {
    const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums));
    return _mm_hadd_epi16(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
}

inline int hsum4_i32(__m128i v) {
    v = _mm_add_epi32(v, _mm_shuffle_epi32(v, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, 0xb1)));
}

// 4 lanes summed as ggml does the min accumulator: (0 + 2, 1 + 3), then the two
inline float hsum4(__m128 v) {
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

} // namespace

namespace {

// One q4_K super-block against q8_K: the 8 int32 lanes of ggml's vec_dot (sum_j sc_j sum q q_a, lane t from bytes
// 4t..4t+3 of each 32-byte step; per 64 elements in sb[j] when asked) and the min term's 4 lanes (m_j sums of 32)
struct q4k_ints {
    __m256i lanes;
    __m128i mins;
};
template <bool PER64> inline q4k_ints q4k_block(const block_q4_k& x, const block_q8_k& y, int (*sb)[4] = nullptr) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    uint32_t u[4];
    unpack_scale_mins(x.scales, u);
    const __m256i sm = _mm256_cvtepu8_epi16(_mm_set_epi32(int(u[3]), int(u[2]), int(u[1]), int(u[0])));
    const __m128i sc = _mm256_castsi256_si128(sm);
    const __m256i scales = _mm256_set_m128i(sc, sc);
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j));
        const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j));
        const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j + 32));
        const __m256i p0 = _mm256_madd_epi16(splat_scale(scales, 2 * j), _mm256_maddubs_epi16(lo, a0));
        const __m256i p1 = _mm256_madd_epi16(splat_scale(scales, 2 * j + 1), _mm256_maddubs_epi16(hi, a1));
        const __m256i pj = _mm256_add_epi32(p0, p1);
        if constexpr (PER64) (*sb)[j] = hsum8_i32(pj);
        sumi = _mm256_add_epi32(sumi, pj);
    }
    return {sumi, _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), sums32(y.bsums))};
}

// ggml's tiled kernels' step for one super-block: r = fma(-dmin, s2, s1 d), acc = fma(r, d_a, acc). Its AVX-512 VNNI
// kernel writes the last step as add(acc, mul(r, d_a)), which GCC contracts to the same fma (ggml-cpu is C++ built
// with -ffp-contract=fast); its AVX2 kernel writes the fma. Checked against libggml-cpu's mul_mat (2026-12-03).
inline float tiled_step(float acc, int s1, float d, int s2, float dmin, float da) {
    const float p = float(s1) * d;
    return std::fma(std::fma(-dmin, float(s2), p), da, acc);
}

} // namespace

float vec_dot_q4_k_q8_k(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q4_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = y[i].d * h2f(x[i].d), dmin = -y[i].d * h2f(x[i].dmin);
        const q4k_ints b = q4k_block<false>(x[i], y[i]);
        acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(b.mins), acc_m);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(b.lanes), acc);
    }
    return hsum8(acc) + hsum4(acc_m);
}

// llama.cpp's repacked q4_K gemv: whole super-blocks' integers into the two accumulators
float vec_dot_q4_k_q8_k_rows8(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q4_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const q4k_ints b = q4k_block<false>(x[i], y[i]);
        acc = std::fma(float(hsum8_i32(b.lanes)), h2f(x[i].d) * y[i].d, acc);
        acc_min = std::fma(float(hsum4_i32(b.mins)), h2f(x[i].dmin) * y[i].d, acc_min);
    }
    return acc - acc_min;
}

// The same for 4 weight rows and one activation row (decode): each activation load serves the four rows, and their
// integers are reduced together; lane i's fmas are row i's above (same bits)
void gemv4_q4_k_q8_k_rows8(const void* w, size_t ws, const void* a, size_t, int64_t n, float* y, size_t) {
    const auto* yb = static_cast<const block_q8_k*>(a);
    const block_q4_k* x[4];
    for (int r = 0; r < 4; r++) x[r] = reinterpret_cast<const block_q4_k*>(static_cast<const uint8_t*>(w) + r * ws);
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m128 acc = _mm_setzero_ps(), acc_min = _mm_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        __m256i scales[4], sumi[4];
        __m128i mins[4];
        const __m128i s32 = sums32(yb[i].bsums);
        alignas(16) float d[4], dmin[4];
        for (int r = 0; r < 4; r++) {
            uint32_t u[4];
            unpack_scale_mins(x[r][i].scales, u);
            const __m256i sm = _mm256_cvtepu8_epi16(_mm_set_epi32(int(u[3]), int(u[2]), int(u[1]), int(u[0])));
            const __m128i sc = _mm256_castsi256_si128(sm);
            scales[r] = _mm256_set_m128i(sc, sc);
            mins[r] = _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), s32);
            sumi[r] = _mm256_setzero_si256();
            d[r] = h2f(x[r][i].d);
            dmin[r] = h2f(x[r][i].dmin);
        }
        for (int j = 0; j < 4; j++) {
            const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb[i].qs + 64 * j));
            const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(yb[i].qs + 64 * j + 32));
            for (int r = 0; r < 4; r++) {
                const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].qs + 32 * j));
                const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                const __m256i p0 = _mm256_madd_epi16(splat_scale(scales[r], 2 * j), _mm256_maddubs_epi16(lo, a0));
                const __m256i p1 = _mm256_madd_epi16(splat_scale(scales[r], 2 * j + 1), _mm256_maddubs_epi16(hi, a1));
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p0, p1));
            }
        }
        // row r's total in lane r (exact integers in any order)
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(sumi[0], sumi[1]), _mm256_hadd_epi32(sumi[2], sumi[3]));
        const __m128i tot = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        const __m128i tot_min = _mm_hadd_epi32(_mm_hadd_epi32(mins[0], mins[1]), _mm_hadd_epi32(mins[2], mins[3]));
        const __m128 da = _mm_set1_ps(yb[i].d);
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(tot), _mm_mul_ps(_mm_load_ps(d), da), acc);
        acc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(tot_min), _mm_mul_ps(_mm_load_ps(dmin), da), acc_min);
    }
    _mm_storeu_ps(y, _mm_sub_ps(acc, acc_min));
}

// ... and its gemm (4 activation rows at a time): the integers of each 64 elements (two sub-blocks) in turn
float vec_dot_q4_k_q8_k_rows8_per64(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q4_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    float acc = 0.0f, acc_min = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        int sb[4];
        alignas(16) int mins[4]; // lane j: the min term of sub-blocks 2j, 2j + 1
        _mm_store_si128(reinterpret_cast<__m128i*>(mins), q4k_block<true>(x[i], y[i], &sb).mins);
        const float dd = h2f(x[i].d) * y[i].d, dm = h2f(x[i].dmin) * y[i].d;
        for (int j = 0; j < 4; j++) {
            acc = std::fma(float(sb[j]), dd, acc);
            acc_min = std::fma(float(mins[j]), dm, acc_min);
        }
    }
    return acc - acc_min;
}
void gemm4_q4_k_q8_k_rows8(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys) {
    for (int j = 0; j < 4; j++)
        for (int i = 0; i < 4; i++)
            y[j * ys + i] = vec_dot_q4_k_q8_k_rows8_per64(static_cast<const uint8_t*>(w) + i * ws,
                                                          static_cast<const uint8_t*>(a) + j * as, n);
}

float vec_dot_q4_k_q8_k_tiled(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q4_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const q4k_ints b = q4k_block<false>(x[i], y[i]);
        acc = tiled_step(acc, hsum8_i32(b.lanes), h2f(x[i].d), hsum4_i32(b.mins), h2f(x[i].dmin), y[i].d);
    }
    return acc;
}

namespace {

// One q5_K super-block against q8_K: ggml's vec_dot lanes (as q4k_block) and the min term's lanes
inline q4k_ints q5k_block(const block_q5_k& x, const block_q8_k& y) {
    const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    uint32_t u[4];
    unpack_scale_mins(x.scales, u);
    const __m256i sm = _mm256_cvtepu8_epi16(_mm_set_epi32(int(u[3]), int(u[2]), int(u[1]), int(u[0])));
    const __m128i sc = _mm256_castsi256_si128(sm);
    const __m256i scales = _mm256_set_m128i(sc, sc);
    const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh));
    __m256i sumi = _mm256_setzero_si256();
    for (int j = 0; j < 4; j++) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * j));
        // the fifth bit: bit 2j (low nibbles) and 2j + 1 (high) of qh, moved to bit 4
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j), one), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * j + 1), one), 4);
        const __m256i lo = _mm256_add_epi8(_mm256_and_si256(q, m4), h0);
        const __m256i hi = _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1);
        const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j));
        const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 64 * j + 32));
        const __m256i p0 = _mm256_madd_epi16(splat_scale(scales, 2 * j), _mm256_maddubs_epi16(lo, a0));
        const __m256i p1 = _mm256_madd_epi16(splat_scale(scales, 2 * j + 1), _mm256_maddubs_epi16(hi, a1));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
    }
    return {sumi, _mm_madd_epi16(_mm256_extracti128_si256(sm, 1), sums32(y.bsums))};
}

// One q6_K super-block: ggml's vec_dot lanes, levels 0..63 dotted unsigned and the 32 offset taken off through the
// q8_K sums of 16 (32 sc_s bsum_s, per lane pair)
inline __m256i q6k_block(const block_q6_k& x, const block_q8_k& y) {
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
    const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(bsums, _mm256_cvtepi8_epi16(sc8)), 5);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qh + 32 * h));
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(l0, m15), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(l1, m15),
                               _mm256_slli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(12)), 2));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m15),
                               _mm256_and_si256(hb, _mm256_set1_epi8(48)));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15),
                               _mm256_srli_epi16(_mm256_and_si256(hb, _mm256_set1_epi8(-64)), 2));
        __m256i p[4];
        for (int k = 0; k < 4; k++) {
            const __m256i av = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 128 * h + 32 * k));
            // sub-blocks 8h + 2k (bytes 0..15) and 8h + 2k + 1 (16..31): their scales as int16 lanes
            const int s0 = x.scales[8 * h + 2 * k], s1 = x.scales[8 * h + 2 * k + 1];
            const __m256i sv = _mm256_setr_m128i(_mm_set1_epi16(int16_t(s0)), _mm_set1_epi16(int16_t(s1)));
            p[k] = _mm256_madd_epi16(sv, _mm256_maddubs_epi16(q[k], av));
        }
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[0], p[1]));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p[2], p[3]));
    }
    return _mm256_sub_epi32(sumi, offset);
}

} // namespace

float vec_dot_q5_k_q8_k(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q5_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = y[i].d * h2f(x[i].d), dmin = -y[i].d * h2f(x[i].dmin);
        const q4k_ints b = q5k_block(x[i], y[i]);
        // ggml's `summs += dmin * sum`, which GCC contracts to one fma where ggml-cpu is built for FMA
        summs = std::fma(dmin, float(hsum4_i32(b.mins)), summs);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(b.lanes), acc);
    }
    return hsum8(acc) + summs;
}

float vec_dot_q5_k_q8_k_tiled(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q5_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const q4k_ints b = q5k_block(x[i], y[i]);
        acc = tiled_step(acc, hsum8_i32(b.lanes), h2f(x[i].d), hsum4_i32(b.mins), h2f(x[i].dmin), y[i].d);
    }
    return acc;
}

float vec_dot_q6_k_q8_k(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q6_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = y[i].d * h2f(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q6k_block(x[i], y[i])), acc);
    }
    return hsum8(acc);
}

float vec_dot_q6_k_q8_k_tiled(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q6_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++)
        acc = tiled_step(acc, hsum8_i32(q6k_block(x[i], y[i])), h2f(x[i].d), 0, 0.0f, y[i].d);
    return acc;
}


namespace {

// int16 lanes of the lower 128 bits set to 16-bit lane 2p of the 8 scales, of the upper to lane 2p + 1 (the two
// sub-blocks of 16 in a 32-byte step)
inline __m256i splat_scale_pair(__m256i scales16, int p) {
    const __m128i lo = _mm_set1_epi16(int16_t((4 * p) | ((4 * p + 1) << 8)));
    const __m128i hi = _mm_set1_epi16(int16_t((4 * p + 2) | ((4 * p + 3) << 8)));
    return _mm256_shuffle_epi8(scales16, _mm256_set_m128i(hi, lo));
}
// 8 int16 scales of one half (128 elements) in both 128-bit lanes
inline __m256i both_halves(__m128i s) {
    return _mm256_set_m128i(s, s);
}

// One q2_K super-block against q8_K: ggml's vec_dot lanes (lane t: sum sc q q_a over bytes 4t..4t+3 of each 32-byte
// step, exact) and its min lanes (lane t: m_2t bsum_2t + m_2t+1 bsum_2t+1)
struct q2k_ints {
    __m256i lanes, mins;
};
inline q2k_ints q2k_block(const block_q2_k& x, const block_q8_k& y) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.scales));
    const __m128i sc8 = _mm_and_si128(packed, _mm_set1_epi8(0xF));
    const __m128i mn8 = _mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF));
    const __m256i mins = _mm256_madd_epi16(_mm256_cvtepi8_epi16(mn8),
                                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)));
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const __m256i scales = both_halves(h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16));
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * h));
        for (int p = 0; p < 4; p++) {
            const __m256i qp = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), m3);
            const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 128 * h + 32 * p));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(splat_scale_pair(scales, p), _mm256_maddubs_epi16(qp, a)));
        }
    }
    return {sumi, mins};
}

// One q3_K super-block against q8_K: ggml's vec_dot lanes of sum sc (q - 4) q_a (lane t: bytes 4t..4t+3 of each
// 32-byte step, exact): maddubs of the low 2 bits minus maddubs of 4 where the high bit is clear, as ggml does
inline __m256i q3k_block(const block_q3_k& x, const block_q8_k& y) {
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    uint32_t u[3];
    std::memcpy(u, x.scales, 12);
    const uint32_t k2 = 0x0f0f0f0f, k1 = 0x03030303;
    const __m128i codes = _mm_set_epi32(int(((u[1] >> 4) & k2) | (((u[2] >> 6) & k1) << 4)),
                                        int(((u[0] >> 4) & k2) | (((u[2] >> 4) & k1) << 4)),
                                        int((u[1] & k2) | (((u[2] >> 2) & k1) << 4)),
                                        int((u[0] & k2) | ((u[2] & k1) << 4)));
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(codes, _mm_set1_epi8(32)));
    const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.hmask));
    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; h++) {
        const __m256i scales = both_halves(h ? _mm256_extracti128_si256(sc16, 1) : _mm256_castsi256_si128(sc16));
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * h));
        for (int p = 0; p < 4; p++) {
            const int bit = 4 * h + p;
            const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * p), m3);
            // 4 where the high bit is clear, else 0
            const __m256i four = _mm256_slli_epi16(_mm256_andnot_si256(_mm256_srli_epi16(hbits, bit), one), 2);
            const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 128 * h + 32 * p));
            const __m256i d16 = _mm256_sub_epi16(_mm256_maddubs_epi16(lo, a), _mm256_maddubs_epi16(four, a));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(splat_scale_pair(scales, p), d16));
        }
    }
    return sumi;
}

} // namespace

// ggml's vec_dot: per super-block the min lanes fma'd first (by -d_a dmin), then the lanes (by d_a d), one 8-lane
// accumulator, hsum_float_8
float vec_dot_q2_k_q8_k(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q2_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = y[i].d * h2f(x[i].d), dmin = -y[i].d * h2f(x[i].dmin);
        const q2k_ints b = q2k_block(x[i], y[i]);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dmin), _mm256_cvtepi32_ps(b.mins), acc);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(b.lanes), acc);
    }
    return hsum8(acc);
}

float vec_dot_q2_k_q8_k_tiled(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q2_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        const q2k_ints b = q2k_block(x[i], y[i]);
        acc = tiled_step(acc, hsum8_i32(b.lanes), h2f(x[i].d), hsum8_i32(b.mins), h2f(x[i].dmin), y[i].d);
    }
    return acc;
}

float vec_dot_q3_k_q8_k(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q3_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const float d = y[i].d * h2f(x[i].d);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(q3k_block(x[i], y[i])), acc);
    }
    return hsum8(acc);
}

float vec_dot_q3_k_q8_k_tiled(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const block_q3_k*>(w);
    auto* y = static_cast<const block_q8_k*>(a);
    float acc = 0.0f;
    for (int64_t i = 0; i < n / 256; i++)
        acc = tiled_step(acc, hsum8_i32(q3k_block(x[i], y[i])), h2f(x[i].d), 0, 0.0f, y[i].d);
    return acc;
}

} // namespace tessera::cpu::avx2
