// q4_0.cuh: the CUDA fast path of q4_0 (layout and reference: quant/q4_0.h) against q8_1 activations.
// Nibble unpack with masks (one LOP3 each), integer dot with __dp4a, the -8 offset folded in exactly:
//   sum_j (q_w[j] - 8) q_a[j] = sum_j q_w[j] q_a[j] - 8 sum_j q_a[j]   (integers, as the reference)
#pragma once

#include "backends/cuda/quant/format.cuh"

namespace tessera::cuda {

template <> struct cuda_format<q4_0> {
    static constexpr bool available = true;
    using block = block_q4_0;
    using act = block_q8_1;
    // Chunk c (0, 1) is nibble bytes [8c, 8c + 8): elements 8c .. 8c+7 (low nibbles) and 16+8c .. 16+8c+7 (high).
    static constexpr int n_chunks = 2;
    struct chunk {
        int q[2]; // 4 nibble bytes each
        float d;
    };

    __device__ static chunk load(const block& w, int c) {
        return {{load_int_b2(w.qs, 2 * c), load_int_b2(w.qs, 2 * c + 1)}, f16_to_f32(w.d)};
    }
    __device__ static float dot(const chunk& w, const act& a, int c) {
        int sumi = 0, suma = 0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int a_lo = load_int_b4(a.qs, 2 * c + i);     // elements 8c + 4i ..
            const int a_hi = load_int_b4(a.qs, 4 + 2 * c + i); // elements 16 + 8c + 4i ..
            sumi = __dp4a(w.q[i] & 0x0F0F0F0F, a_lo, sumi);
            sumi = __dp4a((w.q[i] >> 4) & 0x0F0F0F0F, a_hi, sumi);
            suma = __dp4a(0x01010101, a_lo, suma);
            suma = __dp4a(0x01010101, a_hi, suma);
        }
        return float(sumi - 8 * suma) * (w.d * f16_to_f32(a.d));
    }
};

} // namespace tessera::cuda
