// q8_0.cuh: the CUDA fast path of q8_0 (layout and reference: quant/q8_0.h) against q8_1 activations (the same d
// and qs as the reference's q8_0 activations; s is not used): sum_j q_w[j] q_a[j] with __dp4a, times d_w d_a.
#pragma once

#include "backends/cuda/quant/format.cuh"

namespace tessera::cuda {

template <> struct cuda_format<q8_0> {
    static constexpr bool available = true;
    using block = block_q8_0;
    using act = block_q8_1;
    // Chunk c (0..3) is elements [8c, 8c + 8).
    static constexpr int n_chunks = 4;
    struct chunk {
        int q[2];
        float d;
    };

    __device__ static chunk load(const block& w, int c) {
        return {{load_int_b2(w.qs, 2 * c), load_int_b2(w.qs, 2 * c + 1)}, f16_to_f32(w.d)};
    }
    __device__ static float dot(const chunk& w, const act& a, int c) {
        int sumi = __dp4a(w.q[0], load_int_b4(a.qs, 2 * c), 0);
        sumi = __dp4a(w.q[1], load_int_b4(a.qs, 2 * c + 1), sumi);
        return float(sumi) * (w.d * f16_to_f32(a.d));
    }

    // Split layout (format.cuh): a chunk is the block's 32 values, a scale group its d.
    static constexpr bool split = true;
    using chunk_t = uint4x2;
    static constexpr int scale_bytes = 2, chunks_per_scale = 1;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        memcpy(qs + 32 * i, b[i].qs, 32);
        memcpy(sc + 2 * i, &b[i].d, 2);
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    __device__ static float dot_split(const uint4x2& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        int sumi = 0;
        sumi = __dp4a(int(q.lo.x), a0.x, sumi);
        sumi = __dp4a(int(q.lo.y), a0.y, sumi);
        sumi = __dp4a(int(q.lo.z), a0.z, sumi);
        sumi = __dp4a(int(q.lo.w), a0.w, sumi);
        sumi = __dp4a(int(q.hi.x), a1.x, sumi);
        sumi = __dp4a(int(q.hi.y), a1.y, sumi);
        sumi = __dp4a(int(q.hi.z), a1.z, sumi);
        sumi = __dp4a(int(q.hi.w), a1.w, sumi);
        return half_bits_to_f32(scw) * ds.x * float(sumi);
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4x2& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        v[0] = q.lo.x, v[1] = q.lo.y, v[2] = q.lo.z, v[3] = q.lo.w;
        v[4] = q.hi.x, v[5] = q.hi.y, v[6] = q.hi.z, v[7] = q.hi.w;
        d[0] = d[1] = half_bits_to_f32(scw);
        m = 0.0f;
    }
    // q d, bytes flipped to unsigned (q + 128) for the magic-number conversion
    __device__ static void dequant_split(const uint4x2& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        const __half2 d = __half2half2(*reinterpret_cast<const __half*>(sc));
        const __half2 off = __float2half2_rn(1152.0f);
        const uint4 v = h ? q.hi : q.lo;
        const uint32_t w[4] = {v.x ^ 0x80808080u, v.y ^ 0x80808080u, v.z ^ 0x80808080u, v.w ^ 0x80808080u};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u8_pairs(w[i], out[2 * i], out[2 * i + 1]);
            out[2 * i] = __hmul2(__hsub2(out[2 * i], off), d);
            out[2 * i + 1] = __hmul2(__hsub2(out[2 * i + 1], off), d);
        }
    }
};

} // namespace tessera::cuda
