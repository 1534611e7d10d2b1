// q2_k.h: ggml's Q2_K, super-blocks of 256 values in 16 sub-blocks of 16; 84 bytes, 2.625 bits per weight. Byte s of
// scales holds sub-block s's 4-bit scale (low nibble) and 4-bit min (high nibble) against the f16 d and dmin:
// x = d sc_s q - dmin m_s, q = 0..3. Element order (FORMATS.md §2): for half h = 0, 1 and l = 0..31, byte qs[32h + l]
// holds elements 128h + l, + 32, + 64, + 96 in bits 0-1, 2-3, 4-5, 6-7. Sub-block s = element / 16. The usual
// weights of "Q2_K" files (with q3_K / q4_K attn_v, ffn_down and attn_output, q6_K output).
#pragma once

#include "quant/k_quants.h"

namespace tessera {

struct block_q2_k {
    uint8_t scales[16]; // (scale, min) nibbles of each sub-block
    uint8_t qs[64];     // 2-bit levels
    f16 d;              // super-scale of the sub-block scales
    f16 dmin;           // super-scale of the sub-block mins
};
static_assert(sizeof(block_q2_k) == 84, "q2_K block must match GGUF (16 scale bytes, 64 qs, f16 d, f16 dmin)");

struct q2_k {
    using block = block_q2_k;
    using dot_block = block_q8_k;
    static constexpr type id = type::q2_k;
    static constexpr const char* name = "q2_K";
    static constexpr int block_size = 256;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_k;

    // element e's 2-bit level
    TS_HD static int level(const block& b, int e) {
        const int h = e / 128, r = e % 128;
        return (b.qs[32 * h + r % 32] >> (2 * (r / 32))) & 3;
    }

    // ggml's reference quantizer (no importance matrix): llama-quantize's bytes [quantize_row_q2_K_ref]. Each sub-block
    // gets a scale and min by search_scale_min (weights |x|, absolute error), both quantized to 4 bits against
    // d = max scale / 15 and dmin = max min / 15; the levels are taken again from the rounded scales.
    static void quantize(const float* x, block& y) {
        uint8_t L[256];
        float sc[16], mn[16], w[16];
        float max_scale = 0, max_min = 0;
        for (int s = 0; s < 16; s++) {
            for (int l = 0; l < 16; l++) w[l] = std::fabs(x[16 * s + l]);
            sc[s] = kq::search_scale_min(16, 3, x + 16 * s, w, L + 16 * s, &mn[s], -0.5f, 0.1f, 15, true);
            if (sc[s] > max_scale) max_scale = sc[s];
            if (mn[s] > max_min) max_min = mn[s];
        }
        if (max_scale > 0) {
            const float iscale = 15.0f / max_scale;
            for (int s = 0; s < 16; s++) y.scales[s] = uint8_t(nearest_int_ggml(iscale * sc[s]));
            y.d = to_f16(max_scale / 15.0f);
        } else {
            for (int s = 0; s < 16; s++) y.scales[s] = 0;
            y.d = to_f16(0.0f);
        }
        if (max_min > 0) {
            const float iscale = 15.0f / max_min;
            for (int s = 0; s < 16; s++) y.scales[s] = uint8_t(y.scales[s] | (nearest_int_ggml(iscale * mn[s]) << 4));
            y.dmin = to_f16(max_min / 15.0f);
        } else {
            y.dmin = to_f16(0.0f);
        }
        for (int s = 0; s < 16; s++) {
            const float d = to_f32(y.d) * float(y.scales[s] & 0xF);
            if (d == 0.0f) continue;
            const float dm = to_f32(y.dmin) * float(y.scales[s] >> 4);
            for (int i = 0; i < 16; i++)
                L[16 * s + i] = uint8_t(std::clamp(nearest_int_ggml((x[16 * s + i] + dm) / d), 0, 3));
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++)
                y.qs[32 * h + l] = uint8_t(L[128 * h + l] | (L[128 * h + 32 + l] << 2) | (L[128 * h + 64 + l] << 4) |
                                           (L[128 * h + 96 + l] << 6));
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d), dmin = to_f32(b.dmin);
        for (int s = 0; s < 16; s++) {
            const float d1 = d * float(b.scales[s] & 0xF), m1 = dmin * float(b.scales[s] >> 4);
            for (int i = 0; i < 16; i++) y[16 * s + i] = d1 * float(level(b, 16 * s + i)) - m1;
        }
    }
    // d_a (d sum_s sc_s sum q q_a - dmin sum_s m_s sum q_a), the integer sums exact
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0, summ = 0;
        for (int s = 0; s < 16; s++) {
            int32_t t = 0;
            for (int i = 0; i < 16; i++) t += level(w, 16 * s + i) * int32_t(a.qs[16 * s + i]);
            sumi += int32_t(w.scales[s] & 0xF) * t;
            summ += int32_t(w.scales[s] >> 4) * int32_t(a.bsums[s]);
        }
        return a.d * to_f32(w.d) * float(sumi) - a.d * to_f32(w.dmin) * float(summ);
    }
};

} // namespace tessera
