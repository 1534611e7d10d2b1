// top_k_row.h: the k largest of a row of floats, as indices, in ggml's CPU order: sorted (ggml_argsort_top_k, one
// std::sort of every index) or ggml_top_k's (a partial sort, then the first two swapped). Among equal values the order
// is the one libstdc++'s sorts leave, so both backends run this very code: the CPU backend for every top_k, the CUDA
// backend in exact mode (its own kernel breaks ties by index), and ties do occur (two experts with the same router row,
// probabilities that round alike).
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace tessera {

// y[0 .. k) = the indices of x[0 .. n); idx is scratch (resized to n). Needs 0 <= k <= n.
inline void top_k_row(const float* x, int64_t n, int64_t k, bool sorted, int32_t* y, std::vector<int32_t>& idx) {
    idx.resize(size_t(n));
    for (int64_t j = 0; j < n; j++) idx[size_t(j)] = int32_t(j);
    auto greater = [x](int32_t i, int32_t j) { return x[i] > x[j]; };
    if (sorted) {
        std::sort(idx.begin(), idx.end(), greater);
        std::copy(idx.begin(), idx.begin() + k, y);
        return;
    }
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), greater);
    std::copy(idx.begin(), idx.begin() + k, y);
    if (k > 1) std::swap(y[0], y[1]);
}

} // namespace tessera
