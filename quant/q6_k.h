// q6_k.h: ggml's Q6_K, super-blocks of 256 values in 16 sub-blocks of 16 with signed 8-bit scales against one f16 d;
// 210 bytes, 6.5625 bits per weight. x = d sc_s (q - 32), q = 0..63. For half h = 0, 1 (elements 128h ..) and l =
// 0..31 (FORMATS.md §2): element 128h + l takes the low nibble of ql[64h + l] and bits 0-1 of qh[32h + l], element
// + 32 the low nibble of ql[64h + 32 + l] and bits 2-3, + 64 the high nibble of ql[64h + l] and bits 4-5, + 96 the
// high nibble of ql[64h + 32 + l] and bits 6-7. Sub-block s = element / 16. The output (and tied embedding) tensor of
// most downloaded files, whatever their other weights' type.
#pragma once

#include "quant/k_quants.h"

namespace tessera {

struct block_q6_k {
    uint8_t ql[128];   // low 4 bits
    uint8_t qh[64];    // high 2 bits
    int8_t scales[16]; // sub-block scales
    f16 d;             // super-scale
};
static_assert(sizeof(block_q6_k) == 210, "q6_K block must match GGUF (128 + 64 + 16 bytes, then f16 d)");

struct q6_k {
    using block = block_q6_k;
    using dot_block = block_q8_k;
    static constexpr type id = type::q6_k;
    static constexpr const char* name = "q6_K";
    static constexpr int block_size = 256;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_k;

    // element e's level 0..63
    TS_HD static int level(const block& b, int e) {
        const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
        const uint8_t lo = b.ql[64 * h + 32 * (quarter & 1) + l];
        const int low = quarter < 2 ? lo & 0xF : lo >> 4;
        return low | (((b.qh[32 * h + l] >> (2 * quarter)) & 3) << 4);
    }

    // [quantize_row_q6_K_ref]
    static void quantize(const float* x, block& y) {
        int8_t L[256];
        float scales[16];
        float max_scale = 0, max_abs_scale = 0;
        for (int s = 0; s < 16; s++) {
            scales[s] = kq::search_scale_sym(16, 32, x + 16 * s, L + 16 * s);
            if (std::fabs(scales[s]) > max_abs_scale) {
                max_abs_scale = std::fabs(scales[s]);
                max_scale = scales[s];
            }
        }
        if (max_abs_scale < kq::group_max_eps) {
            y = block{};
            return;
        }
        const float iscale = -128.0f / max_scale;
        y.d = to_f16(1.0f / iscale);
        for (int s = 0; s < 16; s++) y.scales[s] = int8_t(std::min(127, nearest_int_ggml(iscale * scales[s])));
        for (int s = 0; s < 16; s++) {
            const float d = to_f32(y.d) * float(y.scales[s]);
            if (d == 0.0f) continue;
            for (int i = 0; i < 16; i++)
                L[16 * s + i] = int8_t(std::clamp(nearest_int_ggml(x[16 * s + i] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const int q1 = L[128 * h + l], q2 = L[128 * h + 32 + l], q3 = L[128 * h + 64 + l],
                          q4 = L[128 * h + 96 + l];
                y.ql[64 * h + l] = uint8_t((q1 & 0xF) | ((q3 & 0xF) << 4));
                y.ql[64 * h + 32 + l] = uint8_t((q2 & 0xF) | ((q4 & 0xF) << 4));
                y.qh[32 * h + l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int e = 0; e < 256; e++) y[e] = d * float(b.scales[e / 16]) * float(level(b, e) - 32);
    }
    // d d_a sum_s sc_s sum (q - 32) q_a, exactly in integers
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int s = 0; s < 16; s++) {
            int32_t t = 0;
            for (int i = 0; i < 16; i++) t += (level(w, 16 * s + i) - 32) * int32_t(a.qs[16 * s + i]);
            sumi += int32_t(w.scales[s]) * t;
        }
        return a.d * to_f32(w.d) * float(sumi);
    }
};

} // namespace tessera
