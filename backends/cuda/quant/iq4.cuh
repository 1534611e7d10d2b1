// iq4.cuh: the CUDA path of the IQ4 formats (layouts and references: quant/iq4_nl.h, quant/iq4_xs.h), split layout
// only (format.cuh). A chunk is 32 elements as 16 index bytes in q4_0's order (byte j: element j's index low, element
// 16 + j's high): iq4_nl's block as the file holds it, an iq4_xs sub-block likewise. The indices become their levels
// (int8, -127..113) by byte permutes over the 16-byte table, then dp4a against the activations: the integer sums are
// the reference's exactly.
//   iq4_nl: a scale group is the block's f16 d (against q8_1 activations, as q4_0).
//   iq4_xs: a scale group is the word (f16 d, int8 ls - 32, 0); its activations are q8_K's integers and scales (the
//           CPU's dot partner; split_acts' q8k), d (ls - 32) is exact in f32 (f16 times a 6-bit integer).
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "quant/iq4_xs.h"

namespace tessera::cuda {

// The levels table as 4 little-endian words (bytes 0..15 = iq4::levels)
constexpr uint32_t iq4_t0 = 0xBFAD9881u, iq4_t1 = 0xF6EADDCFu, iq4_t2 = 0x26190D01u, iq4_t3 = 0x71594535u;

// Word w of a chunk (bytes 4i..4i+3) -> (the levels of its 4 low nibbles, of its 4 high nibbles), each as 4 int8.
// __byte_perm(a, b, s) picks byte (nibble n of s) & 7 of {b, a}: each half (16 bits = 2 bytes = 4 nibbles, in the
// order low0 high0 low1 high1) is looked up in table bytes 0..7 and 8..15, the two merged by each nibble's bit 3, and
// the halves' results interleaved back into lows and highs.
__device__ __forceinline__ int2 iq4_levels(uint32_t w) {
    uint32_t v[2];
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const uint32_t s = w >> (16 * k);
        const uint32_t lo = __byte_perm(iq4_t0, iq4_t1, s);
        const uint32_t hi = __byte_perm(iq4_t2, iq4_t3, s);
        v[k] = __byte_perm(lo, hi, 0x3210u | ((s & 0x8888u) >> 1)); // (L 2k, H 2k, L 2k+1, H 2k+1)
    }
    return make_int2(int(__byte_perm(v[0], v[1], 0x6420)), int(__byte_perm(v[0], v[1], 0x7531)));
}

// sum of level q_a over a chunk against elements 0..15 (a0) and 16..31 (a1); exact
__device__ __forceinline__ int iq4_dot_chunk(const uint4& q, int4 a0, int4 a1) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    const int a_lo[4] = {a0.x, a0.y, a0.z, a0.w}, a_hi[4] = {a1.x, a1.y, a1.z, a1.w};
    int s = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int2 l = iq4_levels(w[i]);
        s = __dp4a(l.x, a_lo[i], s);
        s = __dp4a(l.y, a_hi[i], s);
    }
    return s;
}
// the chunk's 32 levels as signed bytes in element order (v[i]: elements 4i .. 4i+3)
__device__ __forceinline__ void iq4_unpack(const uint4& q, uint32_t (&v)[8]) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int2 l = iq4_levels(w[i]);
        v[i] = uint32_t(l.x), v[4 + i] = uint32_t(l.y);
    }
}
// elements 16h .. 16h+15 as 8 half2 of level x d (rounded once)
__device__ __forceinline__ void iq4_halves(const uint4& q, int h, float d, __half2 (&out)[8]) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int2 l = iq4_levels(w[i]);
        const uint32_t b = uint32_t(h ? l.y : l.x);
        const auto lv = [&](int j) { return float(int8_t(uint8_t(b >> (8 * j)))) * d; };
        out[2 * i] = __floats2half2_rn(lv(0), lv(1));
        out[2 * i + 1] = __floats2half2_rn(lv(2), lv(3));
    }
}

template <> struct cuda_format<iq4_nl> {
    static constexpr bool available = false; // no file-layout kernel: weights must be split (2-D, contiguous)
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 2, chunks_per_scale = 1;
    using block = block_iq4_nl;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        memcpy(qs + 16 * i, b[i].qs, 16);
        memcpy(sc + 2 * i, &b[i].d, 2);
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    // d_w d_a sum level q_a
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        return float(iq4_dot_chunk(q, a0, a1)) * (half_bits_to_f32(scw) * ds.x);
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        iq4_unpack(q, v);
        d[0] = d[1] = half_bits_to_f32(scw);
        m = 0.0f;
    }
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        uint16_t d;
        memcpy(&d, sc, 2);
        iq4_halves(q, h, half_bits_to_f32(d), out);
    }
};

template <> struct cuda_format<iq4_xs> {
    static constexpr bool available = false;
    static constexpr bool split = true;
    using chunk_t = uint4;
    static constexpr int scale_bytes = 4, chunks_per_scale = 1;
    using block = block_iq4_xs;
    TS_HD static void split_block(const block* b, int64_t i, uint8_t* qs, uint8_t* sc) {
        for (int c = 0; c < 8; c++) {
            memcpy(qs + 16 * (8 * i + c), b[i].qs + 16 * c, 16);
            uint8_t* s = sc + 4 * (8 * i + c);
            memcpy(s, &b[i].d, 2);
            s[2] = uint8_t(int8_t(iq4_xs::scale(b[i], c)));
            s[3] = 0;
        }
    }
    static float out_scale(const void*, int64_t) { return 1.0f; }
    // d (ls - 32), exact in f32
    __device__ static float sub_scale(uint32_t scw) {
        return half_bits_to_f32(scw) * float(int8_t(uint8_t(scw >> 16)));
    }
    __device__ static float dot_split(const uint4& q, uint32_t scw, int, int4 a0, int4 a1, float2 ds) {
        return float(iq4_dot_chunk(q, a0, a1)) * (sub_scale(scw) * ds.x);
    }
    static constexpr int mmq_sub = 1;
    static constexpr bool mmq_offset = false;
    __device__ static void mmq_unpack(const uint4& q, uint32_t scw, int, uint32_t (&v)[8], float (&d)[2], float& m) {
        iq4_unpack(q, v);
        d[0] = d[1] = sub_scale(scw);
        m = 0.0f;
    }
    __device__ static void dequant_split(const uint4& q, const uint8_t* sc, int, int h, __half2 (&out)[8]) {
        uint32_t scw;
        memcpy(&scw, sc, 4);
        iq4_halves(q, h, sub_scale(scw), out);
    }
};

} // namespace tessera::cuda
