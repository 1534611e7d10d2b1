// q8_1.h: the activation partner of offset formats: 32 int8 values, f16 scale d and f16 s = d * sum(qs);
// 36 bytes. x[i] = d * qs[i]. `s` lets q4_1 fold its minimum: dot(q4_1, q8_1) = d4 d8 sum(q4 q8) + m4 s8.
#pragma once

#include "ggml-like/fp16.h"
#include "ggml-like/types.h"

#include <cmath>
#include <cstdint>

namespace tessera {

struct block_q8_1 {
    f16 d;          // scale
    f16 s;          // d * sum(qs)
    int8_t qs[32];  // values, in element order
};
static_assert(sizeof(block_q8_1) == 36, "q8_1 block must match ggml (f16 d, f16 s, 32 x int8)");

struct q8_1 {
    using block = block_q8_1;
    using dot_block = block_q8_1;
    static constexpr type id = type::q8_1;
    static constexpr const char* name = "q8_1";
    static constexpr int block_size = 32;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_1; // format of dot_block

    static void quantize(const float* x, block& y) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = std::fmax(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            y.qs[j] = int8_t(std::roundf(x[j] * id));
            sum += y.qs[j];
        }
        y.d = to_f16(d);
        y.s = to_f16(float(sum) * d);
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int j = 0; j < 32; j++) y[j] = d * float(b.qs[j]);
    }
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int j = 0; j < 32; j++) sumi += int32_t(w.qs[j]) * int32_t(a.qs[j]);
        return float(sumi) * (to_f32(w.d) * to_f32(a.d));
    }
};

} // namespace tessera
