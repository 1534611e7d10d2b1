// q5_k.h: ggml's Q5_K, q4_K with a fifth bit; 176 bytes, 5.5 bits per weight. x = d sc_j q - dmin m_j, q = 0..31.
// The low 4 bits as q4_K's nibbles; the high bit of element 64c + l is bit 2c of qh[l], of element 64c + 32 + l bit
// 2c + 1 (l = 0..31). The usual weights of "Q5_K_M" / "Q5_K_S" files (and some tensors of "Q4_K_M" ones).
#pragma once

#include "quant/k_quants.h"

namespace tessera {

struct block_q5_k {
    f16 d;
    f16 dmin;
    uint8_t scales[12]; // eight 6-bit (scale, min) pairs, as q4_K's
    uint8_t qh[32];     // high bits
    uint8_t qs[128];    // low nibbles
};
static_assert(sizeof(block_q5_k) == 176, "q5_K block must match GGUF (f16 d, f16 dmin, 12 + 32 + 128 bytes)");

struct q5_k {
    using block = block_q5_k;
    using dot_block = block_q8_k;
    static constexpr type id = type::q5_k;
    static constexpr const char* name = "q5_K";
    static constexpr int block_size = 256;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_k;

    TS_HD static int level(const block& b, int e) {
        const int c = e / 64, l = e % 32, hi = (e % 64) / 32; // hi: the high nibble's sub-block
        const int low = hi ? b.qs[32 * c + l] >> 4 : b.qs[32 * c + l] & 0xF;
        return low | (((b.qh[l] >> (2 * c + hi)) & 1) << 4);
    }

    // [quantize_row_q5_K_ref]
    static void quantize(const float* x, block& y) {
        uint8_t L[256];
        kq::quantize_super_asym(x, 31, -0.5f, 15, L, y.scales, y.d, y.dmin);
        for (int l = 0; l < 32; l++) y.qh[l] = 0;
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                const int l1 = L[64 * c + l], l2 = L[64 * c + 32 + l];
                y.qh[l] = uint8_t(y.qh[l] | ((l1 >> 4) << (2 * c)) | ((l2 >> 4) << (2 * c + 1)));
                y.qs[32 * c + l] = uint8_t((l1 & 0xF) | ((l2 & 0xF) << 4));
            }
    }
    TS_HD static void dequantize(const block& b, float* y) { kq::dequantize_asym<q5_k>(b, y); }
    TS_HD static float vec_dot(const block& w, const dot_block& a) { return kq::vec_dot_asym<q5_k>(w, a); }
};

} // namespace tessera
