// awq4.cuh: the CUDA path of AWQ int4 (layout and reference: quant/awq4.h), groups of 128 and 64: split layout only
// (format.cuh). A 32-element chunk is re-packed at upload into q4_0's nibble order (byte j: element j in the low
// nibble, element 16 + j in the high one), so the dot is q4_0's (dot_nibbles16_x16); a scale group is (s f16, z u8,
// pad). Dot against q8_1: s d_a sum (q - z) q_a, with 16 sum (q - z) q_a = 16 sum q q_a - 16 z sum q_a in integers:
// the reference's exact integer sum, times 16. The GEMV loop: 158 instructions instead of 246 with AutoAWQ's order
// (byte_perms to put elements side by side); H200 8B tg128 (staged GEMV, 2026-11-29): 625.6 / 630.5 vs 589.7 / 592.6.
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "quant/awq4.h"

namespace tessera::cuda {

template <class F> struct cuda_awq4 {
    static constexpr int G = F::block_size;
    static constexpr bool available = false; // split layout only
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 4, chunks_per_scale = G / 32;
    using block = typename F::block;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < G / 32; c++)
            for (int j = 0; j < 16; j++)
                qs[(G / 2) * i + 16 * c + j] =
                    uint8_t(F::code(b[i], 32 * c + j) | (F::code(b[i], 32 * c + 16 + j) << 4));
        memcpy(sc + 4 * i, &b[i].s, 2);
        sc[4 * i + 2] = b[i].z;
        sc[4 * i + 3] = 0;
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    // float(sumi16) / 16 is the reference's float(sum (q - z) q_a), exactly (|sumi16| < 2^24)
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        const int z = int((scw >> 16) & 0xFFu);
        const int sumi16 = dot_nibbles16_x16(q, a0, a1) - 16 * z * act_sum32(a0, a1);
        return half_bits_to_f32(scw) * (ds.x * (float(sumi16) * 0.0625f));
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        nibble_bytes_minus(q, (scw >> 16) & 0xFFu, v); // (q - z) as signed bytes
        d[0] = d[1] = half_bits_to_f32(scw);
        m = 0.0f;
    }
    // s (q - z); half 0: the low nibbles of the 16 bytes, half 1: the high ones
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        nibble_halves_scaled(q, h, __float2half2_rn(1024.0f + float(sc[2])),
                             __half2half2(*reinterpret_cast<const __half*>(sc)), out);
    }
};
template <> struct cuda_format<awq4> : cuda_awq4<awq4> {};
template <> struct cuda_format<awq4_g64> : cuda_awq4<awq4_g64> {};

} // namespace tessera::cuda
