// iq3_s.h: ggml's IQ3_S, super-blocks of 256 values in 8 sub-blocks of 32; 110 bytes, 3.4375 bits per weight.
// Each group of 4 values is one point of a 512-point grid (iq3_grid.h, levels 1, 3, .., 15) by a 9-bit index; every
// value has its own sign bit; each sub-block a 4-bit scale ls.
// Layout: f16 d; qs[64]: the grid indices' low 8 bits, 8 a sub-block (index 2l + h: values 8l + 4h .. + 3); qh[8]: bit
// k of qh[s] is bit 8 of sub-block s's index k; signs[32]: 4 bytes a sub-block, bit j of byte l the sign of value
// 8l + j; scales[4]: sub-block 2i in the low nibble of scales[i], 2i + 1 in the high one.
// x = d (2 ls + 1) x grid value x sign. The dot partner is q8_K, as ggml's CPU.
// Quantize: ggml's search without an importance matrix (quant/iq3_quantize.cpp).
#pragma once

#include "ggml-like/fp16.h"
#include "ggml-like/types.h"
#include "quant/iq3_grid.h"
#include "quant/q8_k.h"

namespace tessera {

struct block_iq3_s {
    f16 d;
    uint8_t qs[64];
    uint8_t qh[8];
    uint8_t signs[32];
    uint8_t scales[4];
};
static_assert(sizeof(block_iq3_s) == 110, "iq3_s block must match GGUF (f16 d, 64 qs, 8 qh, 32 signs, 4 scales)");

namespace iq3 {
void quantize_s(const float* x, block_iq3_s& y); // iq3_quantize.cpp
}

struct iq3_s {
    using block = block_iq3_s;
    using dot_block = block_q8_k;
    static constexpr type id = type::iq3_s;
    static constexpr const char* name = "iq3_s";
    static constexpr int block_size = 256;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_k;

    // sub-block s's scale code ls (0..15)
    TS_HD static int scale(const block& b, int s) { return b.scales[s / 2] >> (4 * (s % 2)) & 0xf; }
    // grid index k (0..7) of sub-block s
    TS_HD static int index(const block& b, int s, int k) { return b.qs[8 * s + k] | (b.qh[s] >> k & 1) << 8; }
    // the 32 values of sub-block s as signed integers (grid value x sign), in element order
    TS_HD static void values(const block& b, int s, int (&v)[32]) {
        for (int k = 0; k < 8; k++) {
            const uint32_t g = iq3::s_point(index(b, s, k));
            for (int i = 0; i < 4; i++) {
                const int j = 4 * k + i, val = int(g >> (8 * i) & 0xff);
                v[j] = b.signs[4 * s + j / 8] >> (j % 8) & 1 ? -val : val;
            }
        }
    }

    static void quantize(const float* x, block& y) { iq3::quantize_s(x, y); }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int s = 0; s < 8; s++) {
            const float db = d * float(1 + 2 * scale(b, s));
            int v[32];
            values(b, s, v);
            for (int j = 0; j < 32; j++) y[32 * s + j] = db * float(v[j]);
        }
    }
    // d d_a sum_s (2 ls_s + 1) sum grid q_a, the integer part exact
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int s = 0; s < 8; s++) {
            int v[32], t = 0;
            values(w, s, v);
            for (int j = 0; j < 32; j++) t += v[j] * int32_t(a.qs[32 * s + j]);
            sumi += (2 * scale(w, s) + 1) * t;
        }
        return to_f32(w.d) * a.d * float(sumi);
    }
};

} // namespace tessera
