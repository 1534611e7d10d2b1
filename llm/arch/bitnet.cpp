// bitnet.cpp: BitNet b1.58 (ternary weights). Two names, one block:
//   - `bitnet`: llama.cpp's converter of the 1bitLLM checkpoints; SwiGLU feed-forward;
//   - `bitnet-b1.58`: BitNet's own converter (Microsoft's bitnet-b1.58-2B-4T); squared-ReLU gate, relu(g)^2 * up.
// Against the llama block: NEOX rope; an RMSNorm on the attention result before the output projection
// (attn_sub_norm) and on the gated product before the down projection (ffn_sub_norm); each matrix may carry a
// per-tensor scale (`blk.N.attn_q.scale`, ...) that multiplies its output; the output matrix is the token embedding.
// The ternary matrices (I2_S, TQ2_0) take int8 activations quantized per token (W2A8), as the model was trained.
#include "blocks.h"

namespace tessera::arch {

void bitnet_load(model& m) {
    load_hparams(m, rope_mode::neox);
    load_io(m);
    layer_opts o;
    o.sub_norms = true;
    load_layers(m, o);
}

tensor* bitnet_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv) {
    return builder(m, ctx, g, in, kv).decoder(m.arch == "bitnet-b1.58" ? glu::relu2 : glu::silu);
}

} // namespace tessera::arch
