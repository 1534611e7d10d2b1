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
    TS_HD static void dequantize(const block& b, float* y) { kq::dequantize_asym<q4_k>(b, y); }
    TS_HD static float vec_dot(const block& w, const dot_block& a) { return kq::vec_dot_asym<q4_k>(w, a); }
};

} // namespace tessera
