// q8_0.h: 32 int8 values and one f16 scale; 34 bytes, 8.5 bits per weight. x[i] = d * qs[i], element order.
// Quantize: d = amax / 127, q = roundf(x / d). Activations for q8_0 weights are quantized to q8_0 too (ggml CPU).
#pragma once

#include "ggml-like/fp16.h"
#include "ggml-like/types.h"

#include <cmath>
#include <cstdint>

namespace tessera {

struct block_q8_0 {
    f16 d;          // scale
    int8_t qs[32];  // values, in element order
};
static_assert(sizeof(block_q8_0) == 34, "q8_0 block must match GGUF (f16 d + 32 x int8)");

struct q8_0 {
    using block = block_q8_0;
    using dot_block = block_q8_0;
    static constexpr type id = type::q8_0;
    static constexpr const char* name = "q8_0";
    static constexpr int block_size = 32;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_0; // format of dot_block

    static void quantize(const float* x, block& y) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y.d = to_f16(d);
        for (int j = 0; j < 32; j++) y.qs[j] = int8_t(std::roundf(x[j] * id));
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int j = 0; j < 32; j++) y[j] = d * float(b.qs[j]);
    }
    // sum_j (d_w q_w[j]) (d_a q_a[j]) = d_w d_a sum_j q_w q_a, integer inner sum
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int j = 0; j < 32; j++) sumi += int32_t(w.qs[j]) * int32_t(a.qs[j]);
        return float(sumi) * (to_f32(w.d) * to_f32(a.d));
    }
};

} // namespace tessera
