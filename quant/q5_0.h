// q5_0.h: 32 5-bit values and one f16 scale; 22 bytes, 5.5 bits per weight. x = (q - 16) * d.
// Element order: qs[j] low nibble = element j's low 4 bits, high nibble = element j + 16's (j = 0..15); bit j of the
// little-endian word qh = element j's fifth bit (j = 0..31).
// Quantize (ggml's quantize_row_q5_0_ref, what llama-quantize writes without an importance matrix): the element of
// largest |x| keeps its sign: d = vmax / -16, q = min(31, trunc(x / d + 16.5)).
// llama-quantize's fallback for q4_K rows that are not a multiple of 256 (Q4_K_M files of 576- or 896-wide models).
#pragma once

#include "quant/q8_0.h"

#include <cmath>
#include <cstring>

namespace tessera {

struct block_q5_0 {
    f16 d;          // scale
    uint8_t qh[4];  // fifth bits, element j = bit j
    uint8_t qs[16]; // low 4 bits: low nibble = element j, high = element j + 16
};
static_assert(sizeof(block_q5_0) == 22, "q5_0 block must match GGUF (f16 d, 4 bytes of high bits, 16 of nibbles)");

// element j's 5-bit value (0..31) of a q5_0 / q5_1 block's qh and qs
TS_HD int q5_level(const uint8_t* qh, const uint8_t* qs, int j) {
    const uint32_t h = uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
    const int lo = j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4;
    return lo | int((h >> j) & 1) << 4;
}
// stores 32 5-bit values (element order) into qh and qs
inline void q5_store(const int (&q)[32], uint8_t* qh, uint8_t* qs) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = uint8_t((q[j] & 0xf) | (q[j + 16] & 0xf) << 4);
        h |= uint32_t((q[j] >> 4) & 1) << j;
        h |= uint32_t((q[j + 16] >> 4) & 1) << (j + 16);
    }
    std::memcpy(qh, &h, 4);
}

struct q5_0 {
    using block = block_q5_0;
    using dot_block = block_q8_0; // ggml's CPU dot partner for q5_0
    static constexpr type id = type::q5_0;
    static constexpr const char* name = "q5_0";
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
        const float d = vmax / -16.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y.d = to_f16(d);
        int q[32];
        for (int j = 0; j < 32; j++) {
            const int v = int(x[j] * id + 16.5f); // truncation, as ggml's (int8_t) cast; >= 0 here
            q[j] = v < 31 ? v : 31;
        }
        q5_store(q, y.qh, y.qs);
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int j = 0; j < 32; j++) y[j] = float(q5_level(b.qh, b.qs, j) - 16) * d;
    }
    // d_w d_a sum (q_w - 16) q_a
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int j = 0; j < 32; j++) sumi += int32_t(q5_level(w.qh, w.qs, j) - 16) * int32_t(a.qs[j]);
        return to_f32(w.d) * to_f32(a.d) * float(sumi);
    }
};

} // namespace tessera
