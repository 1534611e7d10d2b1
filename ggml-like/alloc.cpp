// alloc.cpp: greedy best-fit planner over the node order with liveness-based reuse (like ggml-alloc, simpler).
#include "alloc.h"

#include "error.h"

#include <algorithm>
#include <vector>

namespace tessera {

namespace {

tensor* root_of(tensor* t) { return t->view_src ? t->view_src : t; }

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Free blocks sorted by offset, merged when adjacent.
struct free_list {
    struct block {
        size_t offset, size;
    };
    std::vector<block> blocks;
    size_t end = 0; // high-water mark

    size_t take(size_t size) {
        size = align_up(size, TS_TENSOR_ALIGN);
        size_t best = SIZE_MAX;
        for (size_t i = 0; i < blocks.size(); i++)
            if (blocks[i].size >= size && (best == SIZE_MAX || blocks[i].size < blocks[best].size)) best = i;
        if (best != SIZE_MAX) {
            const size_t off = blocks[best].offset;
            blocks[best].offset += size;
            blocks[best].size -= size;
            if (blocks[best].size == 0) blocks.erase(blocks.begin() + long(best));
            return off;
        }
        // grow; if the last free block touches the end, extend it instead of leaving a hole
        if (!blocks.empty() && blocks.back().offset + blocks.back().size == end) {
            const size_t off = blocks.back().offset;
            end = off + size;
            blocks.pop_back();
            return off;
        }
        const size_t off = end;
        end += size;
        return off;
    }

    void give(size_t offset, size_t size) {
        size = align_up(size, TS_TENSOR_ALIGN);
        auto it = std::lower_bound(blocks.begin(), blocks.end(), offset,
                                   [](const block& b, size_t o) { return b.offset < o; });
        it = blocks.insert(it, {offset, size});
        // merge with next, then previous
        if (it + 1 != blocks.end() && it->offset + it->size == (it + 1)->offset) {
            it->size += (it + 1)->size;
            blocks.erase(it + 1);
        }
        if (it != blocks.begin() && (it - 1)->offset + (it - 1)->size == it->offset) {
            (it - 1)->size += it->size;
            blocks.erase(it);
        }
    }
};

} // namespace

memory_plan plan_memory(const graph& g, size_t lag) {
    memory_plan plan;
    free_list fl;

    // inputs without data live for the whole graph
    for (tensor* l : g.leafs)
        if (!l->data && !l->view_src) plan.offset[l] = fl.take(l->n_bytes());

    // last node index that reads each root tensor
    std::unordered_map<const tensor*, size_t> last_use;
    for (size_t i = 0; i < g.nodes.size(); i++) {
        tensor* n = g.nodes[i];
        for (tensor* s : n->src)
            if (s) last_use[root_of(s)] = i;
        if (n->view_src) last_use[n->view_src] = std::max(last_use[n->view_src], i);
    }
    auto keep = [&](const tensor* t) { return (t->flags & flag_output) != 0; };
    // an output view keeps its root alive
    std::unordered_map<const tensor*, bool> pinned;
    for (tensor* n : g.nodes)
        if (keep(n)) pinned[root_of(n)] = true;

    // roots to give back after node i + lag has been planned, by that index
    std::vector<std::vector<const tensor*>> due(g.nodes.size());
    auto give_after = [&](const tensor* r, size_t i) { due[std::min(i + lag, g.nodes.size() - 1)].push_back(r); };
    for (size_t i = 0; i < g.nodes.size(); i++) {
        tensor* n = g.nodes[i];
        if (!n->view_src && !n->data) plan.offset[n] = fl.take(n->n_bytes());
        // release roots whose last reader is this node
        auto release = [&](tensor* t) {
            tensor* r = root_of(t);
            auto it = plan.offset.find(r);
            if (it == plan.offset.end() || r->o == op::none || pinned.count(r)) return;
            auto lu = last_use.find(r);
            if (lu == last_use.end() || lu->second != i) return;
            give_after(r, i);
            last_use.erase(lu); // released once
        };
        for (tensor* s : n->src)
            if (s) release(s);
        // a node nobody reads (and not an output) can go right away
        if (!n->view_src && !pinned.count(n) && !last_use.count(n) && plan.offset.count(n)) give_after(n, i);
        for (const tensor* r : due[i]) fl.give(plan.offset.at(r), r->n_bytes());
    }
    plan.size = fl.end;
    return plan;
}

void bind_memory(graph& g, const memory_plan& plan, void* base) {
    auto* b = static_cast<uint8_t*>(base);
    for (auto& [t, off] : plan.offset) const_cast<tensor*>(t)->data = b + off;
    auto resolve = [](tensor* t) {
        if (t->view_src) {
            TS_ASSERT(t->view_src->data != nullptr);
            t->data = static_cast<uint8_t*>(t->view_src->data) + t->view_offs;
        }
    };
    for (tensor* l : g.leafs) resolve(l);
    for (tensor* n : g.nodes) resolve(n);
}

} // namespace tessera
