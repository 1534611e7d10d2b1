// ternary.cuh: the CUDA path of the ternary formats tq2_0 and i2_s (layouts and references: quant/tq2_0.h,
// quant/i2_s.h): split layout only (format.cuh). Their codes are spread over 32-byte columns in the files; at upload
// each 32-element chunk is re-encoded into 8 bytes (pack_2bit_chunk: 4 consecutive elements per dp4a). Value
// (code - 1) d: against q8_1 d_w (d_a sum code q_a - s_a). tq2_0 keeps its per-256 f16 d as the scale group; i2_s has
// no per-block scale: its per-tensor scale (the tail) multiplies the output.
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "quant/i2_s.h"
#include "quant/tq2_0.h"

namespace tessera::cuda {

template <> struct cuda_format<tq2_0> {
    static constexpr bool available = false;
    static constexpr bool split = true;
    using chunk_t = uint2;
    static constexpr int scale_bytes = 2, chunks_per_scale = 8;
    using block = block_tq2_0;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < 8; c++) {
            int codes[32];
            for (int e = 0; e < 32; e++) {
                const int j = 32 * c + e, h = j / 128, n = (j % 128) / 32, m = j % 32;
                codes[e] = (b[i].qs[32 * h + m] >> (2 * n)) & 3;
            }
            pack_2bit_chunk(codes, qs + 8 * (8 * i + c));
        }
        memcpy(sc + 2 * i, &b[i].d, 2);
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    __device__ static float dot_split(const uint2& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        const float d = half_bits_to_f32(scw);
        return d * (ds.x * 0.015625f * float(dot_2bit_chunk_x64(q, a0, a1)) - ds.y);
    }
    __device__ static void dequant_split(const uint2& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        const __half2 d = __half2half2(*reinterpret_cast<const __half*>(sc));
        const __half2 off = __float2half2_rn(1025.0f);
        halves_2bit_chunk(q, h, out);
#pragma unroll
        for (int i = 0; i < 8; i++) out[i] = __hmul2(__hsub2(out[i], off), d);
    }
};

template <> struct cuda_format<i2_s> {
    static constexpr bool available = false;
    static constexpr bool split = true;
    using chunk_t = uint2;
    static constexpr int scale_bytes = 0, chunks_per_scale = 4;
    using block = block_i2_s;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t*) {
        for (int c = 0; c < 4; c++) {
            int codes[32];
            for (int e = 0; e < 32; e++) codes[e] = i2_s::code(b[i], 32 * c + e);
            pack_2bit_chunk(codes, qs + 8 * (4 * i + c));
        }
    }
    static float out_scale(const void* data, int64_t n) { return i2_s::read_scale(data, n); }
    __device__ static float dot_split(const uint2& q, uint32_t, int, int4 a0, int4 a1, float2 ds) {
        return ds.x * 0.015625f * float(dot_2bit_chunk_x64(q, a0, a1)) - ds.y;
    }
    __device__ static void dequant_split(const uint2& q, const uint8_t*, int, int h, __half2 (&out)[8]) {
        const __half2 off = __float2half2_rn(1025.0f);
        halves_2bit_chunk(q, h, out);
#pragma unroll
        for (int i = 0; i < 8; i++) out[i] = __hsub2(out[i], off);
    }
};

} // namespace tessera::cuda
