// nvfp4.h: NVIDIA FP4 as ggml stores it (type 40): 64 E2M1 values in four sub-blocks of 16, each with a UE4M3
// sub-scale; 36 bytes, 4.5 bits per weight. x = E2M1[q] * UE4M3(d[s]) (* the per-tensor scale, which the graph applies
// as a `mul` after the matmul: it never sits in the block).
// Element order (split halves inside each sub-block): sub-block s = 0..3 uses d[s] and qs[8s .. 8s + 7]; byte j's low
// nibble = element 16s + j, high nibble = element 16s + j + 8 (j = 0..7).
// Values follow ggml's convention so they agree with llama.cpp bit for bit: the E2M1 table is stored doubled as int8
// {0,1,2,3,4,6,8,12, 0,-1,-2,-3,-4,-6,-8,-12} and the sub-scale is read at half its value (ue4m3_to_fp32_half).
// Quantize (ggml's reference): per sub-block d[s] = ue4m3(amax_s / 6), then each element takes the table entry with
// the smallest |entry * d - x| (first index wins ties, so +0 over -0).
#pragma once

#include "quant/q8_0.h"

namespace tessera {

// E2M1 code -> twice its value, as int8 (code bit 3 = sign, bits 2..1 = exponent, bit 0 = mantissa):
// {0,1,2,3,4,6,8,12} then the negatives; computed rather than looked up so device code can call it
TS_HD int e2m1_doubled(int code) {
    const int e = (code >> 1) & 3, m = code & 1;
    const int v = e == 0 ? m : (2 + m) << (e - 1);
    return code & 8 ? -v : v;
}

struct block_nvfp4 {
    uint8_t d[4];   // UE4M3 sub-scales, one per 16 elements
    uint8_t qs[32]; // E2M1 nibbles: qs[8s + j] low = element 16s + j, high = element 16s + j + 8
};
static_assert(sizeof(block_nvfp4) == 36, "nvfp4 block must match GGUF (4 UE4M3 scales + 32 bytes of nibbles)");

// Two q8_0 blocks: the 64 activations of one nvfp4 block (ggml's CPU partner for NVFP4 is Q8_0).
struct block_q8_0x2 {
    block_q8_0 b[2];
};
static_assert(sizeof(block_q8_0x2) == 2 * sizeof(block_q8_0), "a row of q8_0 blocks must read as q8_0x2 blocks");

struct nvfp4 {
    using block = block_nvfp4;
    using dot_block = block_q8_0x2;
    static constexpr type id = type::nvfp4;
    static constexpr const char* name = "nvfp4";
    static constexpr int block_size = 64;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_0; // dot_block is two of these

    static void quantize(const float* x, block& y) {
        for (int s = 0; s < 4; s++) {
            const float* xs = x + 16 * s;
            float amax = 0.0f;
            for (int j = 0; j < 16; j++) amax = std::fabs(xs[j]) > amax ? std::fabs(xs[j]) : amax;
            y.d[s] = fp32_to_ue4m3(amax / 6.0f);
            const float d = ue4m3_to_fp32_half(y.d[s]);
            for (int j = 0; j < 8; j++) y.qs[8 * s + j] = uint8_t(nearest_code(xs[j], d) | (nearest_code(xs[j + 8], d) << 4));
        }
    }
    TS_HD static void dequantize(const block& b, float* y) {
        for (int s = 0; s < 4; s++) {
            const float d = ue4m3_to_fp32_half(b.d[s]);
            for (int j = 0; j < 8; j++) {
                y[16 * s + j] = float(e2m1_doubled(b.qs[8 * s + j] & 0xf)) * d;
                y[16 * s + j + 8] = float(e2m1_doubled(b.qs[8 * s + j] >> 4)) * d;
            }
        }
    }
    // sum over sub-blocks s of (d8 * d_s) * sum_j 2E2M1[q_j] q8_j, in ggml's order (sub-block s reads q8 block s / 2,
    // elements 16 (s % 2) ..): the integer part is exact, the f32 products and sum follow ggml's generic C code
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        float sum = 0.0f;
        for (int s = 0; s < 4; s++) {
            const block_q8_0& q8 = a.b[s / 2];
            const int off = 16 * (s % 2);
            int32_t sumi = 0;
            for (int j = 0; j < 8; j++) {
                sumi += int32_t(q8.qs[off + j]) * e2m1_doubled(w.qs[8 * s + j] & 0xf);
                sumi += int32_t(q8.qs[off + j + 8]) * e2m1_doubled(w.qs[8 * s + j] >> 4);
            }
            sum += to_f32(q8.d) * ue4m3_to_fp32_half(w.d[s]) * float(sumi);
        }
        return sum;
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
