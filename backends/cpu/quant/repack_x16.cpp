// repack_x16.cpp: the kernels for 16-row interleaved weights (layout and summation orders: repack.h). Compiled twice:
// as-is for AVX2/FMA/F16C (namespace avx2: each 64-byte vector is two 8-lane halves, done one after the other, and
// the byte dots are maddubs + madd) and as repack_x16_vnni.cpp with AVX-512 VNNI (namespace avx512vnni: 16 lanes,
// vpdpbusd). Both give the same bits as the row kernels (vec_dot_avx2.cpp, <format>_avx2.cpp); test_quant checks
// every kind.
#include "backends/cpu/quant/repack.h"

#include "ggml-like/fp16.h"
#include "quant/format.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#ifndef TS_SIMD_NS
#define TS_SIMD_NS avx2
#endif

namespace tessera::cpu::TS_SIMD_NS {

namespace {

inline int32_t word(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

#if defined(__AVX512F__) && defined(__AVX512VNNI__) && !defined(TS_X16_YMM)
// one pass of 16 lanes
struct V {
    using i = __m512i;
    using f = __m512;
    static constexpr int lanes = 16, passes = 1;
    static constexpr bool q8_corrected = true; // u8 (q8 + 128) x s8 with a -128 * sum correction
    static constexpr bool pairs16 = false;     // vpdpbusd sums 4 products into int32 in one step
    static i mul_pairs(i, i) { return zero_i(); }
    static i add16(i, i) { return zero_i(); }
    static i widen(i acc, i) { return acc; }
    static i load(const uint8_t* p) { return _mm512_loadu_si512(p); }
    static i set1(int32_t v) { return _mm512_set1_epi32(v); }
    static i low4(i v) { return _mm512_and_si512(v, _mm512_set1_epi8(0x0f)); }
    static i high4(i v) { return _mm512_and_si512(_mm512_srli_epi16(v, 4), _mm512_set1_epi8(0x0f)); }
    static i dp(i acc, i u, i s) { return _mm512_dpbusd_epi32(acc, u, s); }
    static i dp_q8(i acc, i u, i s) { return _mm512_dpbusd_epi32(acc, u, s); }
    static i zero_i() { return _mm512_setzero_si512(); }
    template <int N> static i bits2(i v) { return _mm512_and_si512(_mm512_srli_epi16(v, N), _mm512_set1_epi8(3)); }
    static i table16(__m128i t) { return _mm512_maskz_broadcast_i32x4(0xffff, t); }
    static i lut(i t, i idx) { return _mm512_shuffle_epi8(t, idx); }
    static i add32(i a, i b) { return _mm512_add_epi32(a, b); }
    static i sub32(i a, i b) { return _mm512_sub_epi32(a, b); }
    static i madd16(i a, i b) { return _mm512_madd_epi16(a, b); }
    static i sub16(i a, i b) { return _mm512_sub_epi16(a, b); }
    static i neg8(i v) { return _mm512_sub_epi8(_mm512_setzero_si512(), v); }
    static i maddubs(i u, i s) { return _mm512_maddubs_epi16(u, s); }
    static i mullo(i a, i b) { return _mm512_mullo_epi32(a, b); }
    static i band8(i v, int8_t c) { return _mm512_and_si512(v, _mm512_set1_epi8(c)); }
    static i bor(i a, i b) { return _mm512_or_si512(a, b); }
    template <int N> static i shl16(i v) { return _mm512_slli_epi16(v, N); }
    template <int N> static i shr16(i v) { return _mm512_srli_epi16(v, N); }
    template <int N> static i shl32(i v) { return _mm512_maskz_slli_epi32(0xffff, v, N); }
    // int32 lanes (in int16 range) -> both int16 halves of each lane hold the value
    static i pair16(i v) { return _mm512_or_si512(_mm512_and_si512(v, set1(0xffff)), shl32<16>(v)); }
    // lanes of a (low int16) and b (high int16), both in int16 range
    static i pack16(i a, i b) { return _mm512_or_si512(_mm512_and_si512(a, set1(0xffff)), shl32<16>(b)); }
    // 16 signed bytes -> 16 int32 lanes
    static i load_s8(const uint8_t* p) {
        return _mm512_maskz_cvtepi8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    // 16 bytes -> 16 int32 lanes
    static i load_u8(const uint8_t* p) {
        return _mm512_maskz_cvtepu8_epi32(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    // 16 canonical UE4M3 bytes -> UE4M3 / 2 / 128 (byte << 7 read as f16: exact, subnormals included)
    static f load_ue(const uint8_t* p) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
        return _mm512_maskz_cvtph_ps(0xffff, _mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 7));
    }
    // (maskz forms: GCC 12's plain forms start from _mm512_undefined_ps and warn -Wmaybe-uninitialized)
    static f cvt(i v) { return _mm512_maskz_cvtepi32_ps(0xffff, v); }
    static f zero() { return _mm512_setzero_ps(); }
    static f set1f(float v) { return _mm512_set1_ps(v); }
    static f mul(f a, f b) { return _mm512_mul_ps(a, b); }
    static f add(f a, f b) { return _mm512_add_ps(a, b); }
    static f fma(f a, f b, f c) { return _mm512_fmadd_ps(a, b, c); }
    static f fnma(f a, f b, f c) { return _mm512_fnmadd_ps(a, b, c); }
    static f sub(f a, f b) { return _mm512_sub_ps(a, b); }
    static f load_h(const uint16_t* p) {
        return _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    }
    static void store(float* y, f v) { _mm512_storeu_ps(y, v); }
    // 16 E8M0 bytes -> 2^(e - 128) (e8m0_to_fp32_half: e >= 2 the bits (e - 1) << 23, e = 0, 1 the subnormals)
    static f e8m0_half(const uint8_t* p) {
        const i e = load_u8(p);
        const __mmask16 normal = _mm512_cmpgt_epi32_mask(e, _mm512_set1_epi32(1));
        const i sub = _mm512_maskz_sllv_epi32(0xffff, _mm512_set1_epi32(0x00200000), e);
        const i bits = _mm512_mask_slli_epi32(sub, normal, _mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        return _mm512_castsi512_ps(bits);
    }
};
#else
// two passes of 8 lanes (rows 0-7, then 8-15)
struct V {
    using i = __m256i;
    using f = __m256;
    static constexpr int lanes = 8, passes = 2;
    static i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
    static i set1(int32_t v) { return _mm256_set1_epi32(v); }
    static i low4(i v) { return _mm256_and_si256(v, _mm256_set1_epi8(0x0f)); }
    static i high4(i v) { return _mm256_and_si256(_mm256_srli_epi16(v, 4), _mm256_set1_epi8(0x0f)); }
#if defined(__AVX512VNNI__)
    static constexpr bool q8_corrected = true;
    static constexpr bool pairs16 = false;
    static i mul_pairs(i, i) { return _mm256_setzero_si256(); }
    static i add16(i, i) { return _mm256_setzero_si256(); }
    static i widen(i acc, i) { return acc; }
    static i dp(i acc, i u, i s) { return _mm256_dpbusd_epi32(acc, u, s); }
    static i dp_q8(i acc, i u, i s) { return _mm256_dpbusd_epi32(acc, u, s); }
#else
    // Small unsigned weights (4-bit codes, mxfp4's 0..24) times int8: several maddubs pair sums added in int16 (exact
    // while they stay below 2^15: the caller's bound), then one widening madd, instead of a madd per product pair.
    static constexpr bool pairs16 = true;
    static i mul_pairs(i u, i s) { return _mm256_maddubs_epi16(u, s); }
    static i add16(i a, i b) { return _mm256_add_epi16(a, b); }
    static i widen(i acc, i p) { return _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1))); }
    static constexpr bool q8_corrected = false; // maddubs would saturate on q8 + 128: sign trick on the signed values
    // u: 0..15, s: int8: pair sums stay far from int16 saturation
    static i dp(i acc, i u, i s) {
        return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
    }
    // u: q8 + 128; |q8| * (s with q8's sign), exact for q8 in -128..127 and s in -127..127
    static i dp_q8(i acc, i u, i s) {
        const i q = unbias(u);
        return dp(acc, sign(q, q), sign(s, q));
    }
    // q8 + 128 -> q8
    static i unbias(i u) { return _mm256_xor_si256(u, _mm256_set1_epi8(char(0x80))); }
    // v negated where s < 0, zero where s == 0
    static i sign(i v, i s) { return _mm256_sign_epi8(v, s); }
#endif
    static i zero_i() { return _mm256_setzero_si256(); }
    static i sub16(i a, i b) { return _mm256_sub_epi16(a, b); }
    static i neg8(i v) { return _mm256_sub_epi8(_mm256_setzero_si256(), v); }
    template <int N> static i bits2(i v) { return _mm256_and_si256(_mm256_srli_epi16(v, N), _mm256_set1_epi8(3)); }
    static i table16(__m128i t) { return _mm256_broadcastsi128_si256(t); }
    static i lut(i t, i idx) { return _mm256_shuffle_epi8(t, idx); }
    static i add32(i a, i b) { return _mm256_add_epi32(a, b); }
    static i sub32(i a, i b) { return _mm256_sub_epi32(a, b); }
    static i madd16(i a, i b) { return _mm256_madd_epi16(a, b); }
    static i maddubs(i u, i s) { return _mm256_maddubs_epi16(u, s); }
    static i mullo(i a, i b) { return _mm256_mullo_epi32(a, b); }
    static i band8(i v, int8_t c) { return _mm256_and_si256(v, _mm256_set1_epi8(c)); }
    static i bor(i a, i b) { return _mm256_or_si256(a, b); }
    template <int N> static i shl16(i v) { return _mm256_slli_epi16(v, N); }
    template <int N> static i shr16(i v) { return _mm256_srli_epi16(v, N); }
    template <int N> static i shl32(i v) { return _mm256_slli_epi32(v, N); }
    static i pair16(i v) { return _mm256_or_si256(_mm256_and_si256(v, set1(0xffff)), _mm256_slli_epi32(v, 16)); }
    static i pack16(i a, i b) { return _mm256_or_si256(_mm256_and_si256(a, set1(0xffff)), _mm256_slli_epi32(b, 16)); }
    // 8 signed bytes -> 8 int32 lanes
    static i load_s8(const uint8_t* p) {
        return _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    }
    // 8 bytes -> 8 int32 lanes
    static i load_u8(const uint8_t* p) {
        return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    }
    // 8 canonical UE4M3 bytes -> UE4M3 / 2 / 128 (byte << 7 read as f16: exact, subnormals included)
    static f load_ue(const uint8_t* p) {
        const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
        return _mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(b), 7));
    }
    static f cvt(i v) { return _mm256_cvtepi32_ps(v); }
    static f zero() { return _mm256_setzero_ps(); }
    static f set1f(float v) { return _mm256_set1_ps(v); }
    static f mul(f a, f b) { return _mm256_mul_ps(a, b); }
    static f add(f a, f b) { return _mm256_add_ps(a, b); }
    static f fma(f a, f b, f c) { return _mm256_fmadd_ps(a, b, c); }
    static f fnma(f a, f b, f c) { return _mm256_fnmadd_ps(a, b, c); }
    static f sub(f a, f b) { return _mm256_sub_ps(a, b); }
    static f load_h(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static void store(float* y, f v) { _mm256_storeu_ps(y, v); }
    // 8 E8M0 bytes -> 2^(e - 128) (e8m0_to_fp32_half: e >= 2 the bits (e - 1) << 23, e = 0, 1 the subnormals)
    static f e8m0_half(const uint8_t* p) {
        const i e = load_u8(p);
        const i normal = _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1));
        const i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
        const i nrm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
        return _mm256_castsi256_ps(_mm256_blendv_epi8(sub, nrm, normal));
    }
};
#endif

