// mxfp4.cuh: the CUDA path of mxfp4 (layout and reference: quant/mxfp4.h; gpt-oss's expert weights): split layout
// only (format.cuh). A 32-element chunk is a whole block: its 16 nibble bytes re-packed at upload in element order
// (byte j: elements 2j low, 2j + 1 high, as nvfp4's chunks, so e2m1x8_doubled decodes a word into 8 consecutive
// elements) and its E8M0 byte as the scale group. Values are the doubled E2M1 integers, the scale read at half value
// (e8m0_to_fp32_half), as the reference: each block's integer sum is the CPU's, scaled as (d_a d_w) sum.
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "backends/cuda/quant/nvfp4.cuh"
#include "quant/mxfp4.h"

namespace tessera::cuda {

template <> struct cuda_format<mxfp4> {
    static constexpr bool available = false; // no file-layout kernel: weights must be split
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 1, chunks_per_scale = 1;
    using block = block_mxfp4;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        auto code = [&](int e) { return e < 16 ? b[i].qs[e] & 0x0F : b[i].qs[e - 16] >> 4; };
        for (int j = 0; j < 16; j++) qs[16 * i + j] = uint8_t(code(2 * j) | code(2 * j + 1) << 4);
        sc[i] = b[i].e;
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    // word i of q: elements 8i .. 8i + 7 (the GEMVs' dot: the tables' low words loaded, e2m1_lows_loaded)
    __device__ static int dot_words(const uint4& q, int4 a0, int4 a1) {
        const e2m1_lows lo = e2m1_lows_loaded();
        const int2 x = e2m1x8_doubled(q.x, lo), y = e2m1x8_doubled(q.y, lo), z = e2m1x8_doubled(q.z, lo),
                   w = e2m1x8_doubled(q.w, lo);
        int s = 0;
        s = __dp4a(x.x, a0.x, s);
        s = __dp4a(x.y, a0.y, s);
        s = __dp4a(y.x, a0.z, s);
        s = __dp4a(y.y, a0.w, s);
        s = __dp4a(z.x, a1.x, s);
        s = __dp4a(z.y, a1.y, s);
        s = __dp4a(w.x, a1.z, s);
        s = __dp4a(w.y, a1.w, s);
        return s;
    }
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        return __fmul_rn(ds.x, e8m0_to_fp32_half(uint8_t(scw))) * float(dot_words(q, a0, a1));
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        e2m1x32_doubled(q, v);
        d[0] = d[1] = e8m0_to_fp32_half(uint8_t(scw));
        m = 0.0f;
    }
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        e2m1x16_halves(q, h, e8m0_to_fp32_half(*sc), out);
    }
};

} // namespace tessera::cuda
