// blocks.h: the pieces every decoder family is made of, for the files in llm/arch/: reading the shared
// hyper-parameters and weights, and building embeddings, attention (rope, per-head norms, sliding window, the KV
// cache), the gated feed-forward block, norms and the output head. A family file picks the pieces and their options;
// node names follow llama.cpp's ("Qcur-3") so that layer dumps of the two can be compared line by line.
#pragma once

#include "arch.h"

#include "ggml-like/ops.h"

#include <optional>
#include <string>
#include <vector>

namespace tessera::arch {

// ---- loading ----

// An integer key; throws when it is missing (and no fallback is given), not an integer, or outside [lo, hi].
int64_t get_int(const model& m, const std::string& key, std::optional<int64_t> fallback, int64_t lo, int64_t hi);
// A per-layer integer: a scalar (every layer) or an array of n_layer entries, each within [lo, hi].
std::vector<int64_t> get_per_layer(const model& m, const std::string& key, std::optional<int64_t> fallback,
                                   int64_t lo, int64_t hi);

// The hyper-parameters every family shares, from `{arch}.*` keys: sizes (head counts and feed-forward width may be
// per-layer arrays), RMSNorm epsilon, head size, rope (base, linear / YaRN / LongRoPE scaling) in the given mode.
void load_hparams(model& m, rope_mode mode);
// Sliding-window attention: `attention.sliding_window` tokens on the layers `attention.sliding_window_pattern`
// names (an array of flags, or n: every n-th layer, counting from 1, has full attention; default_pattern when the
// key is missing), with the rope base `rope.freq_base_swa`: by default 10000 and unscaled (gemma3), or with
// swa_rope_as_full the full layers' base and scale (gpt-oss). No key: no window.
void load_sliding_window(model& m, int64_t default_pattern, bool swa_rope_as_full = false);

// token_embd, output_norm and output (absent: tied to token_embd) and the optional output.bias.
void load_io(model& m);

// Mixture of experts: `expert_count` experts, `expert_used_count` chosen per token (per-layer arrays allowed, each
// within 1..expert_count), `expert_feed_forward_length` wide (default: feed_forward_length / expert_used_count, as
// llama.cpp), with the family's gating and renormalization of the chosen weights.
void load_experts(model& m, hparams::gating gating, bool weights_norm);

struct layer_opts {
    bool qk_norm = false;    // attn_q_norm, attn_k_norm (head_dim each): required
    bool post_norms = false; // attn_post_norm, ffn_post_norm (n_embd each): required
    bool sub_norms = false;  // attn_sub_norm (n_head * head_dim), ffn_sub_norm (n_ff): required
    bool fused_up = false;   // ffn_up holds gate and up (2 n_ff rows, gate first) and there is no ffn_gate (phi3)
    bool has_wo_bias = true; // attn_output.bias allowed
    // mixture of experts instead of the dense feed-forward block (load_experts first): the router
    // ffn_gate_inp and the 3-D ffn_{gate,up,down}_exps; expert_biases: their biases (router and experts) as well
    bool experts = false;
    bool expert_biases = false;
    bool sinks = false;                       // attn_sinks (n_head): required
    const char* ffn_norm = "ffn_norm.weight"; // the feed-forward block's pre-norm (gpt-oss: post_attention_norm)
};
// Every layer's norms, attention (attn_q/k/v, or a fused attn_qkv split into the three, optional biases) and
// feed-forward weights, and each matrix's optional per-tensor `.scale` (out_scale).
void load_layers(model& m, const layer_opts& o);

// ---- building ----

// the gate's activation: SwiGLU, GeGLU, squared ReLU, gpt-oss's clamped SwiGLU (ops.h swiglu_oai)
enum class glu { silu, gelu, relu2, silu_oai };

struct attn_opts {
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;
    tensor* freq_factors = nullptr; // rope_freqs or LongRoPE's factors
    bool swa = false;               // the sliding-window mask
    // 0: softmax(Q K^T / sqrt(head_dim)) in the attention op; else Q is multiplied by this after rope and the
    // attention op scales by 1 (gemma3, phi3: llama.cpp's graph does so, and the rounding differs)
    float q_scale = 0.0f;
};

class builder {
  public:
    builder(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);

    const model& m;
    const hparams& hp;
    context& ctx;
    graph& g;
    const batch_inputs& in;
    kv_cache& kv;
    const int64_t n;    // tokens of the batch
    const int64_t n_kv; // cache rows attention reads

    static tensor* named(tensor* t, const char* what, int64_t il = -1);
    tensor* mm(tensor* w, tensor* x);               // W x, times the weight's per-tensor scale when it has one
    tensor* norm(tensor* x, tensor* w, const char* what, int64_t il); // RMSNorm(x) * w (w broadcast over rows)
    // norm() of a width that tensor parallelism divides (BitNet's sub-norms): each member's sum of squares of its
    // part, summed over the members (all_reduce), divides the part (rms_norm_part); w is the member's part of the
    // weight
    tensor* sub_norm(tensor* x, tensor* w, const char* what, int64_t il);
    tensor* embeddings();                           // the batch's token rows, times hp.embd_scale when set
    attn_opts rope_opts(int64_t il) const;          // the layer's rope base, scale and factors, its mask kind

    // Attention of layer il on x (n_embd, n): the q, k, v projections with their biases, per-head Q/K norms when the
    // layer has them, rope, this batch's K and V into the cache, and attention over the cache. Returns the heads'
    // outputs (n_head * head_dim, n), before the output projection.
    tensor* attention(const layer_weights& l, tensor* x, int64_t il, const attn_opts& o);
    tensor* attn_out(const layer_weights& l, tensor* attn, int64_t il); // wo (+ its bias)
    // The gated feed-forward block: down(act(gate x) * up x), with ffn_sub_norm on the product when the layer has
    // one (bitnet). Returns (n_embd, n).
    tensor* ffn(const layer_weights& l, tensor* x, int64_t il, glu act);
    // The mixture-of-experts block (llama.cpp's build_moe_ffn): router logits (+ bias) -> the gating's weights, the
    // top k experts per token -> each chosen expert's gated feed-forward block (+ its biases) -> the outputs times
    // their weights, summed over the k slots in the router's order. Returns (n_embd, n).
    tensor* moe_ffn(const layer_weights& l, tensor* x, int64_t il, glu act);
    // At the last layer, only the rows whose logits are wanted (first_output..n); x itself elsewhere.
    tensor* output_rows(tensor* x, int64_t il);
    // output_norm, the output matrix (+ bias), soft-capping when set; flagged and added to the graph.
    tensor* logits(tensor* x);

    // One pre-norm decoder layer with the norms its weights have:
    //   h   = x + post_attn(wo sub_attn(attention(attn_norm(x))))
    //   out = h + post_ffn(ffn(ffn_norm(h)))          (moe_ffn where the layer has experts)
    // (post_*: gemma's post-norms, sub_attn: bitnet's norm before wo; absent ones are skipped). q_scale: attn_opts.
    tensor* layer(const layer_weights& l, tensor* x, int64_t il, glu act, float q_scale = 0.0f);
    // The whole model: embeddings, every layer, the output head. Returns the logits (null for a tensor-parallel
    // member other than 0: in.part).
    tensor* decoder(glu act, float q_scale = 0.0f);
};

} // namespace tessera::arch
