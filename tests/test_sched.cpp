// The scheduler (ggml-like/sched.h) with two CPU backends: a small transformer-like graph (token embeddings, per
// layer RMSNorm, q/k/v projections, rope, KV-cache writes, attention, output projection, residuals; positions, mask
// and cache slots as inputs read by every layer) split at every layer boundary gives the same bytes as one backend,
// runs each layer's nodes on the backend its weights and cache name, and copies only what crosses.
#include "backends/cpu/cpu_backend.h"
#include "ggml-like/error.h"
#include "ggml-like/ops.h"
#include "ggml-like/sched.h"
#include "helpers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

using namespace tessera;
using tessera::test::random_normal;

namespace {

// A CPU backend that records the nodes it computes.
struct recording_backend final : backend {
    cpu::cpu_backend cpu{cpu::cpu_options{2, false}};
    std::set<const tensor*> computed;
    std::string name() const override { return "recording-cpu"; }
    std::unique_ptr<buffer> alloc(size_t bytes) override { return cpu.alloc(bytes); }
    std::unique_ptr<buffer> alloc_zeroed(size_t bytes) override { return cpu.alloc_zeroed(bytes); }
    void set(tensor& t, const void* src, size_t offset, size_t size) override { cpu.set(t, src, offset, size); }
    void get(const tensor& t, void* dst, size_t offset, size_t size) override { cpu.get(t, dst, offset, size); }
    bool supports(const tensor& node) const override { return cpu.supports(node); }
    void compute(graph& g) override {
        for (tensor* n : g.nodes) computed.insert(n);
        cpu.compute(g);
    }
};

constexpr int64_t n_layer = 4, d = 64, hd = 16, n_head = 4, n_head_kv = 2, n_vocab = 50, n_tok = 7, n_ctx = 16;

struct toy_model {
    context ctx;
    std::vector<std::vector<float>> storage;
    std::map<const tensor*, int64_t> layer_of; // weights and caches -> layer (n_layer: the output)
    tensor *tok_embd, *out_w;
    struct layer {
        tensor *norm, *wq, *wk, *wv, *wo, *k_cache, *v_cache;
    } l[n_layer];

    tensor* weight(std::initializer_list<int64_t> ne, uint32_t seed, int64_t il, float sigma = 0.2f) {
        tensor* t = ctx.new_tensor(type::f32, ne);
        storage.push_back(random_normal(size_t(t->n_elements()), seed, sigma));
        t->data = storage.back().data();
        t->flags |= flag_param;
        layer_of[t] = il;
        return t;
    }
    tensor* cache(int64_t il) { // f32, zeroed: attention may read rows not written yet (masked)
        tensor* t = ctx.new_tensor(type::f32, {hd * n_head_kv, n_ctx});
        storage.emplace_back(size_t(t->n_elements()), 0.0f);
        t->data = storage.back().data();
        layer_of[t] = il;
        return t;
    }
    toy_model() {
        tok_embd = weight({d, n_vocab}, 1, -1, 1.0f);
        out_w = weight({d, n_vocab}, 2, n_layer);
        for (int64_t il = 0; il < n_layer; il++) {
            const uint32_t s = uint32_t(10 * il + 10);
            l[il] = {weight({d}, s, il, 1.0f),
                     weight({d, d}, s + 1, il),
                     weight({d, hd * n_head_kv}, s + 2, il),
                     weight({d, hd * n_head_kv}, s + 3, il),
                     weight({d, d}, s + 4, il),
                     cache(il),
                     cache(il)};
        }
    }

