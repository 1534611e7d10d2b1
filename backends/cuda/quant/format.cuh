// format.cuh: the contract of a block format's CUDA fast path, cuda_format<F>, and the loads the formats share.
// One specialization per format, each in quant/<format>.cuh; the layout and the reference math stay in
// quant/<format>.h. A format without a specialization is not available on CUDA: supports() says no and the graph runner
// names it.
//
// What a specialization provides (used by the decode GEMV, ops/mmv.cu):
//   available            true
//   block                the format's block (quant/<format>.h)
//   act                  the block activations are quantized to, once per mul_mat (block_q8_1 for now)
//   n_chunks             threads that share one weight block; thread c of a block handles chunk c
//   chunk                chunk c of a weight block, unpacked into registers: loaded once, dotted with every column
//   load(w, c)           -> chunk
//   dot(chunk, a, c)     -> float: the chunk's share of F::vec_dot(w, a) (the reference), so that summing dot over
//                           c = 0..n_chunks-1 gives the block dot
// Optional, the split layout (ops/mmv.cu decode GEMV, ops/gemm.cu prefill GEMM): at upload a 2-D weight is repacked
// into two arrays, the values of every 32-element chunk of every row [n][k/32][chunk_bytes], then the scale groups
// [n][k/32/chunks_per_scale][scale_bytes], so that a thread reads a chunk with one 8/16/32-byte load (the files'
// 18/20/34/36/66/68-byte blocks allow only narrow ones). The order of values inside a chunk is the format's choice:
//   split                  true
//   chunk_t                uint2, uint4 or uint4x2 (chunk_bytes = its size)
//   scale_bytes, chunks_per_scale   (a group of 8 bytes loads as a uint2: scale_word_t)
//   block                                      the file's block
//   split_block(row, i, qs, sc)                block i of a row of file blocks -> its chunks and scale groups, into
//                                              the row's qs and sc (split_rows_kernel, on the device)
//   dot_split(q, scw, c, a0, a1, ds) -> float  chunk c of a row (scw: its scale group as a little-endian word,
//                                              load_scale_word) against q8_1 activations given as elements 0..15
//                                              (a0), 16..31 (a1) and (d, s = d sum q)
//   dequant_split(q, sc, c, h, out[8])         elements 16h .. 16h+15 of the chunk as 8 half2, in order
//   out_scale(row0_data, n_elements)           host: a per-tensor factor on the output (i2_s), else 1
// Optional on top of the split layout, the int8 tensor-core GEMM (ops/gemm.cu, prefill), which keeps the CPU's
// numerics: the activations are the q8_1 integers the GEMV dots, each chunk's integer sum is exact (mma s8 -> s32) and
// is scaled per chunk as the reference's vec_dot scales it:
//   mmq_sub                                 1: one weight scale per 32-element chunk; 2: one per 16 elements (nvfp4)
//   mmq_offset                              true when a chunk adds m s_a (q4_1's minimum; s_a = d_a sum q_a)
//   mmq_unpack(q, scw, c, v, d, m)          chunk c's 32 values as signed bytes in element order (v[i]: elements
//                                           4i .. 4i+3), its scale(s) d[0..mmq_sub) and offset m; scw is the chunk's
//                                           scale group as a little-endian word (load_scale_word)
// A format without mmq_unpack (the ternary ones: their CPU activations are q8_K / per-token int8) takes the f16 GEMM.
// A format with f16 activations (AWQ) or its own activation format declares another `act`; mmv.cu branches on it
// with `if constexpr`, not with a copied kernel.
#pragma once

