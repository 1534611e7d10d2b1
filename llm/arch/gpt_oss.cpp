// gpt_oss.cpp: OpenAI's gpt-oss (20b, 120b; llama.cpp's "gpt-oss", its src/models/openai-moe.cpp). Against the llama
// block:
//   - q, k, v and the output projection have biases; NEOX rope with YaRN (the file's rope.scaling.*: factor 32 over an
//     original 4096-token context in the released models), the same base and scale on every layer;
//   - attention sinks: one learned logit per head (attn_sinks) joins each softmax's denominator;
//   - sliding-window attention (`attention.sliding_window`, 128 tokens) on alternate layers: with no
//     `sliding_window_pattern` key, layers 0, 2, 4, ... are local and the odd ones full (llama.cpp's pattern 2);
//   - the feed-forward block's pre-norm is stored as post_attention_norm;
//   - a mixture of experts: router logits (ffn_gate_inp, with a bias) -> the top k logits -> a softmax over those k
//     (llama.cpp's gating SOFTMAX_WEIGHT, no renormalization) -> each chosen expert's gate, up (with per-expert
//     biases) -> clamped SwiGLU (swiglu_oai: alpha 1.702, limit 7) -> down (+ bias) -> weighted sum. The released
//     files store the experts in MXFP4.
#include "blocks.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

namespace tessera::arch {

void gpt_oss_load(model& m) {
    load_hparams(m, rope_mode::neox);
    if (!m.file.find(m.arch + ".attention.sliding_window"))
        throw error(fmt::format("{}: missing metadata key {}.attention.sliding_window", m.path, m.arch));
    load_sliding_window(m, 2, true);
    load_experts(m, hparams::gating::softmax_weight, false);
    load_io(m);
    layer_opts o;
    o.experts = true;
    o.expert_biases = true;
    o.sinks = true;
    o.ffn_norm = "post_attention_norm.weight";
    load_layers(m, o);
}

tensor* gpt_oss_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv) {
    return builder(m, ctx, g, in, kv).decoder(glu::silu_oai);
}

} // namespace tessera::arch
