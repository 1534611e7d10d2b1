// proto_check.cuh: the standalone prototypes' CUDA call check (persist_proto.cu, wgmma_proto.cu build without the
// project's headers): a failing call prints file, line, the call and CUDA's message, and exits 1.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                 \
            std::exit(1);                                                                                              \
        }                                                                                                              \
    } while (0)
