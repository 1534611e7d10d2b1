// float16.h: mul_mat kernels for f16 and bf16 weights, in the float orders of llama.cpp's CPU backend built for
// AVX-512 (the orders the rest of the CPU backend follows, see NOTES.md), so that results are bit-identical to it:
//   - activations are rounded to the weight's type (ggml's vec_dot_type: f16 round-to-nearest-even, bf16 as
//     ggml_compute_fp32_to_bf16) and stored as halves, as ggml stores them;
//   - prompts (>= 2 activation rows, k % 16 == 0, rows % 4 == 0): llamafile's tinyBLAS<16, __m512>: per output one
//     16-lane accumulator, acc[l] = fma(w[i + l], a[i + l], acc[l]) for i = 0, 16, 32, ..., then reduced as
//     _mm512_reduce_add_ps (lanes 8..15 + 0..7, then 4..7 + 0..3, then (0 + 2) + (1 + 3));
//   - otherwise (decode) ggml_vec_dot_f16: 4 accumulators of 16 lanes over 64-element steps, folded (0 + 2) + (1 + 3)
//     and reduced as above, elements past the last multiple of 64 added in double; ggml_vec_dot_bf16: 2 accumulators
//     of 16 lanes over 32-element steps, each reduced and added in double, the rest in double.
// A product of two f16 (or two bf16) values is exact in f32, so fma and mul + add agree: the orders above are all
// that matters. Not followed: llama.cpp on AVX2-only CPUs (8 lanes).
// bf16 on a CPU with AVX512_BF16 (cpu_has_avx512bf16) takes llama.cpp's orders for such a CPU instead (order
// `dpbf16`), as llama.cpp built there (GGML_NATIVE) computes them, through vdpbf16ps: lane l of a 16-lane accumulator
// takes elements 2l + 1, then 2l, of each 32-element step, each product added with one rounding, inputs and results
// flushed to zero when subnormal (DAZ / FTZ, the instruction's own). Prompts (>= 2 activation rows, k % 32 == 0,
// rows % 4 == 0): tinyBLAS<32>, one accumulator an output over 32-element steps, reduced as above; otherwise
// ggml_vec_dot_bf16: 2 accumulators over 64-element steps (elements i .. i + 31 and i + 32 .. i + 63), each reduced
// and added in double, the rest in double. An instruction takes twice the products of the f32 orders' fma; bf16
// results therefore depend on the CPU, as llama.cpp's do.
// The scalar versions (float16.cpp) write those orders out plainly; the AVX2 ones (float16_avx2.cpp), the AVX-512
// ones (float16_avx512.cpp) and the AVX512_BF16 ones (bf16_avx512bf16.cpp) give the same bits as the scalar ones of
// their order (test_float16). TESSERA_CPU_REFERENCE=1 uses none of them: it keeps the double-precision row dots of
// vec_dot.cpp.
#pragma once

#include "ggml-like/types.h"

#include <cstddef>
#include <cstdint>

namespace tessera::cpu {

// the float orders above: llama.cpp's AVX-512 f32 ones, or its AVX512_BF16 ones for bf16
enum class float16_order { avx512, dpbf16 };

struct float16_kernels {
    // x (n floats) -> y (n halves of the weight's type), rounded as ggml rounds
    void (*from_float)(const float* x, uint16_t* y, int64_t n);
    // y[j * ys + i] = w_i . a_j in tinyBLAS's order, i < n_w (a multiple of 4), j < n_a; w_i at w + i * ws halves,
    // a_j at a + j * as halves; k % gemm_k == 0
    void (*gemm)(const uint16_t* w, size_t ws, int64_t n_w, const uint16_t* a, size_t as, int64_t n_a, int64_t k,
                 float* y, size_t ys);
    // y[i * ys] = w_i . a for i < n (w_i at w + i * ws halves, k elements each) in ggml_vec_dot_f16's /
    // ggml_vec_dot_bf16's order
    void (*gemv)(const uint16_t* w, size_t ws, int64_t n, const uint16_t* a, int64_t k, float* y, size_t ys);
    float16_order order = float16_order::avx512;
    int64_t gemm_k = 16; // gemm's k is a multiple of this (tinyBLAS's step): where it is not, mul_mat takes gemv
};

// f16 or bf16 (nullptr for other types, or without AVX2 unless `reference`): for bf16 the AVX512_BF16 kernels where
// the CPU has them (cpu_has_avx512bf16), else the AVX-512 kernels where the CPU has AVX-512 F/BW/VL (+ VNNI:
// cpu_has_avx512vnni), else the AVX2 ones; with `reference` the scalar ones of the order those follow
const float16_kernels* find_float16_kernels(type t, bool reference = false);
// the scalar kernels of an order (dpbf16: bf16 only, else nullptr)
const float16_kernels* scalar_float16_kernels(type t, float16_order order);

namespace avx2 {
const float16_kernels* float16_kernels_for(type t);
}
namespace avx512 {
const float16_kernels* float16_kernels_for(type t); // call only where cpu_has_avx512vnni()
}
namespace avx512bf16 {
const float16_kernels* float16_kernels_for(type t); // bf16 only (else nullptr); call only where cpu_has_avx512bf16()
}

} // namespace tessera::cpu