inline float h2f(f16 h) { return _cvtsh_ss(h.bits); }

// Bytes [p, p + N) towards L1. The heavier kernels (nvfp4, tq2_0) ask for the records 4 ahead: with the hardware
// prefetcher alone they waited on DRAM (GEMV 8192 x 8192, 2 threads, 2026-11-22: tq2_0 14-16 -> 28 GB/s, nvfp4
// 22 -> 32 GB/s in one run; the machine is noisy). For q4_0 / q8_0 / awq4 / i2_s it showed no clear gain.
template <size_t N> inline void prefetch(const uint8_t* p) {
    for (size_t c = 0; c < N; c += 64) _mm_prefetch(reinterpret_cast<const char*>(p + c), _MM_HINT_T0);
}

// Part p of P of the REC-byte record at `next` towards L1: the K formats' decode kernels spread the next record's
// prefetch over their loop (Qwen3-0.6B-shaped q6_K tg64, 2 threads, AVX2: the whole record at once 27.9 t/s, spread
// 32.3, none ~-35% in the GEMV)
template <size_t REC, int P> inline void prefetch_part(const uint8_t* next, int p) {
    constexpr int lines = int((REC + 63) / 64), per = (lines + P - 1) / P;
    for (int l = p * per; l < std::min(lines, (p + 1) * per); l++)
        _mm_prefetch(reinterpret_cast<const char*>(next + 64 * l), _MM_HINT_T0);
}

// hsum_float_8 over 8 per-lane accumulators: ((a4 + a0) + (a6 + a2)) + ((a5 + a1) + (a7 + a3))
inline V::f fold8(const V::f* a) {
    const V::f r0 = V::add(a[4], a[0]), r1 = V::add(a[5], a[1]), r2 = V::add(a[6], a[2]), r3 = V::add(a[7], a[3]);
    return V::add(V::add(r0, r2), V::add(r1, r3));
}

// Decode (one activation row): both 8-lane halves of a record in one sweep over the blocks, the records asked for 4
// ahead (awq4: 2). Two sweeps reread the group from cache while DRAM idles. GEMV 8192 x 8192, 2 threads, this VM
// (AVX2, 2026-11-27, medians of 5-6), GB/s: q4_0 13.6 -> 20.7, q4_1 12.3 -> 17.5, q8_0 14.0 -> 18.5, nvfp4 12.9 ->
// 15.9, awq4 13.5 -> 16.4, tq2_0 11.6 -> 16.2, i2_s 12.2 -> 16.3 (the VM streams 16-18 without prefetching). The
// blockwise kernels (one accumulator per row and activation row) do it whenever NA == 1; the others (up to 8 a row:
// both halves' spill) only as their decode form (SWEEP, chunked's KD), so prefill's activation rows one at a time
// keep the two-sweep form.
template <int NA> constexpr int decode_sweep = NA == 1 ? V::passes : 1;

// Every kernel below: the record's halves (V::passes of V::lanes rows) taken P at a time (P = V::passes: both in one
// sweep over the n records, the decode form; 1: a sweep a half), with an accumulator A a half, zeroed before its sweep;
// record(r) once a record (its prefetch), then half(r, h, acc) for each half h of the sweep, and done(h, acc) after it.
template <int P, class A, class Rec, class Half, class Done>
inline void sweep(int64_t n, Rec&& record, Half&& half, Done&& done) {
    for (int h0 = 0; h0 < V::passes; h0 += P) {
        A acc[P]{};
        for (int64_t r = 0; r < n; r++) {
            record(r);
            for (int hh = 0; hh < P; hh++) half(r, h0 + hh, acc[hh]);
        }
        for (int hh = 0; hh < P; hh++) done(h0 + hh, acc[hh]);
    }
}

// The blockwise kernels' two formats, as policies of `blockwise` below: a record's 4-bit codes as the unsigned bytes
// the dot takes, the record's 8 weight scales of half h, and how many int16 pair sums can be added before one widening
// (the bound: 8 pair sums of <= 2 x 15 x 128 = 3840 for q4_0, 4 of <= 2 x 24 x 128 = 6144 for mxfp4, each < 2^15).
// q4_0: the nibbles as they are (the block's dot starts from -8 x its activation sum); scales f16.
struct q4_0_codes {
    static constexpr bool one_widening = true;
    V::i codes(V::i nibbles) const { return nibbles; }
    static V::f scales(const uint8_t* rec, int h) {
        return V::load_h(reinterpret_cast<const uint16_t*>(rec + 256) + h * 8);
    }
};
// mxfp4 (llama.cpp's mxfp4_8x8 order): a code decodes to its doubled E2M1 value + 12 (0..24, unsigned; the block's dot
// starts from -12 x its activation sum); scales E8M0, read at half value (2^(e - 128)).
struct mxfp4_codes {
    static constexpr bool one_widening = false;
    V::i tab = V::table16(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    V::i codes(V::i nibbles) const { return V::lut(tab, nibbles); }
    static V::f scales(const uint8_t* rec, int h) { return V::e8m0_half(rec + 256 + h * V::lanes); }
};

// IQ4 levels (iq4_nl.h's table, -127..113) against int8 activations: each 4-bit index looked up twice, into (a, b) =
// (|level|, level) without VNNI (maddubs of |level| x the activation with the level's sign: pair sums <= 2 x 127 x
// 127, exact) or (the level's positive part, its negative part) with VNNI (dpbusd of each, the second against the
// negated activation word). Either way the integers are exact, so every order's sums are the row kernels'.
struct iq4_levels {
#if defined(__AVX512VNNI__)
    V::i ta = V::table16(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 13, 25, 38, 53, 69, 89, 113));
    V::i tb = V::table16(_mm_setr_epi8(127, 104, 83, 65, 49, 35, 22, 10, 0, 0, 0, 0, 0, 0, 0, 0));
#else
    V::i ta = V::table16(_mm_setr_epi8(127, 104, 83, 65, 49, 35, 22, 10, 1, 13, 25, 38, 53, 69, 89, 113));
    V::i tb = V::table16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(iq4::levels)));
#endif
    void decode(V::i idx, V::i& a, V::i& b) const { a = V::lut(ta, idx), b = V::lut(tb, idx); }
    // the word's products as int16 pair sums
    static V::i pairs(V::i a, V::i b, V::i aw) {
#if defined(__AVX512VNNI__)
        return V::sub16(V::maddubs(a, aw), V::maddubs(b, aw));
#else
        return V::maddubs(a, V::sign(aw, b));
#endif
    }
    // acc + the word's products summed in each int32 lane
    static V::i dot(V::i acc, V::i a, V::i b, V::i aw) {
#if defined(__AVX512VNNI__)
        return V::dp(V::dp(acc, a, aw), b, V::neg8(aw));
#else
        return V::widen(acc, pairs(a, b, aw));
#endif
    }
};

// q4_0 / mxfp4 summed blockwise (records of 256 code bytes + 32 scale bytes): acc = fma(float(block dot), d_w * d_a,
// acc); s holds each block's offset (-8 or -12 x its activation sum); NA == 1 in one sweep (decode_sweep)
template <class C, int NA>
void blockwise(const uint8_t* w, int64_t nb, const uint8_t* a, size_t as, const int32_t* s, size_t ss, float* y,
               size_t ys) {
    const C c{};
    using A = V::f[NA];
    const auto record = [&](int64_t b) {
        if constexpr (NA == 1) prefetch<256 + 32>(w + size_t(b + 4) * (256 + 32));
    };
    const auto half = [&](int64_t b, int h, A& acc) {
        const uint8_t* rec = w + size_t(b) * (256 + 32);
        V::i lo[4], hi[4];
        for (int v = 0; v < 4; v++) {
            const V::i x = V::load(rec + h * 32 + 64 * v);
            lo[v] = c.codes(V::low4(x));
            hi[v] = c.codes(V::high4(x));
        }
        const V::f dw = C::scales(rec, h);
        for (int j = 0; j < NA; j++) {
            const auto& ab = reinterpret_cast<const block_q8_0*>(a + j * as)[b];
            V::i isum = V::set1(s[j * ss + b]);
            if constexpr (V::pairs16) {
                V::i pl = V::mul_pairs(lo[0], V::set1(word(ab.qs)));
                V::i ph = V::mul_pairs(hi[0], V::set1(word(ab.qs + 16)));
                for (int v = 1; v < 4; v++) {
                    pl = V::add16(pl, V::mul_pairs(lo[v], V::set1(word(ab.qs + 4 * v))));
                    ph = V::add16(ph, V::mul_pairs(hi[v], V::set1(word(ab.qs + 16 + 4 * v))));
                }
                if constexpr (C::one_widening)
                    isum = V::widen(isum, V::add16(pl, ph));
                else
                    isum = V::widen(V::widen(isum, pl), ph);
            } else {
                for (int v = 0; v < 4; v++) {
                    isum = V::dp(isum, lo[v], V::set1(word(ab.qs + 4 * v)));
                    isum = V::dp(isum, hi[v], V::set1(word(ab.qs + 16 + 4 * v)));
                }
            }
            acc[j] = V::fma(V::cvt(isum), V::mul(dw, V::set1f(h2f(ab.d))), acc[j]);
        }
    };
    sweep<decode_sweep<NA>, A>(nb, record, half, [&](int h, const A& acc) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, acc[j]);
    });
}

