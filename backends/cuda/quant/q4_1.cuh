// q4_1.cuh: the CUDA fast path of q4_1 (layout and reference: quant/q4_1.h) against q8_1 activations.
// Nibble unpack with masks, integer dot with __dp4a, and the minimum folded in through q8_1's s = d_a sum(q_a):
//   sum_j (d q_w[j] + m) d_a q_a[j] = d d_a sum_j q_w[j] q_a[j] + m s        (the reference's formula)
#pragma once

#include "backends/cuda/quant/format.cuh"

namespace tessera::cuda {

template <> struct cuda_format<q4_1> {
    static constexpr bool available = true;
    using block = block_q4_1;
    using act = block_q8_1;
    // Chunk c (0, 1) is nibble bytes [8c, 8c + 8): elements 8c .. 8c+7 and 16+8c .. 16+8c+7; chunk 0 adds m s.
    static constexpr int n_chunks = 2;
    struct chunk {
        int q[2];
        float d, m;
    };

    __device__ static chunk load(const block& w, int c) {
        return {{load_int_b4(w.qs, 2 * c), load_int_b4(w.qs, 2 * c + 1)}, f16_to_f32(w.d), f16_to_f32(w.m)};
    }
    __device__ static float dot(const chunk& w, const act& a, int c) {
        int sumi = 0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            sumi = __dp4a(w.q[i] & 0x0F0F0F0F, load_int_b4(a.qs, 2 * c + i), sumi);
            sumi = __dp4a((w.q[i] >> 4) & 0x0F0F0F0F, load_int_b4(a.qs, 4 + 2 * c + i), sumi);
        }
        const float r = w.d * f16_to_f32(a.d) * float(sumi);
        return c == 0 ? r + w.m * f16_to_f32(a.s) : r;
    }
};

} // namespace tessera::cuda
