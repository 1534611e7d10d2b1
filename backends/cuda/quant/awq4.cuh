// awq4.cuh: the CUDA path of AWQ int4 (layout and reference: quant/awq4.h), groups of 128 and 64: split layout only
// (format.cuh). A 32-element chunk is 4 of the group's words (16 bytes, AutoAWQ's nibble order kept); a scale group is
// (s f16, z u8, pad). The AWQ order makes the unpack cheap: the low nibbles of a word are elements (0, 4, 1, 5), the
// high ones (2, 6, 3, 7), and one byte_perm each puts (0, 1, 2, 3) and (4, 5, 6, 7) side by side for dp4a.
// Dot against q8_1: s d_a sum (q - z) q_a, z kept in the integers as the reference does.
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "quant/awq4.h"

#include <cstring>

namespace tessera::cuda {

// a word of 8 AWQ-ordered nibbles -> elements 0..3 and 4..7 as bytes
__device__ __forceinline__ void awq_word(uint32_t w, uint32_t& e0123, uint32_t& e4567) {
    const uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu; // (e0, e4, e1, e5), (e2, e6, e3, e7)
    e0123 = __byte_perm(lo, hi, 0x6420);
    e4567 = __byte_perm(lo, hi, 0x7531);
}

template <class F> struct cuda_awq4 {
    static constexpr int G = F::block_size;
    static constexpr bool available = false; // split layout only
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 4, chunks_per_scale = G / 32;
    static void split_row(const void* row, int64_t k, uint8_t* qs, uint8_t* sc) {
        const auto* b = static_cast<const typename F::block*>(row);
        for (int64_t i = 0; i < k / G; i++) {
            std::memcpy(qs + (G / 2) * i, b[i].qs, G / 2);
            std::memcpy(sc + 4 * i, &b[i].s, 2);
            sc[4 * i + 2] = b[i].z;
            sc[4 * i + 3] = 0;
        }
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    // (q - z) as signed bytes: the reference's exact integers
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        uint32_t v[8];
        signed_values(q, (scw >> 16) & 0xFFu, v);
        int sumi = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) sumi = __dp4a(int(v[i]), act_int(a0, a1, i), sumi);
        return half_bits_to_f32(scw) * (ds.x * float(sumi));
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        signed_values(q, (scw >> 16) & 0xFFu, v);
        d[0] = d[1] = half_bits_to_f32(scw);
        m = 0.0f;
    }
    __device__ static void signed_values(const uint4& q, uint32_t z, uint32_t (&v)[8]) {
        awq_word(q.x, v[0], v[1]);
        awq_word(q.y, v[2], v[3]);
        awq_word(q.z, v[4], v[5]);
        awq_word(q.w, v[6], v[7]);
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = sub_u4_bytes(v[i], z);
    }
    // s (q - z): words 2h, 2h+1 of the chunk
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        const __half2 s = __half2half2(*reinterpret_cast<const __half*>(sc));
        const __half2 off = __float2half2_rn(1024.0f + float(sc[2]));
        uint32_t e[4];
        awq_word(h ? q.z : q.x, e[0], e[1]);
        awq_word(h ? q.w : q.y, e[2], e[3]);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            u8_pairs(e[i], out[2 * i], out[2 * i + 1]);
            out[2 * i] = __hmul2(__hsub2(out[2 * i], off), s);
            out[2 * i + 1] = __hmul2(__hsub2(out[2 * i + 1], off), s);
        }
    }
};
template <> struct cuda_format<awq4> : cuda_awq4<awq4> {};
template <> struct cuda_format<awq4_g64> : cuda_awq4<awq4_g64> {};

} // namespace tessera::cuda
