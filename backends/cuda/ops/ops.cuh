// ops.cuh: the CUDA ops, one function per op, each reading its node (`rms_norm(ctx, dst)`), launching on ctx.stream
// and returning without waiting. Same names and files as the CPU's (backends/cpu/ops/): elementwise, norm, rope,
// softmax, get_rows, attention; mul_mat is the fused dequant GEMV in mmv.cu.
#pragma once

#include "backends/cuda/common.cuh"

#include <cuda_fp16.h>

namespace tessera::cuda {

void get_rows(cuda_context& ctx, tensor& dst);
void mul_mat(cuda_context& ctx, tensor& dst);
void add(cuda_context& ctx, tensor& dst);
void mul(cuda_context& ctx, tensor& dst);
void scale(cuda_context& ctx, tensor& dst);
void rms_norm(cuda_context& ctx, tensor& dst);
void rope(cuda_context& ctx, tensor& dst);
void soft_max(cuda_context& ctx, tensor& dst);
void silu(cuda_context& ctx, tensor& dst);
void swiglu(cuda_context& ctx, tensor& dst);
void cpy(cuda_context& ctx, tensor& dst);
void set_rows(cuda_context& ctx, tensor& dst);
void attention(cuda_context& ctx, tensor& dst);

// What each op accepts (types, strides, sizes), for cuda_backend::supports().
bool mul_mat_supported(const tensor& dst);
bool get_rows_supported(const tensor& dst);
bool attention_supported(const tensor& dst);
bool set_rows_supported(const tensor& dst);
// Weight types mul_mat and get_rows accept: f32, f16, bf16 and the formats with a cuda_format (quant/formats.cuh).
bool weight_type_supported(type t);
// Scratch bytes mul_mat needs for its quantized activations (0 for float weights).
size_t mul_mat_work_size(const tensor& dst);
// Whether the upload repacks weight w into the split layout (quant/format.cuh): a format with one, a 2-D contiguous
// weight of whole blocks; TESSERA_CUDA_SPLIT=0 turns the layout off (the file's blocks, where a format has a kernel).
bool split_eligible(const tensor& w);
// x (f32 rows of k % 32 == 0 elements) quantized to q8_1 for the split kernels, in ctx.scratch: q [cols][k] int8 and
// ds [cols][k / 32] (d, s = d sum q) as half2, the CPU's integers (mmv.cu). Consecutive calls with the same x (q, k, v;
// gate, up) quantize once.
struct split_acts {
    const int8_t* q = nullptr;
    const __half2* ds = nullptr;
};
split_acts split_activations(cuda_context& ctx, const tensor& x);

// The tensor-core GEMM for split-layout weights (gemm.cu): used for more than 8 activation columns.
bool gemm_split_wanted(int64_t cols);
size_t gemm_split_work_size(int64_t k, int64_t cols);
void gemm_split(cuda_context& ctx, const split_weight& w, tensor& dst);

} // namespace tessera::cuda