// iq4_nl in llama.cpp's iq4_nl_8x8 order (q4_0's record, levels through iq4_levels): acc = fma(float(block dot),
// d_w * d_a, acc). A word pair's levels at a time, dotted with every activation row before the next (the integer
// sums of the NA rows live, not the block's 16 decoded vectors: 8-lane registers are too few for those)
template <int NA>
void iq4nl_blockwise(const uint8_t* w, int64_t nb, const uint8_t* a, size_t as, const int32_t*, size_t, float* y,
                     size_t ys) {
    const iq4_levels lv;
    using A = V::f[NA];
    const auto record = [&](int64_t b) {
        if constexpr (NA == 1) prefetch<256 + 32>(w + size_t(b + 4) * (256 + 32));
    };
    const auto half = [&](int64_t b, int h, A& acc) {
        const uint8_t* rec = w + size_t(b) * (256 + 32);
        V::i isum[NA];
        for (int j = 0; j < NA; j++) isum[j] = V::zero_i();
        for (int v = 0; v < 4; v++) {
            const V::i x = V::load(rec + h * 32 + 64 * v);
            V::i la, lb, ha, hb;
            lv.decode(V::low4(x), la, lb), lv.decode(V::high4(x), ha, hb);
            for (int j = 0; j < NA; j++) {
                const int8_t* q = reinterpret_cast<const block_q8_0*>(a + j * as)[b].qs;
                isum[j] = iq4_levels::dot(isum[j], la, lb, V::set1(word(q + 4 * v)));
                isum[j] = iq4_levels::dot(isum[j], ha, hb, V::set1(word(q + 16 + 4 * v)));
            }
        }
        const V::f dw = q4_0_codes::scales(rec, h);
        for (int j = 0; j < NA; j++)
            acc[j] = V::fma(V::cvt(isum[j]),
                            V::mul(dw, V::set1f(h2f(reinterpret_cast<const block_q8_0*>(a + j * as)[b].d))), acc[j]);
    };
    sweep<decode_sweep<NA>, A>(nb, record, half, [&](int h, const A& acc) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, acc[j]);
    });
}

// bit B of each qh byte moved to bit 4 (q5_0, q5_1, q5_K's fifth bit); epi16 shifts bring in a neighbour byte's bits
// only below bit 4 (left shifts of <= 4) or above it (right shifts of <= 3), which the mask drops
template <int B> inline V::i bit4(V::i qh) {
    if constexpr (B <= 4)
        return V::band8(V::shl16<4 - B>(qh), 0x10);
    else
        return V::band8(V::shr16<B - 4>(qh), 0x10);
}

// q4_0 / q4_1 (Q5: q5_0 / q5_1, their fifth bits in the vector after the nibbles) in ggml_vec_dot's order: 8 float
// lanes per row (one per word group), folded at the end; SWEEP: the decode form (one sweep, decode_sweep's comment).
// q4_0 / q5_0 codes are unsigned (nibble, 5-bit level): each group's dot starts from -8 / -16 x its activation sum.
template <int NA, bool Q41, bool SWEEP = false, bool Q5 = false>
void q4_plain(const uint8_t* w, int64_t nb, const uint8_t* a, size_t as, const int32_t* s, size_t ss, float* y,
              size_t ys) {
    using ablock = std::conditional_t<Q41, block_q8_1, block_q8_0>;
    constexpr size_t SC = Q5 ? 256 + 64 : 256; // the scales (f16 d, then q4_1 / q5_1's f16 m)
    constexpr size_t REC = SC + (Q41 ? 64 : 32);
    struct A {
        V::f acc[NA][8], summs[NA];
    };
    const auto record = [&](int64_t b) {
        if constexpr (SWEEP) prefetch<REC>(w + size_t(b + 4) * REC);
    };
    const auto half = [&](int64_t b, int h, A& t) {
        const uint8_t* blk = w + size_t(b) * REC;
        const uint8_t* q = blk + h * 32;
        const uint16_t* bs = reinterpret_cast<const uint16_t*>(blk + SC) + h * 8;
        const V::f dw = V::load_h(bs);
        V::f d[NA];
        for (int j = 0; j < NA; j++) {
            const auto& ab = reinterpret_cast<const ablock*>(a + j * as)[b];
            d[j] = V::mul(dw, V::set1f(h2f(ab.d)));
            if constexpr (Q41) t.summs[j] = V::fma(V::load_h(bs + 16), V::set1f(h2f(ab.s)), t.summs[j]);
        }
        V::i qh = V::zero_i();
        if constexpr (Q5) qh = V::load(q + 256);
        const auto word_pair = [&](int v, V::i& lo, V::i& hi) { // groups v and 4 + v
            const V::i x = V::load(q + 64 * v);
            lo = V::low4(x), hi = V::high4(x);
            if constexpr (Q5) {
                switch (v) { // bit g of byte j: the fifth bit of element 4g + j
                case 0: lo = V::bor(lo, bit4<0>(qh)), hi = V::bor(hi, bit4<4>(qh)); break;
                case 1: lo = V::bor(lo, bit4<1>(qh)), hi = V::bor(hi, bit4<5>(qh)); break;
                case 2: lo = V::bor(lo, bit4<2>(qh)), hi = V::bor(hi, bit4<6>(qh)); break;
                default: lo = V::bor(lo, bit4<3>(qh)), hi = V::bor(hi, bit4<7>(qh)); break;
                }
            }
        };
        for (int v = 0; v < 4; v++) {
            V::i lo, hi;
            word_pair(v, lo, hi);
            for (int j = 0; j < NA; j++) {
                const auto& ab = reinterpret_cast<const ablock*>(a + j * as)[b];
                const int32_t c_lo = Q41 ? 0 : s[j * ss + b * 8 + v];
                const int32_t c_hi = Q41 ? 0 : s[j * ss + b * 8 + 4 + v];
                const V::i il = V::dp(V::set1(c_lo), lo, V::set1(word(ab.qs + 4 * v)));
                const V::i ih = V::dp(V::set1(c_hi), hi, V::set1(word(ab.qs + 16 + 4 * v)));
                t.acc[j][v] = V::fma(d[j], V::cvt(il), t.acc[j][v]);
                t.acc[j][4 + v] = V::fma(d[j], V::cvt(ih), t.acc[j][4 + v]);
            }
        }
    };
    sweep<SWEEP ? V::passes : 1, A>(nb, record, half, [&](int h, const A& t) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, V::add(fold8(t.acc[j]), t.summs[j]));
    });
}

// q8_0 in ggml_vec_dot's order; SWEEP: the decode form
template <int NA, bool SWEEP = false>
void q8_0_plain(const uint8_t* w, int64_t nb, const uint8_t* a, size_t as, const int32_t* s, size_t ss, float* y,
                size_t ys) {
    using A = V::f[NA][8];
    const auto record = [&](int64_t b) {
        if constexpr (SWEEP) prefetch<512 + 32>(w + size_t(b + 4) * (512 + 32));
    };
    const auto half = [&](int64_t b, int h, A& acc) {
        const uint8_t* blk = w + size_t(b) * (512 + 32);
        const uint8_t* q = blk + h * 32;
        const V::f dw = V::load_h(reinterpret_cast<const uint16_t*>(blk + 512) + h * 8);
        V::f d[NA];
        for (int j = 0; j < NA; j++)
            d[j] = V::mul(dw, V::set1f(h2f(reinterpret_cast<const block_q8_0*>(a + j * as)[b].d)));
        for (int g = 0; g < 8; g++) {
            const V::i x = V::load(q + 64 * g);
            for (int j = 0; j < NA; j++) {
                const auto& ab = reinterpret_cast<const block_q8_0*>(a + j * as)[b];
                const V::i init = V::set1(V::q8_corrected ? s[j * ss + b * 8 + g] : 0);
                acc[j][g] = V::fma(d[j], V::cvt(V::dp_q8(init, x, V::set1(word(ab.qs + 4 * g)))), acc[j][g]);
            }
        }
    };
    sweep<SWEEP ? V::passes : 1, A>(nb, record, half, [&](int h, const A& acc) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, fold8(acc[j]));
    });
}

#if !defined(__AVX512VNNI__)
// q8_0 prompts on 8-lane vectors without VNNI: q8_0_plain's lanes and order (each lane's fma chain over the blocks is
// the same), rearranged so that less than the dot itself is done per activation row. NA activation rows at once; a
// stretch of KB blocks is swept 4 times, 2 word groups a sweep (2 x NA accumulators live, the rest in memory), the
// group's signed values and magnitudes formed once for the NA rows, and the scale products d_w * d_a formed once a
// stretch and read by every sweep. It stays near the same floor as tinyBLAS's AVX2 q8_0 kernel (the same lanes): 5
// vector ops (sign, maddubs, madd, cvt, fma) per 8 lanes x 4 bytes. AVX2 build on the AVX-512 VM (2026-11-28), one
// thread, GFLOP/s: 2304 x 768 x 512 in mul_mat's tiles 126 -> 132 (tinyBLAS's loop 101); pp512 on 2 threads, rounds
// alternated: Phi-3-shaped q8_0 +0-8%, SmolLM2 q8_0 +5-8% (the VM is noisy).
template <int NA>
void q8_0_rows(const uint8_t* w, int64_t nb, const uint8_t* a, size_t as, const int32_t*, size_t, float* y, size_t ys) {
    static_assert(V::passes == 2 && V::pairs16, "8-lane maddubs kernel");
    constexpr int KB = 32; // blocks a stretch: the products take KB x NA x 32 bytes (4 KiB)
    alignas(32) float d[KB][NA][V::lanes];
    for (int h = 0; h < V::passes; h++) {
        V::f acc[NA][8];
        for (int j = 0; j < NA; j++)
            for (int g = 0; g < 8; g++) acc[j][g] = V::zero();
        for (int64_t b0 = 0; b0 < nb; b0 += KB) {
            const int64_t kb = std::min<int64_t>(KB, nb - b0);
            for (int64_t b = 0; b < kb; b++) {
                const V::f dw =
                    V::load_h(reinterpret_cast<const uint16_t*>(w + size_t(b0 + b) * (512 + 32) + 512) + h * 8);
                for (int j = 0; j < NA; j++) {
                    const float da = h2f(reinterpret_cast<const block_q8_0*>(a + j * as)[b0 + b].d);
                    _mm256_store_ps(d[b][j], V::mul(dw, V::set1f(da)));
                }
            }
            for (int g0 = 0; g0 < 8; g0 += 2) {
                V::f r[NA][2];
                for (int j = 0; j < NA; j++) r[j][0] = acc[j][g0], r[j][1] = acc[j][g0 + 1];
                for (int64_t b = 0; b < kb; b++) {
                    const uint8_t* q8 = w + size_t(b0 + b) * (512 + 32) + h * 32;
                    for (int gg = 0; gg < 2; gg++) {
                        const V::i q = V::unbias(V::load(q8 + 64 * (g0 + gg))), mag = V::sign(q, q);
                        for (int j = 0; j < NA; j++) {
                            const auto& ab = reinterpret_cast<const block_q8_0*>(a + j * as)[b0 + b];
                            const V::i p = V::mul_pairs(mag, V::sign(V::set1(word(ab.qs + 4 * (g0 + gg))), q));
                            r[j][gg] = V::fma(_mm256_load_ps(d[b][j]), V::cvt(V::widen(V::zero_i(), p)), r[j][gg]);
                        }
                    }
                }
                for (int j = 0; j < NA; j++) acc[j][g0] = r[j][0], acc[j][g0 + 1] = r[j][1];
            }
        }
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, fold8(acc[j]));
    }
}
#endif

