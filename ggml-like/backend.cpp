// backend.cpp: graph_runner: plan, bind and check a graph for one backend.
#include "backend.h"

#include "error.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace tessera {

namespace {

struct heap_buffer final : buffer { // aligned as tensors are: a host backend may compute in it (sched.cpp)
    void* p = nullptr;
    size_t n = 0;
    explicit heap_buffer(size_t bytes) : n(bytes) {
        p = std::aligned_alloc(TS_TENSOR_ALIGN, (std::max<size_t>(bytes, 1) + TS_TENSOR_ALIGN - 1) / TS_TENSOR_ALIGN *
                                                    TS_TENSOR_ALIGN);
        if (!p) throw std::bad_alloc();
    }
    ~heap_buffer() override { std::free(p); }
    heap_buffer(const heap_buffer&) = delete;
    heap_buffer& operator=(const heap_buffer&) = delete;
    void* base() override { return p; }
    size_t size() const override { return n; }
};

} // namespace

std::unique_ptr<buffer> backend::alloc_host(size_t bytes) {
    return std::make_unique<heap_buffer>(bytes);
}

void backend::join(std::shared_ptr<backend_group> group, int rank) {
    (void)group;
    (void)rank;
    throw error(fmt::format("backend {} cannot compute a model split over several backends", name()));
}

memory_plan plan_memory_for(const backend& be, const graph& g) {
    memory_plan plan = plan_memory(g);
    if (const size_t lag = be.fusion_window()) {
        memory_plan wide = plan_memory(g, lag);
        if (wide.size <= plan.size + std::max(plan.size / 2, size_t(64) << 20)) plan = std::move(wide);
    }
    return plan;
}

void graph_runner::prepare(graph& g) {
    for (tensor* n : g.nodes)
        if (!be_.supports(*n))
            throw error(fmt::format("backend {} does not support op {} on {} ({})", be_.name(), op_name(n->o),
                                    n->src[0] ? type_name(n->src[0]->t) : "-", n->name));
    const memory_plan plan = plan_memory_for(be_, g);
    if (!buf_ || buf_->size() < plan.size) {
        buf_.reset();
        buf_ = be_.alloc(plan.size + plan.size / 8 + 4096); // some headroom: graphs grow by a token at a time
    }
    bind_memory(g, plan, buf_->base());
}

} // namespace tessera
