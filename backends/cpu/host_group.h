// host_group.h: a backend group (ggml-like/backend.h) of CPU backends in one process: all_reduce and all_gather through
// host memory.
// Tests run tensor-parallel models on it without a GPU; the CUDA backends use NCCL instead (backends/cuda/nccl.cu).
#pragma once

#include "ggml-like/backend.h"

#include <barrier>
#include <cstddef>
#include <vector>

namespace tessera::cpu {

class host_group final : public backend_group {
  public:
    explicit host_group(int n);
    int size() const override { return n_; }
    // Member `rank`'s all_reduce: every member's x summed element by element in rank order (((x0 + x1) + x2) ...,
    // the same bits for every member) into each member's y, count floats each; x and y may be the same memory. Each
    // member calls it from its own thread; it returns when every member's y is written.
    void all_reduce(int rank, const float* x, float* y, size_t count);
    // Member `rank`'s all_gather: every member's x (rows of `part` floats) side by side in rank order into each
    // member's y (rows of part x size() floats); y is not any member's x. Called as all_reduce.
    void all_gather(int rank, const float* x, float* y, size_t part, size_t rows);

  private:
    // member `rank`'s input, output and element count in; returns when every member's are (the counts checked alike)
    void meet(int rank, const float* x, float* y, size_t count);

    int n_;
    std::vector<const float*> in_;
    std::vector<float*> out_;
    std::vector<size_t> count_;
    std::barrier<> bar_;
};

} // namespace tessera::cpu
