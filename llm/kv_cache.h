// kv_cache.h: the per-layer K and V caches: f16 tensors (n_embd_kv of the layer, n_ctx), row p holding position p of
// every KV head of that layer, in the memory of the backend that computes the layer. Rows [0, n_used) are filled; a new
// batch writes rows [n_used, n_used + n_tok) through set_rows nodes. The memory starts zeroed: attention may read rows
// past n_used (masked out) when the backend pads the KV length.
#pragma once

#include "ggml-like/backend.h"
#include "ggml-like/graph.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace tessera {

struct kv_cache {
    context ctx;                              // owns the tensor headers below
    std::vector<tensor*> k, v;                // per layer: (n_embd_kv, n_ctx) f16
    std::vector<std::unique_ptr<buffer>> mem; // backing memory: one buffer per backend holding layers
    int64_t n_ctx = 0;
    int64_t n_used = 0; // positions held

    // widths[il] = K (and V) values per position of layer il; be[il] = the backend whose memory holds layer il
    void init(const std::vector<backend*>& be, const std::vector<int64_t>& widths, int64_t n_ctx_, type t = type::f16) {
        n_ctx = n_ctx_;
        k.assign(widths.size(), nullptr);
        v.assign(widths.size(), nullptr);
        std::vector<backend*> owners;
        for (backend* b : be)
            if (std::find(owners.begin(), owners.end(), b) == owners.end()) owners.push_back(b);
        for (backend* b : owners) {
            std::vector<int64_t> mine(widths.size(), 0);
            for (size_t il = 0; il < widths.size(); il++)
                if (be[il] == b) mine[il] = widths[il];
            mem.push_back(b->alloc_zeroed(bytes_for(mine, n_ctx, t)));
            auto* base = static_cast<uint8_t*>(mem.back()->base());
            for (size_t il = 0; il < widths.size(); il++) {
                if (be[il] != b) continue;
                for (auto* list : {&k, &v}) {
                    tensor* t_ = ctx.new_tensor(t, {widths[il], n_ctx});
                    t_->data = base;
                    base += row_size(t, widths[il]) * size_t(n_ctx);
                    (*list)[il] = t_;
                }
            }
        }
    }
    static size_t bytes_for(const std::vector<int64_t>& widths, int64_t n_ctx, type t = type::f16) {
        size_t n = 0;
        for (int64_t w : widths) n += 2 * row_size(t, w) * size_t(n_ctx);
        return n;
    }
    size_t bytes() const {
        size_t n = 0;
        for (const auto& b : mem) n += b->size();
        return n;
    }
};

} // namespace tessera
