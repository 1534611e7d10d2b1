// vec_dot.h: the CPU's per-type row kernels: convert activations to the weight's dot partner, dot one weight row
// with one activation row, dequantize a row. Picks the AVX2/FMA/F16C versions at run time when the CPU has them;
// the scalar versions are the formats' reference functions (quant/), which the fast ones are tested against.
#pragma once

#include "ggml-like/cpu_features.h"
#include "ggml-like/types.h"

#include <cstdint>

namespace tessera::cpu {

// s = w (n elements, weight type) . a (n elements, dot type); for a type with a per-tensor scale (i2_s) at unit scale:
// the caller multiplies by read_tensor_scale() (quant/format.h)
using vec_dot_fn = float (*)(const void* w, const void* a, int64_t n);
using from_float_fn = void (*)(const float* x, void* y, int64_t n);
using to_float_fn = void (*)(const void* x, float* y, int64_t n);

// 4 weight rows x 4 activation rows at once: y[j * y_stride + i] = w_i . a_j (w_i at w + i * w_stride bytes, a_j at
// a + j * a_stride bytes). Each output is summed in exactly the order of the type's vec_dot (same bits), so the
// choice between the two is a speed decision only.
using gemm4_fn = void (*)(const void* w, size_t w_stride, const void* a, size_t a_stride, int64_t n, float* y,
                          size_t y_stride);
// One weight row (n elements) against na activation rows (row j at a + j * a_stride bytes): y[j * y_stride] = their
// dots, each in exactly the order of the row kernel it stands for (same bits), the weight row decoded once for all.
using row_panel_fn = void (*)(const void* w, const void* a, size_t a_stride, int64_t na, int64_t n, float* y,
                              size_t y_stride);

struct cpu_type_ops {
    type dot_type;               // activations are converted to this type before vec_dot
    from_float_fn act_from_float; // f32 activations -> dot_type row
    vec_dot_fn vec_dot;
    to_float_fn to_float;         // weight row -> f32
    gemm4_fn gemm4 = nullptr;     // optional register-blocked kernel for prompt processing (4 x 4)
    gemm4_fn gemv4 = nullptr;     // the same for 4 weight rows x 1 activation row (decode)
    // llama.cpp on an AVX2 CPU repacks Q4_0 weights whose row count is a multiple of 8 (q4_0_8x8) and then sums each
    // output block by block: acc = fma(float(int block dot), d_w * d_a, acc). For those tensors mul_mat uses these
    // kernels (same order, same bits as llama.cpp); null where the type has no such path.
    vec_dot_fn vec_dot_rows8 = nullptr;
    gemm4_fn gemm4_rows8 = nullptr;
    gemm4_fn gemv4_rows8 = nullptr;
    // llama.cpp's x86 CPU takes a matmul of >= 8 activation rows (dim 1) of the K formats' weights that it does not
    // repack through its tiled kernels, which scale each super-block's exact integers their own way: mul_mat then
    // uses this row kernel for every output (same bits); null where the type has no such path.
    vec_dot_fn vec_dot_batch8 = nullptr;
    // llama.cpp's x86 CPU takes a matmul of >= 2 activation rows of the matrices it does not repack through tinyBLAS
    // (llamafile's sgemm), whose order differs from vec_dot's for some types (iq4_nl): mul_mat then uses this row
    // kernel for every output (mul_mat_id never does); null where tinyBLAS sums as vec_dot does, or never runs.
    vec_dot_fn vec_dot_sgemm = nullptr;
    // For formats whose weights cost more to decode than to dot (the IQ3 grids: a table load every 4 values), a
    // weight row against a tile's activation rows, decoded once: vec_dot's order (row_panel) and vec_dot_batch8's
    // (row_panel_batch8); mul_mat takes them for tiles of 2 or more activation rows; null where the type has none.
    row_panel_fn row_panel = nullptr;
    row_panel_fn row_panel_batch8 = nullptr;
};

// Float kernels whose rounding must match ggml's CPU code exactly (attention, silu); scalar, AVX2 and (the prefill
// attention tiles) AVX-512 versions give bit-identical results, which test_ops checks.
struct float_kernels {
    // x . y summed in the order of ggml's AVX-512 f16 dot: 4 registers x 16 lanes of FMAs, registers folded 0+2, 1+3,
    // then 0+1, lanes folded in halves; elements past a multiple of 64 added in double
    float (*dot)(const float* x, const float* y, int64_t n);
    void (*mad)(float* acc, const float* v, float s, int64_t n, bool round_f16);  // acc = fma(v, s, acc)
    void (*scale)(float* acc, float s, int64_t n, bool round_f16);                // acc = acc * s
    void (*swiglu)(const float* g, const float* u, float* y, int64_t n);          // y = silu(g) * u, ggml's expf
    void (*silu)(const float* x, float* y, int64_t n);
    // prefill attention tile (ggml's tiled flash attention), for nr query rows at once: s[i * 64 + j] = fma-chain over
    // d of q[i][d] * kt[d * 64 + j] (kt: a 64-key tile transposed), for the 64 keys of the tile
    void (*kq_tile)(const float* const* q, int nr, const float* kt, int64_t hd, float* s);
    // s[j] = s[j] * scale + mask[j] (+ 0 where mask is null; the product rounded first) for j < n, -inf for the rest of
    // the 64; returns max(s) as a left-to-right std::max takes it
    float (*score_tile)(float* s, const float* mask, float scale, int64_t n);
    // p[j] = expf_ggml(s[j] - m) in place for 64 scores; returns their sum, 16 at a time (AVX-512 order) in double
    double (*softmax_tile)(float* s, float m);
    // for nr rows i: acc[i][d] = fma-chain over j < n of v[j * hd + d] * p[i][j]
    void (*pv_tile)(float* const* acc, const float* const* p, int nr, const float* v, int64_t n, int64_t hd);
    // dot and mad with the second operand in f16 (the KV cache): the same bits as converting it to f32 first
    float (*dot_f16)(const float* x, const uint16_t* y, int64_t n);
    void (*mad_f16)(float* acc, const uint16_t* v, float s, int64_t n, bool round_f16);
    // ggml's decode attention (one_chunk, f16 cache) for one query head (any size hd) over n <= attend_rows K/V rows
    // (elements k[j * stride ..], v[j * stride ..]): per row not masked out (mask[j] == -inf), s = dot_f16(q, k_j) *
    // scale + mask[j], the online softmax step on M and S, acc (f16-rounded) scaled and v_j added as scale / mad_f16
    // do: the same bits as those calls, with acc held in registers up to 64 lanes at a time. mask may be null. nullptr
    // where no kernel does it so.
    void (*attend_f16)(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, const float* mask,
                       int64_t n, float scale, int64_t hd, float& M, float& S, float* acc);
};
constexpr int64_t attend_rows = 32;
const float_kernels& find_float_kernels(bool reference = false);
// e^x exactly as ggml's AVX-512 kernel computes it (Arm optimized-routines polynomial, ~1.5 ulp)
float expf_ggml(float x);

// nullptr if the CPU backend cannot compute with this type. `reference` forces the scalar reference kernels.
const cpu_type_ops* find_cpu_ops(type t, bool reference = false);

} // namespace tessera::cpu
