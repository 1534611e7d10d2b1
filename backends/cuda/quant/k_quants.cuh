// k_quants.cuh: the CUDA path of ggml's K super-block formats (layouts and references: quant/q4_k.h, q5_k.h, q6_k.h):
// split layout only (format.cuh), a chunk being one 32-element sub-block (two of q6_K's 16-element ones), so that the
// GEMV, the GEMMs and the experts' kernels take them as they take the 32-element formats.
//   q6_K: a chunk is its 32 values as int8 (q - 32, element order; 8 bits a value where the file packs 6: the split
//         layout has no 24-byte chunk), a scale group the word (f16 d, int8 sc of elements 0..15, of 16..31): the
//         integer sums and scales are the reference's, exactly.
//   q4_K: a chunk is the sub-block's 16 nibble bytes in q4_1's order (byte j: element j low, j + 16 high), a scale
//         group the f16 pair (d sc, -dmin m): a q4_1 block whose two f16 are the products rounded once (each within
//         2^-12 relative of the file's; the reference multiplies them in f32).
//   q5_K: likewise, with the 32 levels 0..31 as bytes (8 bits a value where the file packs 5).
// The CPU's dot partner for these is q8_K; here, as for every format, the activations are q8_1.
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "quant/q4_k.h"
#include "quant/q5_k.h"
#include "quant/q6_k.h"

namespace tessera::cuda {

// Sub-block c of a q4_K / q5_K block as the f16 pair (d sc_c, -dmin m_c), little-endian in 4 bytes
TS_HD void k_scale_pair(f16 d, f16 dmin, const uint8_t* scales, int c, uint8_t* out) {
    int sc, m;
    kq::scale_min(scales, c, sc, m);
    const f16 a = to_f16(to_f32(d) * float(sc)), b = to_f16(-(to_f32(dmin) * float(m)));
    memcpy(out, &a, 2);
    memcpy(out + 2, &b, 2);
}

// (d sc) sum q q_a + (-dmin m) s_a, s_a = d_a sum q_a: q4_1's formula
__device__ __forceinline__ float k_dot_offset(int sumi, uint32_t scw, float2 ds) {
    const float2 dm = __half22float2(half2_of_word(scw));
    return dm.x * ds.x * float(sumi) + dm.y * ds.y;
}

template <> struct cuda_format<q4_k> {
    static constexpr bool available = false; // no file-layout kernel: weights must be split (2-D, contiguous)
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 4, chunks_per_scale = 1;
    using block = block_q4_k;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < 8; c++) {
            uint8_t* out = qs + 16 * (8 * i + c);
            for (int j = 0; j < 16; j++)
                out[j] = uint8_t(q4_k::level(b[i], 32 * c + j) | (q4_k::level(b[i], 32 * c + 16 + j) << 4));
            k_scale_pair(b[i].d, b[i].dmin, b[i].scales, c, sc + 4 * (8 * i + c));
        }
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        const int sumi16 = dot_nibbles16_x16(q, a0, a1); // 16 sum q q_a, exactly
        const float2 dm = __half22float2(half2_of_word(scw));
        return dm.x * ds.x * 0.0625f * float(sumi16) + dm.y * ds.y;
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = true;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[i] = w[i] & 0x0F0F0F0Fu;
            v[4 + i] = (w[i] >> 4) & 0x0F0F0F0Fu;
        }
        d[0] = d[1] = half_bits_to_f32(scw);
        m = half_bits_to_f32(scw >> 16);
    }
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        const __half2 dm = *reinterpret_cast<const __half2*>(sc);
        const __half2 d = __low2half2(dm), m = __high2half2(dm);
        const __half2 off = __float2half2_rn(1024.0f);
        const uint32_t w[4] = {q.x >> (4 * h), q.y >> (4 * h), q.z >> (4 * h), q.w >> (4 * h)};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u4_pairs(w[i], out[2 * i], out[2 * i + 1]);
            out[2 * i] = __hfma2(__hsub2(out[2 * i], off), d, m);
            out[2 * i + 1] = __hfma2(__hsub2(out[2 * i + 1], off), d, m);
        }
    }
};

