// i2_s.h: BitNet's I2_S ternary weights (its fork's type 36, x86 layout): 128 2-bit codes per 32-byte block, 2 bits
// per weight, and ONE f32 scale per tensor kept in a 32-byte tail after all rows (tail bytes 0..3 = the scale, the
// rest zero), so a tensor takes n/4 + 32 bytes (types.h tensor_bytes). x = (code - 1) * scale, code 0, 1, 2 = -1, 0, +1.
// Element order, MSB first (FORMATS.md §4.3): byte j (0..31) of a block holds element j in bits 7:6, j + 32 in 5:4,
// j + 64 in 3:2 and j + 96 in 1:0.
// The block functions work at unit scale (dequantize gives code - 1; quantize takes x already divided by the scale):
// the per-tensor scale is never in a block. Whole tensors go through quantize_tensor_ref (quant/format.h), which picks
// the scale with absmean_scale and writes the tail; mul_mat multiplies its output by read_tensor_scale().
// Quantize (BitNet b1.58): s = max(mean|W|, 1e-5) over the tensor, code = clamp(round(W / s), -1, 1) + 1, round =
// half to even (torch.round). A tensor that is already ternary (every |W| is 0 or one value m) keeps s = m, as
// BitNet's converter does (its scale is max|W| of ternarized weights), so it round-trips exactly.
#pragma once

#include "quant/i8_s.h"

#include <cstring>

namespace tessera {

struct block_i2_s {
    uint8_t qs[32]; // byte j: bits 7:6 = element j, 5:4 = j + 32, 3:2 = j + 64, 1:0 = j + 96
};
static_assert(sizeof(block_i2_s) == 32, "i2_s block: 128 x 2-bit codes");

struct i2_s {
    using block = block_i2_s;
    using dot_block = block_i8_s; // BitNet's per-token int8 activations
    static constexpr type id = type::i2_s;
    static constexpr const char* name = "i2_s";
    static constexpr int block_size = 128;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::i8_s; // format of dot_block
    static constexpr bool tensor_scaled = true;  // values are code - 1 times the scale in the tensor's tail
    static constexpr int tail_bytes = 32;

    TS_HD static int code(const block& b, int j) { return (b.qs[j % 32] >> (6 - 2 * (j / 32))) & 3; }

    // x at unit scale (W / s)
    static void quantize(const float* x, block& y) {
        std::memset(y.qs, 0, sizeof(y.qs));
        for (int j = 0; j < 128; j++) {
            const int code = int(std::fmin(1.0f, std::fmax(-1.0f, std::nearbyint(x[j])))) + 1;
            y.qs[j % 32] = uint8_t(y.qs[j % 32] | (code << (6 - 2 * (j / 32))));
        }
    }
    TS_HD static void dequantize(const block& b, float* y) {
        for (int j = 0; j < 128; j++) y[j] = float(code(b, j) - 1);
    }
    // a.d * sum (code - 1) q_a: the dot at unit weight scale; the caller multiplies by the tensor's scale
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int j = 0; j < 128; j++) sumi += (code(w, j) - 1) * int32_t(a.qs[j]);
        return float(sumi) * a.d;
    }

    // BitNet b1.58's per-tensor absmean scale of n weights (see the top of the file for already-ternary tensors).
    static float absmean_scale(const float* x, int64_t n) {
        double sum = 0;
        float m = 0.0f;
        bool ternary = true;
        for (int64_t i = 0; i < n; i++) {
            const float a = std::fabs(x[i]);
            sum += a;
            if (a != 0.0f) {
                if (m == 0.0f) m = a;
                ternary &= a == m;
            }
        }
        if (ternary && m != 0.0f) return m;
        return float(std::fmax(sum / double(n > 0 ? n : 1), 1e-5));
    }
    // The scale in the tail of a tensor of n elements whose rows start at data.
    TS_HD static float read_scale(const void* data, int64_t n) {
        float s;
        std::memcpy(&s, static_cast<const uint8_t*>(data) + n / 4, sizeof(s));
        return s;
    }
    static void write_tail(void* data, int64_t n, float scale) {
        uint8_t* tail = static_cast<uint8_t*>(data) + n / 4;
        std::memset(tail, 0, tail_bytes);
        std::memcpy(tail, &scale, sizeof(scale));
    }
};

} // namespace tessera