#include "quant/format.h"

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace tessera::cuda {

template <class F> struct cuda_format { static constexpr bool available = false; };

// Whether format F has the int8 tensor-core GEMM (mmq_unpack).
template <class F, class = void> struct has_mmq { static constexpr bool value = false; };
template <class F> struct has_mmq<F, std::void_t<decltype(cuda_format<F>::mmq_sub)>> { static constexpr bool value = true; };

// Whether format F has the split layout.
template <class F, class = void> struct has_split { static constexpr bool value = false; };
template <class F> struct has_split<F, std::void_t<decltype(cuda_format<F>::split)>> {
    static constexpr bool value = cuda_format<F>::split;
};

// f16 bits -> f32 in one instruction (same value as the reference fp16_to_fp32).
__device__ __forceinline__ float f16_to_f32(f16 h) {
    return __half2float(__ushort_as_half(h.bits));
}

// Magic-number conversion (no int->float instructions): the 16-bit pattern 0x6400 | x is the half 1024 + x for
// x < 1024. u4_pairs: the low nibbles of the 4 bytes of w as half2 (1024 + x0, 1024 + x1), (1024 + x2, 1024 + x3),
// each pair one byte_perm and one LOP3; u8_pairs: the same for whole bytes.
__device__ __forceinline__ void u4_pairs(uint32_t w, __half2& p01, __half2& p23) {
    const uint32_t v = __byte_perm(w, 0, 0x3120); // bytes 0, 2, 1, 3: pairs (0, 1) and (2, 3) in 16-bit lanes
    const uint32_t a = (v & 0x000F000Fu) | 0x64006400u, b = ((v >> 8) & 0x000F000Fu) | 0x64006400u;
    p01 = *reinterpret_cast<const __half2*>(&a);
    p23 = *reinterpret_cast<const __half2*>(&b);
}
__device__ __forceinline__ void u8_pairs(uint32_t w, __half2& p01, __half2& p23) {
    const uint32_t v = __byte_perm(w, 0, 0x3120);
    const uint32_t a = (v & 0x00FF00FFu) | 0x64006400u, b = ((v >> 8) & 0x00FF00FFu) | 0x64006400u;
    p01 = *reinterpret_cast<const __half2*>(&a);
    p23 = *reinterpret_cast<const __half2*>(&b);
}

// PTX prmt in its default mode: byte n of the result is byte (nibble n of sel) of {b, a} (a: bytes 0..3), for the
// low 16 bits of sel. Unlike __byte_perm, which defines only the low 3 bits of each nibble and so has the compiler
// clear bit 3 (PRMT's sign-replicate flag) of a selector it cannot see, the selector goes in as it is: callers keep
// bit 3 of every nibble clear.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
    return d;
}

// Bytes x in [0, 15] minus z in [0, 15] as signed bytes: x + 0x80 - z stays inside its byte (0x71 .. 0x8f), and
// flipping bit 7 turns that excess-128 value into two's complement. Two instructions for four values.
__device__ __forceinline__ uint32_t sub_u4_bytes(uint32_t x, uint32_t z) {
    return (x + (0x80u - z) * 0x01010101u) ^ 0x80808080u;
}

// A 16-byte chunk of nibbles in q4_0's order (byte j: element j low, element 16 + j high; q4_0, awq4 re-packed):
// nibble_bytes_minus, elements 0..31 minus z as signed bytes (v[i]: elements 4i .. 4i + 3); nibble_halves_scaled,
// elements 16h .. 16h + 15 as half2 (x - zo) d, with off = 1024 + zo (u4_pairs' 1024 + x).
__device__ __forceinline__ void nibble_bytes_minus(const uint4& q, uint32_t z, uint32_t (&v)[8]) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        v[i] = sub_u4_bytes(w[i] & 0x0F0F0F0Fu, z);
        v[4 + i] = sub_u4_bytes((w[i] >> 4) & 0x0F0F0F0Fu, z);
    }
}
__device__ __forceinline__ void nibble_halves_scaled(const uint4& q, int h, __half2 off, __half2 d, __half2 (&out)[8]) {
    const uint32_t w[4] = {q.x >> (4 * h), q.y >> (4 * h), q.z >> (4 * h), q.w >> (4 * h)};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        u4_pairs(w[i], out[2 * i], out[2 * i + 1]);
        out[2 * i] = __hmul2(__hsub2(out[2 * i], off), d);
        out[2 * i + 1] = __hmul2(__hsub2(out[2 * i + 1], off), d);
    }
}

