// harness_check.h: the standalone CUDA harnesses' (tests/bench/*_harness.cu) check of a runtime call: on an error,
// the call and the error on one line, and exit 1.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
#define CKH(x)                                                                                                         \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            std::printf("%s: %s\n", #x, cudaGetErrorString(e_));                                                       \
            std::exit(1);                                                                                              \
        }                                                                                                              \
    } while (0)
