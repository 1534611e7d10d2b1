// sched.cpp: placement, splits, boundary copies and per-backend memory for a graph on several backends.
#include "sched.h"

#include "alloc.h"
#include "error.h"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <cstdint>
#include <cstring>
#include <map>
#include <unordered_set>
#include <utility>

namespace tessera {

namespace {

tensor* root_of(tensor* t) {
    while (t->view_src) t = t->view_src;
    return t;
}
bool is_leaf(const tensor* t) {
    return t->o == op::none;
}

} // namespace

scheduler::scheduler(std::vector<backend*> backends)
    : backends_(std::move(backends)), buffers_(backends_.size()), weight_slots_(backends_.size()) {
    TS_ASSERT(!backends_.empty());
    if (const char* e = std::getenv("TESSERA_SCHED_PROFILE"); e && std::string(e) == "1") {
        prof_ = std::make_unique<profile>();
        for (auto* v : {&prof_->compute_s, &prof_->copy_s, &prof_->weight_s}) v->assign(backends_.size(), 0.0);
        for (auto* v : {&prof_->copy_bytes, &prof_->weight_bytes, &prof_->n_splits}) v->assign(backends_.size(), 0);
    }
}

scheduler::~scheduler() {
    if (!prof_ || prof_->graphs == 0) return;
    const double g = double(prof_->graphs);
    fmt::print(stderr, "scheduler profile: {} graphs; per graph, by backend:\n", prof_->graphs);
    fmt::print(stderr, "  {:<3} {:<8} {:>7} {:>11} {:>11} {:>9} {:>11} {:>9}\n", "#", "backend", "splits", "compute ms",
               "copies ms", "GB/s", "weights ms", "GB/s");
    for (size_t b = 0; b < backends_.size(); b++) {
        const profile& p = *prof_;
        auto rate = [](size_t bytes, double s) { return s > 0 ? double(bytes) / s * 1e-9 : 0.0; };
        fmt::print(stderr, "  {:<3} {:<8} {:>7.1f} {:>11.2f} {:>11.2f} {:>9.1f} {:>11.2f} {:>9.1f}\n", b,
                   backends_[b]->name(), double(p.n_splits[b]) / g, 1e3 * p.compute_s[b] / g, 1e3 * p.copy_s[b] / g,
                   rate(p.copy_bytes[b], p.copy_s[b]), 1e3 * p.weight_s[b] / g, rate(p.weight_bytes[b], p.weight_s[b]));
    }
}

void scheduler::prepare(graph& g, const home_fn& home) {
    const int n_be = int(backends_.size());
    for (backend* b : backends_) b->forget_weight_copies(); // the copies of the graph before go with copies_ctx_
    splits_.clear();
    where_.clear();
    copies_ctx_ = std::make_unique<context>();
    prepared_ = &g;
    auto leaf_home = [&](const tensor* leaf) {
        const int h = home(*leaf);
        if (h >= n_be) throw error(fmt::format("tensor {} placed on backend {} of {}", leaf->name, h, n_be));
        return std::max(h, 0);
    };

    // 1) nodes, in order. A node that aliases memory (view, cpy, set_rows) goes with what it aliases; a node reading a
    // weight or a cache goes to that leaf's backend; any other node goes with its first reader when that one reads a
    // weight or a cache (a layer's first norm joins its layer), else with the node before it (-1 until there is one;
    // -2: aliases an input, placed with it below).
    const size_t n = g.nodes.size();
    std::unordered_map<const tensor*, size_t> index;
    for (size_t i = 0; i < n; i++) index[g.nodes[i]] = i;
    std::vector<int> by_leaf(n, -1); // the backend of the weight or cache a node reads
    std::vector<size_t> first_reader(n, SIZE_MAX);
    for (size_t i = 0; i < n; i++) {
        tensor* nd = g.nodes[i];
        for (tensor* s : nd->src) {
            if (!s) continue;
            tensor* r = root_of(s);
            if (!is_leaf(r)) {
                const size_t j = index.at(r);
                if (first_reader[j] == SIZE_MAX && nd->o != op::view) first_reader[j] = i;
            } else if (r->data && home(*r) >= 0 && by_leaf[i] < 0 && !nd->view_src) {
                by_leaf[i] = leaf_home(r);
            }
        }
        // a backend that cannot compute the node leaves it to backends[0]
        if (by_leaf[i] > 0 && !backends_[size_t(by_leaf[i])]->supports(*nd)) by_leaf[i] = 0;
    }
    // op offload: a batch's mul_mat of a weight held for backends[0] goes to the target, which gets the weight copied
    std::unordered_set<const tensor*> offloaded;
    if (offload_target_ >= 1 && offload_target_ < n_be)
        for (size_t i = 0; i < n; i++) {
            tensor* nd = g.nodes[i];
            const bool id = nd->o == op::mul_mat_id; // a mixture's experts (--n-cpu-moe): the whole stack goes up
            if ((nd->o != op::mul_mat && !id) || by_leaf[i] != 0 || !nd->src[0] || !nd->src[1]) continue;
            tensor* w = nd->src[0]; // the weight itself (a view of one, as phi3's fused q/k/v, stays)
            // tokens: mul_mat's activation rows; mul_mat_id's activations are (k, slots, tokens)
            const int64_t rows = id ? nd->src[1]->ne[2] : nd->src[1]->ne[1] * nd->src[1]->ne[2] * nd->src[1]->ne[3];
            if (!is_leaf(w) || !(w->flags & flag_param) || !w->data || rows < offload_min_batch_ ||
                !backends_[size_t(offload_target_)]->supports(*nd))
                continue;
            by_leaf[i] = offload_target_;
            offloaded.insert(nd);
        }
    n_offloaded_ = offloaded.size();
    std::vector<int> pl(n, -1);
    int cur = -1;
    for (size_t i = 0; i < n; i++) {
        tensor* nd = g.nodes[i];
        if (nd->view_src) {
            tensor* r = root_of(nd);
            if (!is_leaf(r))
                pl[i] = pl[index.at(r)];
            else
                pl[i] = r->data ? leaf_home(r) : -2;
        } else if (by_leaf[i] >= 0) {
            pl[i] = by_leaf[i];
        } else if (first_reader[i] != SIZE_MAX && by_leaf[first_reader[i]] >= 0 &&
                   (by_leaf[first_reader[i]] == 0 || backends_[size_t(by_leaf[first_reader[i]])]->supports(*nd))) {
            pl[i] = by_leaf[first_reader[i]];
        } else {
            pl[i] = cur;
            if (pl[i] > 0 && !backends_[size_t(pl[i])]->supports(*nd)) pl[i] = 0;
        }
        if (nd->o != op::view && pl[i] >= 0) cur = pl[i];
    }
    int first = 0;
    for (size_t i = 0; i < n; i++)
        if (pl[i] >= 0) {
            first = pl[i];
            break;
        }
    for (size_t i = 0; i < n; i++)
        if (pl[i] == -1) pl[i] = first;
    // inputs (leaves without data) live with their first reader that computes
    for (size_t i = 0; i < n; i++) {
        if (g.nodes[i]->o == op::view || pl[i] < 0) continue;
        for (tensor* s : g.nodes[i]->src)
            if (s) {
                tensor* r = root_of(s);
                if (is_leaf(r) && !r->data && !where_.count(r)) where_[r] = pl[i];
            }
    }
    for (tensor* l : g.leafs)
        if (!l->data && !l->view_src && !where_.count(l)) where_[l] = 0;
    for (size_t i = 0; i < n; i++) {
        if (pl[i] == -2) pl[i] = where_.at(root_of(g.nodes[i]));
        where_[g.nodes[i]] = pl[i];
        tensor* nd = g.nodes[i];
        if (nd->o != op::view && !backends_[size_t(pl[i])]->supports(*nd))
            throw error(fmt::format("backend {} does not support op {} on {} ({})", backends_[size_t(pl[i])]->name(),
                                    op_name(nd->o), nd->src[0] ? type_name(nd->src[0]->t) : "-", nd->name));
    }

    // 2) splits: runs of computing nodes on one backend (a view joins the run when it is on the run's backend; it
    // computes nothing), and each backend's planning graph (its nodes, inputs and copies)
    std::vector<graph> plan_g(backends_.size());
    for (tensor* l : g.leafs)
        if (!l->data && !l->view_src) plan_g[size_t(where_.at(l))].leafs.push_back(l);
    for (size_t i = 0; i < n; i++) {
        tensor* nd = g.nodes[i];
        plan_g[size_t(pl[i])].nodes.push_back(nd);
        if (nd->o == op::view) {
            if (!splits_.empty() && splits_.back().b == pl[i]) splits_.back().g.nodes.push_back(nd);
            continue;
        }
        if (splits_.empty() || splits_.back().b != pl[i]) {
            splits_.emplace_back();
            splits_.back().b = pl[i];
        }
        splits_.back().g.nodes.push_back(nd);
    }

    // 3) what a split reads from another backend: the whole root tensor is copied (once per split), and the node reads
    // the copy, or a view of the copy at the same offset
    auto owner = [&](tensor* r) -> int {
        if (!is_leaf(r) || !r->data) return where_.at(r);
        return (r->flags & flag_param) ? -1 : leaf_home(r); // weights: read where they are, never copied
    };
    std::vector<tensor*> views_of_copies;
    for (split& sp : splits_) {
        std::map<tensor*, tensor*> sub; // tensor as read -> what this split reads instead
        for (tensor* nd : sp.g.nodes) {
            if (nd->o == op::view) continue;
            for (tensor*& s : nd->src) {
                if (!s) continue;
                if (auto it = sub.find(s); it != sub.end()) {
                    s = it->second;
                    continue;
                }
                tensor* r = root_of(s);
                // an offloaded mul_mat's weight: copied from host memory into the split's weight slot
                const bool weight_copy = is_leaf(r) && (r->flags & flag_param) && offloaded.count(nd) &&
                                         s == nd->src[0] && leaf_home(r) != sp.b;
                const int o = weight_copy ? leaf_home(r) : owner(r);
                if (o < 0 || o == sp.b) continue;
                tensor* c = nullptr;
                if (auto it = sub.find(r); it != sub.end()) {
                    c = it->second;
                } else {
                    c = copies_ctx_->dup_header(*r); // no flags: a weight's copy is not a loaded weight
                    std::memcpy(c->name, r->name, sizeof c->name);
                    sub[r] = c;
                    if (weight_copy) {
                        sp.weight_copies.push_back({r, c, o});
                    } else {
                        sp.copies.push_back({r, c, o});
                        plan_g[size_t(sp.b)].leafs.push_back(c);
                    }
                    if (!is_leaf(r)) r->flags |= flag_output; // kept until the copy is made
                }
                tensor* v = c;
                if (s != r) {
                    v = copies_ctx_->dup_header(*s);
                    std::memcpy(v->name, s->name, sizeof v->name);
                    v->view_src = c;
                    v->view_offs = s->view_offs; // the offset inside the root, as the view was built
                    views_of_copies.push_back(v);
                }
                sub[s] = v;
                s = v;
            }
        }
    }

    // each split's graph names the leaves its nodes read (weights, caches, inputs, copies), as a whole graph does: a
    // backend may describe them (CUDA's replay check)
    for (split& sp : splits_) {
        std::unordered_set<const tensor*> seen;
        for (tensor* nd : sp.g.nodes)
            for (tensor* s : nd->src)
                if (s) {
                    tensor* r = root_of(s);
                    if (is_leaf(r) && seen.insert(r).second) sp.g.leafs.push_back(r);
                }
    }

    // 4) memory: each backend plans and binds its own graph in its own buffer
    for (size_t b = 0; b < backends_.size(); b++) {
        if (plan_g[b].nodes.empty() && plan_g[b].leafs.empty()) continue;
        const memory_plan plan = plan_memory_for(*backends_[b], plan_g[b]);
        if (!buffers_[b] || buffers_[b]->size() < plan.size) {
            buffers_[b].reset();
            const size_t bytes = plan.size + plan.size / 8 + 4096;
            // a host backend's memory from a device backend's alloc_host (CUDA: page-locked), so that the copies
            // between them go straight from and into it at the bus's speed
            backend* dev = nullptr;
            if (backends_[b]->host_memory())
                for (backend* o : backends_)
                    if (!o->host_memory() && !dev) dev = o;
            buffers_[b] = dev ? dev->alloc_host(bytes) : backends_[b]->alloc(bytes);
        }
        bind_memory(plan_g[b], plan, buffers_[b]->base());
    }
    auto copy_bytes = [&](int b, const tensor& w) {
        return (backends_[size_t(b)]->weight_copy_bytes(w) + 255) / 256 * 256;
    };
    // the offloaded weights: each split's packed from the start of its backend's slot (splits run one after the
    // other, and a backend's copies and kernels are ordered on its stream, so the next split's copies wait for them)
    std::vector<size_t> slot(backends_.size(), 0);
    for (const split& sp : splits_) {
        size_t need = 0;
        for (const copy& c : sp.weight_copies) need += copy_bytes(sp.b, *c.from);
        slot[size_t(sp.b)] = std::max(slot[size_t(sp.b)], need);
    }
    for (size_t b = 0; b < backends_.size(); b++)
        if (slot[b] > 0 && (!weight_slots_[b] || weight_slots_[b]->size() < slot[b])) {
            weight_slots_[b].reset();
            weight_slots_[b] = backends_[b]->alloc(slot[b]);
        }
    for (split& sp : splits_) {
        size_t off = 0;
        for (const copy& c : sp.weight_copies) {
            c.to->data = static_cast<uint8_t*>(weight_slots_[size_t(sp.b)]->base()) + off;
            off += copy_bytes(sp.b, *c.from);
        }
    }
    for (tensor* v : views_of_copies) v->data = static_cast<uint8_t*>(v->view_src->data) + v->view_offs;

    size_t staging = 0; // copies between two device backends go through host memory
    for (const split& sp : splits_)
        for (const copy& c : sp.copies)
            if (!backends_[size_t(sp.b)]->host_memory() && !backends_[size_t(c.from_backend)]->host_memory())
                staging = std::max(staging, c.from->n_bytes());
    staging_.resize(staging);
}

void scheduler::compute(graph& g, bool again) {
    TS_ASSERT(&g == prepared_);
    std::vector<int> per_backend(backends_.size(), 0);
    for (const split& sp : splits_) per_backend[size_t(sp.b)]++;
    using clock = std::chrono::steady_clock;
    auto since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
    if (prof_) {
        prof_->graphs++;
        for (backend* b : backends_) b->synchronize();
    }
    // device backends that may still be reading a host backend's memory (set() from it returns before the copy ends
    // where that memory is page-locked): waited for before a host backend computes
    std::vector<char>& reading_host = reading_host_;
    std::vector<char>& weights_sent = weights_sent_;
    reading_host.assign(backends_.size(), 0); // (members: no allocation per decode step)
    weights_sent.assign(splits_.size(), 0);
    auto send_weights = [&](size_t si) {
        split& sp = splits_[si];
        backend& be = *backends_[size_t(sp.b)];
        for (const copy& c : sp.weight_copies) { // from host memory
            be.set_weight_copy(*c.to, *c.from);
            if (prof_) prof_->weight_bytes[size_t(sp.b)] += be.weight_copy_bytes(*c.from);
        }
        weights_sent[si] = 1;
    };
    for (size_t si = 0; si < splits_.size(); si++) {
        split& sp = splits_[si];
        const size_t b = size_t(sp.b);
        backend& be = *backends_[b];
        auto t0 = clock::now();
        for (const copy& c : sp.copies) {
            const size_t bytes = c.from->n_bytes();
            backend& from = *backends_[size_t(c.from_backend)];
            if (be.host_memory()) { // straight into the copy
                from.get(*c.from, c.to->data, 0, bytes);
            } else if (from.host_memory()) { // straight from the original
                be.set(*c.to, c.from->data, 0, bytes);
                reading_host[b] = 1;
            } else {
                from.get(*c.from, staging_.data(), 0, bytes);
                be.set(*c.to, staging_.data(), 0, bytes);
            }
            if (prof_) prof_->copy_bytes[b] += bytes;
        }
        if (prof_) {
            be.synchronize();
            prof_->copy_s[b] += since(t0);
            t0 = clock::now();
        }
        if (!weights_sent[si]) send_weights(si);
        if (prof_) {
            be.synchronize();
            prof_->weight_s[b] += since(t0);
        }
        if (be.host_memory())
            for (size_t o = 0; o < backends_.size(); o++)
                if (reading_host[o]) {
                    backends_[o]->synchronize();
                    reading_host[o] = 0;
                }
        // op offload: the weights of the next split on another backend go up while this one computes (that backend's
        // stream orders them after its earlier kernels, the last readers of its weight slot)
        for (size_t sj = si + 1; sj < splits_.size(); sj++)
            if (splits_[sj].b != sp.b) {
                if (!weights_sent[sj] && !splits_[sj].weight_copies.empty()) send_weights(sj);
                break;
            }
        if (prof_) t0 = clock::now();
        if (again && per_backend[b] == 1)
            be.compute_again(sp.g);
        else
            be.compute(sp.g);
        if (prof_) {
            be.synchronize();
            prof_->compute_s[b] += since(t0);
            prof_->n_splits[b]++;
        }
    }
    // the caller may write the host backends' inputs next
    for (size_t o = 0; o < backends_.size(); o++)
        if (reading_host[o]) backends_[o]->synchronize();
}

backend& scheduler::backend_of(const tensor& t) const {
    const tensor* r = &t;
    while (r->view_src) r = r->view_src;
    auto it = where_.find(r);
    return *backends_[it == where_.end() ? 0 : size_t(it->second)];
}

int scheduler::placement(const tensor& node) const {
    auto it = where_.find(&node);
    return it == where_.end() ? -1 : it->second;
}

size_t scheduler::n_copies() const {
    size_t k = 0;
    for (const split& sp : splits_) k += sp.copies.size() + sp.weight_copies.size();
    return k;
}

size_t scheduler::buffer_size(int b) const {
    return buffers_[size_t(b)] ? buffers_[size_t(b)]->size() : 0;
}

} // namespace tessera
