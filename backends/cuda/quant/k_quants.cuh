// k_quants.cuh: the CUDA path of ggml's K super-block formats (layouts and references: quant/q2_k.h .. q6_k.h):
// split layout only (format.cuh), a chunk being one 32-element sub-block (two of q6_K's 16-element ones), so that the
// GEMV, the GEMMs and the experts' kernels take them as they take the 32-element formats.
//   q6_K: a chunk is its 32 values as int8 (q - 32, element order; 8 bits a value where the file packs 6: the split
//         layout has no 24-byte chunk), a scale group the word (f16 d, int8 sc of elements 0..15, of 16..31): the
//         integer sums and scales are the reference's, exactly.
//   q4_K: a chunk is the sub-block's 16 nibble bytes in q4_1's order (byte j: element j low, j + 16 high); a scale
//         group serves two sub-blocks (8 bytes, as many as a word per chunk would take): the super-block's f16 d and
//         dmin, then (sc, m) of each, so d sc and dmin m are the reference's f32 products, exactly. (The f16 products
//         rounded once, a word a chunk, put test_families' q4_K file's CUDA perplexity 2.7e-3 from the CPU's.)
//   q5_K: likewise, with the 32 levels 0..31 as bytes (8 bits a value where the file packs 5).
// The CPU's dot partner for these is q8_K: the activations come in q8_1's layout with q8_K's integers and scale (one
// per 256 values: split_acts' q8k, ops.cuh), so the integer sums are the CPU's.
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "quant/q2_k.h"
#include "quant/q3_k.h"
#include "quant/q4_k.h"
#include "quant/q5_k.h"
#include "quant/q6_k.h"

