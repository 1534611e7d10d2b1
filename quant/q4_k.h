// q4_k.h: ggml's Q4_K, super-blocks of 256 values in 8 sub-blocks of 32; 144 bytes, 4.5 bits per weight. Each
// sub-block j has a 6-bit scale sc_j and min m_j (12 packed bytes, k_quants.h scale_min) against the f16 d and dmin:
// x = d sc_j q - dmin m_j, q = 0..15. Element order: for c = 0..3, qs[32c + l] low nibble = element 64c + l (sub-block
// 2c), high nibble = element 64c + 32 + l (sub-block 2c + 1). The usual weights of "Q4_K_M" / "Q4_K_S" files.
// Activations for the dot are q8_K (as ggml's CPU pairs them); the min term uses q8_K's sums of 16.
#pragma once

#include "quant/k_quants.h"

namespace tessera {

struct block_q4_k {
    f16 d;              // super-scale of the sub-block scales
    f16 dmin;           // super-scale of the sub-block mins
    uint8_t scales[12]; // eight 6-bit (scale, min) pairs
    uint8_t qs[128];    // nibbles
};
static_assert(sizeof(block_q4_k) == 144, "q4_K block must match GGUF (f16 d, f16 dmin, 12 scale bytes, 128 qs)");

struct q4_k {
    using block = block_q4_k;
    using dot_block = block_q8_k;
    static constexpr type id = type::q4_k;
    static constexpr const char* name = "q4_K"; // ggml's spelling
    static constexpr int block_size = 256;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_k;

    // element e's 4-bit level
    TS_HD static int level(const block& b, int e) {
        const int c = e / 64, l = e % 32;
        return (e % 64) < 32 ? b.qs[32 * c + l] & 0xF : b.qs[32 * c + l] >> 4;
    }

    // ggml's reference quantizer (no importance matrix): llama-quantize's bytes [quantize_row_q4_K_ref]
    static void quantize(const float* x, block& y) {
        uint8_t L[256];
        kq::quantize_super_asym(x, 15, -1.0f, 20, L, y.scales, y.d, y.dmin);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) y.qs[32 * c + l] = uint8_t(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d), dmin = to_f32(b.dmin);
        for (int j = 0; j < 8; j++) {
            int sc, m;
            kq::scale_min(b.scales, j, sc, m);
            const float d1 = d * float(sc), m1 = dmin * float(m);
            for (int l = 0; l < 32; l++) y[32 * j + l] = d1 * float(level(b, 32 * j + l)) - m1;
        }
    }
    // d_a (d sum_j sc_j sum q q_a - dmin sum_j m_j sum q_a): the integer sums are exact
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            int sc, m;
            kq::scale_min(w.scales, j, sc, m);
            int32_t s = 0;
            for (int l = 0; l < 32; l++) s += level(w, 32 * j + l) * int32_t(a.qs[32 * j + l]);
            sumi += sc * s;
            summ += m * (int32_t(a.bsums[2 * j]) + int32_t(a.bsums[2 * j + 1]));
        }
        return a.d * to_f32(w.d) * float(sumi) - a.d * to_f32(w.dmin) * float(summ);
    }
};

} // namespace tessera
