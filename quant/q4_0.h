// q4_0.h: 32 4-bit values and one f16 scale; 18 bytes, 4.5 bits per weight. x = (q - 8) * d.
// Element order: qs[j] low nibble = element j, high nibble = element j + 16 (j = 0..15).
// Quantize (ggml): the element of largest |x| keeps its sign: d = vmax / -8, q = min(15, trunc(x / d + 8.5)).
#pragma once

#include "quant/q8_0.h"

namespace tessera {

struct block_q4_0 {
    f16 d;          // scale
    uint8_t qs[16]; // nibbles: low = element j, high = element j + 16
};
static_assert(sizeof(block_q4_0) == 18, "q4_0 block must match GGUF (f16 d + 16 bytes of nibbles)");

struct q4_0 {
    using block = block_q4_0;
    using dot_block = block_q8_0; // ggml's CPU dot partner for q4_0
    static constexpr type id = type::q4_0;
    static constexpr const char* name = "q4_0";
    static constexpr int block_size = 32;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_0; // format of dot_block

    static void quantize(const float* x, block& y) {
        float amax = 0.0f, vmax = 0.0f;
        for (int j = 0; j < 32; j++)
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                vmax = x[j];
            }
        const float d = vmax / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y.d = to_f16(d);
        for (int j = 0; j < 16; j++) {
            const int q0 = std::min(15, int(x[j] * id + 8.5f));
            const int q1 = std::min(15, int(x[j + 16] * id + 8.5f));
            y.qs[j] = uint8_t(q0 | (q1 << 4));
        }
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int j = 0; j < 16; j++) {
            y[j] = float(int(b.qs[j] & 0xf) - 8) * d;
            y[j + 16] = float(int(b.qs[j] >> 4) - 8) * d;
        }
    }
    // d_w d_a sum_j (q_w[j] - 8) q_a[j]
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += (int32_t(w.qs[j] & 0xf) - 8) * int32_t(a.qs[j]);
            sumi += (int32_t(w.qs[j] >> 4) - 8) * int32_t(a.qs[j + 16]);
        }
        return float(sumi) * (to_f32(w.d) * to_f32(a.d));
    }
};

} // namespace tessera
