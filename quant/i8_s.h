// i8_s.h: the activation partner of i2_s, BitNet's per-token int8 ("I8_S"): 128 int8 values, the ROW's f32 scale d
// and the block's sum of values; 136 bytes (activations only, never in a file; tessera type 1026). x = d * q.
// A row is quantized with ONE scale, as BitNet does (quantize_row): s = 127 / max(max|x| over the row, 1e-5),
// q = clamp(round(x * s), -128, 127) (half away from zero), d = max / 127, the same in every block of the row.
// Why not q8_0's per-32 scales: BitNet b1.58 models are trained with per-token absmax activations, so this keeps the
// numbers of the model's own math (y = sum(q w) / s * s_w); finer scales would be more precise but a different model.
// `sum` folds the i2_s code offset: sum (code - 1) q = sum code * q - sum q, so the dot stays in unsigned x signed
// bytes (a -128 activation cannot be negated in int8).
#pragma once

#include "ggml-like/fp16.h"
#include "ggml-like/types.h"

#include <cmath>
#include <cstdint>

namespace tessera {

struct block_i8_s {
    float d;         // max|x| / 127 of the whole row (the same in every block of a row)
    int32_t sum;     // sum of qs
    int8_t qs[128];  // values, in element order
};
static_assert(sizeof(block_i8_s) == 136, "i8_s block: f32 d, i32 sum, 128 x int8");

struct i8_s {
    using block = block_i8_s;
    using dot_block = block_i8_s;
    static constexpr type id = type::i8_s;
    static constexpr const char* name = "i8_s";
    static constexpr int block_size = 128;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::i8_s; // format of dot_block

    // One scale for the whole row of n elements (n a multiple of 128), BitNet's quantize_row_i8_s.
    static void quantize_row(const float* x, block* y, int64_t n) {
        double amax = 1e-5;
        for (int64_t i = 0; i < n; i++) amax = std::fmax(amax, std::fabs(double(x[i])));
        const float s = float(127.0 / amax);
        const float d = float(amax / 127.0);
        for (int64_t b = 0; b < n / 128; b++) {
            int32_t sum = 0;
            for (int j = 0; j < 128; j++) {
                const float q = std::fmin(127.0f, std::fmax(-128.0f, std::round(x[128 * b + j] * s)));
                y[b].qs[j] = int8_t(q);
                sum += y[b].qs[j];
            }
            y[b].d = d;
            y[b].sum = sum;
        }
    }
    static void quantize(const float* x, block& y) { quantize_row(x, &y, 128); }
    TS_HD static void dequantize(const block& b, float* y) {
        for (int j = 0; j < 128; j++) y[j] = b.d * float(b.qs[j]);
    }
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int j = 0; j < 128; j++) sumi += int32_t(w.qs[j]) * int32_t(a.qs[j]);
        return float(sumi) * (w.d * a.d);
    }
};

} // namespace tessera
