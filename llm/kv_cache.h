// kv_cache.h: the per-layer K and V caches: f16 tensors (n_embd_kv, n_ctx), row p holding position p of every KV
// head. Rows [0, n_used) are filled; a new batch writes rows [n_used, n_used + n_tok) through set_rows nodes. The
// memory starts zeroed: attention may read rows past n_used (masked out) when the backend pads the KV length.
#pragma once

#include "ggml-like/backend.h"
#include "ggml-like/graph.h"

#include <memory>
#include <vector>

namespace tessera {

struct kv_cache {
    context ctx;                  // owns the tensor headers below
    std::vector<tensor*> k, v;    // per layer: (n_embd_kv, n_ctx) f16
    std::unique_ptr<buffer> mem;  // backing memory for all of them
    int64_t n_ctx = 0;
    int64_t n_used = 0;           // positions held

    void init(backend& be, int n_layer, int64_t n_embd_kv, int64_t n_ctx_, type t = type::f16) {
        n_ctx = n_ctx_;
        const size_t row = row_size(t, n_embd_kv);
        mem = be.alloc_zeroed(size_t(2 * n_layer) * row * size_t(n_ctx));
        auto* base = static_cast<uint8_t*>(mem->base());
        for (int il = 0; il < n_layer; il++) {
            for (auto* list : {&k, &v}) {
                tensor* t_ = ctx.new_tensor(t, {n_embd_kv, n_ctx});
                t_->data = base;
                base += row * size_t(n_ctx);
                list->push_back(t_);
            }
        }
    }
    size_t bytes() const { return mem ? mem->size() : 0; }
};

} // namespace tessera
