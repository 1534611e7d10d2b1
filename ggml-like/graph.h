// graph.h: the arena that owns tensors (context) and a computation graph in topological order (graph).
// Op builders are in ops.h; buffer planning in alloc.h; computing is a backend's job (backend.h).
#pragma once

#include "tensor.h"

#include <deque>
#include <initializer_list>
#include <unordered_set>
#include <vector>

namespace tessera {

// Owns tensor structs (not their data). Pointers stay valid for the context's lifetime.
class context {
  public:
    tensor* new_tensor(type t, std::initializer_list<int64_t> ne);
    tensor* new_tensor(type t, const int64_t* ne, int n_dims);
    tensor* dup_header(const tensor& t); // same type/shape/strides, no op, no data
    size_t size() const { return tensors_.size(); }

  private:
    std::deque<tensor> tensors_;
};

// Nodes in an order where every src comes before its user. Leafs (op::none) are kept apart.
struct graph {
    std::vector<tensor*> nodes; // computed in this order
    std::vector<tensor*> leafs; // weights, inputs, caches

    // Adds t and everything it depends on that is not in the graph yet (post-order DFS), like
    // ggml_build_forward_expand: calling expand(a) then expand(b) computes a's nodes before b's.
    void expand(tensor* t);

  private:
    std::unordered_set<const tensor*> seen_;
};

} // namespace tessera
