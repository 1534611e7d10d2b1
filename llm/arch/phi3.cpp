// phi3.cpp: Phi-3, Phi-3.5 and Phi-4-mini. The llama block with
//   - q, k, v in one matrix (attn_qkv, rows q then k then v) and gate and up in one (ffn_up, 2 n_ff rows, gate
//     first): split into views of the fused weights at load;
//   - NEOX rope, with LongRoPE's per-pair factors where the file has them (rope_factors_long / rope_factors_short:
//     the long ones once the context is longer than `rope.scaling.original_context_length`) and its attention
//     factor (`rope.scaling.attn_factor`);
//   - Q multiplied by 1/sqrt(head_dim) after rope, the attention scaling by 1.
// A sliding window in the file is ignored, as llama.cpp does (its Phi-3 converters write windows the models were
// not evaluated with).
#include "blocks.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <cmath>

namespace tessera::arch {

void phi3_load(model& m) {
    load_hparams(m, rope_mode::neox);
    hparams& hp = m.hp;
    load_io(m);
    m.rope_long = m.require("rope_factors_long.weight", {hp.n_rot / 2}, false);
    m.rope_short = m.require("rope_factors_short.weight", {hp.n_rot / 2}, false);
    if (!m.rope_long != !m.rope_short)
        throw error(fmt::format("{}: LongRoPE needs both rope_factors_long and rope_factors_short", m.path));
    layer_opts o;
    o.fused_up = true;
    load_layers(m, o);
}

tensor* phi3_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv) {
    return builder(m, ctx, g, in, kv).decoder(glu::silu, 1.0f / std::sqrt(float(m.hp.head_dim)));
}

} // namespace tessera::arch
