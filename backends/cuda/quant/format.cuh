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
// A format with f16 activations (AWQ) or its own activation format declares another `act`; mmv.cu branches on it
// with `if constexpr`, not with a copied kernel.
#pragma once

#include "quant/format.h"

#include <cuda_fp16.h>

#include <cstdint>

namespace tessera::cuda {

template <class F> struct cuda_format { static constexpr bool available = false; };

// f16 bits -> f32 in one instruction (same value as the reference fp16_to_fp32).
__device__ __forceinline__ float f16_to_f32(f16 h) {
    return __half2float(__ushort_as_half(h.bits));
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
