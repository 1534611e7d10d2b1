// vec_dot.h: the CPU's per-type row kernels: convert activations to the weight's dot partner, dot one weight row
// with one activation row, dequantize a row. Picks the AVX2/FMA/F16C versions at run time when the CPU has them;
// the scalar versions are the formats' reference functions (quant/), which the fast ones are tested against.
#pragma once

#include "ggml-like/types.h"

#include <cstdint>

namespace tessera::cpu {

// s = w (n elements, weight type) . a (n elements, dot type)
using vec_dot_fn = float (*)(const void* w, const void* a, int64_t n);
using from_float_fn = void (*)(const float* x, void* y, int64_t n);
using to_float_fn = void (*)(const void* x, float* y, int64_t n);

struct cpu_type_ops {
    type dot_type;               // activations are converted to this type before vec_dot
    from_float_fn act_from_float; // f32 activations -> dot_type row
    vec_dot_fn vec_dot;
    to_float_fn to_float;         // weight row -> f32
};

// nullptr if the CPU backend cannot compute with this type. `reference` forces the scalar reference kernels.
const cpu_type_ops* find_cpu_ops(type t, bool reference = false);
bool cpu_has_avx2();

} // namespace tessera::cpu
