// llama.cpp (the architecture, not the project): llama-family models (Llama 1-3, SmolLM, Mistral-style GQA).
// Facts: ../shared/docs/FORMATS.md §5.
//   per layer: h = x + Wo Attn(RoPE(Wq n), RoPE(Wk n), Wv n), n = RMSNorm(x) * attn_norm
//              out = h + Wdown (silu(Wgate m) * Wup m),   m = RMSNorm(h) * ffn_norm
//   logits = output (RMSNorm(x_last) * output_norm)
// Rope rotates adjacent pairs (normal mode) over the whole head; Llama 3.1 divides each pair's frequency by the
// optional rope_freqs factors.
#include "blocks.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

namespace tessera::arch {

void llama_load(model& m) {
    load_hparams(m, rope_mode::normal);
    hparams& hp = m.hp;
    if (hp.n_rot != hp.head_dim)
        throw error(fmt::format("{}: rope.dimension_count {} must equal the head size {} for llama", m.path, hp.n_rot,
                                hp.head_dim));
    load_io(m);
    m.rope_freqs = m.require("rope_freqs.weight", {hp.n_rot / 2}, false);
    load_layers(m, {});
}

tensor* llama_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv) {
    return builder(m, ctx, g, in, kv).decoder(glu::silu);
}

} // namespace tessera::arch
