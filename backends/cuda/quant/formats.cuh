// formats.cuh: every block format's CUDA fast path. Code that asks cuda_format<F> includes this file (never a single
// format's header), so every translation unit sees the same specializations. A new format: one quant/<name>.cuh with
// its cuda_format specialization, one line here.
#pragma once

#include "backends/cuda/quant/format.cuh"
#include "backends/cuda/quant/awq4.cuh"
#include "backends/cuda/quant/iq3.cuh"
#include "backends/cuda/quant/iq4.cuh"
#include "backends/cuda/quant/k_quants.cuh"
#include "backends/cuda/quant/mxfp4.cuh"
#include "backends/cuda/quant/nvfp4.cuh"
#include "backends/cuda/quant/q4_0.cuh"
#include "backends/cuda/quant/q4_1.cuh"
#include "backends/cuda/quant/q5.cuh"
#include "backends/cuda/quant/q8_0.cuh"
#include "backends/cuda/quant/ternary.cuh"
