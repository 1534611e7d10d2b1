// q4_1.cuh: the CUDA fast path of q4_1 (layout and reference: quant/q4_1.h) against q8_1 activations.
// Nibble unpack with masks, integer dot with __dp4a, and the minimum folded in through q8_1's s = d_a sum(q_a):
//   sum_j (d q_w[j] + m) d_a q_a[j] = d d_a sum_j q_w[j] q_a[j] + m s        (the reference's formula)
#pragma once

#include "backends/cuda/quant/format.cuh"

namespace tessera::cuda {

template <> struct cuda_format<q4_1> {
    static constexpr bool available = true;
    using block = block_q4_1;
    using act = block_q8_1;
    // Chunk c (0, 1) is nibble bytes [8c, 8c + 8): elements 8c .. 8c+7 and 16+8c .. 16+8c+7; chunk 0 adds m s.
    static constexpr int n_chunks = 2;
    struct chunk {
        int q[2];
        float d, m;
    };

    __device__ static chunk load(const block& w, int c) {
        return {{load_int_b4(w.qs, 2 * c), load_int_b4(w.qs, 2 * c + 1)}, f16_to_f32(w.d), f16_to_f32(w.m)};
    }
    __device__ static float dot(const chunk& w, const act& a, int c) {
        int sumi = 0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            sumi = __dp4a(w.q[i] & 0x0F0F0F0F, load_int_b4(a.qs, 2 * c + i), sumi);
            sumi = __dp4a((w.q[i] >> 4) & 0x0F0F0F0F, load_int_b4(a.qs, 4 + 2 * c + i), sumi);
        }
        const float r = w.d * f16_to_f32(a.d) * float(sumi);
        return c == 0 ? r + w.m * f16_to_f32(a.s) : r;
    }

    // Split layout (format.cuh): a chunk is the block's 16 nibble bytes in file order, a scale group (d, m).
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 4, chunks_per_scale = 1;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        memcpy(qs + 16 * i, b[i].qs, 16);
        memcpy(sc + 4 * i, &b[i].d, 2);
        memcpy(sc + 4 * i + 2, &b[i].m, 2);
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        const int sumi16 = dot_nibbles16_x16(q, a0, a1); // 16 sum q q_a, exactly: the scale taken / 16
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
    // q d + m
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

} // namespace tessera::cuda