// A scale group of 0, 1, 2 or 4 bytes (format.cuh's scale_bytes) as one little-endian word; of 8 bytes (q4_K, q5_K:
// a pair of sub-blocks' scales and mins with their super-block's d and dmin) as a uint2
template <int B> __device__ __forceinline__ auto load_scale_word(const uint8_t* p) {
    if constexpr (B == 0) return uint32_t(0);
    else if constexpr (B == 1) return uint32_t(__ldg(p));
    else if constexpr (B == 2) return uint32_t(__ldg(reinterpret_cast<const uint16_t*>(p)));
    else if constexpr (B == 4) return uint32_t(__ldg(reinterpret_cast<const uint32_t*>(p)));
    else {
        static_assert(B == 8, "scale groups of 0, 1, 2, 4 or 8 bytes");
        return __ldg(reinterpret_cast<const uint2*>(p));
    }
}
// the type a format's scale group loads as (dot_split's and mmq_unpack's scw)
template <class D> using scale_word_t = decltype(load_scale_word<D::scale_bytes>(nullptr));
__device__ __forceinline__ float half_bits_to_f32(uint32_t bits) {
    return __half2float(__ushort_as_half(uint16_t(bits)));
}
// A scale word's two halves (low: .x) as one __half2 (not trivially copyable: no bit_cast)
__device__ __forceinline__ __half2 half2_of_word(uint32_t w) {
    __half2 h;
    memcpy(&h, &w, sizeof(h));
    return h;
}

struct uint4x2 {
    uint4 lo, hi;
};
template <class C> __device__ __forceinline__ C ldg_chunk(const uint8_t* p);
template <> __device__ __forceinline__ uint2 ldg_chunk<uint2>(const uint8_t* p) {
    return __ldg(reinterpret_cast<const uint2*>(p));
}
template <> __device__ __forceinline__ uint4 ldg_chunk<uint4>(const uint8_t* p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}
template <> __device__ __forceinline__ uint4x2 ldg_chunk<uint4x2>(const uint8_t* p) {
    return {__ldg(reinterpret_cast<const uint4*>(p)), __ldg(reinterpret_cast<const uint4*>(p) + 1)};
}

// 8 int4-bit lanes of (a0, a1) by index 0..7 (elements 4i .. 4i+3 of the chunk)
__device__ __forceinline__ int act_int(const int4& a0, const int4& a1, int i) {
    const int4& a = i < 4 ? a0 : a1;
    switch (i & 3) {
    case 0: return a.x;
    case 1: return a.y;
    case 2: return a.z;
    default: return a.w;
    }
}