// nvfp4 in ggml's AVX2 order: per row 8 lanes, lane v: fma(UE4M3(d_{v/4}) * d_a0, dot of group v of q8 block 2b),
// then fma(UE4M3(d_{2+v/4}) * d_a1, group v of block 2b + 1). Codes decode to E2M1 value + 12 (0..24, unsigned) and
// the dot starts from -12 x the group's activation sum.
template <int NA, bool SWEEP = false>
void nvfp4_plain(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t* s, size_t ss, float* y,
                 size_t ys) {
    const V::i tab = V::table16(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
    using A = V::f[NA][8];
    const auto record = [&](int64_t b) { prefetch<512 + 64>(w + size_t(b + 4) * (512 + 64)); };
    const auto half = [&](int64_t b, int h, A& acc) {
        const uint8_t* blk = w + size_t(b) * (512 + 64);
        const uint8_t* q = blk + h * 32;
        const uint8_t* sc = blk + 512 + h * V::lanes;
        const V::f w0 = V::load_ue(sc), w1 = V::load_ue(sc + 16);
        const V::f w2 = V::load_ue(sc + 32), w3 = V::load_ue(sc + 48);
        V::f sa[NA][4];
        for (int j = 0; j < NA; j++) {
            const auto* ab = reinterpret_cast<const block_q8_0*>(a + j * as) + 2 * b;
            // (UE4M3 / 2 / 128) * (128 d_a): the exact product UE4M3 / 2 * d_a, rounded once, as ggml's
            const V::f f0 = V::set1f(h2f(ab[0].d) * 128.0f), f1 = V::set1f(h2f(ab[1].d) * 128.0f);
            sa[j][0] = V::mul(w0, f0), sa[j][1] = V::mul(w1, f0);
            sa[j][2] = V::mul(w2, f1), sa[j][3] = V::mul(w3, f1);
        }
        for (int v = 0; v < 8; v++) {
            const V::i x = V::load(q + 64 * v);
            const V::i lo = V::lut(tab, V::low4(x)), hi = V::lut(tab, V::high4(x));
            for (int j = 0; j < NA; j++) {
                const auto* ab = reinterpret_cast<const block_q8_0*>(a + j * as) + 2 * b;
                const int32_t* c = s + j * ss + 16 * b;
                const V::i i0 = V::dp(V::set1(c[v]), lo, V::set1(word(ab[0].qs + 4 * v)));
                const V::i i1 = V::dp(V::set1(c[8 + v]), hi, V::set1(word(ab[1].qs + 4 * v)));
                acc[j][v] = V::fma(sa[j][v / 4], V::cvt(i0), acc[j][v]);
                acc[j][v] = V::fma(sa[j][2 + v / 4], V::cvt(i1), acc[j][v]);
            }
        }
    };
    sweep<SWEEP ? V::passes : 1, A>(nb32 / 2, record, half, [&](int h, const A& acc) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, fold8(acc[j]));
    });
}

// awq4 (group G): per group, per q8_1 block, I = sum q q8 - z sum q8 (exact; the correction z * (-sum) by one madd),
// acc_g = fma(float(I), d8, acc_g), then acc = fma(s, acc_g, acc)
template <int G, int NA, bool SWEEP = false>
void awq4_k(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t* s, size_t ss, float* y,
            size_t ys) {
    constexpr int QB = G / 32;
    constexpr size_t rec = G * 8 + 64;
    using A = V::f[NA];
    const auto record = [&](int64_t g) {
        if constexpr (SWEEP) prefetch<rec>(w + size_t(g + 2) * rec);
    };
    const auto half = [&](int64_t g, int h, A& acc) {
        const uint8_t* blk = w + size_t(g) * rec;
        const V::f sw = V::load_h(reinterpret_cast<const uint16_t*>(blk + G * 8) + h * V::lanes);
        const V::i z = V::load_u8(blk + G * 8 + 32 + h * V::lanes); // int32 lanes: (int16 z, 0)
        V::f accg[NA];
        for (int j = 0; j < NA; j++) accg[j] = V::zero();
        for (int qb = 0; qb < QB; qb++) {
            const uint8_t* q = blk + qb * 256 + h * 32;
            V::i lo[4], hi[4];
            for (int v = 0; v < 4; v++) {
                const V::i x = V::load(q + 64 * v);
                lo[v] = V::low4(x);
                hi[v] = V::high4(x);
            }
            for (int j = 0; j < NA; j++) {
                const auto& ab = reinterpret_cast<const block_q8_1*>(a + j * as)[g * QB + qb];
                // s: -sum of the block's q8 (|sum| <= 4096: its low int16 is the value)
                V::i i0 = V::madd16(z, V::set1(s[j * ss + g * QB + qb])), i1 = V::zero_i();
                for (int v = 0; v < 4; v++) {
                    i0 = V::dp(i0, lo[v], V::set1(word(ab.qs + 4 * v)));
                    i1 = V::dp(i1, hi[v], V::set1(word(ab.qs + 16 + 4 * v)));
                }
                accg[j] = V::fma(V::cvt(V::add32(i0, i1)), V::set1f(h2f(ab.d)), accg[j]);
            }
        }
        for (int j = 0; j < NA; j++) acc[j] = V::fma(sw, accg[j], acc[j]);
    };
    sweep<SWEEP ? V::passes : 1, A>(nb32 / QB, record, half, [&](int h, const A& acc) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, acc[j]);
    });
}

// tq2_0 in ggml's AVX2 order: lane l of a block = sum over h, n of the codes of group (h, n, l) times the activations,
// minus sum q[32l .. 32l + 31] (from act_sums), acc_l = fma(float, d_a * d_w, acc_l), folded as hsum_float_8
template <int NA, bool SWEEP = false>
void tq2_0_plain(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t* s, size_t ss, float* y,
                 size_t ys) {
    using A = V::f[NA][8];
    const auto record = [&](int64_t b) { prefetch<1024 + 64>(w + size_t(b + 4) * (1024 + 64)); };
    const auto half = [&](int64_t b, int h, A& acc) {
        const uint8_t* blk = w + size_t(b) * (1024 + 64);
        const uint8_t* q = blk + h * 32;
        const V::f dw = V::load_h(reinterpret_cast<const uint16_t*>(blk + 1024) + h * V::lanes);
        V::f d[NA];
        for (int j = 0; j < NA; j++) d[j] = V::mul(V::set1f(reinterpret_cast<const block_q8_k*>(a + j * as)[b].d), dw);
        for (int l = 0; l < 8; l++) {
            const V::i x0 = V::load(q + 128 * l), x1 = V::load(q + 128 * l + 64);
            const V::i c[8] = {V::bits2<0>(x0), V::bits2<2>(x0), V::bits2<4>(x0), V::bits2<6>(x0),
                               V::bits2<0>(x1), V::bits2<2>(x1), V::bits2<4>(x1), V::bits2<6>(x1)};
            for (int j = 0; j < NA; j++) {
                const int8_t* qa = reinterpret_cast<const block_q8_k*>(a + j * as)[b].qs + 4 * l;
                V::i isum;
                if constexpr (V::pairs16) { // a pair sum <= 2 x 3 x 128 = 768, eight of them < 2^15
                    V::i p = V::mul_pairs(c[0], V::set1(word(qa)));
                    p = V::add16(p, V::mul_pairs(c[4], V::set1(word(qa + 128))));
                    for (int n = 1; n < 4; n++) {
                        p = V::add16(p, V::mul_pairs(c[n], V::set1(word(qa + 32 * n))));
                        p = V::add16(p, V::mul_pairs(c[4 + n], V::set1(word(qa + 128 + 32 * n))));
                    }
                    isum = V::widen(V::set1(s[j * ss + 8 * b + l]), p);
                } else {
                    V::i i0 = V::set1(s[j * ss + 8 * b + l]), i1 = V::zero_i();
                    for (int n = 0; n < 4; n++) {
                        i0 = V::dp(i0, c[n], V::set1(word(qa + 32 * n)));
                        i1 = V::dp(i1, c[4 + n], V::set1(word(qa + 128 + 32 * n)));
                    }
                    isum = V::add32(i0, i1);
                }
                acc[j][l] = V::fma(V::cvt(isum), d[j], acc[j][l]);
            }
        }
    };
    sweep<SWEEP ? V::passes : 1, A>(nb32 / 8, record, half, [&](int h, const A& acc) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, fold8(acc[j]));
    });
}

