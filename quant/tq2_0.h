// tq2_0.h: ternary weights, 256 2-bit codes and one f16 scale d at the END; 66 bytes, 2.0625 bits per weight.
// x = (code - 1) * d, code 0, 1, 2 = -1, 0, +1 (3 would read as +2; never produced).
// Element order, LSB first (FORMATS.md §2): for half h = 0, 1 and byte m = 0..31, qs[32h + m] bits 2n..2n+1
// (n = 0..3) hold element 128h + 32n + m.
// Quantize (ggml's reference): d = max|x| over the block, code = lroundf(x / d) + 1 (half away from zero). That is
// lossless on weights that are already ternary times a scale (BitNet checkpoints); a float model is first ternarized
// per tensor by absmean (i2_s.h absmean_scale: W' = s * clamp(round(W / s), -1, 1)), which this then stores exactly
// up to the f16 rounding of s.
#pragma once

#include "quant/q8_k.h"

namespace tessera {

struct block_tq2_0 {
    uint8_t qs[64]; // 2-bit codes, LSB first: qs[32h + m] bits 2n..2n+1 = element 128h + 32n + m
    f16 d;          // scale
};
static_assert(sizeof(block_tq2_0) == 66, "tq2_0 block must match GGUF (64 bytes of 2-bit codes, then f16 d)");

struct tq2_0 {
    using block = block_tq2_0;
    using dot_block = block_q8_k; // ggml's CPU dot partner for TQ2_0
    static constexpr type id = type::tq2_0;
    static constexpr const char* name = "tq2_0";
    static constexpr int block_size = 256;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_k; // format of dot_block

    static void quantize(const float* x, block& y) {
        float amax = 0.0f;
        for (int j = 0; j < 256; j++) amax = std::fmax(amax, std::fabs(x[j]));
        const float id = amax != 0.0f ? 1.0f / amax : 0.0f;
        y.d = to_f16(amax);
        for (int h = 0; h < 2; h++)
            for (int m = 0; m < 32; m++) {
                uint8_t q = 0;
                for (int n = 0; n < 4; n++) {
                    const long code = std::lroundf(x[128 * h + 32 * n + m] * id) + 1;
                    q = uint8_t(q + ((code & 3) << (2 * n)));
                }
                y.qs[32 * h + m] = q;
            }
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int h = 0; h < 2; h++)
            for (int n = 0; n < 4; n++)
                for (int m = 0; m < 32; m++) y[128 * h + 32 * n + m] = float(((b.qs[32 * h + m] >> (2 * n)) & 3) - 1) * d;
    }
    // d_w d_a sum_j (code_j - 1) q_a[j]; the integer sum is exact, so any summation order gives the same int
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int h = 0; h < 2; h++)
            for (int n = 0; n < 4; n++)
                for (int m = 0; m < 32; m++)
                    sumi += int32_t(a.qs[128 * h + 32 * n + m]) * (((w.qs[32 * h + m] >> (2 * n)) & 3) - 1);
        return float(sumi) * (a.d * to_f32(w.d));
    }
};

} // namespace tessera
