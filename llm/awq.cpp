// awq.cpp: AWQ calibration (activations recorded through the eval callback), the per-layer grid search over the
// scaling exponent, and the folding of the scales into the model's tensors. See awq.h for the math and the groups.
#include "llm/awq.h"

#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "quant/format.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>

namespace tessera {

const char* awq_group_name(awq_group g) {
    switch (g) {
    case awq_group::qkv:
        return "qkv";
    case awq_group::o:
        return "o";
    case awq_group::gate_up:
        return "gate_up";
    case awq_group::down:
        return "down";
    }
    return "?";
}

std::vector<float> awq_stats::mean_abs(int64_t il, awq_group g) const {
    const entry& e = layers[size_t(il)][size_t(g)];
    std::vector<float> m(static_cast<size_t>(e.n_in));
    for (int64_t i = 0; i < e.n_in; i++)
        m[size_t(i)] = float(e.sum_abs[size_t(i)] / double(std::max<int64_t>(1, n_tokens)));
    return m;
}

namespace {

int64_t group_n_in(const hparams& hp, awq_group g) {
    switch (g) {
    case awq_group::qkv:
    case awq_group::gate_up:
        return hp.n_embd;
    case awq_group::o:
        return hp.n_head * hp.head_dim;
    case awq_group::down:
        return hp.n_ff;
    }
    return 0;
}

// The weights that read a group's input, in the order their errors are summed.
std::vector<const tensor*> group_weights(const layer_weights& l, awq_group g) {
    switch (g) {
    case awq_group::qkv:
        return {l.wq, l.wk, l.wv};
    case awq_group::o:
        return {l.wo};
    case awq_group::gate_up:
        return {l.ffn_gate, l.ffn_up};
    case awq_group::down:
        return {l.ffn_down};
    }
    return {};
}

// "attn_norm-12" -> (qkv, 12); false for nodes that are no group's input.
bool parse_node(const char* name, awq_group& g, int64_t& il) {
    static const std::pair<std::string_view, awq_group> inputs[] = {{"attn_norm-", awq_group::qkv},
                                                                    {"kqv_out-", awq_group::o},
                                                                    {"ffn_norm-", awq_group::gate_up},
                                                                    {"ffn_swiglu-", awq_group::down}};
    const std::string_view n(name);
    for (const auto& [prefix, group] : inputs)
        if (n.size() > prefix.size() && n.substr(0, prefix.size()) == prefix) {
            il = 0;
            for (char c : n.substr(prefix.size())) {
                if (c < '0' || c > '9') return false;
                il = il * 10 + (c - '0');
            }
            g = group;
            return true;
        }
    return false;
}

// Runs fn(i) for i in [0, n) over n_threads threads (dynamic: rows differ little, but threads may be preempted).
template <class Fn> void parallel_for(int64_t n, int n_threads, Fn&& fn) {
    std::atomic<int64_t> next{0};
    auto work = [&]() {
        for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
    };
    const int nt = int(std::clamp<int64_t>(n_threads, 1, n));
    std::vector<std::thread> pool;
    for (int t = 1; t < nt; t++) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
}

int resolve_threads(int n) {
    return n > 0 ? n : int(std::max(1u, std::thread::hardware_concurrency()));
}

} // namespace

awq_stats awq_collect(const model& m, std::span<const token> tokens, const awq_params& p,
                      const std::function<void(int64_t, int64_t)>& progress) {
    const hparams& hp = m.hp;
    if (tokens.empty()) throw error("awq: no calibration tokens");
    if (p.n_ctx < 1 || p.n_sample < 1) throw error("awq: chunk size and sample size must be positive");
    const int64_t n_total = int64_t(tokens.size());
    // token i joins the sample when i % stride == 0: spread over the whole text, not just its first chunk
    const int64_t stride = std::max<int64_t>(1, n_total / p.n_sample);
    const int64_t n_sample = std::min(p.n_sample, (n_total + stride - 1) / stride);

    awq_stats st;
    st.n_tokens = n_total;
    st.layers.resize(size_t(hp.n_layer));
    for (auto& layer : st.layers)
        for (int g = 0; g < awq_n_groups; g++) {
            auto& e = layer[size_t(g)];
            e.n_in = group_n_in(hp, awq_group(g));
            e.n_sample = n_sample;
            e.sum_abs.assign(size_t(e.n_in), 0.0);
            e.sample.assign(size_t(e.n_in * n_sample), 0.0f);
        }

    session_params sp;
    sp.n_ctx = std::min(p.n_ctx, n_total);
    sp.n_batch = sp.n_ctx;
    sp.n_threads = p.n_threads;
    session s(m, sp);
    int64_t offset = 0; // index of the current chunk's first token in `tokens`
    std::vector<float> buf;
    s.set_eval_callback([&](backend& be, const tensor& node) {
        awq_group g;
        int64_t il;
        if (!parse_node(node.name, g, il) || il >= hp.n_layer) return;
        auto& e = st.layers[size_t(il)][size_t(g)];
        // the node holds one input row per token of the chunk
        TS_ASSERT(node.t == type::f32 && node.is_contiguous() && node.n_elements() % e.n_in == 0);
        const int64_t n_tok = node.n_elements() / e.n_in;
        buf.resize(size_t(node.n_elements()));
        be.get(node, buf.data(), 0, buf.size() * sizeof(float));
        for (int64_t t = 0; t < n_tok; t++) {
            const float* x = buf.data() + t * e.n_in;
            for (int64_t i = 0; i < e.n_in; i++) e.sum_abs[size_t(i)] += std::fabs(x[i]);
            const int64_t gi = offset + t;
            if (gi % stride == 0 && gi / stride < n_sample)
                std::memcpy(e.sample.data() + (gi / stride) * e.n_in, x, size_t(e.n_in) * sizeof(float));
        }
    });
    try {
        for (offset = 0; offset < n_total; offset += sp.n_ctx) {
            const int64_t n = std::min(sp.n_ctx, n_total - offset);
            s.clear();
            s.decode(tokens.subspan(size_t(offset), size_t(n)));
            if (progress) progress(offset + n, n_total);
        }
    } catch (...) {
        s.set_eval_callback({});
        throw;
    }
    s.set_eval_callback({});
    return st;
}

std::map<std::string, tensor_scaling> awq_fold(const model& m, const std::vector<awq_layer_scales>& scales) {
    const hparams& hp = m.hp;
    if (int64_t(scales.size()) != hp.n_layer)
        throw error(fmt::format("awq: {} layers of scales for a model of {} layers", scales.size(), hp.n_layer));
    std::map<std::string, tensor_scaling> out;
    auto inv = [](const std::vector<float>& s) {
        std::vector<float> r(s.size());
        for (size_t i = 0; i < s.size(); i++) r[i] = 1.0f / s[i];
        return r;
    };
    auto check = [&](const std::vector<float>& s, int64_t n, int64_t il, awq_group g) {
        if (int64_t(s.size()) != n)
            throw error(fmt::format("awq: layer {} {}: {} scales, expected {}", il, awq_group_name(g), s.size(), n));
        for (float x : s)
            if (!(x > 0.0f && std::isfinite(x)))
                throw error(
                    fmt::format("awq: layer {} {}: scale {} is not positive and finite", il, awq_group_name(g), x));
    };
    const int64_t D = hp.head_dim, group_heads = hp.n_head / hp.n_head_kv;
    for (int64_t il = 0; il < hp.n_layer; il++) {
        const layer_weights& l = m.layers[size_t(il)];
        const auto& s = scales[size_t(il)].s;
        if (const auto& q = s[size_t(awq_group::qkv)]; !q.empty()) {
            check(q, hp.n_embd, il, awq_group::qkv);
            out[l.attn_norm->name].col = inv(q);
            for (const tensor* w : {l.wq, l.wk, l.wv}) out[w->name].col = q;
        }
        if (const auto& o = s[size_t(awq_group::o)]; !o.empty()) {
            check(o, hp.n_embd_kv(), il, awq_group::o);
            // kqv_out channel h*D + d is V channel (h / group_heads)*D + d, shared by the heads of a KV group
            std::vector<float> full(static_cast<size_t>(hp.n_head * D));
            for (int64_t h = 0; h < hp.n_head; h++)
                for (int64_t d = 0; d < D; d++) full[size_t(h * D + d)] = o[size_t((h / group_heads) * D + d)];
            out[l.wo->name].col = std::move(full);
            out[l.wv->name].row = inv(o);
            if (l.bv) out[l.bv->name].col = inv(o);
        }
        if (const auto& gu = s[size_t(awq_group::gate_up)]; !gu.empty()) {
            check(gu, hp.n_embd, il, awq_group::gate_up);
            out[l.ffn_norm->name].col = inv(gu);
            for (const tensor* w : {l.ffn_gate, l.ffn_up}) out[w->name].col = gu;
        }
        if (const auto& dn = s[size_t(awq_group::down)]; !dn.empty()) {
            check(dn, hp.n_ff, il, awq_group::down);
            out[l.ffn_up->name].row = inv(dn);
            out[l.ffn_down->name].col = dn;
        }
    }
    return out;
}

namespace {

// One weight of a group, dequantized, with the type it will be quantized to.
struct group_weight {
    std::vector<float> w; // (n_rows, n_in)
    int64_t n_rows = 0;
    type to = type::f32;
};

// Sum over rows r and samples n of (dW_r . x_n)^2 with dW = W - deq(Q(W diag(s))) diag(1/s); s empty means 1.
double group_error(const std::vector<group_weight>& ws, int64_t n_in, const std::vector<float>& x, int64_t n_sample,
                   const std::vector<float>& s, int n_threads) {
    const auto& dot = cpu::find_float_kernels().dot;
    int64_t n_rows = 0;
    for (const auto& gw : ws) n_rows += gw.n_rows;
    std::vector<double> err(static_cast<size_t>(n_rows));
    parallel_for(n_rows, n_threads, [&](int64_t r) {
        size_t k = 0;
        int64_t rr = r;
        while (rr >= ws[k].n_rows) rr -= ws[k++].n_rows;
        const group_weight& gw = ws[k];
        const row_ops* ops = find_row_ops(gw.to);
        thread_local std::vector<float> a, dw;
        thread_local std::vector<uint8_t> q;
        a.resize(size_t(n_in));
        dw.resize(size_t(n_in));
        q.resize(row_size(gw.to, n_in));
        const float* w = gw.w.data() + rr * n_in;
        for (int64_t i = 0; i < n_in; i++) a[size_t(i)] = s.empty() ? w[i] : w[i] * s[size_t(i)];
        ops->from_float(a.data(), q.data(), n_in);
        ops->to_float(q.data(), a.data(), n_in);
        for (int64_t i = 0; i < n_in; i++)
            dw[size_t(i)] = w[i] - (s.empty() ? a[size_t(i)] : a[size_t(i)] / s[size_t(i)]);
        double e = 0;
        for (int64_t n = 0; n < n_sample; n++) {
            const double y = dot(dw.data(), x.data() + n * n_in, n_in);
            e += y * y;
        }
        err[size_t(r)] = e;
    });
    double total = 0;
    for (double e : err) total += e;
    return total;
}

// s = m^a, floored at 1e-4 and divided by sqrt(max * min) so the scales straddle 1 (AutoAWQ's normalization).
std::vector<float> scales_for(const std::vector<float>& m, float a) {
    std::vector<float> s(m.size());
    float mx = 0, mn = INFINITY;
    for (size_t i = 0; i < m.size(); i++) {
        s[i] = std::max(std::pow(std::max(m[i], 0.0f), a), 1e-4f);
        mx = std::max(mx, s[i]);
        mn = std::min(mn, s[i]);
    }
    const float norm = std::sqrt(mx * mn);
    for (float& x : s) x /= norm;
    return s;
}

} // namespace

awq_result awq_search(const model& m, const awq_stats& st, const std::function<type(const std::string&)>& type_of,
                      const awq_params& p, const std::function<void(int64_t, int64_t)>& progress) {
    const hparams& hp = m.hp;
    if (int64_t(st.layers.size()) != hp.n_layer) throw error("awq: statistics do not match the model's layers");
    const int n_threads = resolve_threads(p.n_threads);
    const int n_grid = std::max(1, p.n_grid);
    const int64_t D = hp.head_dim, group_heads = hp.n_head / hp.n_head_kv;
    awq_result res;
    res.scales.resize(size_t(hp.n_layer));
    const int64_t total = hp.n_layer * awq_n_groups * (n_grid + 1);
    int64_t done = 0;
    for (int64_t il = 0; il < hp.n_layer; il++) {
        for (int gi = 0; gi < awq_n_groups; gi++) {
            const awq_group g = awq_group(gi);
            const auto& e = st.layers[size_t(il)][size_t(gi)];
            std::vector<group_weight> ws;
            bool any_quantized = false;
            for (const tensor* t : group_weights(m.layers[size_t(il)], g)) {
                group_weight gw;
                gw.n_rows = t->n_rows();
                gw.to = type_of(t->name);
                any_quantized |= is_quantized(gw.to);
                gw.w.resize(size_t(gw.n_rows * e.n_in));
                const row_ops* ops = find_row_ops(t->t);
                TS_ASSERT(ops && t->ne[0] == e.n_in);
                for (int64_t r = 0; r < gw.n_rows; r++)
                    ops->to_float(static_cast<const uint8_t*>(t->data) + size_t(r) * t->nb[1], gw.w.data() + r * e.n_in,
                                  e.n_in);
                if (const float ts = read_tensor_scale(t->t, t->data, t->n_elements()); ts != 1.0f)
                    for (float& x : gw.w) x *= ts;
                ws.push_back(std::move(gw));
            }
            // the statistic the exponent applies to; for o, one value per V channel (mean over its heads)
            std::vector<float> mean = st.mean_abs(il, g);
            if (g == awq_group::o) {
                std::vector<float> kv(size_t(hp.n_embd_kv()), 0.0f);
                for (int64_t h = 0; h < hp.n_head; h++)
                    for (int64_t d = 0; d < D; d++)
                        kv[size_t((h / group_heads) * D + d)] += mean[size_t(h * D + d)] / float(group_heads);
                mean = std::move(kv);
            }
            auto expand = [&](const std::vector<float>& s) {
                if (g != awq_group::o || s.empty()) return s;
                std::vector<float> full(static_cast<size_t>(hp.n_head * D));
                for (int64_t h = 0; h < hp.n_head; h++)
                    for (int64_t d = 0; d < D; d++) full[size_t(h * D + d)] = s[size_t((h / group_heads) * D + d)];
                return full;
            };
            awq_layer_report rep;
            rep.il = il;
            rep.group = g;
            if (!any_quantized) { // nothing is rounded: every exponent gives the same (zero) error
                done += n_grid + 1;
                res.reports.push_back(rep);
                continue;
            }
            rep.err_rtn = group_error(ws, e.n_in, e.sample, e.n_sample, {}, n_threads);
            rep.err_best = rep.err_rtn;
            std::vector<float> best;
            if (progress) progress(++done, total);
            for (int k = 1; k <= n_grid; k++) {
                const float a = float(k) / float(n_grid);
                std::vector<float> s = scales_for(mean, a);
                const double err = group_error(ws, e.n_in, e.sample, e.n_sample, expand(s), n_threads);
                if (err < rep.err_best) {
                    rep.err_best = err;
                    rep.alpha = a;
                    best = std::move(s);
                }
                if (progress) progress(++done, total);
            }
            res.scales[size_t(il)].s[size_t(gi)] = std::move(best);
            res.reports.push_back(rep);
        }
    }
    if (progress) progress(total, total);
    return res;
}

} // namespace tessera
