// nvfp4.cuh: the CUDA path of nvfp4 (layout and reference: quant/nvfp4.h): split layout only (format.cuh). A 32-element
// chunk is half a block: 16 nibble bytes (two sub-blocks of 16 elements, in file order) and its two UE4M3 sub-scales.
// E2M1 codes become int8 (the doubled table, as the reference) by two byte_perm lookups and a select on the sign bit;
// the sub-scales are read at half value (ue4m3_to_fp32_half), so the doubled integers give the reference's values.
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "quant/nvfp4.h"

#include <cstring>

namespace tessera::cuda {

// 4 E2M1 codes (the low nibbles of the 4 bytes of w) -> 4 int8 of twice their value
__device__ __forceinline__ int e2m1x4_doubled(uint32_t w) {
    const uint32_t c = w & 0x0F0F0F0Fu;
    // byte_perm selector: one nibble per output byte, the magnitude index (code & 7)
    const uint32_t m = c & 0x07070707u;
    const uint32_t sel = (m & 0x7u) | ((m >> 4) & 0x70u) | ((m >> 8) & 0x700u) | ((m >> 12) & 0x7000u);
    const uint32_t pos = __byte_perm(0x03020100u, 0x0C080604u, sel); // {0, 1, 2, 3, 4, 6, 8, 12}
    const uint32_t neg = __byte_perm(0xFDFEFF00u, 0xF4F8FAFCu, sel); // their negatives
    const uint32_t sign = ((c >> 3) & 0x01010101u) * 0xFFu;           // 0xFF in bytes whose code has bit 3
    return int((pos & ~sign) | (neg & sign));
}

template <> struct cuda_format<nvfp4> {
    static constexpr bool available = false; // no file-layout kernel: weights must be split (2-D, contiguous)
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 4, chunks_per_scale = 2; // a block's four sub-scales
    // the E2M1 decode is too slow to redo per column tile inside the wgmma GEMM (H100: 140 vs 275 TFLOP/s at 4096^2)
    static constexpr bool wgmma_dequant_first = true;
    static void split_row(const void* row, int64_t k, uint8_t* qs, uint8_t* sc) {
        const auto* b = static_cast<const block_nvfp4*>(row);
        for (int64_t i = 0; i < k / 64; i++) {
            std::memcpy(qs + 32 * i, b[i].qs, 32);
            std::memcpy(sc + 4 * i, b[i].d, 4);
        }
    }
    static float out_scale(const void*, int64_t) { return 1.0f; } // the `.scale` tensor is a graph op
    // sub-block t (0, 1) of chunk c: bytes 8t .. 8t+7, low nibbles elements 16t + j, high 16t + 8 + j
    __device__ static float dot_split(const uint4& q, const uint8_t* sc, int c, int4 a0, int4 a1, float2 ds) {
        int s0 = 0, s1 = 0;
        s0 = __dp4a(e2m1x4_doubled(q.x), a0.x, s0);
        s0 = __dp4a(e2m1x4_doubled(q.y), a0.y, s0);
        s0 = __dp4a(e2m1x4_doubled(q.x >> 4), a0.z, s0);
        s0 = __dp4a(e2m1x4_doubled(q.y >> 4), a0.w, s0);
        s1 = __dp4a(e2m1x4_doubled(q.z), a1.x, s1);
        s1 = __dp4a(e2m1x4_doubled(q.w), a1.y, s1);
        s1 = __dp4a(e2m1x4_doubled(q.z >> 4), a1.z, s1);
        s1 = __dp4a(e2m1x4_doubled(q.w >> 4), a1.w, s1);
        const uint8_t* d = sc + 2 * (c % 2);
        return ds.x * (ue4m3_to_fp32_half(d[0]) * float(s0) + ue4m3_to_fp32_half(d[1]) * float(s1));
    }
    // sub-block t of the chunk: elements 16t .. 16t+15, scale byte 2 (c % 2) + t of the block's group
    static constexpr int mmq_sub = 2;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int c, uint32_t (&v)[8], float (&d)[2], float& m) {
        v[0] = e2m1x4_doubled(q.x), v[1] = e2m1x4_doubled(q.y), v[2] = e2m1x4_doubled(q.x >> 4);
        v[3] = e2m1x4_doubled(q.y >> 4), v[4] = e2m1x4_doubled(q.z), v[5] = e2m1x4_doubled(q.w);
        v[6] = e2m1x4_doubled(q.z >> 4), v[7] = e2m1x4_doubled(q.w >> 4);
        const uint32_t s = scw >> (16 * (c % 2));
        d[0] = ue4m3_to_fp32_half(uint8_t(s));
        d[1] = ue4m3_to_fp32_half(uint8_t(s >> 8));
        m = 0.0f;
    }
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int c, int h, __half2 (&out)[8]) {
        const float d = ue4m3_to_fp32_half(sc[2 * (c % 2) + h]);
        const uint32_t lo = h ? q.z : q.x, hi = h ? q.w : q.y;
        const int v[4] = {e2m1x4_doubled(lo), e2m1x4_doubled(hi), e2m1x4_doubled(lo >> 4), e2m1x4_doubled(hi >> 4)};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int8_t* b = reinterpret_cast<const int8_t*>(&v[i]);
            out[2 * i] = __floats2half2_rn(float(b[0]) * d, float(b[1]) * d);
            out[2 * i + 1] = __floats2half2_rn(float(b[2]) * d, float(b[3]) * d);
        }
    }
};

} // namespace tessera::cuda
