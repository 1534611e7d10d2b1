// backend.cpp: graph_runner: plan, bind and check a graph for one backend.
#include "backend.h"

#include "error.h"

#include <fmt/core.h>

namespace tessera {

void graph_runner::prepare(graph& g) {
    for (tensor* n : g.nodes)
        if (!be_.supports(*n))
            throw error(fmt::format("backend {} does not support op {} on {} ({})", be_.name(), op_name(n->o),
                                    n->src[0] ? type_name(n->src[0]->t) : "-", n->name));
    memory_plan plan = plan_memory(g);
    if (!buf_ || buf_->size() < plan.size) {
        buf_.reset();
        buf_ = be_.alloc(plan.size + plan.size / 8 + 4096); // some headroom: graphs grow by a token at a time
    }
    bind_memory(g, plan, buf_->base());
}

} // namespace tessera