// i2_s: the exact integer sum over the row of code * q (four independent chains), minus the row's sum of q, times d_a
template <int NA, bool SWEEP = false>
void i2_s_k(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t*, size_t, float* y,
            size_t ys) {
    const int64_t nb = nb32 / 4;
    using A = V::i[NA][4];
    const auto record = [&](int64_t b) {
        if constexpr (SWEEP) prefetch<512>(w + size_t(b + 4) * 512);
    };
    const auto half = [&](int64_t b, int h, A& acc) {
        const uint8_t* q = w + size_t(b) * 512 + h * 32;
        // AVX2: the block's products summed in int16 (32 pair sums of <= 2 x 3 x 128 = 768: < 2^15), one widening
        V::i p[NA];
        for (int j = 0; j < NA; j++) p[j] = V::zero_i();
        for (int l = 0; l < 8; l++) {
            const V::i x = V::load(q + 64 * l);
            const V::i c[4] = {V::bits2<6>(x), V::bits2<4>(x), V::bits2<2>(x), V::bits2<0>(x)};
            for (int j = 0; j < NA; j++) {
                const int8_t* qa = reinterpret_cast<const block_i8_s*>(a + j * as)[b].qs + 4 * l;
                for (int n = 0; n < 4; n++) {
                    if constexpr (V::pairs16)
                        p[j] = V::add16(p[j], V::mul_pairs(c[n], V::set1(word(qa + 32 * n))));
                    else
                        acc[j][n] = V::dp(acc[j][n], c[n], V::set1(word(qa + 32 * n)));
                }
            }
        }
        if constexpr (V::pairs16)
            for (int j = 0; j < NA; j++) acc[j][int(b % 4)] = V::widen(acc[j][int(b % 4)], p[j]);
    };
    sweep<SWEEP ? V::passes : 1, A>(nb, record, half, [&](int h, const A& acc) {
        for (int j = 0; j < NA; j++) {
            const auto* ab = reinterpret_cast<const block_i8_s*>(a + j * as);
            int32_t total = 0; // the activation row's sum of q
            for (int64_t b = 0; b < nb; b++) total += ab[b].sum;
            const V::i* c = acc[j];
            const V::i sum = V::sub32(V::add32(V::add32(c[0], c[1]), V::add32(c[2], c[3])), V::set1(total));
            V::store(y + j * ys + h * V::lanes, V::mul(V::cvt(sum), V::set1f(ab[0].d)));
        }
    });
}

// ---- K formats: 256-element super-blocks against q8_K (layouts: repack.h) ----
// Word slot w of a record = elements 4w..4w+3 of each row; nibble vector i (at 64 i) holds slot 2i in its low nibbles
// and 2i + 1 in its high ones. The integer sums are exact in any order; each kernel keeps the float steps of the row
// kernel it stands in for (k_quants_avx2.cpp). maddubs pair sums are added in int16 only while they stay below 2^15.
struct q4k_rec {
    static constexpr size_t sc = 2048, mn = 2176, d = 2304, dmin = 2336, bytes = 2368;
};
struct q5k_rec {
    static constexpr size_t qh = 2048, sc = 2560, mn = 2688, d = 2816, dmin = 2848, bytes = 2880;
};
struct q6k_rec {
    static constexpr size_t qh = 2048, sc = 3072, d = 3328, bytes = 3392; // d padded: records on cache lines
};
struct q3k_rec {
    static constexpr size_t sc = 2048, d = 2304, bytes = 2368; // d padded likewise
};
struct q2k_rec {
    static constexpr size_t sc = 1024, mn = 1280, d = 1536, dmin = 1568, bytes = 1600;
};

// activation row j's q8_K super-block b
inline const block_q8_k& act_k(const uint8_t* a, size_t as, int j, int64_t b) {
    return reinterpret_cast<const block_q8_k*>(a + size_t(j) * as)[b];
}
// q8_K activation word: 4 bytes from element e of a super-block
inline V::i aword(const block_q8_k& a, int e) { return V::set1(word(a.qs + e)); }
// two int16 bsums (sub-blocks 2c, 2c + 1) as one word
inline V::i bsum_pair(const block_q8_k& a, int c) {
    int32_t v;
    std::memcpy(&v, a.bsums + 2 * c, 4);
    return V::set1(v);
}

// The 8 words of 32-element sub-block c (q4_K: nibbles; q5_K: plus the fifth bit), of half h
template <bool Q5> struct k4_words {
    V::i x[8];
    k4_words(const uint8_t* rec, int h, int c) {
        const uint8_t* q = rec + h * 32;
        V::i qh = V::zero_i();
        if constexpr (Q5) qh = V::load(q + q5k_rec::qh + 64 * c);
        for (int i = 0; i < 4; i++) {
            const V::i l = V::load(q + 64 * (4 * c + i));
            x[2 * i] = V::low4(l);
            x[2 * i + 1] = V::high4(l);
        }
        if constexpr (Q5) {
            x[0] = V::bor(x[0], bit4<0>(qh)), x[1] = V::bor(x[1], bit4<1>(qh));
            x[2] = V::bor(x[2], bit4<2>(qh)), x[3] = V::bor(x[3], bit4<3>(qh));
            x[4] = V::bor(x[4], bit4<4>(qh)), x[5] = V::bor(x[5], bit4<5>(qh));
            x[6] = V::bor(x[6], bit4<6>(qh)), x[7] = V::bor(x[7], bit4<7>(qh));
        }
    }
};

// The 4 words of q6_K's 16-element sub-block s (levels 0..63), of half h
struct q6_words {
    V::i x[4];
    q6_words(const uint8_t* rec, int h, int s) {
        const uint8_t* q = rec + h * 32;
        const V::i l0 = V::load(q + 64 * (2 * s)), l1 = V::load(q + 64 * (2 * s + 1));
        const V::i qh = V::load(q + q6k_rec::qh + 64 * s);
        x[0] = V::bor(V::low4(l0), V::band8(V::shl16<4>(qh), 0x30));
        x[1] = V::bor(V::high4(l0), V::band8(V::shl16<2>(qh), 0x30));
        x[2] = V::bor(V::low4(l1), V::band8(qh, 0x30));
        x[3] = V::bor(V::high4(l1), V::band8(V::shr16<2>(qh), 0x30));
    }
};

// The 4 words of q3_K's 16-element sub-block s (levels 0..7: the nibbles alone), of half h
struct q3_words {
    V::i x[4];
    q3_words(const uint8_t* rec, int h, int s) {
        const uint8_t* q = rec + h * 32;
        const V::i l0 = V::load(q + 64 * (2 * s)), l1 = V::load(q + 64 * (2 * s + 1));
        x[0] = V::low4(l0), x[1] = V::high4(l0), x[2] = V::low4(l1), x[3] = V::high4(l1);
    }
};

// The kinds k_lanes and k_tiled serve: q5_K (32-element sub-blocks with a scale and a min), and the symmetric ones
// with 16-element sub-blocks of int8 scales and one d, whose levels are stored unsigned (q6_K 0..63, q3_K 0..7) and
// whose offset (32, 4 = 2^shift) comes off as 2^shift x (sc bsum); ggml's q3_K vec_dot takes it off each pair sum
// (word_bias: its lanes hold other integers than q6_K's way would give them)
struct q5k_kind {
    static constexpr bool sym = false, word_bias = false;
    static constexpr size_t bytes = q5k_rec::bytes, d = q5k_rec::d;
};
struct q6k_kind {
    static constexpr bool sym = true;
    static constexpr size_t bytes = q6k_rec::bytes, sc = q6k_rec::sc, d = q6k_rec::d;
    static constexpr int shift = 5;
    static constexpr bool word_bias = false;
    using words = q6_words;
};
struct q3k_kind {
    static constexpr bool sym = true;
    static constexpr size_t bytes = q3k_rec::bytes, sc = q3k_rec::sc, d = q3k_rec::d;
    static constexpr int shift = 2;
    static constexpr bool word_bias = true;
    using words = q3_words;
};

// sum over the 8 words of a 32-element sub-block of sc x (words . activations from element e0), exact: 4-bit levels
// (pair sums <= 2 x 15 x 128) add 8 in int16, 5-bit ones (<= 2 x 31 x 128) 4; VNNI sums the bytes in int32 and
// multiplies once
template <bool Q5> inline V::i k4_scaled(const V::i (&x)[8], const block_q8_k& a, int e0, V::i scp, V::i sc32) {
    if constexpr (V::pairs16) {
        constexpr int R = Q5 ? 4 : 8; // words a widening
        V::i acc = V::zero_i();
        for (int w0 = 0; w0 < 8; w0 += R) {
            V::i p = V::maddubs(x[w0], aword(a, e0 + 4 * w0));
            for (int w = w0 + 1; w < w0 + R; w++) p = V::add16(p, V::maddubs(x[w], aword(a, e0 + 4 * w)));
            acc = V::add32(acc, V::madd16(p, scp));
        }
        return acc;
    } else {
        (void)scp;
        V::i u = V::zero_i();
        for (int w = 0; w < 8; w++) u = V::dp(u, x[w], aword(a, e0 + 4 * w));
        return V::mullo(u, sc32);
    }
}

// q4_K in llama.cpp's repacked (q4_K_8x8) orders. PER64: its gemm's, per 64 elements (sub-block pair p):
// acc = fma(float(S_p), d_w d_a, acc), acc_min = fma(float(M_p), dmin_w d_a, acc_min); else its gemv's, the same per
// super-block; the result acc - acc_min. S: sum of sc x dot, M: sum of m x (the sub-block's activation sum).
template <int NA, bool PER64, bool SWEEP = false>
void q4k_rows8(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t*, size_t, float* y,
               size_t ys) {
    struct A {
        V::f acc[NA], acc_min[NA];
    };
    using R = q4k_rec;
    const auto half = [&](int64_t b, int h, A& t) {
        const uint8_t* rec = w + size_t(b) * R::bytes;
        const V::f dw = V::load_h(reinterpret_cast<const uint16_t*>(rec + R::d) + h * V::lanes);
        const V::f dmw = V::load_h(reinterpret_cast<const uint16_t*>(rec + R::dmin) + h * V::lanes);
        V::f dd[NA], dm[NA];
        for (int j = 0; j < NA; j++) {
            const V::f da = V::set1f(reinterpret_cast<const block_q8_k*>(a + j * as)[b].d);
            dd[j] = V::mul(dw, da), dm[j] = V::mul(dmw, da);
        }
        V::i S[NA], M[NA];
        for (int j = 0; j < NA; j++) S[j] = M[j] = V::zero_i();
        for (int c = 0; c < 8; c++) {
            if (SWEEP && h == 0) prefetch_part<R::bytes, 8>(rec + R::bytes, c);
            const V::i sc = V::load_u8(rec + R::sc + 16 * c + h * V::lanes);
            const V::i scp = V::pair16(sc), mp = V::pair16(V::load_u8(rec + R::mn + 16 * c + h * V::lanes));
            const k4_words<false> q(rec, h, c);
            for (int j = 0; j < NA; j++) {
                const auto& ab = reinterpret_cast<const block_q8_k*>(a + j * as)[b];
                S[j] = V::add32(S[j], k4_scaled<false>(q.x, ab, 32 * c, scp, sc));
                M[j] = V::add32(M[j], V::madd16(mp, bsum_pair(ab, c)));
            }
            if (PER64 && c % 2 == 1)
                for (int j = 0; j < NA; j++) {
                    t.acc[j] = V::fma(V::cvt(S[j]), dd[j], t.acc[j]);
                    t.acc_min[j] = V::fma(V::cvt(M[j]), dm[j], t.acc_min[j]);
                    S[j] = M[j] = V::zero_i();
                }
        }
        if constexpr (!PER64)
            for (int j = 0; j < NA; j++) {
                t.acc[j] = V::fma(V::cvt(S[j]), dd[j], t.acc[j]);
                t.acc_min[j] = V::fma(V::cvt(M[j]), dm[j], t.acc_min[j]);
            }
    };
    sweep<SWEEP ? V::passes : 1, A>(nb32 / 8, [](int64_t) {}, half, [&](int h, const A& t) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, V::sub(t.acc[j], t.acc_min[j]));
    });
}

