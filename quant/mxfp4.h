// mxfp4.h: OCP microscaling FP4 as ggml stores it (type 39; gpt-oss's expert weights): 32 E2M1 values and one E8M0
// power-of-two scale; 17 bytes, 4.25 bits per weight. x = E2M1[q] * 2^(e - 127).
// Element order (as q4_0): qs[j] low nibble = element j, high nibble = element j + 16 (j = 0..15).
// Values follow ggml's convention so they agree with llama.cpp bit for bit: the E2M1 table is read doubled as int8
// ({0,1,2,3,4,6,8,12} and the negatives, e2m1_doubled in nvfp4.h) and the scale at half its value, 2^(e - 128)
// (e8m0_to_fp32_half; e = 0 and 1 are the subnormals 2^-128 and 2^-127).
// Quantize (ggml's reference): e = floor(log2(amax)) - 2 + 127 (0 for an all-zero block), so that amax / 2^(e - 127)
// lands in [4, 8) of E2M1's range [0, 6]; each element takes the table entry nearest to x / 2^(e - 128) (first index
// wins ties, so +0 over -0). The dot partner is q8_0, as ggml's CPU: d_a * 2^(e - 128) * sum_j 2E2M1[q_j] q8_j.
#pragma once

#include "quant/nvfp4.h"
#include "quant/q8_0.h"

#include <cmath>

namespace tessera {

// 2^(x - 128) as ggml's GGML_E8M0_TO_FP32_HALF computes it (bit patterns; exact)
TS_HD float e8m0_to_fp32_half(uint8_t x) {
    return f32_from_bits(x < 2 ? uint32_t(0x00200000) << x : uint32_t(x - 1) << 23);
}

struct block_mxfp4 {
    uint8_t e;      // E8M0 scale exponent
    uint8_t qs[16]; // E2M1 nibbles: low = element j, high = element j + 16
};
static_assert(sizeof(block_mxfp4) == 17, "mxfp4 block must match GGUF (1 E8M0 byte + 16 bytes of nibbles)");

struct mxfp4 {
    using block = block_mxfp4;
    using dot_block = block_q8_0; // ggml's CPU dot partner for MXFP4
    static constexpr type id = type::mxfp4;
    static constexpr const char* name = "mxfp4";
    static constexpr int block_size = 32;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_0;

    static void quantize(const float* x, block& y) {
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = amax < std::fabs(x[j]) ? std::fabs(x[j]) : amax;
        // ggml's expression, in float: the same log2f, floorf and truncating conversion (amax >= 2^-125 for e >= 0;
        // smaller blocks wrap as ggml's uint8_t cast does)
        y.e = amax > 0.0f ? uint8_t(int(std::floor(std::log2(amax)) - 2.0f + 127.0f)) : 0;
        const float d = e8m0_to_fp32_half(y.e);
        for (int j = 0; j < 16; j++) y.qs[j] = uint8_t(nearest_code(x[j], d) | (nearest_code(x[j + 16], d) << 4));
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = e8m0_to_fp32_half(b.e);
        for (int j = 0; j < 16; j++) {
            y[j] = float(e2m1_doubled(b.qs[j] & 0xf)) * d;
            y[j + 16] = float(e2m1_doubled(b.qs[j] >> 4)) * d;
        }
    }
    // ggml's generic order: (d_a * d_w) * (sum over the low nibbles + sum over the high nibbles), integers exact
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sum1 = 0, sum2 = 0;
        for (int j = 0; j < 16; j++) {
            sum1 += int32_t(a.qs[j]) * e2m1_doubled(w.qs[j] & 0xf);
            sum2 += int32_t(a.qs[j + 16]) * e2m1_doubled(w.qs[j] >> 4);
        }
        return to_f32(a.d) * e8m0_to_fp32_half(w.e) * float(sum1 + sum2);
    }

  private:
    static int nearest_code(float x, float d) {
        int best = 0;
        float best_err = std::fabs(float(e2m1_doubled(0)) * d - x);
        for (int i = 1; i < 16; i++) {
            const float err = std::fabs(float(e2m1_doubled(i)) * d - x);
            if (err < best_err) {
                best = i;
                best_err = err;
            }
        }
        return best;
    }
};

} // namespace tessera
