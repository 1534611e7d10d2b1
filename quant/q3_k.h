// q3_k.h: ggml's Q3_K, super-blocks of 256 values in 16 sub-blocks of 16 with signed 6-bit scales against one f16 d;
// 110 bytes, 3.4375 bits per weight. x = d (sc_s - 32) (q - 4), q = 0..7: the low 2 bits in qs as q2_K packs them
// (byte qs[32h + l]: elements 128h + l, + 32, + 64, + 96 in bits 0-1, 2-3, 4-5, 6-7), the high bit of element
// 128h + 32n + l in bit 4h + n of hmask[l]. Scale codes (FORMATS.md §2): sub-block s's low 4 bits are the low nibble
// of scales[s] (s < 8) or the high nibble of scales[s - 8], its high 2 bits bits 2 (s / 4) .. +1 of scales[8 + s % 4].
// The usual weights of "Q3_K_S / _M / _L" files (and the attn_v / ffn_down / attn_output tensors of "Q2_K" ones).
#pragma once

#include "quant/k_quants.h"

#include <cstring>

namespace tessera {

struct block_q3_k {
    uint8_t hmask[32];  // high bits
    uint8_t qs[64];     // low 2 bits
    uint8_t scales[12]; // sixteen 6-bit scale codes
    f16 d;              // super-scale
};
static_assert(sizeof(block_q3_k) == 110, "q3_K block must match GGUF (32 hmask, 64 qs, 12 scale bytes, f16 d)");

struct q3_k {
    using block = block_q3_k;
    using dot_block = block_q8_k;
    static constexpr type id = type::q3_k;
    static constexpr const char* name = "q3_K";
    static constexpr int block_size = 256;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_k;

    // element e's 3-bit level (q; the value is q - 4)
    TS_HD static int level(const block& b, int e) {
        const int h = e / 128, r = e % 128, n = r / 32, l = r % 32;
        return ((b.qs[32 * h + l] >> (2 * n)) & 3) | (((b.hmask[l] >> (4 * h + n)) & 1) << 2);
    }
    // sub-block s's scale, -32..31
    TS_HD static int scale(const block& b, int s) {
        const int lo = s < 8 ? b.scales[s] & 0xF : b.scales[s - 8] >> 4;
        return (lo | (((b.scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4)) - 32;
    }

    // ggml's reference quantizer (no importance matrix): llama-quantize's bytes [quantize_row_q3_K_ref]. Each sub-block
    // gets a scale by search_scale_q3; they are quantized to 6 bits against d = -(the one of largest magnitude) / 32,
    // and the levels taken again from the rounded scales.
    static void quantize(const float* x, block& y) {
        int8_t L[256];
        float sc[16];
        float max_scale = 0, amax = 0;
        for (int s = 0; s < 16; s++) {
            sc[s] = kq::search_scale_q3(16, 4, x + 16 * s, L + 16 * s);
            if (std::fabs(sc[s]) > amax) {
                amax = std::fabs(sc[s]);
                max_scale = sc[s];
            }
        }
        std::memset(y.scales, 0, 12);
        if (max_scale != 0.0f) {
            const float iscale = -32.0f / max_scale;
            for (int s = 0; s < 16; s++) {
                const int l = std::clamp(int(int8_t(nearest_int_ggml(iscale * sc[s]))), -32, 31) + 32;
                if (s < 8) y.scales[s] = uint8_t(l & 0xF);
                else y.scales[s - 8] = uint8_t(y.scales[s - 8] | ((l & 0xF) << 4));
                y.scales[8 + s % 4] = uint8_t(y.scales[8 + s % 4] | ((l >> 4) << (2 * (s / 4))));
            }
            y.d = to_f16(1.0f / iscale);
        } else {
            y.d = to_f16(0.0f);
        }
        for (int s = 0; s < 16; s++) {
            const float d = to_f32(y.d) * float(scale(y, s));
            if (d == 0.0f) continue;
            for (int i = 0; i < 16; i++)
                L[16 * s + i] = int8_t(std::clamp(nearest_int_ggml(x[16 * s + i] / d), -4, 3) + 4);
        }
        std::memset(y.hmask, 0, 32);
        for (int e = 0; e < 256; e++) {
            // ggml's counter order: element e's high bit at hmask[e % 32], bit e / 32
            if (L[e] > 3) {
                y.hmask[e % 32] = uint8_t(y.hmask[e % 32] | (1 << (e / 32)));
                L[e] = int8_t(L[e] - 4);
            }
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++)
                y.qs[32 * h + l] = uint8_t(L[128 * h + l] | (L[128 * h + 32 + l] << 2) | (L[128 * h + 64 + l] << 4) |
                                           (L[128 * h + 96 + l] << 6));
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int s = 0; s < 16; s++) {
            const float d1 = d * float(scale(b, s));
            for (int i = 0; i < 16; i++) y[16 * s + i] = d1 * float(level(b, 16 * s + i) - 4);
        }
    }
    // d d_a sum_s sc_s sum (q - 4) q_a, the integer part exact
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int s = 0; s < 16; s++) {
            int32_t t = 0;
            for (int i = 0; i < 16; i++) t += (level(w, 16 * s + i) - 4) * int32_t(a.qs[16 * s + i]);
            sumi += scale(w, s) * t;
        }
        return a.d * to_f32(w.d) * float(sumi);
    }
};

} // namespace tessera
