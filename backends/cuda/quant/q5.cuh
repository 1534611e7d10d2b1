// q5.cuh: the CUDA fast paths of q5_0 and q5_1 (layouts and references: quant/q5_0.h, quant/q5_1.h) against q8_1
// activations, in the split layout only (no file-layout GEMV: TESSERA_CUDA_SPLIT=0 leaves them to the CPU).
// A chunk is the block's 32 values as bytes in element order (8 bits a value: the fifth bits need no unpacking in the
// kernels; the files' 22 / 24-byte blocks are read at 34 / 36): q5_0's as signed q - 16, q5_1's as unsigned q.
//   q5_0: d_w d_a sum (q - 16) q_a                         (q8_0's arithmetic)
//   q5_1: d_w d_a sum q q_a + m_w s_a, s_a = d_a sum q_a   (q4_1's)
#pragma once

#include "backends/cuda/quant/format.cuh"

namespace tessera::cuda {

namespace q5_detail {
// the 32 bytes of a chunk dotted with activations 0..15 (a0) and 16..31 (a1)
__device__ __forceinline__ int dot32(const uint4x2& q, int4 a0, int4 a1) {
    int s = __dp4a(int(q.lo.x), a0.x, 0);
    s = __dp4a(int(q.lo.y), a0.y, s);
    s = __dp4a(int(q.lo.z), a0.z, s);
    s = __dp4a(int(q.lo.w), a0.w, s);
    s = __dp4a(int(q.hi.x), a1.x, s);
    s = __dp4a(int(q.hi.y), a1.y, s);
    s = __dp4a(int(q.hi.z), a1.z, s);
    return __dp4a(int(q.hi.w), a1.w, s);
}
__device__ __forceinline__ void unpack(const uint4x2& q, uint32_t (&v)[8]) {
    v[0] = q.lo.x, v[1] = q.lo.y, v[2] = q.lo.z, v[3] = q.lo.w;
    v[4] = q.hi.x, v[5] = q.hi.y, v[6] = q.hi.z, v[7] = q.hi.w;
}
// elements 16h .. 16h+15 as 8 half2 of 1024 + byte (flip 0x80808080: signed bytes, 1152 + b)
__device__ __forceinline__ void halves(const uint4x2& q, int h, uint32_t flip, __half2 (&out)[8]) {
    const uint4 v = h ? q.hi : q.lo;
    const uint32_t w[4] = {v.x ^ flip, v.y ^ flip, v.z ^ flip, v.w ^ flip};
#pragma unroll
    for (int i = 0; i < 4; i++) u8_pairs(w[i], out[2 * i], out[2 * i + 1]);
}
} // namespace q5_detail

template <> struct cuda_format<q5_0> {
    static constexpr bool available = false;
    static constexpr bool split = true;
    using block = block_q5_0;
    using chunk_t = uint4x2;
    static constexpr int scale_bytes = 2, chunks_per_scale = 1;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int j = 0; j < 32; j++) qs[32 * i + j] = uint8_t(int8_t(q5_level(b[i].qh, b[i].qs, j) - 16));
        memcpy(sc + 2 * i, &b[i].d, 2);
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    __device__ static float dot_split(const uint4x2& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        return half_bits_to_f32(scw) * ds.x * float(q5_detail::dot32(q, a0, a1));
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4x2& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        q5_detail::unpack(q, v);
        d[0] = d[1] = half_bits_to_f32(scw);
        m = 0.0f;
    }
    // (q - 16) d: exact in f16 before the product (|q - 16| <= 16), one rounding
    __device__ static void dequant_split(const uint4x2& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        const __half2 d = __half2half2(*reinterpret_cast<const __half*>(sc));
        const __half2 off = __float2half2_rn(1152.0f);
        q5_detail::halves(q, h, 0x80808080u, out);
#pragma unroll
        for (int i = 0; i < 8; i++) out[i] = __hmul2(__hsub2(out[i], off), d);
    }
};

template <> struct cuda_format<q5_1> {
    static constexpr bool available = false;
    static constexpr bool split = true;
    using block = block_q5_1;
    using chunk_t = uint4x2;
    static constexpr int scale_bytes = 4, chunks_per_scale = 1;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int j = 0; j < 32; j++) qs[32 * i + j] = uint8_t(q5_level(b[i].qh, b[i].qs, j));
        memcpy(sc + 4 * i, &b[i].d, 2);
        memcpy(sc + 4 * i + 2, &b[i].m, 2);
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    __device__ static float dot_split(const uint4x2& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        const float2 dm = __half22float2(half2_of_word(scw));
        return dm.x * ds.x * float(q5_detail::dot32(q, a0, a1)) + dm.y * ds.y;
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = true;
    __device__ static void mmq_unpack(const uint4x2& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        q5_detail::unpack(q, v);
        d[0] = d[1] = half_bits_to_f32(scw);
        m = half_bits_to_f32(scw >> 16);
    }
    // q d + m in f32, one rounding (q d is not exact in f16 for every d)
    __device__ static void dequant_split(const uint4x2& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        uint32_t scw;
        memcpy(&scw, sc, 4);
        const float2 dm = __half22float2(half2_of_word(scw));
        const uint4 v = h ? q.hi : q.lo;
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t b = w[i / 2] >> (16 * (i % 2));
            out[i] = __floats2half2_rn(fmaf(dm.x, float(b & 0xFF), dm.y), fmaf(dm.x, float((b >> 8) & 0xFF), dm.y));
        }
    }
};

} // namespace tessera::cuda