// 32 bytes dotted with the activations' elements 0..15 (a0) and 16..31 (a1)
__device__ __forceinline__ int dot_bytes32(const uint4x2& q, int4 a0, int4 a1, int& s1) {
    int s0 = __dp4a(int(q.lo.x), a0.x, 0);
    s0 = __dp4a(int(q.lo.y), a0.y, s0);
    s0 = __dp4a(int(q.lo.z), a0.z, s0);
    s0 = __dp4a(int(q.lo.w), a0.w, s0);
    s1 = __dp4a(int(q.hi.x), a1.x, 0);
    s1 = __dp4a(int(q.hi.y), a1.y, s1);
    s1 = __dp4a(int(q.hi.z), a1.z, s1);
    s1 = __dp4a(int(q.hi.w), a1.w, s1);
    return s0;
}
// bytes b of half h of a chunk as 8 half2 of 1024 + b (b unsigned; x ^ 0x80 first for signed bytes: 1152 + b)
__device__ __forceinline__ void byte_halves(const uint4x2& q, int h, uint32_t flip, __half2 (&out)[8]) {
    const uint4 v = h ? q.hi : q.lo;
    const uint32_t w[4] = {v.x ^ flip, v.y ^ flip, v.z ^ flip, v.w ^ flip};
#pragma unroll
    for (int i = 0; i < 4; i++) u8_pairs(w[i], out[2 * i], out[2 * i + 1]);
}

template <> struct cuda_format<q5_k> {
    static constexpr bool available = false;
    static constexpr bool split = true;
    using chunk_t = uint4x2;
    static constexpr int scale_bytes = 4, chunks_per_scale = 1;
    using block = block_q5_k;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < 8; c++) {
            for (int e = 0; e < 32; e++) qs[32 * (8 * i + c) + e] = uint8_t(q5_k::level(b[i], 32 * c + e));
            k_scale_pair(b[i].d, b[i].dmin, b[i].scales, c, sc + 4 * (8 * i + c));
        }
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    __device__ static float dot_split(const uint4x2& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        int s1;
        const int s0 = dot_bytes32(q, a0, a1, s1);
        return k_dot_offset(s0 + s1, scw, ds);
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = true;
    __device__ static void mmq_unpack(const uint4x2& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        v[0] = q.lo.x, v[1] = q.lo.y, v[2] = q.lo.z, v[3] = q.lo.w;
        v[4] = q.hi.x, v[5] = q.hi.y, v[6] = q.hi.z, v[7] = q.hi.w;
        d[0] = d[1] = half_bits_to_f32(scw);
        m = half_bits_to_f32(scw >> 16);
    }
    __device__ static void dequant_split(const uint4x2& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        const __half2 dm = *reinterpret_cast<const __half2*>(sc);
        const __half2 d = __low2half2(dm), m = __high2half2(dm);
        const __half2 off = __float2half2_rn(1024.0f);
        byte_halves(q, h, 0u, out);
#pragma unroll
        for (int i = 0; i < 8; i++) out[i] = __hfma2(__hsub2(out[i], off), d, m);
    }
};

template <> struct cuda_format<q6_k> {
    static constexpr bool available = false;
    static constexpr bool split = true;
    using chunk_t = uint4x2;
    static constexpr int scale_bytes = 4, chunks_per_scale = 1;
    using block = block_q6_k;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < 8; c++) {
            for (int e = 0; e < 32; e++) qs[32 * (8 * i + c) + e] = uint8_t(int8_t(q6_k::level(b[i], 32 * c + e) - 32));
            uint8_t* s = sc + 4 * (8 * i + c);
            memcpy(s, &b[i].d, 2);
            s[2] = uint8_t(b[i].scales[2 * c]);
            s[3] = uint8_t(b[i].scales[2 * c + 1]);
        }
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    __device__ static int sub_scale(uint32_t scw, int t) { return int(int8_t(uint8_t(scw >> (16 + 8 * t)))); }
    // d d_a (sc0 sum_{0..15} + sc1 sum_{16..31}) (q - 32) q_a: the integer part exact
    __device__ static float dot_split(const uint4x2& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        int s1;
        const int s0 = dot_bytes32(q, a0, a1, s1);
        return half_bits_to_f32(scw) * ds.x * float(sub_scale(scw, 0) * s0 + sub_scale(scw, 1) * s1);
    }
    static constexpr int mmq_sub = 2;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4x2& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        v[0] = q.lo.x, v[1] = q.lo.y, v[2] = q.lo.z, v[3] = q.lo.w;
        v[4] = q.hi.x, v[5] = q.hi.y, v[6] = q.hi.z, v[7] = q.hi.w;
        const float dd = half_bits_to_f32(scw);
        d[0] = dd * float(sub_scale(scw, 0)); // f16 times int8: exact in f32
        d[1] = dd * float(sub_scale(scw, 1));
        m = 0.0f;
    }
    __device__ static void dequant_split(const uint4x2& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        uint32_t scw;
        memcpy(&scw, sc, 4);
        const __half2 d = __float2half2_rn(half_bits_to_f32(scw) * float(sub_scale(scw, h)));
        const __half2 off = __float2half2_rn(1152.0f);
        byte_halves(q, h, 0x80808080u, out);
#pragma unroll
        for (int i = 0; i < 8; i++) out[i] = __hmul2(__hsub2(out[i], off), d);
    }
};

} // namespace tessera::cuda
