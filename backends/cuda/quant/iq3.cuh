// iq3.cuh: the CUDA path of the IQ3 formats (layouts and references: quant/iq3_xxs.h, quant/iq3_s.h), split layout
// only (format.cuh). At upload each 32-element sub-block becomes one 16-byte chunk: words x, y the 8 grid indices'
// low bytes (byte k: elements 4k .. 4k+3), z one sign bit an element (bit j: element j negative; IQ3_XXS's implied
// eighth signs made explicit), w the indices' 9th bits (bit k; IQ3_S only); its scale group is the word (f16 d,
// 2 ls + 1, 0). The grid points (4 unsigned bytes each) come from iq3_grid.h's tables in device memory (L1-resident),
// get their signs by a byte-wise negate, then dp4a against the activations: the integer sums are the reference's.
// Activations are q8_K's integers and scales (the CPU's dot partner; split_acts' q8k). The chunk scale d (2 ls + 1)
// (IQ3_XXS: / 4) is exact in f32.
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "quant/iq3_s.h"
#include "quant/iq3_xxs.h"

namespace tessera::cuda {

// 4 sign bits -> a byte mask each (0xff: negative)
__device__ __forceinline__ uint32_t iq3_sign_mask(uint32_t bits4) {
    return ((bits4 * 0x00204081u) & 0x01010101u) * 0xffu;
}
// point k of a chunk (elements 4k .. 4k+3) as 4 signed bytes
template <bool S> __device__ __forceinline__ uint32_t iq3_point(const uint4& q, int k) {
    const uint32_t lo = (k < 4 ? q.x : q.y) >> (8 * (k % 4)) & 0xff;
    const uint32_t g = S ? __ldg(&iq3::s_grid_dev.v[lo | (q.w >> k & 1) << 8]) : __ldg(&iq3::xxs_grid_dev.v[lo]);
    const uint32_t m = iq3_sign_mask(q.z >> (4 * k) & 0xf);
    return __vsub4(g ^ m, m);
}
// sum value q_a over a chunk against elements 0..15 (a0) and 16..31 (a1); exact
template <bool S> __device__ __forceinline__ int iq3_dot_chunk(const uint4& q, int4 a0, int4 a1) {
    int s = 0;
#pragma unroll
    for (int k = 0; k < 8; k++) s = __dp4a(int(iq3_point<S>(q, k)), act_int(a0, a1, k), s);
    return s;
}

// the shared part of the two formats' CUDA paths; S: IQ3_S (9-bit indices into the 512-point grid)
template <class F, bool S> struct iq3_cuda {
    static constexpr bool available = false; // no file-layout kernel: weights must be split (2-D, contiguous)
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 4, chunks_per_scale = 1;
    using block = typename F::block;
    static float out_scale(const void*, int64_t) { return 1.0f; }
    // d (2 ls + 1) (IQ3_XXS: / 4), exact in f32
    __device__ static float sub_scale(uint32_t scw) {
        return half_bits_to_f32(scw) * float(scw >> 16 & 0xff) * (S ? 1.0f : 0.25f);
    }
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        return float(iq3_dot_chunk<S>(q, a0, a1)) * (sub_scale(scw) * ds.x);
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
#pragma unroll
        for (int k = 0; k < 8; k++) v[k] = iq3_point<S>(q, k);
        d[0] = d[1] = sub_scale(scw);
        m = 0.0f;
    }
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        uint32_t scw;
        memcpy(&scw, sc, 4);
        const float d = sub_scale(scw);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t p = iq3_point<S>(q, 4 * h + i);
            const auto val = [&](int j) { return float(int8_t(uint8_t(p >> (8 * j)))) * d; };
            out[2 * i] = __floats2half2_rn(val(0), val(1));
            out[2 * i + 1] = __floats2half2_rn(val(2), val(3));
        }
    }
};

template <> struct cuda_format<iq3_xxs> : iq3_cuda<iq3_xxs, false> {
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        const uint8_t* raw = reinterpret_cast<const uint8_t*>(&b[i]); // f16 d, 64 indices, 8 sign words
        for (int c = 0; c < 8; c++) {
            uint32_t w = 0, signs = 0;
            for (int j = 0; j < 4; j++) w |= uint32_t(raw[2 + 64 + 4 * c + j]) << (8 * j);
            for (int l = 0; l < 4; l++) signs |= uint32_t(iq3::sign_byte(w >> (7 * l) & 127)) << (8 * l);
            uint8_t* chunk = qs + 16 * (8 * i + c);
            memcpy(chunk, raw + 2 + 8 * c, 8);
            memcpy(chunk + 8, &signs, 4);
            memset(chunk + 12, 0, 4);
            uint8_t* s = sc + 4 * (8 * i + c);
            memcpy(s, raw, 2);
            s[2] = uint8_t(2 * (w >> 28) + 1);
            s[3] = 0;
        }
    }
};

template <> struct cuda_format<iq3_s> : iq3_cuda<iq3_s, true> {
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < 8; c++) {
            uint8_t* chunk = qs + 16 * (8 * i + c);
            memcpy(chunk, b[i].qs + 8 * c, 8);
            memcpy(chunk + 8, b[i].signs + 4 * c, 4);
            chunk[12] = b[i].qh[c];
            chunk[13] = chunk[14] = chunk[15] = 0;
            uint8_t* s = sc + 4 * (8 * i + c);
            memcpy(s, &b[i].d, 2);
            s[2] = uint8_t(2 * (b[i].scales[c / 2] >> (4 * (c % 2)) & 0xf) + 1);
            s[3] = 0;
        }
    }
};

} // namespace tessera::cuda
