// alloc.h: buffer planning for a graph: every computed tensor (and every input leaf without data) gets an offset in
// one buffer; a tensor's memory is reused once its last reader has run. Views and cpy nodes alias their source.
#pragma once

#include "graph.h"

#include <cstddef>
#include <unordered_map>

namespace tessera {

struct memory_plan {
    std::unordered_map<const tensor*, size_t> offset; // tensors that own memory in the buffer
    size_t size = 0;                                  // bytes needed
};

constexpr size_t TS_TENSOR_ALIGN = 64;

// Plans the graph's memory. Leafs that already have data (weights, caches) are left alone. lag: a tensor's memory is
// reused only once `lag` more nodes have run after its last reader (and a result nobody reads lives `lag` nodes),
// so that a backend running nodes i .. i + lag as one kernel at node i never finds a result of theirs planned over
// something the kernel still reads (cuda: ops/fused.cu; backend::fusion_window).
memory_plan plan_memory(const graph& g, size_t lag = 0);
// Points every planned tensor into `base` and resolves every view's data from its source.
void bind_memory(graph& g, const memory_plan& plan, void* base);

} // namespace tessera
