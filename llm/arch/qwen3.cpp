// qwen3.cpp: Qwen3 (dense). The llama block with NEOX rope and a per-head RMSNorm of Q and K before rope
// (attn_q_norm, attn_k_norm, head_dim wide each). The head size comes from `attention.key_length` (128 in every
// released size), which need not be n_embd / n_head (Qwen3-0.6B: 1024 / 16 = 64).
#include "blocks.h"

namespace tessera::arch {

void qwen3_load(model& m) {
    load_hparams(m, rope_mode::neox);
    load_io(m);
    layer_opts o;
    o.qk_norm = true;
    load_layers(m, o);
}

tensor* qwen3_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv) {
    return builder(m, ctx, g, in, kv).decoder(glu::silu);
}

} // namespace tessera::arch
