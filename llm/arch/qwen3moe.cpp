// qwen3moe.cpp: Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B). Qwen3's attention (NEOX rope, a per-head RMSNorm of Q and
// K before rope, head size from `attention.key_length`) and, in place of the dense feed-forward block, a mixture of
// `expert_count` SwiGLU experts (`expert_feed_forward_length` wide), `expert_used_count` of them per token: router
// logits (ffn_gate_inp) -> softmax -> the top k -> their probabilities divided by their sum (llama.cpp passes
// norm_w = true for this family whatever the file says) -> the experts' outputs weighted and summed. No shared expert.
#include "blocks.h"

namespace tessera::arch {

void qwen3moe_load(model& m) {
    load_hparams(m, rope_mode::neox);
    load_experts(m, hparams::gating::softmax, true);
    load_io(m);
    layer_opts o;
    o.qk_norm = true;
    o.experts = true;
    load_layers(m, o);
}

tensor* qwen3moe_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv) {
    return builder(m, ctx, g, in, kv).decoder(glu::silu);
}

} // namespace tessera::arch
