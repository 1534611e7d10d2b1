// q5_1.h: 32 5-bit values, f16 scale d and f16 minimum m; 24 bytes, 6 bits per weight. x = q * d + m.
// Element order as q5_0 (quant/q5_0.h): qs nibbles for elements j and j + 16, bit j of qh = element j's fifth bit.
// Quantize (ggml's quantize_row_q5_1_ref): d = (max - min) / 31, m = min, q = trunc((x - min) / d + 0.5).
// llama-quantize's fallback for q5_K rows that are not a multiple of 256.
#pragma once

#include "quant/q5_0.h"
#include "quant/q8_1.h"

#include <cfloat>

namespace tessera {

struct block_q5_1 {
    f16 d;          // scale
    f16 m;          // minimum
    uint8_t qh[4];  // fifth bits, element j = bit j
    uint8_t qs[16]; // low 4 bits: low nibble = element j, high = element j + 16
};
static_assert(sizeof(block_q5_1) == 24, "q5_1 block must match GGUF (f16 d, f16 m, 4 bytes of high bits, 16 of nibbles)");

struct q5_1 {
    using block = block_q5_1;
    using dot_block = block_q8_1;
    static constexpr type id = type::q5_1;
    static constexpr const char* name = "q5_1";
    static constexpr int block_size = 32;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_1; // format of dot_block

    static void quantize(const float* x, block& y) {
        float mn = FLT_MAX, mx = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            if (x[j] < mn) mn = x[j];
            if (x[j] > mx) mx = x[j];
        }
        const float d = (mx - mn) / 31.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y.d = to_f16(d);
        y.m = to_f16(mn);
        int q[32];
        for (int j = 0; j < 32; j++) q[j] = int((x[j] - mn) * id + 0.5f) & 0xff; // ggml's (uint8_t) cast
        q5_store(q, y.qh, y.qs);
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d), m = to_f32(b.m);
        for (int j = 0; j < 32; j++) y[j] = float(q5_level(b.qh, b.qs, j)) * d + m;
    }
    // sum_j (d_w q_w + m) (d_a q_a) = d_w d_a sum(q_w q_a) + m s_a
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int j = 0; j < 32; j++) sumi += int32_t(q5_level(w.qh, w.qs, j)) * int32_t(a.qs[j]);
        return to_f32(w.d) * to_f32(a.d) * float(sumi) + to_f32(w.m) * to_f32(a.s);
    }
};

} // namespace tessera
