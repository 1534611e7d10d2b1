// gelu.h: GELU in its tanh form, 0.5 x (1 + tanh(sqrt(2/pi) x (1 + 0.044715 x^2))), as ggml's CPU backend evaluates
// it: looked up in a table of 65536 f16 results indexed by x rounded to f16, with x <= -10 giving 0 and x >= 10
// giving x. Both backends use the same table, so gelu (and GeGLU, gelu(gate) * up) agrees with llama.cpp's CPU results
// bit for bit.
#pragma once

#include "ggml-like/fp16.h"

#include <cstdint>

namespace tessera {

// The table: entry h = f16(gelu(f32 value of the f16 bits h)), computed once on first use (thread-safe).
const uint16_t* gelu_f16_table();

// gelu(x) through the table (the rule above).
inline float gelu_lookup(const uint16_t* table, float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return fp16_to_fp32(table[fp32_to_fp16(x)]);
}

} // namespace tessera
