// gemma3.cpp: Gemma 3 (text). Against the llama block:
//   - the token embeddings are multiplied by sqrt(n_embd);
//   - RMSNorm weights are used as stored (the converter has already added gemma's +1);
//   - Q and K get a per-head RMSNorm before rope (NEOX mode); Q is multiplied by the query scale after rope and the
//     attention itself scales by 1: 1/sqrt(head_dim), except the 27B (62 layers), which uses 1/sqrt(n_embd/n_head)
//     (gemma_pytorch's query_pre_attn_scalar);
//   - norms after attention and after the feed-forward block as well (post_attention_norm, post_ffw_norm);
//   - the feed-forward gate is GELU (tanh form): GeGLU;
//   - most layers attend to a sliding window only (`attention.sliding_window`, default pattern: 5 local layers, then
//     one global), and the local layers rotate with their own rope base (`rope.freq_base_swa`, default 10000);
//   - optional soft-capping of the logits (`final_logit_softcapping`).
#include "blocks.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <cmath>

namespace tessera::arch {

void gemma3_load(model& m) {
    load_hparams(m, rope_mode::neox);
    load_sliding_window(m, 6);
    hparams& hp = m.hp;
    hp.embd_scale = std::sqrt(float(hp.n_embd));
    hp.attn_scale = hp.n_layer == 62 ? 1.0f / std::sqrt(float(hp.n_embd / hp.n_head))
                                     : 1.0f / std::sqrt(float(hp.head_dim));
    if (const gguf_value* v = m.file.find(m.arch + ".final_logit_softcapping"); v) {
        const std::optional<double> cap = m.file.get_float(m.arch + ".final_logit_softcapping");
        if (!cap || !std::isfinite(*cap) || *cap < 0.0)
            throw error(fmt::format("{}: metadata {}.final_logit_softcapping is not a non-negative number", m.path,
                                    m.arch));
        hp.final_softcap = float(*cap);
    }
    load_io(m);
    layer_opts o;
    o.qk_norm = true;
    o.post_norms = true;
    o.has_wo_bias = false;
    load_layers(m, o);
}

tensor* gemma3_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv) {
    return builder(m, ctx, g, in, kv).decoder(glu::gelu, m.hp.attn_scale);
}

} // namespace tessera::arch