// q5_K / q6_K / q3_K in ggml_vec_dot's order (fewer than 8 activation rows): per row 8 int32 lanes a super-block,
// lane t the sum over its 32-element chunks c of sc x (the dot of elements 32c + 4t .. + 3) (q6_K / q3_K: minus 32 /
// 4 x (sc bsum) of sub-blocks 2t, 2t + 1), acc_t = fma(d_a d_w, float(lane t), acc_t), folded as hsum_float_8; q5_K
// adds summs = fma(-d_a dmin_w, float(M), summs) after the fold
template <int NA, class KK, bool SWEEP = false>
void k_lanes(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t*, size_t, float* y,
             size_t ys) {
    constexpr bool SYM = KK::sym; // q6_K, q3_K
    constexpr size_t REC = KK::bytes;
    struct A {
        V::f acc[NA][8], summs[NA];
    };
    // lanes 0-3, then 4-7 (4 int32 accumulators a row live at a time: 8 spilled)
    const auto half = [&](int64_t b, int h, A& t) {
        const uint8_t* rec = w + size_t(b) * REC;
        V::i I[NA][8];
        const auto lanes4 = [&]<int l0>() {
            V::i J[NA][4];
            for (int j = 0; j < NA; j++)
                for (int l = 0; l < 4; l++) J[j][l] = V::zero_i();
            if constexpr (SYM) { // lane l0 + f: word f of the even (l0 = 0) or odd sub-blocks
                for (int s = l0 / 4; s < 16; s += 2) {
                    if (SWEEP && h == 0) prefetch_part<REC, 16>(rec + REC, l0 / 4 * 8 + s / 2);
                    const V::i scp = V::pair16(V::load_s8(rec + KK::sc + 16 * s + h * V::lanes));
                    const typename KK::words q(rec, h, s);
                    for (int j = 0; j < NA; j++) {
                        const auto& ab = reinterpret_cast<const block_q8_k*>(a + j * as)[b];
                        for (int f = 0; f < 4; f++) {
                            const V::i aw = aword(ab, 16 * s + 4 * f);
                            V::i p = V::maddubs(q.x[f], aw);
                            if constexpr (KK::word_bias) p = V::sub16(p, V::maddubs(V::set1(0x04040404), aw));
                            J[j][f] = V::add32(J[j][f], V::madd16(p, scp));
                        }
                    }
                }
            } else { // lane l0 + f: word l0 + f of every sub-block
                for (int c = 0; c < 8; c++) {
                    if (SWEEP && h == 0) prefetch_part<REC, 16>(rec + REC, l0 / 4 * 8 + c);
                    const V::i scp = V::pair16(V::load_u8(rec + q5k_rec::sc + 16 * c + h * V::lanes));
                    const uint8_t* q = rec + h * 32;
                    const V::i qh = V::load(q + q5k_rec::qh + 64 * c);
                    const V::i l0v = V::load(q + 64 * (4 * c + l0 / 2)), l1v = V::load(q + 64 * (4 * c + l0 / 2 + 1));
                    V::i x[4];
                    if constexpr (l0 == 0) {
                        x[0] = V::bor(V::low4(l0v), bit4<0>(qh)), x[1] = V::bor(V::high4(l0v), bit4<1>(qh));
                        x[2] = V::bor(V::low4(l1v), bit4<2>(qh)), x[3] = V::bor(V::high4(l1v), bit4<3>(qh));
                    } else {
                        x[0] = V::bor(V::low4(l0v), bit4<4>(qh)), x[1] = V::bor(V::high4(l0v), bit4<5>(qh));
                        x[2] = V::bor(V::low4(l1v), bit4<6>(qh)), x[3] = V::bor(V::high4(l1v), bit4<7>(qh));
                    }
                    for (int j = 0; j < NA; j++) {
                        const auto& ab = reinterpret_cast<const block_q8_k*>(a + j * as)[b];
                        for (int f = 0; f < 4; f++)
                            J[j][f] = V::add32(
                                J[j][f], V::madd16(V::maddubs(x[f], aword(ab, 32 * c + 4 * (l0 + f))), scp));
                    }
                }
            }
            for (int j = 0; j < NA; j++)
                for (int l = 0; l < 4; l++) I[j][l0 + l] = J[j][l];
        };
        lanes4.template operator()<0>();
        lanes4.template operator()<4>();
        if constexpr (SYM) { // lane t: minus 2^shift x (sc bsum) of sub-blocks 2t, 2t + 1 (q3_K: taken off already)
            if constexpr (!KK::word_bias)
                for (int l = 0; l < 8; l++) {
                    const V::i sc01 = V::pack16(V::load_s8(rec + KK::sc + 32 * l + h * V::lanes),
                                                V::load_s8(rec + KK::sc + 32 * l + 16 + h * V::lanes));
                    for (int j = 0; j < NA; j++)
                        I[j][l] = V::sub32(I[j][l],
                                           V::shl32<KK::shift>(V::madd16(sc01, bsum_pair(act_k(a, as, j, b), l))));
                }
        } else {
            V::i M[NA];
            for (int j = 0; j < NA; j++) M[j] = V::zero_i();
            for (int c = 0; c < 8; c++) {
                const V::i mp = V::pair16(V::load_u8(rec + q5k_rec::mn + 16 * c + h * V::lanes));
                for (int j = 0; j < NA; j++)
                    M[j] = V::add32(M[j], V::madd16(mp, bsum_pair(act_k(a, as, j, b), c)));
            }
            const V::f dmw = V::load_h(reinterpret_cast<const uint16_t*>(rec + q5k_rec::dmin) + h * V::lanes);
            for (int j = 0; j < NA; j++) {
                const float da = reinterpret_cast<const block_q8_k*>(a + j * as)[b].d;
                t.summs[j] = V::fma(V::mul(V::set1f(-da), dmw), V::cvt(M[j]), t.summs[j]);
            }
        }
        const V::f dw = V::load_h(reinterpret_cast<const uint16_t*>(rec + KK::d) + h * V::lanes);
        for (int j = 0; j < NA; j++) {
            const V::f d = V::mul(V::set1f(reinterpret_cast<const block_q8_k*>(a + j * as)[b].d), dw);
            for (int l = 0; l < 8; l++) t.acc[j][l] = V::fma(d, V::cvt(I[j][l]), t.acc[j][l]);
        }
    };
    sweep<SWEEP ? V::passes : 1, A>(nb32 / 8, [](int64_t) {}, half, [&](int h, const A& t) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, V::add(fold8(t.acc[j]), t.summs[j]));
    });
}

// q5_K / q6_K / q3_K in ggml's tiled order (a matmul of >= 8 activation rows): per super-block S = sum of sc x dot
// (q6_K / q3_K: of the levels minus 32 / 4) and M = sum of m x (sub-block activation sum) exact, r = fma(-dmin_w,
// float(M), float(S) d_w), acc = fma(r, d_a, acc) (q6_K / q3_K: r = float(S) d_w)
template <int NA, class KK>
void k_tiled(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t*, size_t, float* y,
             size_t ys) {
    constexpr bool SYM = KK::sym;
    constexpr size_t REC = KK::bytes;
    using A = V::f[NA];
    const auto half = [&](int64_t b, int h, A& acc) {
        const uint8_t* rec = w + size_t(b) * REC;
        V::i S[NA], M[NA];
        for (int j = 0; j < NA; j++) S[j] = M[j] = V::zero_i();
        if constexpr (SYM) {
            for (int s = 0; s < 16; s += 2) {
                const V::i s0 = V::load_s8(rec + KK::sc + 16 * s + h * V::lanes);
                const V::i s1 = V::load_s8(rec + KK::sc + 16 * (s + 1) + h * V::lanes);
                for (int k = 0; k < 2; k++) {
                    const V::i sc = k ? s1 : s0, scp = V::pair16(sc);
                    const typename KK::words q(rec, h, s + k);
                    for (int j = 0; j < NA; j++) {
                        const auto& ab = reinterpret_cast<const block_q8_k*>(a + j * as)[b];
                        const int e0 = 16 * (s + k);
                        if constexpr (V::pairs16) { // pair sums <= 2 x 63 x 128: two add in int16
                            const V::i p01 = V::add16(V::maddubs(q.x[0], aword(ab, e0)),
                                                      V::maddubs(q.x[1], aword(ab, e0 + 4)));
                            const V::i p23 = V::add16(V::maddubs(q.x[2], aword(ab, e0 + 8)),
                                                      V::maddubs(q.x[3], aword(ab, e0 + 12)));
                            S[j] = V::add32(S[j], V::add32(V::madd16(p01, scp), V::madd16(p23, scp)));
                        } else {
                            V::i u = V::zero_i();
                            for (int f = 0; f < 4; f++) u = V::dp(u, q.x[f], aword(ab, e0 + 4 * f));
                            S[j] = V::add32(S[j], V::mullo(u, sc));
                        }
                    }
                }
                const V::i sc01 = V::pack16(s0, s1);
                for (int j = 0; j < NA; j++) // M: sum of sc bsum, taken 2^shift times off S at the end
                    M[j] = V::add32(M[j], V::madd16(sc01, bsum_pair(act_k(a, as, j, b), s / 2)));
            }
        } else {
            for (int c = 0; c < 8; c++) {
                const V::i sc = V::load_u8(rec + q5k_rec::sc + 16 * c + h * V::lanes);
                const V::i scp = V::pair16(sc), mp = V::pair16(V::load_u8(rec + q5k_rec::mn + 16 * c + h * V::lanes));
                const k4_words<true> q(rec, h, c);
                for (int j = 0; j < NA; j++) {
                    const auto& ab = reinterpret_cast<const block_q8_k*>(a + j * as)[b];
                    S[j] = V::add32(S[j], k4_scaled<true>(q.x, ab, 32 * c, scp, sc));
                    M[j] = V::add32(M[j], V::madd16(mp, bsum_pair(ab, c)));
                }
            }
        }
        const V::f dw = V::load_h(reinterpret_cast<const uint16_t*>(rec + KK::d) + h * V::lanes);
        for (int j = 0; j < NA; j++) {
            const V::f da = V::set1f(reinterpret_cast<const block_q8_k*>(a + j * as)[b].d);
            if constexpr (SYM) {
                acc[j] = V::fma(V::mul(V::cvt(V::sub32(S[j], V::shl32<KK::shift>(M[j]))), dw), da, acc[j]);
            } else {
                const V::f dmw = V::load_h(reinterpret_cast<const uint16_t*>(rec + q5k_rec::dmin) + h * V::lanes);
                acc[j] = V::fma(V::fnma(dmw, V::cvt(M[j]), V::mul(V::cvt(S[j]), dw)), da, acc[j]);
            }
        }
    };
    sweep<1, A>(nb32 / 8, [](int64_t) {}, half, [&](int h, const A& acc) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, acc[j]);
    });
}


