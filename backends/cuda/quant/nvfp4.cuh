// nvfp4.cuh: the CUDA path of nvfp4 (layout and reference: quant/nvfp4.h): split layout only (format.cuh). A 32-element
// chunk is half a block: 16 nibble bytes (two sub-blocks of 16 elements, re-packed in element order at upload); its
// scale group is its two UE4M3 sub-scales, converted at upload to f16 at half value (ue4m3_to_fp32_half's values,
// exact in f16: 0 and 2^-10 .. 224), so that the doubled integers give the reference's values and the kernels read
// a scale pair with one conversion (the byte decode took ~5 operations a sub-scale in the GEMV). E2M1 codes become
// int8 (the doubled table, as the reference) by byte_perm lookups (e2m1x8_doubled).
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "ggml-like/fp16.h"
#include "quant/nvfp4.h"

namespace tessera::cuda {

// 8 E2M1 codes, element i in nibble i of w (the split layout's order) -> int8 of twice their values: .x elements
// 0..3, .y elements 4..7. Each code's low 3 bits index a byte_perm table of the magnitudes {0, 1, 2, 3, 4, 6, 8, 12}
// and one of their negatives; a third byte_perm per 4 values takes, byte by byte, the negative where the code's sign
// bit (bit 3) is set. 6 byte_perms and 4 logic ops for 8 values; the previous decode (codes in the low nibbles of 4
// bytes, a selector assembled from them, the sign as a mask) took ~32 ops. The byte_perms are PTX prmt (format.cuh),
// not __byte_perm, whose selectors the compiler masked again before each: the GEMV's loop 332 instead of 369
// instructions a 2-step iteration, 8B tg128 495.7 / 495.0 vs 438.3 / 440.8 t/s (H200, 2026-11-29, one call).
// The tables' low words ({0, 1, 2, 3} and their negatives), which a PRMT takes in a register. As constants ptxas
// copies them from uniform registers before every use (48 of the GEMV loop's 321 instructions, nvfp4 and mxfp4 alike);
// the GEMVs' dots read them from memory instead (e2m1_lows_loaded: once a kernel, no store in the loop), the GEMMs'
// unpacks (stores to shared memory in their loops) keep the constants. Measured (H200, 8B tg128, 2026-11-29, staged
// GEMV, two rounds in one call): mxfp4 548.8 / 547.9 vs 533.9 / 536.3 t/s, nvfp4 545.4 / 553.1 vs 542.6 / 544.6.
struct e2m1_lows {
    uint32_t pos, neg;
};
constexpr e2m1_lows E2M1_LOWS{0x03020100u, 0xFDFEFF00u};
static __device__ e2m1_lows e2m1_low_words = E2M1_LOWS;
__device__ __forceinline__ e2m1_lows e2m1_lows_loaded() {
    return {__ldg(&e2m1_low_words.pos), __ldg(&e2m1_low_words.neg)};
}
__device__ __forceinline__ int2 e2m1x8_doubled(uint32_t w, e2m1_lows lo = E2M1_LOWS) {
    const uint32_t m = w & 0x77777777u;                             // magnitude indices
    const uint32_t pick = 0x32103210u | ((w & 0x88888888u) >> 1);   // byte i of pos (i) or of neg (4 + i)
    constexpr uint32_t POS_HI = 0x0C080604u, NEG_HI = 0xF4F8FAFCu; // {4, 6, 8, 12}, their negatives
    const uint32_t p0 = prmt(lo.pos, POS_HI, m), n0 = prmt(lo.neg, NEG_HI, m);
    const uint32_t p1 = prmt(lo.pos, POS_HI, m >> 16), n1 = prmt(lo.neg, NEG_HI, m >> 16);
    return make_int2(int(prmt(p0, n0, pick)), int(prmt(p1, n1, pick >> 16)));
}

// The four words of a chunk (8 E2M1 codes each, element order) as 8 words of doubled int8 values (mmq_unpack's v)
__device__ __forceinline__ void e2m1x32_doubled(const uint4& q, uint32_t (&v)[8]) {
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int2 e = e2m1x8_doubled(words[i]);
        v[2 * i] = uint32_t(e.x), v[2 * i + 1] = uint32_t(e.y);
    }
}

// 8 E2M1 codes (element i in nibble i of w) -> their doubled values as f16: 4 half2 words, elements 2i, 2i + 1 in
// word i. The f16 of each doubled value {0, 1, 2, 3, 4, 6, 8, 12} has a zero low byte, so byte_perm tables give the
// high bytes (magnitude and its negative, picked by the sign bit as in e2m1x8_doubled) and two more byte_perms per 4
// values put them over zero low bytes: 10 byte_perms and 4 logic ops for 8 values (int8 -> f32 -> f16 took ~40).
__device__ __forceinline__ void e2m1x8_halves(uint32_t w, uint32_t (&h)[4]) {
    const uint32_t m = w & 0x77777777u;
    const uint32_t pick = 0x32103210u | ((w & 0x88888888u) >> 1);
    constexpr uint32_t POS_LO = 0x42403C00u, POS_HI = 0x4A484644u; // f16 high bytes of {0, 1, 2, 3}, {4, 6, 8, 12}
    constexpr uint32_t NEG_LO = 0xC2C0BC00u, NEG_HI = 0xCAC8C6C4u; // of their negatives (0 stays +0)
    const uint32_t p0 = __byte_perm(POS_LO, POS_HI, m), n0 = __byte_perm(NEG_LO, NEG_HI, m);
    const uint32_t p1 = __byte_perm(POS_LO, POS_HI, m >> 16), n1 = __byte_perm(NEG_LO, NEG_HI, m >> 16);
    const uint32_t b0 = __byte_perm(p0, n0, pick), b1 = __byte_perm(p1, n1, pick >> 16); // elements 0..3, 4..7
    h[0] = __byte_perm(b0, 0u, 0x1404u), h[1] = __byte_perm(b0, 0u, 0x3424u);
    h[2] = __byte_perm(b1, 0u, 0x1404u), h[3] = __byte_perm(b1, 0u, 0x3424u);
}

