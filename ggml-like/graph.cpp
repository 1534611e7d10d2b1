// graph.cpp: tensor arena and topological graph building.
#include "graph.h"

#include "error.h"

namespace tessera {

tensor* context::new_tensor(type t, const int64_t* ne, int n_dims) {
    TS_ASSERT(n_dims >= 1 && n_dims <= TS_MAX_DIMS);
    tensor& x = tensors_.emplace_back();
    x.t = t;
    for (int d = 0; d < n_dims; d++) x.ne[d] = ne[d];
    TS_ASSERT(x.ne[0] % block_size(t) == 0);
    x.nb[0] = type_size(t);
    x.nb[1] = row_size(t, x.ne[0]);
    for (int d = 2; d < TS_MAX_DIMS; d++) x.nb[d] = x.nb[d - 1] * size_t(x.ne[d - 1]);
    return &x;
}

tensor* context::new_tensor(type t, std::initializer_list<int64_t> ne) {
    return new_tensor(t, ne.begin(), int(ne.size()));
}

tensor* context::dup_header(const tensor& t) {
    tensor& x = tensors_.emplace_back();
    x.t = t.t;
    for (int d = 0; d < TS_MAX_DIMS; d++) {
        x.ne[d] = t.ne[d];
        x.nb[d] = t.nb[d];
    }
    return &x;
}

void graph::expand(tensor* t) {
    // iterative post-order DFS (graphs are a few thousand nodes deep at most, but avoid recursion anyway)
    struct frame {
        tensor* t;
        int next;
    };
    std::vector<frame> stack;
    if (seen_.count(t)) return;
    stack.push_back({t, 0});
    seen_.insert(t);
    while (!stack.empty()) {
        frame& f = stack.back();
        tensor* cur = f.t;
        // a view depends on the tensor it aliases too (its data must be computed first)
        tensor* deps[TS_MAX_SRC + 1];
        int n_deps = 0;
        for (int i = 0; i < TS_MAX_SRC; i++)
            if (cur->src[i]) deps[n_deps++] = cur->src[i];
        if (cur->view_src && cur->o == op::view) {
            bool dup = false;
            for (int i = 0; i < n_deps; i++) dup |= deps[i] == cur->view_src;
            if (!dup) deps[n_deps++] = cur->view_src;
        }
        if (f.next < n_deps) {
            tensor* s = deps[f.next++];
            if (!seen_.count(s)) {
                seen_.insert(s);
                stack.push_back({s, 0});
            }
            continue;
        }
        if (cur->o == op::none)
            leafs.push_back(cur);
        else
            nodes.push_back(cur);
        stack.pop_back();
    }
}

} // namespace tessera