    // the graph of one batch of n_tok tokens at positions 0..n_tok-1; inputs returned for the caller to fill
    struct inputs {
        tensor *ids, *pos, *mask, *slots, *out;
    };
    inputs build(context& c, graph& g) {
        inputs in;
        in.ids = c.new_tensor(type::i32, {n_tok});
        in.pos = c.new_tensor(type::i32, {n_tok});
        in.mask = c.new_tensor(type::f32, {n_ctx, n_tok});
        in.slots = c.new_tensor(type::i32, {n_tok});
        for (tensor* t : {in.ids, in.pos, in.mask, in.slots}) t->flags |= flag_input;
        tensor* x = get_rows(c, tok_embd, in.ids);
        for (int64_t il = 0; il < n_layer; il++) {
            const layer& w = l[il];
            tensor* h = mul(c, rms_norm(c, x, 1e-5f), w.norm);
            tensor* q = reshape_3d(c, mul_mat(c, w.wq, h), hd, n_head, n_tok);
            tensor* k = reshape_3d(c, mul_mat(c, w.wk, h), hd, n_head_kv, n_tok);
            tensor* v = mul_mat(c, w.wv, h);
            q = rope(c, q, in.pos, nullptr, int(hd), rope_mode::neox, 10000.0f, 1.0f);
            k = rope(c, k, in.pos, nullptr, int(hd), rope_mode::neox, 10000.0f, 1.0f);
            tensor* kw = set_rows(c, w.k_cache, reshape_2d(c, k, hd * n_head_kv, n_tok), in.slots);
            tensor* vw = set_rows(c, w.v_cache, v, in.slots);
            tensor* kv = view_3d(c, kw, hd, n_head_kv, n_ctx, size_t(hd) * 4, w.k_cache->nb[1], 0);
            tensor* vv = view_3d(c, vw, hd, n_head_kv, n_ctx, size_t(hd) * 4, w.v_cache->nb[1], 0);
            tensor* a = attention(c, q, kv, vv, in.mask, 0.25f);
            x = add(c, x, mul_mat(c, w.wo, reshape_2d(c, a, d, n_tok)));
        }
        in.out = mul_mat(c, out_w, rms_norm(c, x, 1e-5f));
        in.out->flags |= flag_output;
        g.expand(in.out);
        return in;
    }
};

void fill_inputs(const toy_model::inputs& in, const std::function<backend&(const tensor&)>& where) {
    std::vector<int32_t> ids(n_tok), pos(n_tok);
    std::vector<float> mask(size_t(n_ctx * n_tok));
    for (int64_t t = 0; t < n_tok; t++) {
        ids[size_t(t)] = int32_t((t * 7 + 3) % n_vocab);
        pos[size_t(t)] = int32_t(t);
        for (int64_t j = 0; j < n_ctx; j++) mask[size_t(t * n_ctx + j)] = j <= t ? 0.0f : -INFINITY;
    }
    where(*in.ids).set(*in.ids, ids.data(), 0, ids.size() * 4);
    where(*in.pos).set(*in.pos, pos.data(), 0, pos.size() * 4);
    where(*in.mask).set(*in.mask, mask.data(), 0, mask.size() * 4);
    where(*in.slots).set(*in.slots, pos.data(), 0, pos.size() * 4);
}

// Runs the toy model with layers [first_b1, n_layer) and the output on backend 1 (first_b1 = n_layer + 1: all on
// backend 0); returns the logits' bytes, and the scheduler's counts
std::vector<uint8_t> run(int64_t first_b1, size_t* splits = nullptr, size_t* copies = nullptr) {
    toy_model m;
    recording_backend b0, b1;
    scheduler s({&b0, &b1});
    context c;
    graph g;
    const toy_model::inputs in = m.build(c, g);
    s.prepare(g, [&](const tensor& leaf) {
        auto it = m.layer_of.find(&leaf);
        if (it == m.layer_of.end()) return -1;
        return it->second >= first_b1 ? 1 : 0;
    });
    fill_inputs(in, [&](const tensor& t) -> backend& { return s.backend_of(t); });
    s.compute(g);
    // every node ran on the backend its placement names, once
    for (tensor* n : g.nodes) {
        if (n->o == op::view) continue;
        const int p = s.placement(*n);
        EXPECT_EQ(b0.computed.count(n) + b1.computed.count(n), 1u) << n->name;
        EXPECT_EQ((p == 1 ? b1 : b0).computed.count(n), 1u) << n->name << " placed on " << p;
    }
    // the layers' projections where their weights are
    for (int64_t il = 0; il < n_layer; il++)
        for (tensor* n : g.nodes) {
            if (n->o == op::mul_mat && n->src[0] == m.l[il].wq) {
                EXPECT_EQ(s.placement(*n), il >= first_b1 ? 1 : 0);
            }
        }
    if (splits) *splits = s.n_splits();
    if (copies) *copies = s.n_copies();
    std::vector<uint8_t> out(in.out->n_bytes());
    s.backend_of(*in.out).get(*in.out, out.data(), 0, out.size());
    return out;
}

} // namespace

TEST(sched, one_backend_is_one_split_without_copies) {
    size_t splits = 0, copies = 0;
    run(n_layer + 1, &splits, &copies);
    EXPECT_EQ(splits, 1u);
    EXPECT_EQ(copies, 0u);
}

TEST(sched, every_layer_split_gives_the_same_bytes) {
    const std::vector<uint8_t> ref = run(n_layer + 1);
    float sum = 0;
    for (size_t i = 0; i < ref.size(); i += 4) {
        float f;
        std::memcpy(&f, &ref[i], 4);
        sum += std::fabs(f);
    }
    EXPECT_GT(sum, 0.0f); // the reference computed something
    for (int64_t first = 0; first <= n_layer; first++) {
        size_t splits = 0, copies = 0;
        EXPECT_TRUE(run(first, &splits, &copies) == ref) << "layers from " << first << " on backend 1";
        // the embeddings (backend 0) then everything from the first layer on backend 1: two splits; the residual
        // stream crosses once, and so do the inputs every layer reads (positions, mask, cache slots) when layers on
        // both backends read them (an input lives with its first reader)
        EXPECT_EQ(splits, 2u) << first;
        EXPECT_EQ(copies, first == 0 || first == n_layer ? 1u : 4u) << first;
    }
}

TEST(sched, alternating_layers_cross_back_and_forth) {
    toy_model m;
    recording_backend b0, b1;
    scheduler s({&b0, &b1});
    context c;
    graph g;
    const toy_model::inputs in = m.build(c, g);
    s.prepare(g, [&](const tensor& leaf) {
        auto it = m.layer_of.find(&leaf);
        return it == m.layer_of.end() ? -1 : int(it->second % 2); // layer 0, 2, (output: 4) on 0; 1, 3 on 1
    });
    EXPECT_EQ(s.n_splits(), size_t(n_layer + 1));
    fill_inputs(in, [&](const tensor& t) -> backend& { return s.backend_of(t); });
    s.compute(g);
    std::vector<uint8_t> out(in.out->n_bytes());
    s.backend_of(*in.out).get(*in.out, out.data(), 0, out.size());
    EXPECT_TRUE(out == run(n_layer + 1));
    // and again with new inputs, as a decode step reruns its graph
    s.compute(g, true);
    std::vector<uint8_t> again(out.size());
    s.backend_of(*in.out).get(*in.out, again.data(), 0, again.size());
    EXPECT_TRUE(again == out); // the same inputs and cache rows: the same bytes
}

TEST(sched, a_placement_past_the_backends_is_an_error) {
    toy_model m;
    recording_backend b0;
    scheduler s({&b0});
    context c;
    graph g;
    m.build(c, g);
    EXPECT_THROW(s.prepare(g, [](const tensor&) { return 1; }), error);
}
