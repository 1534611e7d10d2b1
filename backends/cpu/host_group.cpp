// host_group.cpp: all_reduce over CPU backends: each member sums its slice of the elements over every member's input
// and writes the sums into every member's output, between two barriers; all_gather: each member copies every
// member's input into its own output.
#include "host_group.h"

#include "ggml-like/error.h"

#include <cstring>

namespace tessera::cpu {

host_group::host_group(int n)
    : n_(n), in_(size_t(n), nullptr), out_(size_t(n), nullptr), count_(size_t(n), 0), bar_(n) {
    TS_ASSERT(n >= 1);
}

void host_group::meet(int rank, const float* x, float* y, size_t count) {
    TS_ASSERT(rank >= 0 && rank < n_);
    in_[size_t(rank)] = x;
    out_[size_t(rank)] = y;
    count_[size_t(rank)] = count;
    bar_.arrive_and_wait(); // every member's pointers are in
    for (int r = 0; r < n_; r++) TS_ASSERT(count_[size_t(r)] == count); // the members' graphs match
}

void host_group::all_reduce(int rank, const float* x, float* y, size_t count) {
    meet(rank, x, y, count);
    // this member's slice: no other member reads or writes it, so an output that is its own input is safe
    const size_t lo = count * size_t(rank) / size_t(n_), hi = count * size_t(rank + 1) / size_t(n_);
    for (size_t i = lo; i < hi; i++) {
        float s = in_[0][i];
        for (int r = 1; r < n_; r++) s += in_[size_t(r)][i];
        for (int r = 0; r < n_; r++) out_[size_t(r)][i] = s;
    }
    bar_.arrive_and_wait(); // every slice is written (and no member's memory is reused before)
}

void host_group::all_gather(int rank, const float* x, float* y, size_t part, size_t rows) {
    meet(rank, x, y, part * rows);
    const size_t width = part * size_t(n_);
    for (size_t row = 0; row < rows; row++)
        for (int r = 0; r < n_; r++)
            std::memcpy(y + row * width + size_t(r) * part, in_[size_t(r)] + row * part, part * sizeof(float));
    bar_.arrive_and_wait(); // every member has read every input (and no member's memory is reused before)
}

} // namespace tessera::cpu