// q2_K: the 4 words of 16-element sub-block s (levels 0..3: vector s, byte j, bits 2f..2f+1 = word f's element j)
struct q2_words {
    V::i x[4];
    q2_words(const uint8_t* rec, int h, int s) {
        const V::i v = V::load(rec + h * 32 + 64 * s);
        x[0] = V::bits2<0>(v), x[1] = V::bits2<2>(v), x[2] = V::bits2<4>(v), x[3] = V::bits2<6>(v);
    }
};
// lane t's min term of a q2_K super-block: m_2t bsum_2t + m_2t+1 bsum_2t+1 (exact)
inline V::i q2k_min_lane(const uint8_t* rec, int h, const block_q8_k& a, int t) {
    const V::i m01 = V::pack16(V::load_u8(rec + q2k_rec::mn + 32 * t + h * V::lanes),
                               V::load_u8(rec + q2k_rec::mn + 32 * t + 16 + h * V::lanes));
    return V::madd16(m01, bsum_pair(a, t));
}

// q2_K in ggml_vec_dot's order (fewer than 8 activation rows): per row 8 int32 lanes a super-block, lane t the sum over
// its 32-element chunks of sc x (the dot of elements 4t .. + 3), and its min lane; acc_t = fma(-d_a dmin_w,
// float(min lane t), acc_t), then acc_t = fma(d_a d_w, float(lane t), acc_t); folded as hsum_float_8
template <int NA, bool SWEEP = false>
void q2k_lanes(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t*, size_t, float* y,
               size_t ys) {
    using R = q2k_rec;
    struct A {
        V::f acc[NA][8];
    };
    const auto half = [&](int64_t b, int h, A& t) {
        const uint8_t* rec = w + size_t(b) * R::bytes;
        V::i I[NA][8];
        const auto lanes4 = [&]<int l0>() { // lane l0 + f: word f of the even (l0 = 0) or odd sub-blocks
            V::i J[NA][4];
            for (int j = 0; j < NA; j++)
                for (int l = 0; l < 4; l++) J[j][l] = V::zero_i();
            for (int s = l0 / 4; s < 16; s += 2) {
                if (SWEEP && h == 0) prefetch_part<R::bytes, 16>(rec + R::bytes, l0 / 4 * 8 + s / 2);
                const V::i scp = V::pair16(V::load_u8(rec + R::sc + 16 * s + h * V::lanes));
                const q2_words q(rec, h, s);
                for (int j = 0; j < NA; j++) {
                    const auto& ab = act_k(a, as, j, b);
                    for (int f = 0; f < 4; f++)
                        J[j][f] = V::add32(J[j][f], V::madd16(V::maddubs(q.x[f], aword(ab, 16 * s + 4 * f)), scp));
                }
            }
            for (int j = 0; j < NA; j++)
                for (int l = 0; l < 4; l++) I[j][l0 + l] = J[j][l];
        };
        lanes4.template operator()<0>();
        lanes4.template operator()<4>();
        const V::f dw = V::load_h(reinterpret_cast<const uint16_t*>(rec + R::d) + h * V::lanes);
        const V::f dmw = V::load_h(reinterpret_cast<const uint16_t*>(rec + R::dmin) + h * V::lanes);
        for (int j = 0; j < NA; j++) {
            const auto& ab = act_k(a, as, j, b);
            const V::f d = V::mul(V::set1f(ab.d), dw), dm = V::mul(V::set1f(-ab.d), dmw);
            for (int l = 0; l < 8; l++) {
                t.acc[j][l] = V::fma(dm, V::cvt(q2k_min_lane(rec, h, ab, l)), t.acc[j][l]);
                t.acc[j][l] = V::fma(d, V::cvt(I[j][l]), t.acc[j][l]);
            }
        }
    };
    sweep<SWEEP ? V::passes : 1, A>(nb32 / 8, [](int64_t) {}, half, [&](int h, const A& t) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, fold8(t.acc[j]));
    });
}

// q2_K in ggml's tiled order (>= 8 activation rows): per super-block S = sum of sc x dot and M = sum of m x bsum
// exact, r = fma(-dmin_w, float(M), float(S) d_w), acc = fma(r, d_a, acc)
template <int NA>
void q2k_tiled(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t*, size_t, float* y,
               size_t ys) {
    using R = q2k_rec;
    using A = V::f[NA];
    const auto half = [&](int64_t b, int h, A& acc) {
        const uint8_t* rec = w + size_t(b) * R::bytes;
        V::i S[NA], M[NA];
        for (int j = 0; j < NA; j++) S[j] = M[j] = V::zero_i();
        for (int s = 0; s < 16; s++) {
            const V::i sc = V::load_u8(rec + R::sc + 16 * s + h * V::lanes), scp = V::pair16(sc);
            const q2_words q(rec, h, s);
            for (int j = 0; j < NA; j++) {
                const auto& ab = act_k(a, as, j, b);
                if constexpr (V::pairs16) { // pair sums <= 2 x 3 x 128: the four add in int16
                    V::i p = V::maddubs(q.x[0], aword(ab, 16 * s));
                    for (int f = 1; f < 4; f++) p = V::add16(p, V::maddubs(q.x[f], aword(ab, 16 * s + 4 * f)));
                    S[j] = V::add32(S[j], V::madd16(p, scp));
                } else {
                    V::i u = V::zero_i();
                    for (int f = 0; f < 4; f++) u = V::dp(u, q.x[f], aword(ab, 16 * s + 4 * f));
                    S[j] = V::add32(S[j], V::mullo(u, sc));
                }
            }
        }
        for (int l = 0; l < 8; l++)
            for (int j = 0; j < NA; j++) M[j] = V::add32(M[j], q2k_min_lane(rec, h, act_k(a, as, j, b), l));
        const V::f dw = V::load_h(reinterpret_cast<const uint16_t*>(rec + R::d) + h * V::lanes);
        const V::f dmw = V::load_h(reinterpret_cast<const uint16_t*>(rec + R::dmin) + h * V::lanes);
        for (int j = 0; j < NA; j++) {
            const V::f da = V::set1f(act_k(a, as, j, b).d);
            acc[j] = V::fma(V::fnma(dmw, V::cvt(M[j]), V::mul(V::cvt(S[j]), dw)), da, acc[j]);
        }
    };
    sweep<1, A>(nb32 / 8, [](int64_t) {}, half, [&](int h, const A& acc) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, acc[j]);
    });
}

// iq4_xs: q4_K's nibble vectors holding the level indices, 8 x 16 int8 scales (ls - 32), 16 f16 d, 32 zero bytes
struct iq4xs_rec {
    static constexpr size_t sc = 2048, d = 2176, bytes = 2240;
};

// iq4_xs in ggml_vec_dot's order (fewer than 8 activation rows): per row 8 int32 lanes a super-block, lane t the sum
// over sub-blocks c of ls_c x (the dot of elements 32c + 4t .. + 3), acc_t = fma(d_w d_a, float(lane t), acc_t),
// folded as hsum_float_8
template <int NA, bool SWEEP = false>
void iq4xs_lanes(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t*, size_t, float* y,
                 size_t ys) {
    using R = iq4xs_rec;
    const iq4_levels lv;
    struct A {
        V::f acc[NA][8];
    };
    const auto half = [&](int64_t b, int h, A& t) {
        const uint8_t* rec = w + size_t(b) * R::bytes;
        V::i I[NA][8];
        const auto lanes4 = [&]<int l0>() { // lane l0 + f: word l0 + f of every sub-block
            V::i J[NA][4];
            for (int j = 0; j < NA; j++)
                for (int l = 0; l < 4; l++) J[j][l] = V::zero_i();
            for (int c = 0; c < 8; c++) {
                if (SWEEP && h == 0) prefetch_part<R::bytes, 16>(rec + R::bytes, l0 / 4 * 8 + c);
                const V::i scp = V::pair16(V::load_s8(rec + R::sc + 16 * c + h * V::lanes));
                const uint8_t* q = rec + h * 32;
                const V::i v0 = V::load(q + 64 * (4 * c + l0 / 2)), v1 = V::load(q + 64 * (4 * c + l0 / 2 + 1));
                V::i xa[4], xb[4];
                lv.decode(V::low4(v0), xa[0], xb[0]), lv.decode(V::high4(v0), xa[1], xb[1]);
                lv.decode(V::low4(v1), xa[2], xb[2]), lv.decode(V::high4(v1), xa[3], xb[3]);
                for (int j = 0; j < NA; j++) {
                    const auto& ab = act_k(a, as, j, b);
                    for (int f = 0; f < 4; f++)
                        J[j][f] = V::add32(
                            J[j][f], V::madd16(iq4_levels::pairs(xa[f], xb[f], aword(ab, 32 * c + 4 * (l0 + f))), scp));
                }
            }
            for (int j = 0; j < NA; j++)
                for (int l = 0; l < 4; l++) I[j][l0 + l] = J[j][l];
        };
        lanes4.template operator()<0>();
        lanes4.template operator()<4>();
        const V::f dw = V::load_h(reinterpret_cast<const uint16_t*>(rec + R::d) + h * V::lanes);
        for (int j = 0; j < NA; j++) {
            const V::f d = V::mul(dw, V::set1f(act_k(a, as, j, b).d));
            for (int l = 0; l < 8; l++) t.acc[j][l] = V::fma(d, V::cvt(I[j][l]), t.acc[j][l]);
        }
    };
    sweep<SWEEP ? V::passes : 1, A>(nb32 / 8, [](int64_t) {}, half, [&](int h, const A& t) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, fold8(t.acc[j]));
    });
}

