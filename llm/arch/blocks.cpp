// blocks.cpp: shared loading and graph pieces of the decoder families (blocks.h). Facts about the metadata keys and
// tensors: ../shared/docs/FORMATS.md §5 and llama.cpp's llama-model.cpp / llama-graph.cpp, whose graphs these follow
// operation for operation so that the CPU results agree with it bit for bit.
#include "blocks.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <cmath>

namespace tessera::arch {

namespace {

// gpt-oss's clamped SwiGLU: llama.cpp's constants (build_moe_ffn, LLM_FFN_SWIGLU_OAI_MOE), not in the GGUF
constexpr float oai_alpha = 1.702f, oai_limit = 7.0f;

void check_range(const model& m, const std::string& what, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
        throw error(fmt::format("{}: {} = {} is out of range (expected {}..{})", m.path, what, v, lo, hi));
}

float get_float(const model& m, const std::string& key, float fallback) {
    const gguf_value* v = m.file.find(key);
    if (!v) return fallback;
    const std::optional<double> x = m.file.get_float(key);
    if (!x) throw error(fmt::format("{}: metadata {} is not a number", m.path, key));
    if (!std::isfinite(*x)) throw error(fmt::format("{}: metadata {} = {} is not finite", m.path, key, *x));
    return float(*x);
}

} // namespace

int64_t get_int(const model& m, const std::string& key, std::optional<int64_t> fallback, int64_t lo, int64_t hi) {
    const gguf_value* v = m.file.find(key);
    if (!v) {
        if (fallback) return *fallback;
        throw error(fmt::format("{}: missing metadata key {}", m.path, key));
    }
    if (v->is_array()) throw error(fmt::format("{}: metadata {} is an array; expected one integer", m.path, key));
    const int64_t x = *m.file.get_int(key); // throws, naming the key, when it is not an integer
    check_range(m, key, x, lo, hi);
    return x;
}

std::vector<int64_t> get_per_layer(const model& m, const std::string& key, std::optional<int64_t> fallback,
                                   int64_t lo, int64_t hi) {
    const size_t n_layer = size_t(m.hp.n_layer);
    const gguf_value* v = m.file.find(key);
    if (!v || !v->is_array()) return std::vector<int64_t>(n_layer, get_int(m, key, fallback, lo, hi));
    const std::vector<int64_t> all = *m.file.get_ints(key); // throws when the entries are not integers
    if (all.size() != n_layer)
        throw error(fmt::format("{}: metadata {} has {} entries for {} layers", m.path, key, all.size(), n_layer));
    for (size_t il = 0; il < all.size(); il++) check_range(m, fmt::format("{}[{}]", key, il), all[il], lo, hi);
    return all;
}

void load_hparams(model& m, rope_mode mode) {
    const std::string a = m.arch + ".";
    hparams& hp = m.hp;
    hp.n_layer = get_int(m, a + "block_count", {}, 1, 1024);
    hp.n_ctx_train = get_int(m, a + "context_length", {}, 1, int64_t(1) << 24);
    hp.n_embd = get_int(m, a + "embedding_length", {}, 1, 1 << 20);
    hp.ff_l = get_per_layer(m, a + "feed_forward_length", {}, 1, 1 << 22);
    hp.head_l = get_per_layer(m, a + "attention.head_count", {}, 1, 4096);
    if (m.file.find(a + "attention.head_count_kv"))
        hp.head_kv_l = get_per_layer(m, a + "attention.head_count_kv", {}, 1, 4096);
    else
        hp.head_kv_l = hp.head_l;
    for (int64_t il = 0; il < hp.n_layer; il++) {
        const int64_t h = hp.head_l[size_t(il)], hkv = hp.head_kv_l[size_t(il)];
        if (hkv > h || h % hkv != 0)
            throw error(fmt::format("{}: layer {}: head_count {} is not a multiple of head_count_kv {}", m.path, il, h,
                                    hkv));
    }
    hp.n_head = hp.head_l[0];
    hp.n_head_kv = hp.head_kv_l[0];
    hp.n_ff = hp.ff_l[0];
    if (hp.n_embd % hp.n_head != 0 && !m.file.find(a + "attention.key_length"))
        throw error(fmt::format("{}: embedding_length {} is not a multiple of head_count {} (and there is no "
                                "attention.key_length)",
                                m.path, hp.n_embd, hp.n_head));
    hp.head_dim = get_int(m, a + "attention.key_length", hp.n_embd / hp.n_head, 2, 1024);
    const int64_t v_len = get_int(m, a + "attention.value_length", hp.head_dim, 1, 1024);
    if (v_len != hp.head_dim)
        throw error(fmt::format("{}: key_length {} != value_length {} is not supported", m.path, hp.head_dim, v_len));
    if (hp.head_dim % 2 != 0) throw error(fmt::format("{}: head size {} is odd", m.path, hp.head_dim));
    hp.n_rot = get_int(m, a + "rope.dimension_count", hp.head_dim, 2, hp.head_dim);
    if (hp.n_rot % 2 != 0) throw error(fmt::format("{}: rope.dimension_count {} is odd", m.path, hp.n_rot));
    // sliding-window layers with another head size or rotary width (newer families) are not supported
    for (auto [key, full] : {std::pair{"attention.key_length_swa", hp.head_dim},
                             std::pair{"attention.value_length_swa", hp.head_dim},
                             std::pair{"rope.dimension_count_swa", hp.n_rot}})
        if (m.file.find(a + key) && get_int(m, a + key, {}, 1, 1024) != full)
            throw error(fmt::format("{}: {}{} differs from the full-attention layers' {}, which is not supported",
                                    m.path, a, key, full));

    const auto eps = m.file.get_float(a + "attention.layer_norm_rms_epsilon");
    if (!eps) throw error(fmt::format("{}: missing metadata key {}attention.layer_norm_rms_epsilon", m.path, a));
    hp.rms_eps = float(*eps);
    if (!(hp.rms_eps > 0.0f && hp.rms_eps < 1.0f))
        throw error(fmt::format("{}: layer_norm_rms_epsilon {} is out of range", m.path, hp.rms_eps));

    // rope: base, then the scaling the file asks for (llama.cpp's llama_model::load_hparams and llama_context)
    hp.rope_mode = int32_t(mode);
    hp.rope_freq_base = get_float(m, a + "rope.freq_base", 10000.0f);
    if (!(hp.rope_freq_base > 0.0f))
        throw error(fmt::format("{}: rope.freq_base {} is out of range", m.path, hp.rope_freq_base));
    const std::string scaling = m.file.get_string(a + "rope.scaling.type").value_or("linear");
    if (scaling != "none" && scaling != "linear" && scaling != "yarn" && scaling != "longrope")
        throw error(fmt::format("{}: rope scaling '{}' is not supported (supported: none, linear, yarn, longrope)",
                                m.path, scaling));
    float factor = get_float(m, a + "rope.scaling.factor", 0.0f);
    if (factor == 0.0f) factor = get_float(m, a + "rope.scale_linear", 0.0f);
    if (factor < 0.0f) throw error(fmt::format("{}: rope scaling factor {} is negative", m.path, factor));
    hp.rope_freq_scale = (scaling == "none" || factor == 0.0f) ? 1.0f : 1.0f / factor;
    hp.rope_n_ctx_orig = get_int(m, a + "rope.scaling.original_context_length", hp.n_ctx_train, 1, int64_t(1) << 24);
    const float attn_factor = get_float(m, a + "rope.scaling.attn_factor", 1.0f);
    hp.rope_ext_factor = get_float(m, a + "rope.scaling.yarn_ext_factor", scaling == "yarn" ? 1.0f : 0.0f);
    hp.rope_beta_fast = get_float(m, a + "rope.scaling.yarn_beta_fast", 32.0f);
    hp.rope_beta_slow = get_float(m, a + "rope.scaling.yarn_beta_slow", 1.0f);
    hp.rope_attn_factor = get_float(m, a + "rope.scaling.yarn_attn_factor", 1.0f);
    if (hp.rope_ext_factor != 0.0f) {
        // YaRN's magnitude: mscale(factor) (over mscale(factor, log_mul) when the file gives one), with the
        // 1 + 0.1 ln(factor) the rope kernel multiplies back in divided out (llama_context's arithmetic, in its order)
        auto mscale = [](float s, float k) { return s <= 1.0f ? 1.0f : (0.1f * k * std::log(s) + 1.0f); };
        const float f = 1.0f / hp.rope_freq_scale;
        const float log_mul = get_float(m, a + "rope.scaling.yarn_log_multiplier", 0.0f);
        hp.rope_attn_factor = log_mul != 0.0f ? mscale(f, 1.0f) / mscale(f, log_mul) : mscale(f, 1.0f);
        hp.rope_attn_factor *= 1.0f / (1.0f + 0.1f * std::log(f));
    }
    hp.rope_attn_factor *= attn_factor;
    hp.rope_freq_base_swa = hp.rope_freq_base;
    hp.rope_freq_scale_swa = hp.rope_freq_scale;
}

void load_sliding_window(model& m, int64_t default_pattern, bool swa_rope_as_full) {
    const std::string a = m.arch + ".";
    hparams& hp = m.hp;
    hp.n_swa = get_int(m, a + "attention.sliding_window", 0, 0, int64_t(1) << 24);
    if (hp.n_swa == 0) return;
    hp.swa_l.assign(size_t(hp.n_layer), 0);
    const std::string key = a + "attention.sliding_window_pattern";
    const gguf_value* v = m.file.find(key);
    if (v && v->is_array()) {
        // one flag per layer (booleans or integers), true = sliding window
        const std::optional<std::vector<int64_t>> flags = m.file.get_ints(key);
        if (!flags || flags->size() != size_t(hp.n_layer))
            throw error(fmt::format("{}: metadata {} must hold one flag per layer ({})", m.path, key, hp.n_layer));
        for (size_t il = 0; il < flags->size(); il++) hp.swa_l[il] = (*flags)[il] != 0;
    } else {
        // every n-th layer (the last of each group of n) has full attention; n = 0: every layer has the window
        const int64_t n = get_int(m, key, default_pattern, 0, 1 << 20);
        for (int64_t il = 0; il < hp.n_layer; il++) hp.swa_l[size_t(il)] = n == 0 || il % n < n - 1;
    }
    // the local layers' rope: their own base (gemma3: 10000), unscaled; or the full layers' (gpt-oss)
    hp.rope_freq_base_swa = get_float(m, a + "rope.freq_base_swa", swa_rope_as_full ? hp.rope_freq_base : 10000.0f);
    hp.rope_freq_scale_swa = swa_rope_as_full ? hp.rope_freq_scale : 1.0f;
}

void load_experts(model& m, hparams::gating gating, bool weights_norm) {
    const std::string a = m.arch + ".";
    hparams& hp = m.hp;
    hp.n_expert = get_int(m, a + "expert_count", {}, 1, 4096);
    hp.expert_used_l = get_per_layer(m, a + "expert_used_count", {}, 1, hp.n_expert);
    std::optional<int64_t> ff_fallback;
    if (hp.uniform() && hp.n_ff % hp.expert_used_l[0] == 0) ff_fallback = hp.n_ff / hp.expert_used_l[0];
    hp.ff_exp_l = get_per_layer(m, a + "expert_feed_forward_length", ff_fallback, 1, 1 << 22);
    hp.expert_gating = gating;
    hp.expert_weights_norm = weights_norm;
    hp.expert_weights_scale = get_float(m, a + "expert_weights_scale", 0.0f);
}

void load_io(model& m) {
    hparams& hp = m.hp;
    const int64_t E = hp.n_embd;
    m.tok_embd = m.require("token_embd.weight", {E, -1});
    m.tok_embd->flags |= flag_embedding;
    hp.n_vocab = m.tok_embd->ne[1];
    if (hp.n_vocab != m.voc.n_tokens())
        throw error(fmt::format("{}: token_embd.weight has {} rows but the vocabulary has {} tokens", m.path,
                                hp.n_vocab, m.voc.n_tokens()));
    m.output_norm = m.require("output_norm.weight", {E});
    m.output = m.require("output.weight", {E, hp.n_vocab}, false);
    if (!m.output) { // tied embeddings
        m.output = m.tok_embd;
        m.tok_embd->flags |= flag_tied;
    }
    m.output_b = m.require("output.bias", {hp.n_vocab}, false);
    if (m.output != m.tok_embd)
        if (tensor* sc = m.require("output.scale", {1}, false)) m.out_scale[m.output] = sc;
    m.require("output.input_scale", {1}, false);
}

void load_layers(model& m, const layer_opts& o) {
    const hparams& hp = m.hp;
    const int64_t E = hp.n_embd, D = hp.head_dim;
    m.layers.resize(size_t(hp.n_layer));
    for (int64_t il = 0; il < hp.n_layer; il++) {
        layer_weights& l = m.layers[size_t(il)];
        const int64_t H = hp.n_head_at(il), HKV = hp.n_head_kv_at(il), F = hp.n_ff_at(il);
        auto name = [&](const char* t) { return fmt::format("blk.{}.{}", il, t); };
        l.attn_norm = m.require(name("attn_norm.weight"), {E});
        // q, k, v: three matrices, or one fused matrix (rows q, then k, then v) split into three views of it
        if (tensor* qkv = m.require(name("attn_qkv.weight"), {E, (H + 2 * HKV) * D}, false)) {
            const auto parts = m.split_rows(qkv, {H * D, HKV * D, HKV * D});
            l.wq = parts[0], l.wk = parts[1], l.wv = parts[2];
            if (tensor* b = m.require(name("attn_qkv.bias"), {(H + 2 * HKV) * D}, false)) {
                const auto bs = m.split_rows(b, {H * D, HKV * D, HKV * D});
                l.bq = bs[0], l.bk = bs[1], l.bv = bs[2];
            }
        } else {
            l.wq = m.require(name("attn_q.weight"), {E, H * D});
            l.wk = m.require(name("attn_k.weight"), {E, HKV * D});
            l.wv = m.require(name("attn_v.weight"), {E, HKV * D});
        }
        if (!l.bq) {
            l.bq = m.require(name("attn_q.bias"), {H * D}, false);
            l.bk = m.require(name("attn_k.bias"), {HKV * D}, false);
            l.bv = m.require(name("attn_v.bias"), {HKV * D}, false);
        }
        l.wo = m.require(name("attn_output.weight"), {H * D, E});
        if (o.has_wo_bias) l.bo = m.require(name("attn_output.bias"), {E}, false);
        if (o.qk_norm) {
            l.q_norm = m.require(name("attn_q_norm.weight"), {D});
            l.k_norm = m.require(name("attn_k_norm.weight"), {D});
        }
        if (o.post_norms) {
            l.attn_post_norm = m.require(name("post_attention_norm.weight"), {E});
            l.ffn_post_norm = m.require(name("post_ffw_norm.weight"), {E});
        }
        if (o.sub_norms) {
            l.attn_sub_norm = m.require(name("attn_sub_norm.weight"), {H * D});
            l.ffn_sub_norm = m.require(name("ffn_sub_norm.weight"), {F});
        }
        if (o.sinks) l.attn_sinks = m.require(name("attn_sinks.weight"), {H});
        l.ffn_norm = m.require(name(o.ffn_norm), {E});
        if (o.experts) {
            const int64_t X = hp.n_expert, FX = hp.n_ff_exp_at(il);
            l.ffn_gate_inp = m.require(name("ffn_gate_inp.weight"), {E, X});
            l.ffn_gate_exps = m.require(name("ffn_gate_exps.weight"), {E, FX, X});
            l.ffn_up_exps = m.require(name("ffn_up_exps.weight"), {E, FX, X});
            l.ffn_down_exps = m.require(name("ffn_down_exps.weight"), {FX, E, X});
            if (o.expert_biases) {
                l.ffn_gate_inp_b = m.require(name("ffn_gate_inp.bias"), {X});
                l.ffn_gate_exps_b = m.require(name("ffn_gate_exps.bias"), {FX, X});
                l.ffn_up_exps_b = m.require(name("ffn_up_exps.bias"), {FX, X});
                l.ffn_down_exps_b = m.require(name("ffn_down_exps.bias"), {E, X});
            }
            // the router's logits and the biases are added to f32 results as they are
            for (tensor* t : {l.ffn_gate_inp_b, l.ffn_gate_exps_b, l.ffn_up_exps_b, l.ffn_down_exps_b, l.attn_sinks})
                if (t && t->t != type::f32)
                    throw error(
                        fmt::format("{}: tensor {} has type {}; expected f32", m.path, t->name, type_name(t->t)));
            continue;
        }
        if (o.fused_up) {
            const auto parts = m.split_rows(m.require(name("ffn_up.weight"), {E, 2 * F}), {F, F});
            l.ffn_gate = parts[0], l.ffn_up = parts[1];
        } else {
            l.ffn_gate = m.require(name("ffn_gate.weight"), {E, F});
            l.ffn_up = m.require(name("ffn_up.weight"), {E, F});
        }
        l.ffn_down = m.require(name("ffn_down.weight"), {F, E});
    }
    // per-tensor multipliers of the matmul output: NVFP4's `<base>.scale`, BitNet's weight scales; `.input_scale`
    // is loaded but not used (llama.cpp's graph does not use it either)
    auto scales_for = [&](tensor* w, const std::string& base) {
        if (tensor* sc = m.require(base + ".scale", {1}, false)) m.out_scale[w] = sc;
        m.require(base + ".input_scale", {1}, false);
    };
    for (int64_t il = 0; il < hp.n_layer; il++) {
        layer_weights& l = m.layers[size_t(il)];
        const std::string b = fmt::format("blk.{}.", il);
        if (!m.file.find_tensor(b + "attn_qkv.weight")) {
            scales_for(l.wq, b + "attn_q");
            scales_for(l.wk, b + "attn_k");
            scales_for(l.wv, b + "attn_v");
        }
        scales_for(l.wo, b + "attn_output");
        if (o.experts) continue;
        if (!o.fused_up) scales_for(l.ffn_gate, b + "ffn_gate");
        if (!o.fused_up) scales_for(l.ffn_up, b + "ffn_up");
        scales_for(l.ffn_down, b + "ffn_down");
    }
}

// ---- building ----

builder::builder(const model& m_, context& ctx_, graph& g_, const batch_inputs& in_, kv_cache& kv_)
    : m(m_), hp(in_.part ? in_.part->hp : m_.hp), ctx(ctx_), g(g_), in(in_), kv(kv_), n(in_.n_tok),
      n_kv(in_.n_kv > 0 ? in_.n_kv : in_.n_past + in_.n_tok) {
    TS_ASSERT(n_kv >= in.n_past + n && n_kv <= kv.n_ctx && in.kv_idx && in.kv_idx->ne[0] == n);
    TS_ASSERT(!hp.any_swa() || in.mask_swa);
}

tensor* builder::named(tensor* t, const char* what, int64_t il) {
    t->set_name(il < 0 ? std::string(what) : fmt::format("{}-{}", what, il));
    return t;
}

tensor* builder::mm(tensor* w, tensor* x) {
    tensor* y = mul_mat(ctx, w, x);
    if (in.part)
        if (auto it = in.part->out_scale.find(w); it != in.part->out_scale.end()) return mul(ctx, y, it->second);
    auto it = m.out_scale.find(w);
    return it == m.out_scale.end() ? y : mul(ctx, y, it->second);
}

tensor* builder::norm(tensor* x, tensor* w, const char* what, int64_t il) {
    return named(mul(ctx, rms_norm(ctx, x, hp.rms_eps), w), what, il);
}

tensor* builder::sub_norm(tensor* x, tensor* w, const char* what, int64_t il) {
    if (!in.part || in.part->n_ranks == 1) return norm(x, w, what, il);
    tensor* ss = named(sum_rows(ctx, mul(ctx, x, x)), "sub_norm_sum_sq", il); // (1, n)
    ss = named(all_reduce(ctx, ss), "sub_norm_sum_sq_all", il);
    return named(mul(ctx, rms_norm_part(ctx, x, ss, x->ne[0] * in.part->n_ranks, hp.rms_eps), w), what, il);
}

tensor* builder::embeddings() {
    tensor* table = in.part && in.part->tok_embd ? in.part->tok_embd : m.tok_embd;
    tensor* x = named(get_rows(ctx, table, in.ids), "embd"); // (E, n)
    if (hp.embd_scale != 0.0f) x = named(scale(ctx, x, hp.embd_scale), "inp_scaled");
    return x;
}

attn_opts builder::rope_opts(int64_t il) const {
    attn_opts o;
    o.swa = hp.is_swa(il);
    o.freq_base = o.swa ? hp.rope_freq_base_swa : hp.rope_freq_base;
    o.freq_scale = o.swa ? hp.rope_freq_scale_swa : hp.rope_freq_scale;
    if (m.rope_freqs)
        o.freq_factors = m.rope_freqs;
    else if (m.rope_long) // LongRoPE: the long factors once the context is longer than the one trained without them
        o.freq_factors = kv.n_ctx > hp.rope_n_ctx_orig ? m.rope_long : m.rope_short;
    return o;
}

tensor* builder::attention(const layer_weights& l, tensor* x, int64_t il, const attn_opts& o) {
    const int64_t D = hp.head_dim, H = hp.n_head_at(il), HKV = hp.n_head_kv_at(il);
    tensor* q = named(mm(l.wq, x), "Qcur", il);
    tensor* k = named(mm(l.wk, x), "Kcur", il);
    tensor* v = named(mm(l.wv, x), "Vcur", il);
    // q, k, v next to each other in the graph: a backend can run the three matmuls of one activation together
    g.expand(q);
    g.expand(k);
    g.expand(v);
    if (l.bq) q = named(add(ctx, q, l.bq), "Qcur_b", il);
    if (l.bk) k = named(add(ctx, k, l.bk), "Kcur_b", il);
    if (l.bv) v = named(add(ctx, v, l.bv), "Vcur_b", il);
    // the biased q, k, v next to each other too, so that rope(Q), rope(K) and the two cache writes below follow one
    // another (CUDA runs those four as one kernel: fused.cu)
    if (l.bq || l.bk || l.bv) {
        g.expand(q);
        g.expand(k);
        g.expand(v);
    }
    q = reshape_3d(ctx, q, D, H, n);
    k = reshape_3d(ctx, k, D, HKV, n);
    if (l.q_norm) { // RMSNorm of every head's Q and K before rope (qwen3, gemma3); both before either rope
        q = norm(q, l.q_norm, "Qcur_normed", il);
        k = norm(k, l.k_norm, "Kcur_normed", il);
        g.expand(q);
        g.expand(k);
    }
    rope_params rp;
    rp.n_rot = int(hp.n_rot);
    rp.mode = rope_mode(hp.rope_mode);
    rp.freq_base = o.freq_base;
    rp.freq_scale = o.freq_scale;
    rp.ext_factor = hp.rope_ext_factor;
    rp.attn_factor = hp.rope_attn_factor;
    rp.beta_fast = hp.rope_beta_fast;
    rp.beta_slow = hp.rope_beta_slow;
    rp.n_ctx_orig = int(hp.rope_n_ctx_orig);
    q = named(rope(ctx, q, in.pos, o.freq_factors, rp), "Qrope", il);
    k = named(rope(ctx, k, in.pos, o.freq_factors, rp), "Krope", il);
    // rotated Q first: its result is then placed while K and V still live, so a backend can run both ropes and the
    // cache writes below as one kernel without Q's result landing where K or V are still to be read
    g.expand(q);
    // append this batch's K, V to the cache (rows kv_idx = n_past .. n_past + n), before attention reads them; the
    // row numbers are a graph input, so the graph itself does not change from token to token
    tensor* kc = kv.k[size_t(il)];
    tensor* vc = kv.v[size_t(il)];
    g.expand(set_rows(ctx, kc, reshape_2d(ctx, k, HKV * D, n), in.kv_idx));
    g.expand(set_rows(ctx, vc, v, in.kv_idx));
    tensor* kview = view_3d(ctx, kc, D, HKV, n_kv, row_size(kc->t, D), kc->nb[1], 0);
    tensor* vview = view_3d(ctx, vc, D, HKV, n_kv, row_size(vc->t, D), vc->nb[1], 0);
    float kq_scale = 1.0f / std::sqrt(float(D));
    if (o.q_scale != 0.0f) {
        q = named(scale(ctx, q, o.q_scale), "Qcur_scaled", il);
        kq_scale = 1.0f;
    }
    tensor* attn = named(
        tessera::attention(ctx, q, kview, vview, o.swa ? in.mask_swa : in.mask, kq_scale, l.attn_sinks), "kqv_out", il);
    return reshape_2d(ctx, attn, D * H, n);
}

tensor* builder::attn_out(const layer_weights& l, tensor* attn, int64_t il) {
    tensor* cur = named(mm(l.wo, attn), "attn_out", il);
    if (in.part && in.part->n_ranks > 1) cur = named(all_reduce(ctx, cur), "attn_out_sum", il); // every member's heads
    if (l.bo) cur = named(add(ctx, cur, l.bo), "attn_out_b", il);
    return cur;
}

tensor* builder::ffn(const layer_weights& l, tensor* x, int64_t il, glu act) {
    tensor* gate = named(mm(l.ffn_gate, x), "ffn_gate", il);
    tensor* up = named(mm(l.ffn_up, x), "ffn_up", il);
    tensor* cur = nullptr;
    switch (act) {
    case glu::silu: cur = named(swiglu(ctx, gate, up), "ffn_swiglu", il); break;
    case glu::gelu: cur = named(geglu(ctx, gate, up), "ffn_geglu", il); break;
    case glu::relu2: cur = named(relu2_glu(ctx, gate, up), "ffn_relu2", il); break;
    case glu::silu_oai:
        cur = named(swiglu_oai(ctx, gate, up, oai_alpha, oai_limit), "ffn_swiglu_oai", il);
        break;
    }
    if (l.ffn_sub_norm) cur = sub_norm(cur, l.ffn_sub_norm, "ffn_sub_norm", il);
    cur = named(mm(l.ffn_down, cur), "ffn_out", il);
    if (in.part && in.part->n_ranks > 1) cur = named(all_reduce(ctx, cur), "ffn_out_sum", il); // every member's width
    return cur;
}

tensor* builder::moe_ffn(const layer_weights& l, tensor* x, int64_t il, glu act) {
    const int64_t E = hp.n_embd, X = hp.n_expert, K = hp.n_expert_used_at(il);
    // router: logits (X, n), biased; the weights the top k are chosen by: softmax probabilities, or the logits
    tensor* logits = named(mm(l.ffn_gate_inp, x), "ffn_moe_logits", il);
    if (l.ffn_gate_inp_b) logits = named(add(ctx, logits, l.ffn_gate_inp_b), "ffn_moe_logits_biased", il);
    tensor* probs = logits;
    if (hp.expert_gating == hparams::gating::softmax)
        probs = named(soft_max(ctx, logits, nullptr, 1.0f), "ffn_moe_probs", il);
    // the k chosen experts per token, largest first (llama.cpp's argsort order: its outputs are summed in it)
    tensor* chosen = named(top_k(ctx, probs, K, true), "ffn_moe_topk", il);                           // (K, n) i32
    tensor* w = named(get_rows(ctx, reshape_3d(ctx, probs, 1, X, n), chosen), "ffn_moe_weights", il); // (1, K, n)
    if (hp.expert_gating == hparams::gating::softmax_weight) // gpt-oss: softmax over the k chosen logits
        w = reshape_3d(
            ctx, named(soft_max(ctx, reshape_2d(ctx, w, K, n), nullptr, 1.0f), "ffn_moe_weights_softmax", il), 1, K, n);
    if (hp.expert_weights_norm) { // divided by their sum, kept above f16's smallest normal against a zero sum
        tensor* w2 = reshape_2d(ctx, w, K, n);
        tensor* sum = named(sum_rows(ctx, w2), "ffn_moe_weights_sum", il); // (1, n)
        sum = named(clamp(ctx, sum, 6.103515625e-5f, INFINITY), "ffn_moe_weights_sum_clamped", il);
        w = reshape_3d(ctx, named(div(ctx, w2, sum), "ffn_moe_weights_norm", il), 1, K, n);
    }
    if (hp.expert_weights_scale != 0.0f && hp.expert_weights_scale != 1.0f)
        w = named(scale(ctx, w, hp.expert_weights_scale), "ffn_moe_weights_scaled", il);
    g.expand(w);

    // each chosen expert's block on the token's activations (shared by its k slots): (n_ff_exp, K, n)
    tensor* xe = reshape_3d(ctx, x, E, 1, n);
    tensor* up = named(mul_mat_id(ctx, l.ffn_up_exps, xe, chosen), "ffn_moe_up", il);
    if (l.ffn_up_exps_b) up = named(add_id(ctx, up, l.ffn_up_exps_b, chosen), "ffn_moe_up_biased", il);
    tensor* gate = named(mul_mat_id(ctx, l.ffn_gate_exps, xe, chosen), "ffn_moe_gate", il);
    if (l.ffn_gate_exps_b) gate = named(add_id(ctx, gate, l.ffn_gate_exps_b, chosen), "ffn_moe_gate_biased", il);
    tensor* cur = nullptr;
    switch (act) {
    case glu::silu:
        cur = named(swiglu(ctx, gate, up), "ffn_moe_swiglu", il);
        break;
    case glu::gelu:
        cur = named(geglu(ctx, gate, up), "ffn_moe_geglu", il);
        break;
    case glu::relu2:
        cur = named(relu2_glu(ctx, gate, up), "ffn_moe_relu2", il);
        break;
    case glu::silu_oai:
        cur = named(swiglu_oai(ctx, gate, up, oai_alpha, oai_limit), "ffn_moe_swiglu_oai", il);
        break;
    }
    tensor* experts = named(mul_mat_id(ctx, l.ffn_down_exps, cur, chosen), "ffn_moe_down", il); // (E, K, n)
    if (l.ffn_down_exps_b) experts = named(add_id(ctx, experts, l.ffn_down_exps_b, chosen), "ffn_moe_down_biased", il);
    experts = named(mul(ctx, experts, w), "ffn_moe_weighted", il);
    g.expand(experts);

    // the k slots summed in order: ((e0 + e1) + e2) + ...
    auto slot = [&](int64_t i) { return view_2d(ctx, experts, E, n, experts->nb[2], size_t(i) * experts->nb[1]); };
    tensor* out = slot(0);
    for (int64_t i = 1; i < K; i++) out = add(ctx, out, slot(i));
    if (K == 1) out = scale(ctx, out, 1.0f); // a contiguous copy (x * 1 is exact), as llama.cpp's ggml_cont
    // tensor parallelism: every member's share of every chosen expert's width
    if (in.part && in.part->n_ranks > 1) out = all_reduce(ctx, out);
    return named(out, "ffn_moe_out", il);
}

tensor* builder::output_rows(tensor* x, int64_t il) {
    if (il != hp.n_layer - 1 || in.first_output == 0) return x;
    return view_2d(ctx, x, x->ne[0], n - in.first_output, x->nb[1], size_t(in.first_output) * x->nb[1]);
}

tensor* builder::logits(tensor* x) {
    const shard* split = in.part && in.part->n_ranks > 1 && in.part->output ? in.part : nullptr;
    tensor* cur = norm(x, m.output_norm, "result_norm", -1);
    tensor* bias = split ? split->output_b : m.output_b;
    tensor* out = mm(split ? split->output : m.output, cur);
    if (bias) out = add(ctx, out, bias);
    if (hp.final_softcap != 0.0f) { // cap * tanh(logits / cap)
        out = scale(ctx, out, 1.0f / hp.final_softcap);
        out = tanh(ctx, out);
        out = scale(ctx, out, hp.final_softcap);
    }
    if (split) out = all_gather(ctx, out, split->n_ranks); // every member's rows of the vocabulary, in order
    out->flags |= flag_output;
    out->set_name("logits");
    g.expand(out);
    return out;
}

tensor* builder::layer(const layer_weights& l, tensor* x, int64_t il, glu act, float q_scale) {
    tensor* cur = norm(x, l.attn_norm, "attn_norm", il);
    attn_opts o = rope_opts(il);
    o.q_scale = q_scale;
    cur = attention(l, cur, il, o);
    if (l.attn_sub_norm) cur = sub_norm(cur, l.attn_sub_norm, "attn_sub_norm", il);
    cur = attn_out(l, cur, il);
    if (l.attn_post_norm) cur = norm(cur, l.attn_post_norm, "attn_post_norm", il);
    tensor* ffn_inp = named(add(ctx, cur, x), "ffn_inp", il);
    cur = norm(ffn_inp, l.ffn_norm, "ffn_norm", il);
    cur = l.ffn_gate_inp ? moe_ffn(l, cur, il, act) : ffn(l, cur, il, act);
    if (l.ffn_post_norm) cur = norm(cur, l.ffn_post_norm, "ffn_post_norm", il);
    return output_rows(named(add(ctx, cur, ffn_inp), "l_out", il), il);
}

tensor* builder::decoder(glu act, float q_scale) {
    tensor* x = embeddings();
    const std::vector<layer_weights>& layers = in.part ? in.part->layers : m.layers;
    for (int64_t il = 0; il < hp.n_layer; il++) x = layer(layers[size_t(il)], x, il, act, q_scale);
    if (in.part && in.part->rank != 0) { // the others' logits rows go to member 0, or member 0 computes them all
        if (in.part->output) {
            logits(x);
        } else {
            x->flags |= flag_output;
            g.expand(x);
        }
        return nullptr;
    }
    return logits(x);
}

} // namespace tessera::arch