namespace tessera::cuda {

// The scale group of sub-blocks 2p, 2p + 1 of a q4_K / q5_K block: f16 d, f16 dmin, sc_2p, m_2p, sc_2p+1, m_2p+1
TS_HD void k_scale_group(f16 d, f16 dmin, const uint8_t* scales, int p, uint8_t* out) {
    memcpy(out, &d, 2);
    memcpy(out + 2, &dmin, 2);
    for (int t = 0; t < 2; t++) {
        int sc, m;
        kq::scale_min(scales, 2 * p + t, sc, m);
        out[4 + 2 * t] = uint8_t(sc);
        out[5 + 2 * t] = uint8_t(m);
    }
}
// sub-block t (0, 1) of a group: (d sc, dmin m) in f32, exactly (f16 times 6 bits)
__device__ __forceinline__ float2 k_scales(uint2 g, int t) {
    const float d = half_bits_to_f32(g.x), dmin = half_bits_to_f32(g.x >> 16);
    const uint32_t b = g.y >> (16 * t);
    return make_float2(d * float(b & 0xFF), dmin * float((b >> 8) & 0xFF));
}

template <> struct cuda_format<q4_k> {
    static constexpr bool available = false; // no file-layout kernel: weights must be split (2-D, contiguous)
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 8, chunks_per_scale = 2;
    using block = block_q4_k;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < 8; c++) {
            uint8_t* out = qs + 16 * (8 * i + c);
            for (int j = 0; j < 16; j++)
                out[j] = uint8_t(q4_k::level(b[i], 32 * c + j) | (q4_k::level(b[i], 32 * c + 16 + j) << 4));
        }
        for (int p = 0; p < 4; p++) k_scale_group(b[i].d, b[i].dmin, b[i].scales, p, sc + 8 * (4 * i + p));
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    // (d sc) d_a sum q q_a - (dmin m) s_a, s_a = d_a sum q_a
    __device__ static float dot_split(const uint4& q, uint2 scw, int c, int4 a0, int4 a1, float2 ds) {
        const int sumi16 = dot_nibbles16_x16(q, a0, a1); // 16 sum q q_a, exactly
        const float2 dm = k_scales(scw, c);
        return dm.x * ds.x * 0.0625f * float(sumi16) - dm.y * ds.y;
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = true;
    __device__ static void mmq_unpack(const uint4& q, uint2 scw, int c, uint32_t (&v)[8], float (&d)[2], float& m) {
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[i] = w[i] & 0x0F0F0F0Fu;
            v[4 + i] = (w[i] >> 4) & 0x0F0F0F0Fu;
        }
        const float2 dm = k_scales(scw, c);
        d[0] = d[1] = dm.x;
        m = -dm.y;
    }
    // q (d sc) - dmin m in f32, rounded to f16 once: a weight near zero comes from two larger terms, and f16 terms
    // would round them apart (test_families' llama-q4_K: CUDA perplexity 2.7e-3 from the CPU's through the GEMM)
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int c, int h, __half2 (&out)[8]) {
        uint2 g;
        memcpy(&g, sc, 8);
        const float2 dm = k_scales(g, c);
        const uint32_t w[4] = {q.x >> (4 * h), q.y >> (4 * h), q.z >> (4 * h), q.w >> (4 * h)};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t b = w[i / 2] >> (16 * (i % 2));
            out[i] = __floats2half2_rn(fmaf(dm.x, float(b & 0xF), -dm.y), fmaf(dm.x, float((b >> 8) & 0xF), -dm.y));
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
    static constexpr int scale_bytes = 8, chunks_per_scale = 2;
    using block = block_q5_k;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < 8; c++)
            for (int e = 0; e < 32; e++) qs[32 * (8 * i + c) + e] = uint8_t(q5_k::level(b[i], 32 * c + e));
        for (int p = 0; p < 4; p++) k_scale_group(b[i].d, b[i].dmin, b[i].scales, p, sc + 8 * (4 * i + p));
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    __device__ static float dot_split(const uint4x2& q, uint2 scw, int c, int4 a0, int4 a1, float2 ds) {
        int s1;
        const int s0 = dot_bytes32(q, a0, a1, s1);
        const float2 dm = k_scales(scw, c);
        return dm.x * ds.x * float(s0 + s1) - dm.y * ds.y;
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = true;
    __device__ static void mmq_unpack(const uint4x2& q, uint2 scw, int c, uint32_t (&v)[8], float (&d)[2], float& m) {
        v[0] = q.lo.x, v[1] = q.lo.y, v[2] = q.lo.z, v[3] = q.lo.w;
        v[4] = q.hi.x, v[5] = q.hi.y, v[6] = q.hi.z, v[7] = q.hi.w;
        const float2 dm = k_scales(scw, c);
        d[0] = d[1] = dm.x;
        m = -dm.y;
    }
    // as q4_K's: in f32, one rounding
    __device__ static void dequant_split(const uint4x2& q, const uint8_t* sc, int c, int h, __half2 (&out)[8]) {
        uint2 g;
        memcpy(&g, sc, 8);
        const float2 dm = k_scales(g, c);
        const uint4 v = h ? q.hi : q.lo;
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t b = w[i / 2] >> (16 * (i % 2));
            out[i] = __floats2half2_rn(fmaf(dm.x, float(b & 0xFF), -dm.y), fmaf(dm.x, float((b >> 8) & 0xFF), -dm.y));
        }
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

// The sum of 16 activation values (one int4: elements of a sub-block of 16; the same in every row a lane dots it with)
__device__ __forceinline__ int act_sum16(int4 a) {
    int s = __dp4a(0x01010101, a.x, 0);
    s = __dp4a(0x01010101, a.y, s);
    s = __dp4a(0x01010101, a.z, s);
    return __dp4a(0x01010101, a.w, s);
}

// q3_K: a chunk is the 32 levels 0..7 (value + 4) as nibbles in q4_1's order (16 bytes: 4 bits a value where the file
// packs 3.4375), a scale group the word (f16 d, int8 sc of elements 0..15, of 16..31) as q6_K's: the integer sums
// and scales are the reference's, exactly.
template <> struct cuda_format<q3_k> {
    static constexpr bool available = false;
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 4, chunks_per_scale = 1;
    using block = block_q3_k;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < 8; c++) {
            uint8_t* out = qs + 16 * (8 * i + c);
            for (int j = 0; j < 16; j++)
                out[j] = uint8_t(q3_k::level(b[i], 32 * c + j) | (q3_k::level(b[i], 32 * c + 16 + j) << 4));
            uint8_t* s = sc + 4 * (8 * i + c);
            memcpy(s, &b[i].d, 2);
            s[2] = uint8_t(int8_t(q3_k::scale(b[i], 2 * c)));
            s[3] = uint8_t(int8_t(q3_k::scale(b[i], 2 * c + 1)));
        }
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    __device__ static int sub_scale(uint32_t scw, int t) { return int(int8_t(uint8_t(scw >> (16 + 8 * t)))); }
    // d d_a (sc0 sum_{0..15} + sc1 sum_{16..31}) (q - 4) q_a: the integer part exact
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        const int2 s = dot_nibble_halves(q, a0, a1);
        const int lo = s.x - 4 * act_sum16(a0), hi = (s.y >> 4) - 4 * act_sum16(a1);
        return half_bits_to_f32(scw) * ds.x * float(sub_scale(scw, 0) * lo + sub_scale(scw, 1) * hi);
    }
    static constexpr int mmq_sub = 2;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        nibble_bytes_minus(q, 4, v);
        const float dd = half_bits_to_f32(scw);
        d[0] = dd * float(sub_scale(scw, 0)); // f16 times a 6-bit integer: exact in f32
        d[1] = dd * float(sub_scale(scw, 1));
        m = 0.0f;
    }
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        uint32_t scw;
        memcpy(&scw, sc, 4);
        const __half2 d = __float2half2_rn(half_bits_to_f32(scw) * float(sub_scale(scw, h)));
        nibble_halves_scaled(q, h, __float2half2_rn(1028.0f), d, out);
    }
};