// Half h (elements 16h .. 16h + 15) of a chunk of E2M1 codes as 8 half2 of (doubled value) d (dequant_split). Where
// d is an f16 that no product can overflow (2^-24 <= d <= 2^11: every E8M0 scale a real file has, every UE4M3 half
// sub-scale but 0), the products in f16 (e2m1x8_halves) are exact and round once, as the f32 products converted to
// f16: the same halves; other scales (and NaN) take the f32 route.
__device__ __forceinline__ void e2m1x16_halves(const uint4& q, int h, float d, __half2 (&out)[8]) {
    const uint32_t w0 = h ? q.z : q.x, w1 = h ? q.w : q.y;
    if (d >= 0x1p-24f && d <= 0x1p11f) {
        const __half2 d2 = __float2half2_rn(d);
        uint32_t v[8];
        e2m1x8_halves(w0, *reinterpret_cast<uint32_t(*)[4]>(&v[0]));
        e2m1x8_halves(w1, *reinterpret_cast<uint32_t(*)[4]>(&v[4]));
#pragma unroll
        for (int i = 0; i < 8; i++) out[i] = __hmul2(*reinterpret_cast<const __half2*>(&v[i]), d2);
        return;
    }
    const int2 e0 = e2m1x8_doubled(w0), e1 = e2m1x8_doubled(w1);
    const int v[4] = {e0.x, e0.y, e1.x, e1.y};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int8_t* b = reinterpret_cast<const int8_t*>(&v[i]);
        out[2 * i] = __floats2half2_rn(float(b[0]) * d, float(b[1]) * d);
        out[2 * i + 1] = __floats2half2_rn(float(b[2]) * d, float(b[3]) * d);
    }
}

template <> struct cuda_format<nvfp4> {
    static constexpr bool available = false; // no file-layout kernel: weights must be split (2-D, contiguous)
    static constexpr bool split = true;
    using chunk_t = uint4;
    // a chunk's two sub-scales as f16 half values (ue4m3_to_fp32_half, exact in f16: 0 and 2^-10 .. 224). Measured
    // against the UE4M3 bytes decoded in the kernels (H200, 2026-11-29, 8B tg128, two rounds in one call): 467.7 /
    // 465.3 vs 442.0 / 443.9 t/s, pp512 even (17220 / 17065 vs 17158 / 17115), the same greedy text; +1.4% bytes.
    static constexpr int scale_bytes = 4, chunks_per_scale = 1;
    // The file's sub-block of 16 elements is 8 bytes, low nibbles elements 0..7, high nibbles 8..15; the split layout
    // re-packs it in element order, byte j holding elements 2j (low nibble) and 2j + 1 (high), so that a 32-bit word
    // is 8 consecutive elements (e2m1x8_doubled).
    using block = block_nvfp4;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int t = 0; t < 4; t++) {
            const uint8_t* in = b[i].qs + 8 * t;
            auto code = [&](int e) { return e < 8 ? in[e] & 0x0F : in[e - 8] >> 4; };
            for (int j = 0; j < 8; j++) qs[32 * i + 8 * t + j] = uint8_t(code(2 * j) | code(2 * j + 1) << 4);
        }
        for (int t = 0; t < 4; t++) {
            const uint16_t h = fp32_to_fp16(ue4m3_to_fp32_half(b[i].d[t]));
            memcpy(sc + 4 * (2 * i + t / 2) + 2 * (t % 2), &h, 2);
        }
    }
    static float out_scale(const void*, int64_t) { return 1.0f; } // the `.scale` tensor is a graph op
    // sub-block t (0, 1) of chunk c: words 2t, 2t + 1 of q, elements 16t .. 16t + 15 in order
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        const e2m1_lows lo = e2m1_lows_loaded();
        const int2 x = e2m1x8_doubled(q.x, lo), y = e2m1x8_doubled(q.y, lo), z = e2m1x8_doubled(q.z, lo),
                   w = e2m1x8_doubled(q.w, lo);
        int s0 = 0, s1 = 0;
        s0 = __dp4a(x.x, a0.x, s0);
        s0 = __dp4a(x.y, a0.y, s0);
        s0 = __dp4a(y.x, a0.z, s0);
        s0 = __dp4a(y.y, a0.w, s0);
        s1 = __dp4a(z.x, a1.x, s1);
        s1 = __dp4a(z.y, a1.y, s1);
        s1 = __dp4a(w.x, a1.z, s1);
        s1 = __dp4a(w.y, a1.w, s1);
        const float2 d = __half22float2(half2_of_word(scw)); // the chunk's two half sub-scales
        return ds.x * (d.x * float(s0) + d.y * float(s1));
    }
    // sub-block t of the chunk: elements 16t .. 16t+15, half t of the chunk's scale group
    static constexpr int mmq_sub = 2;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        e2m1x32_doubled(q, v);
        d[0] = half_bits_to_f32(scw);
        d[1] = half_bits_to_f32(scw >> 16);
        m = 0.0f;
    }
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        e2m1x16_halves(q, h, __half2float(reinterpret_cast<const __half*>(sc)[h]), out);
    }
};

} // namespace tessera::cuda
