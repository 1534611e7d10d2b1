// q4_1.h: 32 4-bit values, f16 scale d and f16 minimum m; 20 bytes, 5 bits per weight. x = q * d + m.
// Element order: qs[j] low nibble = element j, high nibble = element j + 16 (j = 0..15).
// Quantize (ggml): d = (max - min) / 15, m = min, q = min(15, trunc((x - min) / d + 0.5)).
#pragma once

#include "quant/q8_1.h"

#include <algorithm>

namespace tessera {

struct block_q4_1 {
    f16 d;          // scale
    f16 m;          // minimum
    uint8_t qs[16]; // nibbles: low = element j, high = element j + 16
};
static_assert(sizeof(block_q4_1) == 20, "q4_1 block must match GGUF (f16 d, f16 m + 16 bytes of nibbles)");

struct q4_1 {
    using block = block_q4_1;
    using dot_block = block_q8_1;
    static constexpr type id = type::q4_1;
    static constexpr const char* name = "q4_1";
    static constexpr int block_size = 32;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_1; // format of dot_block

    static void quantize(const float* x, block& y) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < 32; j++) {
            mn = std::min(mn, x[j]);
            mx = std::max(mx, x[j]);
        }
        const float d = (mx - mn) / 15.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y.d = to_f16(d);
        y.m = to_f16(mn);
        for (int j = 0; j < 16; j++) {
            const int q0 = std::min(15, int((x[j] - mn) * id + 0.5f));
            const int q1 = std::min(15, int((x[j + 16] - mn) * id + 0.5f));
            y.qs[j] = uint8_t(q0 | (q1 << 4));
        }
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d), m = to_f32(b.m);
        for (int j = 0; j < 16; j++) {
            y[j] = float(b.qs[j] & 0xf) * d + m;
            y[j + 16] = float(b.qs[j] >> 4) * d + m;
        }
    }
    // sum_j (d_w q_w + m) (d_a q_a) = d_w d_a sum(q_w q_a) + m s_a
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += int32_t(w.qs[j] & 0xf) * int32_t(a.qs[j]);
            sumi += int32_t(w.qs[j] >> 4) * int32_t(a.qs[j + 16]);
        }
        return to_f32(w.d) * to_f32(a.d) * float(sumi) + to_f32(w.m) * to_f32(a.s);
    }
};

} // namespace tessera