// q2_K: a chunk is the 32 levels 0..3 re-encoded as the ternary formats' 2-bit chunks (8 bytes: byte i holds element
// i + 8n in bits 2n, pack_2bit_chunk), a scale group serves two chunks (8 bytes): the super-block's f16 d and dmin,
// then the (scale | min << 4) bytes of its four sub-blocks of 16. No int8 tensor-core GEMM (a min a sub-block of 16,
// where mmq has one offset a chunk): prefill takes the f16 GEMM.
template <> struct cuda_format<q2_k> {
    static constexpr bool available = false;
    static constexpr bool split = true;
    using chunk_t = uint2;
    static constexpr int scale_bytes = 8, chunks_per_scale = 2;
    using block = block_q2_k;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < 8; c++) {
            int codes[32];
            for (int e = 0; e < 32; e++) codes[e] = q2_k::level(b[i], 32 * c + e);
            pack_2bit_chunk(codes, qs + 8 * (8 * i + c));
        }
        for (int p = 0; p < 4; p++) {
            uint8_t* g = sc + 8 * (4 * i + p);
            memcpy(g, &b[i].d, 2);
            memcpy(g + 2, &b[i].dmin, 2);
            for (int t = 0; t < 4; t++) g[4 + t] = b[i].scales[4 * p + t];
        }
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    // sub-block u (0, 1) of chunk t of a group: (scale, min) codes
    __device__ static int2 codes(uint2 g, int t, int u) {
        const uint32_t b = (g.y >> (16 * t + 8 * u)) & 0xFF;
        return make_int2(int(b & 0xF), int(b >> 4));
    }
    // d_a (d (sc0 S0 + sc1 S1) - dmin (m0 A0 + m1 A1)), S / A the halves' sums of q q_a / q_a: integers exact
    __device__ static float dot_split(const uint2& q, uint2 scw, int c, int4 a0, int4 a1, float2 ds) {
        const int4 s = dot_2bit_fields(q, a0, a1);
        const int lo = s.x * 4 + s.y, hi = s.z * 4 + s.w; // 4 S0, 64 S1
        const int2 k0 = codes(scw, c, 0), k1 = codes(scw, c, 1);
        const int sumi = k0.x * lo * 16 + k1.x * hi;   // 64 (sc0 S0 + sc1 S1)
        const int summ = k0.y * act_sum16(a0) + k1.y * act_sum16(a1);
        const float d = half_bits_to_f32(scw.x), dmin = half_bits_to_f32(scw.x >> 16);
        return ds.x * (d * 0.015625f * float(sumi) - dmin * float(summ));
    }
    // q (d sc) - dmin m in f32, rounded to f16 once (as q4_K)
    __device__ static void dequant_split(const uint2& q, const uint8_t* sc, int c, int h, __half2 (&out)[8]) {
        uint2 g;
        memcpy(&g, sc, 8);
        const int2 k = codes(g, c, h);
        const float d = half_bits_to_f32(g.x) * float(k.x), m = half_bits_to_f32(g.x >> 16) * float(k.y);
        __half2 v[8];
        halves_2bit_chunk(q, h, v); // 1024 + code
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float2 f = __half22float2(v[i]);
            out[i] = __floats2half2_rn(fmaf(d, f.x - 1024.0f, -m), fmaf(d, f.y - 1024.0f, -m));
        }
    }
};

} // namespace tessera::cuda
