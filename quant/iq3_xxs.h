// iq3_xxs.h: ggml's IQ3_XXS, super-blocks of 256 values in 8 sub-blocks of 32; 98 bytes, 3.0625 bits per weight.
// Each group of 4 values is one point of a 256-point grid (iq3_grid.h, levels 4 .. 62) by an 8-bit index; each group
// of 8 values shares 7 sign bits (the 8th sign makes the count of minus signs even); each sub-block a 4-bit scale ls.
// Layout: f16 d; qs[0 .. 64): the grid indices, 8 a sub-block (index 2l + h: values 8l + 4h .. 8l + 4h + 3); qs[64 ..
// 96): one 32-bit word a sub-block, its sign groups l = 0..3 in bits 7l .. 7l + 6 and ls in bits 28..31.
// x = d (2 ls + 1) / 4 x grid value x sign. The dot partner is q8_K, as ggml's CPU.
// Quantize: ggml's search without an importance matrix (quant/iq3_quantize.cpp).
#pragma once

#include "ggml-like/fp16.h"
#include "ggml-like/types.h"
#include "quant/iq3_grid.h"
#include "quant/q8_k.h"

#include <cstring>

namespace tessera {

struct block_iq3_xxs {
    f16 d;
    uint8_t qs[96]; // 64 grid indices, then 8 words of signs and scales
};
static_assert(sizeof(block_iq3_xxs) == 98, "iq3_xxs block must match GGUF (f16 d, 64 grid indices, 8 sign words)");

namespace iq3 {
void quantize_xxs(const float* x, block_iq3_xxs& y); // iq3_quantize.cpp
}

struct iq3_xxs {
    using block = block_iq3_xxs;
    using dot_block = block_q8_k;
    static constexpr type id = type::iq3_xxs;
    static constexpr const char* name = "iq3_xxs";
    static constexpr int block_size = 256;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_k;

    // sub-block s's sign-and-scale word
    TS_HD static uint32_t word(const block& b, int s) {
        uint32_t w;
        std::memcpy(&w, b.qs + 64 + 4 * s, 4);
        return w;
    }
    // the 32 values of sub-block s as signed integers (grid value x sign), in element order
    TS_HD static void values(const block& b, int s, int (&v)[32]) {
        const uint32_t w = word(b, s);
        for (int l = 0; l < 4; l++) {
            const uint8_t signs = iq3::sign_byte(w >> (7 * l) & 127);
            for (int h = 0; h < 2; h++) {
                const uint32_t g = iq3::xxs_point(b.qs[8 * s + 2 * l + h]);
                for (int k = 0; k < 4; k++) {
                    const int j = 4 * h + k, val = int(g >> (8 * k) & 0xff);
                    v[8 * l + j] = signs >> j & 1 ? -val : val;
                }
            }
        }
    }

    static void quantize(const float* x, block& y) { iq3::quantize_xxs(x, y); }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int s = 0; s < 8; s++) {
            const float db = d * (0.5f + float(word(b, s) >> 28)) * 0.5f; // ggml's expression, its rounding
            int v[32];
            values(b, s, v);
            for (int j = 0; j < 32; j++) y[32 * s + j] = db * float(v[j]);
        }
    }
    // d d_a / 4 sum_s (2 ls_s + 1) sum grid q_a, the integer part exact
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int s = 0; s < 8; s++) {
            int v[32], t = 0;
            values(w, s, v);
            for (int j = 0; j < 32; j++) t += v[j] * int32_t(a.qs[32 * s + j]);
            sumi += int32_t(2 * (word(w, s) >> 28) + 1) * t;
        }
        return 0.25f * (to_f32(w.d) * a.d * float(sumi));
    }
};

} // namespace tessera
