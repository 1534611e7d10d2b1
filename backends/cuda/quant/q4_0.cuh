// q4_0.cuh: the CUDA fast path of q4_0 (layout and reference: quant/q4_0.h) against q8_1 activations.
// Nibble unpack with masks (one LOP3 each), integer dot with __dp4a, the -8 offset folded in exactly:
//   sum_j (q_w[j] - 8) q_a[j] = sum_j q_w[j] q_a[j] - 8 sum_j q_a[j]   (integers, as the reference)
#pragma once

#include "backends/cuda/quant/format.cuh"

namespace tessera::cuda {

template <> struct cuda_format<q4_0> {
    static constexpr bool available = true;
    using block = block_q4_0;
    using act = block_q8_1;
    // Chunk c (0, 1) is nibble bytes [8c, 8c + 8): elements 8c .. 8c+7 (low nibbles) and 16+8c .. 16+8c+7 (high).
    static constexpr int n_chunks = 2;
    struct chunk {
        int q[2]; // 4 nibble bytes each
        float d;
    };

    __device__ static chunk load(const block& w, int c) {
        return {{load_int_b2(w.qs, 2 * c), load_int_b2(w.qs, 2 * c + 1)}, f16_to_f32(w.d)};
    }
    __device__ static float dot(const chunk& w, const act& a, int c) {
        int sumi = 0, suma = 0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int a_lo = load_int_b4(a.qs, 2 * c + i);     // elements 8c + 4i ..
            const int a_hi = load_int_b4(a.qs, 4 + 2 * c + i); // elements 16 + 8c + 4i ..
            sumi = __dp4a(w.q[i] & 0x0F0F0F0F, a_lo, sumi);
            sumi = __dp4a((w.q[i] >> 4) & 0x0F0F0F0F, a_hi, sumi);
            suma = __dp4a(0x01010101, a_lo, suma);
            suma = __dp4a(0x01010101, a_hi, suma);
        }
        return float(sumi - 8 * suma) * (w.d * f16_to_f32(a.d));
    }

    // Split layout (format.cuh): a chunk is the block's 16 nibble bytes in file order, a scale group its d.
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 2, chunks_per_scale = 1;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        memcpy(qs + 16 * i, b[i].qs, 16);
        memcpy(sc + 2 * i, &b[i].d, 2);
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    // 16 sum (q - 8) q_a = 16 sum q q_a - 128 sum q_a, in integers (dot_nibbles16_x16, act_sum32): 16 times the
    // reference's integer sum, exactly, and a scale taken / 16 (a power of two) gives its product. Against (q - 8) as
    // signed bytes: the GEMV's loop 147 instead of 197 instructions a 2-step iteration; H200, 2026-11-29, tg128 two
    // rounds in one call: 8B 598.1 / 601.5 vs 585.3 / 574.1 t/s, 1B 2061 / 2044 vs 2000 / 2056; the same greedy text.
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        const int sumi16 = dot_nibbles16_x16(q, a0, a1) - 128 * act_sum32(a0, a1);
        return float(sumi16) * (half_bits_to_f32(scw) * ds.x * 0.0625f);
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        nibble_bytes_minus(q, 8, v);
        d[0] = d[1] = half_bits_to_f32(scw);
        m = 0.0f;
    }
    // half 0: the low nibbles of the 16 bytes, half 1: the high ones; (q - 8) d
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        nibble_halves_scaled(q, h, __float2half2_rn(1032.0f), __half2half2(*reinterpret_cast<const __half*>(sc)), out);
    }
};

} // namespace tessera::cuda
