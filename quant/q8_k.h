// q8_k.h: the activation partner of tq2_0 (ggml's CPU pairs TQ2_0 with Q8_K): 256 int8 values, f32 scale d and 16
// int16 sums of 16 values each; 292 bytes, 9.125 bits per value. x[i] = d * qs[i], element order.
// Quantize (ggml's reference, which x86 ggml also runs): take the element `max` of largest |x| (first one wins),
// iscale = -127 / max, q = min(127, nearest_int(iscale * x)) (round half to even), d = 1 / iscale (so d < 0 when
// max > 0); an all-zero block stores d = 0. bsums[j] = sum of qs[16j .. 16j + 15]: lets tq2_0 fold its code offset.
#pragma once

#include "ggml-like/fp16.h"
#include "ggml-like/types.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tessera {

struct block_q8_k {
    float d;            // scale (f32, may be negative)
    int8_t qs[256];     // values, in element order
    int16_t bsums[16];  // bsums[j] = sum of qs[16j .. 16j + 15]
};
static_assert(sizeof(block_q8_k) == 292, "q8_K block must match ggml (f32 d, 256 x int8, 16 x int16)");

// ggml's nearest_int: round half to even through the 1.5 * 2^23 trick (valid for |x| < 2^22)
TS_HD int nearest_int_ggml(float x) {
    const uint32_t i = f32_bits(x + 12582912.0f);
    return int(i & 0x007fffff) - 0x00400000;
}

struct q8_k {
    using block = block_q8_k;
    using dot_block = block_q8_k;
    static constexpr type id = type::q8_k;
    static constexpr const char* name = "q8_K"; // ggml's spelling
    static constexpr int block_size = 256;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_k; // format of dot_block

    static void quantize(const float* x, block& y) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 256; j++)
            if (std::fabs(x[j]) > amax) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        if (amax == 0.0f) {
            std::memset(&y, 0, sizeof(y));
            return;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < 256; j++) {
            const int v = nearest_int_ggml(iscale * x[j]);
            y.qs[j] = int8_t(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y.qs[16 * j + i];
            y.bsums[j] = int16_t(sum);
        }
        y.d = 1.0f / iscale;
    }
    TS_HD static void dequantize(const block& b, float* y) {
        for (int j = 0; j < 256; j++) y[j] = b.d * float(b.qs[j]);
    }
    // d_w d_a sum_j q_w q_a (q8_K is only an activation format in ggml; this pairing exists for completeness)
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int j = 0; j < 256; j++) sumi += int32_t(w.qs[j]) * int32_t(a.qs[j]);
        return float(sumi) * (w.d * a.d);
    }
};

} // namespace tessera
