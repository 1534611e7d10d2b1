// llama.cpp (the architecture, not the project): hyper-parameters, weights and forward graph of llama-family models
// (Llama 1-3, SmolLM, Mistral-style GQA). Facts: ../shared/docs/FORMATS.md §5.
//   per layer: h = x + Wo Attn(RoPE(Wq n), RoPE(Wk n), Wv n), n = RMSNorm(x) * attn_norm
//              out = h + Wdown (silu(Wgate m) * Wup m),   m = RMSNorm(h) * ffn_norm
//   logits = output (RMSNorm(x_last) * output_norm)
#include "arch.h"

#include "ggml-like/error.h"
#include "ggml-like/ops.h"

#include <fmt/core.h>

#include <cmath>

namespace tessera::arch {

namespace {

// A per-layer value may be stored as a scalar or an array with one entry per layer; we need them all equal.
int64_t uniform_int(const model& m, const std::string& key, std::optional<int64_t> fallback) {
    const gguf_value* v = m.file.find(key);
    if (!v) {
        if (fallback) return *fallback;
        throw error(fmt::format("{}: missing metadata key {}", m.path, key));
    }
    if (!v->is_array()) return *m.file.get_int(key); // throws, naming the key, when it is not an integer
    const std::vector<int64_t> all = *m.file.get_ints(key);
    if (all.empty()) throw error(fmt::format("{}: metadata {} is an empty array", m.path, key));
    for (int64_t x : all)
        if (x != all[0])
            throw error(fmt::format("{}: metadata {} differs between layers, which tessera does not support", m.path,
                                    key));
    return all[0];
}

void check_range(const model& m, const char* what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        throw error(fmt::format("{}: {} = {} is out of range (expected {}..{})", m.path, what, v, lo, hi));
}

} // namespace

void llama_load(model& m) {
    const std::string a = m.arch;
    hparams& hp = m.hp;
    hp.n_layer = uniform_int(m, a + ".block_count", {});
    hp.n_ctx_train = uniform_int(m, a + ".context_length", {});
    hp.n_embd = uniform_int(m, a + ".embedding_length", {});
    hp.n_ff = uniform_int(m, a + ".feed_forward_length", {});
    hp.n_head = uniform_int(m, a + ".attention.head_count", {});
    hp.n_head_kv = uniform_int(m, a + ".attention.head_count_kv", hp.n_head);
    check_range(m, "block_count", hp.n_layer, 1, 1024);
    check_range(m, "context_length", hp.n_ctx_train, 1, int64_t(1) << 24);
    check_range(m, "embedding_length", hp.n_embd, 1, 1 << 20);
    check_range(m, "feed_forward_length", hp.n_ff, 1, 1 << 22);
    check_range(m, "attention.head_count", hp.n_head, 1, 4096);
    check_range(m, "attention.head_count_kv", hp.n_head_kv, 1, hp.n_head);
    if (hp.n_head % hp.n_head_kv != 0)
        throw error(fmt::format("{}: head_count {} is not a multiple of head_count_kv {}", m.path, hp.n_head,
                                hp.n_head_kv));
    if (hp.n_embd % hp.n_head != 0 && !m.file.find(a + ".attention.key_length"))
        throw error(fmt::format("{}: embedding_length {} is not a multiple of head_count {}", m.path, hp.n_embd,
                                hp.n_head));
    hp.head_dim = uniform_int(m, a + ".attention.key_length", hp.n_embd / hp.n_head);
    const int64_t v_len = uniform_int(m, a + ".attention.value_length", hp.head_dim);
    if (v_len != hp.head_dim)
        throw error(fmt::format("{}: key_length {} != value_length {} is not supported", m.path, hp.head_dim, v_len));
    check_range(m, "attention.key_length", hp.head_dim, 2, 1024);
    hp.n_rot = uniform_int(m, a + ".rope.dimension_count", hp.head_dim);
    if (hp.n_rot != hp.head_dim)
        throw error(fmt::format("{}: rope.dimension_count {} must equal the head size {} for llama", m.path, hp.n_rot,
                                hp.head_dim));
    if (hp.head_dim % 2 != 0) throw error(fmt::format("{}: head size {} is odd", m.path, hp.head_dim));
    const auto eps = m.file.get_float(a + ".attention.layer_norm_rms_epsilon");
    if (!eps) throw error(fmt::format("{}: missing metadata key {}.attention.layer_norm_rms_epsilon", m.path, a));
    hp.rms_eps = float(*eps);
    if (!(hp.rms_eps > 0.0f && hp.rms_eps < 1.0f))
        throw error(fmt::format("{}: layer_norm_rms_epsilon {} is out of range", m.path, hp.rms_eps));
    hp.rope_freq_base = float(m.file.get_float(a + ".rope.freq_base").value_or(10000.0));
    if (!(hp.rope_freq_base > 0.0f && std::isfinite(hp.rope_freq_base)))
        throw error(fmt::format("{}: rope.freq_base {} is out of range", m.path, hp.rope_freq_base));
    const std::string scaling = m.file.get_string(a + ".rope.scaling.type").value_or("linear");
    double factor = m.file.get_float(a + ".rope.scaling.factor").value_or(0.0);
    if (factor == 0.0) factor = m.file.get_float(a + ".rope.scale_linear").value_or(0.0);
    if (scaling != "none" && scaling != "linear")
        throw error(fmt::format("{}: rope scaling '{}' is not supported yet (supported: none, linear)", m.path,
                                scaling));
    hp.rope_freq_scale = (scaling == "linear" && factor > 0.0) ? float(1.0 / factor) : 1.0f;
    hp.rope_mode = int32_t(rope_mode::normal);

    // weights
    const int64_t E = hp.n_embd, D = hp.head_dim, F = hp.n_ff;
    m.tok_embd = m.require("token_embd.weight", {E, -1});
    m.tok_embd->flags |= flag_embedding;
    hp.n_vocab = m.tok_embd->ne[1];
    if (hp.n_vocab != m.voc.n_tokens())
        throw error(fmt::format("{}: token_embd.weight has {} rows but the vocabulary has {} tokens", m.path,
                                hp.n_vocab, m.voc.n_tokens()));
    m.output_norm = m.require("output_norm.weight", {E});
    m.output = m.require("output.weight", {E, hp.n_vocab}, false);
    if (!m.output) m.output = m.tok_embd; // tied embeddings
    m.rope_freqs = m.require("rope_freqs.weight", {hp.n_rot / 2}, false);
    m.layers.resize(size_t(hp.n_layer));
    for (int64_t il = 0; il < hp.n_layer; il++) {
        layer_weights& l = m.layers[size_t(il)];
        auto name = [&](const char* t) { return fmt::format("blk.{}.{}", il, t); };
        l.attn_norm = m.require(name("attn_norm.weight"), {E});
        l.wq = m.require(name("attn_q.weight"), {E, hp.n_head * D});
        l.wk = m.require(name("attn_k.weight"), {E, hp.n_head_kv * D});
        l.wv = m.require(name("attn_v.weight"), {E, hp.n_head_kv * D});
        l.wo = m.require(name("attn_output.weight"), {hp.n_head * D, E});
        l.bq = m.require(name("attn_q.bias"), {hp.n_head * D}, false);
        l.bk = m.require(name("attn_k.bias"), {hp.n_head_kv * D}, false);
        l.bv = m.require(name("attn_v.bias"), {hp.n_head_kv * D}, false);
        l.bo = m.require(name("attn_output.bias"), {E}, false);
        l.ffn_norm = m.require(name("ffn_norm.weight"), {E});
        l.ffn_gate = m.require(name("ffn_gate.weight"), {E, F});
        l.ffn_up = m.require(name("ffn_up.weight"), {E, F});
        l.ffn_down = m.require(name("ffn_down.weight"), {F, E});
    }
    // NVFP4 per-tensor scales: `<base>.scale` multiplies the matmul output; `<base>.input_scale` is loaded but not used
    // by llama.cpp's graph either
    auto scales_for = [&](tensor* w, const std::string& base) {
        if (!w) return;
        if (tensor* sc = m.require(base + ".scale", {1}, false)) m.out_scale[w] = sc;
        m.require(base + ".input_scale", {1}, false);
    };
    if (m.output != m.tok_embd) scales_for(m.output, "output");
    for (int64_t il = 0; il < hp.n_layer; il++) {
        layer_weights& l = m.layers[size_t(il)];
        const std::string b = fmt::format("blk.{}.", il);
        scales_for(l.wq, b + "attn_q");
        scales_for(l.wk, b + "attn_k");
        scales_for(l.wv, b + "attn_v");
        scales_for(l.wo, b + "attn_output");
        scales_for(l.ffn_gate, b + "ffn_gate");
        scales_for(l.ffn_up, b + "ffn_up");
        scales_for(l.ffn_down, b + "ffn_down");
    }
}

tensor* llama_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv) {
    const hparams& hp = m.hp;
    const int64_t n = in.n_tok, n_kv = in.n_kv > 0 ? in.n_kv : in.n_past + in.n_tok;
    TS_ASSERT(n_kv >= in.n_past + n && n_kv <= kv.n_ctx && in.kv_idx && in.kv_idx->ne[0] == n);
    const int64_t D = hp.head_dim, E = hp.n_embd, EKV = hp.n_embd_kv();
    const float kq_scale = 1.0f / std::sqrt(float(D));
    const auto mode = rope_mode(hp.rope_mode);

    // node names follow llama.cpp's ("Qcur-3") so layer dumps of the two can be compared line by line
    auto named = [](tensor* t, const char* what, int64_t il) {
        t->set_name(il < 0 ? std::string(what) : fmt::format("{}-{}", what, il));
        return t;
    };
    // W x, times the weight's per-tensor scale when the file has one (NVFP4)
    auto mm = [&](tensor* w, tensor* x) {
        tensor* y = mul_mat(ctx, w, x);
        auto it = m.out_scale.find(w);
        return it == m.out_scale.end() ? y : mul(ctx, y, it->second);
    };
    tensor* inp = named(get_rows(ctx, m.tok_embd, in.ids), "embd", -1); // (E, n)
    for (int64_t il = 0; il < hp.n_layer; il++) {
        const layer_weights& l = m.layers[size_t(il)];
        // attention block
        tensor* cur = named(mul(ctx, rms_norm(ctx, inp, hp.rms_eps), l.attn_norm), "attn_norm", il);
        tensor* q = named(mm(l.wq, cur), "Qcur", il);
        tensor* k = named(mm(l.wk, cur), "Kcur", il);
        tensor* v = named(mm(l.wv, cur), "Vcur", il);
        // q, k, v next to each other in the graph: a backend can run the three matmuls of one activation together
        g.expand(q);
        g.expand(k);
        g.expand(v);
        if (l.bq) q = add(ctx, q, l.bq);
        if (l.bk) k = add(ctx, k, l.bk);
        if (l.bv) v = add(ctx, v, l.bv);
        q = named(rope(ctx, reshape_3d(ctx, q, D, hp.n_head, n), in.pos, m.rope_freqs, int(hp.n_rot), mode,
                       hp.rope_freq_base, hp.rope_freq_scale),
                  "Qrope", il);
        k = named(rope(ctx, reshape_3d(ctx, k, D, hp.n_head_kv, n), in.pos, m.rope_freqs, int(hp.n_rot), mode,
                       hp.rope_freq_base, hp.rope_freq_scale),
                  "Krope", il);
        // rotated Q first: its result is then placed while K and V still live, so a backend can run both ropes and
        // the cache writes below as one kernel without Q's result landing where K or V are still to be read
        g.expand(q);
        // append this batch's K, V to the cache (rows kv_idx = n_past .. n_past + n), before attention reads them;
        // the row numbers are a graph input, so the graph itself does not change from token to token
        tensor* kc = kv.k[size_t(il)];
        tensor* vc = kv.v[size_t(il)];
        g.expand(set_rows(ctx, kc, reshape_2d(ctx, k, EKV, n), in.kv_idx));
        g.expand(set_rows(ctx, vc, v, in.kv_idx));
        tensor* kview = view_3d(ctx, kc, D, hp.n_head_kv, n_kv, row_size(kc->t, D), kc->nb[1], 0);
        tensor* vview = view_3d(ctx, vc, D, hp.n_head_kv, n_kv, row_size(vc->t, D), vc->nb[1], 0);
        tensor* attn = named(attention(ctx, q, kview, vview, in.mask, kq_scale), "kqv_out", il); // (D, n_head, n)
        cur = named(mm(l.wo, reshape_2d(ctx, attn, D * hp.n_head, n)), "attn_out", il);
        if (l.bo) cur = add(ctx, cur, l.bo);
        tensor* ffn_inp = named(add(ctx, cur, inp), "ffn_inp", il);
        // feed-forward block
        cur = named(mul(ctx, rms_norm(ctx, ffn_inp, hp.rms_eps), l.ffn_norm), "ffn_norm", il);
        tensor* gate = named(mm(l.ffn_gate, cur), "ffn_gate", il);
        tensor* up = named(mm(l.ffn_up, cur), "ffn_up", il);
        cur = named(mm(l.ffn_down, named(swiglu(ctx, gate, up), "ffn_swiglu", il)), "ffn_out", il);
        inp = named(add(ctx, cur, ffn_inp), "l_out", il);
        if (il == hp.n_layer - 1 && in.first_output > 0) // only the rows whose logits are wanted
            inp = view_2d(ctx, inp, E, n - in.first_output, inp->nb[1], size_t(in.first_output) * inp->nb[1]);
    }
    tensor* cur = mul(ctx, rms_norm(ctx, inp, hp.rms_eps), m.output_norm);
    tensor* logits = mm(m.output, cur);
    logits->flags |= flag_output;
    logits->set_name("logits");
    g.expand(logits);
    return logits;
}

} // namespace tessera::arch