// dp4a of unsigned bytes a (0..255) with signed bytes b
__device__ __forceinline__ int dp4a_u8s8(uint32_t a, int b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// 16 nibble bytes in q4_0 / q4_1 order (byte j: element j low, element 16 + j high) dotted with elements 0..15 (a0)
// and 16..31 (a1) of an activation chunk, times 16, exactly: the low nibbles masked (one op a word), the high ones
// masked in place (value 16 q, dotted as unsigned bytes) rather than shifted down. |result| <= 16 * 32 * 15 * 128.
// dot_nibble_halves keeps the two halves apart: (sum over elements 0..15, 16 x sum over 16..31)
__device__ __forceinline__ int2 dot_nibble_halves(const uint4& q, int4 a0, int4 a1) {
    int lo = __dp4a(int(q.x & 0x0F0F0F0Fu), a0.x, 0);
    lo = __dp4a(int(q.y & 0x0F0F0F0Fu), a0.y, lo);
    lo = __dp4a(int(q.z & 0x0F0F0F0Fu), a0.z, lo);
    lo = __dp4a(int(q.w & 0x0F0F0F0Fu), a0.w, lo);
    int hi = dp4a_u8s8(q.x & 0xF0F0F0F0u, a1.x, 0);
    hi = dp4a_u8s8(q.y & 0xF0F0F0F0u, a1.y, hi);
    hi = dp4a_u8s8(q.z & 0xF0F0F0F0u, a1.z, hi);
    hi = dp4a_u8s8(q.w & 0xF0F0F0F0u, a1.w, hi);
    return make_int2(lo, hi);
}
__device__ __forceinline__ int dot_nibbles16_x16(const uint4& q, int4 a0, int4 a1) {
    const int2 s = dot_nibble_halves(q, a0, a1);
    return s.x * 16 + s.y;
}
// The sum of an activation chunk's 32 values (the same in every row a lane dots it with: the compiler keeps one)
__device__ __forceinline__ int act_sum32(int4 a0, int4 a1) {
    int s = __dp4a(0x01010101, a0.x, 0);
    s = __dp4a(0x01010101, a0.y, s);
    s = __dp4a(0x01010101, a0.z, s);
    s = __dp4a(0x01010101, a0.w, s);
    s = __dp4a(0x01010101, a1.x, s);
    s = __dp4a(0x01010101, a1.y, s);
    s = __dp4a(0x01010101, a1.z, s);
    return __dp4a(0x01010101, a1.w, s);
}
// 2-bit chunks (tq2_0, i2_s): the 32 codes of a chunk re-encoded at upload into 8 bytes, byte i (0..7) holding
// element i + 8n in bits 2n..2n+1; then word & (3 << 2n) is 4^n times 4 consecutive elements, one dp4a each.
TS_HD void pack_2bit_chunk(const int* codes, uint8_t* out) {
    for (int i = 0; i < 8; i++) {
        uint8_t b = 0;
        for (int n = 0; n < 4; n++) b = uint8_t(b | (codes[i + 8 * n] & 3) << (2 * n));
        out[i] = b;
    }
}
// 64 x sum code q_a over a chunk, exactly: each 2-bit field is dotted in place (masked, not shifted down: the field
// at bits 2n weighs 4^n; the top one reaches 192, so its bytes are dotted as unsigned), and the four sums are weighed
// to 64 by three multiply-adds. |result| <= 64 * 32 * 3 * 128 < 2^24, so it converts to float exactly, and a scale
// taken / 64 (a power of two) gives the product the unshifted sum would (same bits). Against shifting each field
// down: 52 instead of 57 instructions a lane step of two rows, yet the same speed (H200, 2026-11-29, 8B i2_s tg128
// 801.8 / 797.2 vs 798.2 / 785.5 t/s; gate + up 12.7 us in ncu either way: a warp's fixed costs dominate).
// dot_2bit_fields: the four fields' sums apart, field n = 4^n x the dot of elements 8n .. 8n + 7 (q2_K's scales
// differ between elements 0..15 and 16..31)
__device__ __forceinline__ int4 dot_2bit_fields(uint2 q, int4 a0, int4 a1) {
    int s0 = __dp4a(int(q.x & 0x03030303u), a0.x, 0);
    s0 = __dp4a(int(q.y & 0x03030303u), a0.y, s0);
    int s1 = __dp4a(int(q.x & 0x0C0C0C0Cu), a0.z, 0);
    s1 = __dp4a(int(q.y & 0x0C0C0C0Cu), a0.w, s1);
    int s2 = __dp4a(int(q.x & 0x30303030u), a1.x, 0);
    s2 = __dp4a(int(q.y & 0x30303030u), a1.y, s2);
    int s3 = dp4a_u8s8(q.x & 0xC0C0C0C0u, a1.z, 0);
    s3 = dp4a_u8s8(q.y & 0xC0C0C0C0u, a1.w, s3);
    return make_int4(s0, s1, s2, s3);
}
__device__ __forceinline__ int dot_2bit_chunk_x64(uint2 q, int4 a0, int4 a1) {
    const int4 s = dot_2bit_fields(q, a0, a1);
    return ((s.x * 4 + s.y) * 4 + s.z) * 4 + s.w;
}
// codes of elements 16h .. 16h+15 as 8 half2 of (1024 + code)
__device__ __forceinline__ void halves_2bit_chunk(uint2 q, int h, __half2 (&out)[8]) {
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const int n = 2 * h + t;
        u8_pairs((q.x >> (2 * n)) & 0x03030303u, out[4 * t], out[4 * t + 1]);
        u8_pairs((q.y >> (2 * n)) & 0x03030303u, out[4 * t + 2], out[4 * t + 3]);
    }
}

// The i-th int (4 consecutive int8 / 8 nibbles) of p when p is only 2-byte aligned (q4_0, q8_0: blocks of 18 and
// 34 bytes): two 16-bit loads.
__device__ __forceinline__ int load_int_b2(const void* p, int i) {
    const uint16_t* x = static_cast<const uint16_t*>(p);
    return int(uint32_t(x[2 * i]) | (uint32_t(x[2 * i + 1]) << 16));
}
// The i-th int of p when p is 4-byte aligned (q4_1, q8_1: blocks of 20 and 36 bytes).
__device__ __forceinline__ int load_int_b4(const void* p, int i) {
    return static_cast<const int*>(p)[i];
}

} // namespace tessera::cuda