// iq4_xs in ggml's tiled order (>= 8 activation rows): per super-block S = sum of ls_c x dot exact, acc = fma(float(S)
// d_w, d_a, acc)
template <int NA>
void iq4xs_tiled(const uint8_t* w, int64_t nb32, const uint8_t* a, size_t as, const int32_t*, size_t, float* y,
                 size_t ys) {
    using R = iq4xs_rec;
    const iq4_levels lv;
    using A = V::f[NA];
    const auto half = [&](int64_t b, int h, A& acc) {
        const uint8_t* rec = w + size_t(b) * R::bytes;
        V::i S[NA];
        for (int j = 0; j < NA; j++) S[j] = V::zero_i();
        for (int c = 0; c < 8; c++) { // a word pair's levels at a time (iq4nl_blockwise's comment)
            const V::i sc = V::load_s8(rec + R::sc + 16 * c + h * V::lanes), scp = V::pair16(sc);
            V::i u[NA]; // VNNI: the sub-block's dots, scaled once
            for (int j = 0; j < NA; j++) u[j] = V::zero_i();
            for (int i = 0; i < 4; i++) { // words 2i, 2i + 1: elements 32c + 8i .. + 7
                const V::i v = V::load(rec + h * 32 + 64 * (4 * c + i));
                V::i la, lb, ha, hb;
                lv.decode(V::low4(v), la, lb), lv.decode(V::high4(v), ha, hb);
                for (int j = 0; j < NA; j++) {
                    const auto& ab = act_k(a, as, j, b);
                    const V::i w0 = aword(ab, 32 * c + 8 * i), w1 = aword(ab, 32 * c + 8 * i + 4);
#if defined(__AVX512VNNI__)
                    u[j] = iq4_levels::dot(iq4_levels::dot(u[j], la, lb, w0), ha, hb, w1);
#else
                    S[j] = V::add32(S[j], V::madd16(iq4_levels::pairs(la, lb, w0), scp));
                    S[j] = V::add32(S[j], V::madd16(iq4_levels::pairs(ha, hb, w1), scp));
#endif
                }
            }
#if defined(__AVX512VNNI__)
            (void)scp;
            for (int j = 0; j < NA; j++) S[j] = V::add32(S[j], V::mullo(u[j], sc));
#else
            (void)u;
#endif
        }
        const V::f dw = V::load_h(reinterpret_cast<const uint16_t*>(rec + R::d) + h * V::lanes);
        for (int j = 0; j < NA; j++)
            acc[j] = V::fma(V::mul(V::cvt(S[j]), dw), V::set1f(act_k(a, as, j, b).d), acc[j]);
    };
    sweep<1, A>(nb32 / 8, [](int64_t) {}, half, [&](int h, const A& acc) {
        for (int j = 0; j < NA; j++) V::store(y + j * ys + h * V::lanes, acc[j]);
    });
}

// na activation rows in chunks of NA, then one at a time
template <int NA, void (*K)(const uint8_t*, int64_t, const uint8_t*, size_t, const int32_t*, size_t, float*, size_t),
          void (*K1)(const uint8_t*, int64_t, const uint8_t*, size_t, const int32_t*, size_t, float*, size_t),
          void (*KD)(const uint8_t*, int64_t, const uint8_t*, size_t, const int32_t*, size_t, float*, size_t) = K1>
void chunked(const uint8_t* w, int64_t nb, const uint8_t* a, size_t as, const int32_t* s, size_t ss, int64_t na,
             float* y, size_t ys) {
    if (na == 1) return KD(w, nb, a, as, s, ss, y, ys); // decode: the one-sweep form where a kind has one
    int64_t j = 0;
    // s may be null (a kind without corrections): offset it only when it is not
    for (; j + NA <= na; j += NA) K(w, nb, a + j * as, as, s ? s + j * ss : s, ss, y + j * ys, ys);
    for (; j < na; j++) K1(w, nb, a + j * as, as, s ? s + j * ss : s, ss, y + j * ys, ys);
}

// plain kinds keep 8 accumulators per activation row: two rows fit the 32 zmm registers, one the 16 ymm
constexpr int plain_na = V::passes == 1 ? 2 : 1;

// -Mul x (sum of each 32-element q8_0 block): q4_0 (8), mxfp4 (12)
template <int Mul> void sums_blocks(const void* a, int32_t* s, int64_t k) {
    const auto* b = static_cast<const block_q8_0*>(a);
    for (int64_t i = 0; i < k / 32; i++) {
        int32_t t = 0;
        for (int e = 0; e < 32; e++) t += b[i].qs[e];
        s[i] = -Mul * t;
    }
}

template <int Mul> void sums_groups(const void* a, int32_t* s, int64_t k) {
    const auto* b = static_cast<const block_q8_0*>(a);
    for (int64_t i = 0; i < k / 32; i++)
        for (int g = 0; g < 8; g++) {
            const int8_t* q = b[i].qs + 4 * g;
            s[i * 8 + g] = Mul * (q[0] + q[1] + q[2] + q[3]);
        }
}

// -(sum of each 32-element q8_1 block) (awq4's zero-point correction, times z per row)
void sums_q8_1_blocks(const void* a, int32_t* s, int64_t k) {
    const auto* b = static_cast<const block_q8_1*>(a);
    for (int64_t i = 0; i < k / 32; i++) {
        int32_t t = 0;
        for (int e = 0; e < 32; e++) t += b[i].qs[e];
        s[i] = -t;
    }
}

// tq2_0: lane l of block i starts from -(bsums[2l] + bsums[2l + 1]) = -(sum of q[32l .. 32l + 31])
void sums_tq2_0(const void* a, int32_t* s, int64_t k) {
    const auto* b = static_cast<const block_q8_k*>(a);
    for (int64_t i = 0; i < k / 256; i++)
        for (int l = 0; l < 8; l++) s[8 * i + l] = -(int32_t(b[i].bsums[2 * l]) + int32_t(b[i].bsums[2 * l + 1]));
}

// kinds with one or two accumulators per activation row take four rows at a time with 16 lanes, two with 8
constexpr int narrow_na = V::passes == 1 ? 4 : 2;

} // namespace

x16_kernels x16_kernels_for(x16_kind kind) {
    switch (kind) {
    case x16_kind::q4_0_blockwise:
        return {chunked<4, blockwise<q4_0_codes, 4>, blockwise<q4_0_codes, 1>>, sums_blocks<8>};
    case x16_kind::mxfp4_blockwise:
        return {chunked<4, blockwise<mxfp4_codes, 4>, blockwise<mxfp4_codes, 1>>, sums_blocks<12>};
    case x16_kind::iq4_nl_blockwise:
        return {chunked<4, iq4nl_blockwise<4>, iq4nl_blockwise<1>>, nullptr};
    case x16_kind::iq4_xs:
        return {chunked<plain_na, iq4xs_lanes<plain_na>, iq4xs_lanes<1>, iq4xs_lanes<1, true>>, nullptr,
                chunked<4, iq4xs_tiled<4>, iq4xs_tiled<1>>, x16_batch::m8};
    case x16_kind::q4_0:
        return {chunked<plain_na, q4_plain<plain_na, false>, q4_plain<1, false>, q4_plain<1, false, true>>,
                sums_groups<-8>};
    case x16_kind::q4_1:
        return {chunked<plain_na, q4_plain<plain_na, true>, q4_plain<1, true>, q4_plain<1, true, true>>, nullptr};
    case x16_kind::q5_0:
        return {chunked<plain_na, q4_plain<plain_na, false, false, true>, q4_plain<1, false, false, true>,
                        q4_plain<1, false, true, true>>,
                sums_groups<-16>};
    case x16_kind::q5_1:
        return {chunked<plain_na, q4_plain<plain_na, true, false, true>, q4_plain<1, true, false, true>,
                        q4_plain<1, true, true, true>>,
                nullptr};
    case x16_kind::q8_0:
#if defined(__AVX512VNNI__)
        return {chunked<plain_na, q8_0_plain<plain_na>, q8_0_plain<1>, q8_0_plain<1, true>>,
                V::q8_corrected ? sums_groups<-128> : nullptr};
#else
        return {chunked<4, q8_0_rows<4>, q8_0_plain<1>, q8_0_plain<1, true>>, nullptr};
#endif
    case x16_kind::nvfp4:
        return {chunked<narrow_na, nvfp4_plain<narrow_na>, nvfp4_plain<1>, nvfp4_plain<1, true>>, sums_groups<-12>};
    case x16_kind::awq4:
        return {chunked<narrow_na, awq4_k<128, narrow_na>, awq4_k<128, 1>, awq4_k<128, 1, true>>, sums_q8_1_blocks};
    case x16_kind::awq4_g64:
        return {chunked<narrow_na, awq4_k<64, narrow_na>, awq4_k<64, 1>, awq4_k<64, 1, true>>, sums_q8_1_blocks};
    case x16_kind::tq2_0:
        return {chunked<plain_na, tq2_0_plain<plain_na>, tq2_0_plain<1>, tq2_0_plain<1, true>>, sums_tq2_0};
    case x16_kind::i2_s: return {chunked<narrow_na, i2_s_k<narrow_na>, i2_s_k<1>, i2_s_k<1, true>>, nullptr};
    case x16_kind::q4_k:
        return {chunked<narrow_na, q4k_rows8<narrow_na, false>, q4k_rows8<1, false>, q4k_rows8<1, false, true>>,
                nullptr, chunked<4, q4k_rows8<4, true>, q4k_rows8<1, true>>, x16_batch::groups4};
    case x16_kind::q5_k:
        return {chunked<plain_na, k_lanes<plain_na, q5k_kind>, k_lanes<1, q5k_kind>, k_lanes<1, q5k_kind, true>>,
                nullptr, chunked<4, k_tiled<4, q5k_kind>, k_tiled<1, q5k_kind>>, x16_batch::m8};
    case x16_kind::q6_k:
        return {chunked<plain_na, k_lanes<plain_na, q6k_kind>, k_lanes<1, q6k_kind>, k_lanes<1, q6k_kind, true>>,
                nullptr, chunked<4, k_tiled<4, q6k_kind>, k_tiled<1, q6k_kind>>, x16_batch::m8};
    case x16_kind::q2_k:
        return {chunked<plain_na, q2k_lanes<plain_na>, q2k_lanes<1>, q2k_lanes<1, true>>, nullptr,
                chunked<4, q2k_tiled<4>, q2k_tiled<1>>, x16_batch::m8};
    case x16_kind::q3_k:
        return {chunked<plain_na, k_lanes<plain_na, q3k_kind>, k_lanes<1, q3k_kind>, k_lanes<1, q3k_kind, true>>,
                nullptr, chunked<4, k_tiled<4, q3k_kind>, k_tiled<1, q3k_kind>>, x16_batch::m8};
    }
    return {};
}

} // namespace tessera::cpu::TS_SIMD_NS
