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
// Optional, the split layout for decode (ops/mmv_split.cu): at upload a 2-D weight is repacked into two arrays, all
// blocks' values [n][k/32][qs_bytes] and then all their scales [n][k/32][scale_bytes], so that a thread reads a block
// with 16-byte loads (the file's 18/20/34-byte blocks allow only 2- or 4-byte ones):
//   split                 true
//   qs_bytes, scale_bytes, qs_vecs (= qs_bytes / 16)
//   split_block(b, qs, sc)               host: one block into its two places
//   dot_split(q, sc, a0, a1, ds) -> float  the block dot against q8_1 activations given as elements 0..15 (a0),
//                                          16..31 (a1) and (d, s)
//   dequant_split(q, sc, h, out[8])        elements 16h .. 16h+15 of the block as 8 half2 in element order (the
//                                          prefill GEMM, ops/gemm.cu)
// A format with f16 activations (AWQ) or its own activation format declares another `act`; mmv.cu branches on it
// with `if constexpr`, not with a copied kernel.
#pragma once

#include "quant/format.h"

#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace tessera::cuda {

template <class F> struct cuda_format { static constexpr bool available = false; };

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
