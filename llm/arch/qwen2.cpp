// qwen2.cpp: Qwen2 / Qwen2.5. The llama block with biases on the q, k and v projections (and, in some files, on the
// output matrix), rope rotating the two halves of each head (NEOX mode), and YaRN scaling where the file asks for
// it (`rope.scaling.type = yarn`: long-context Qwen2.5 variants).
#include "blocks.h"

namespace tessera::arch {

void qwen2_load(model& m) {
    load_hparams(m, rope_mode::neox);
    load_io(m);
    load_layers(m, {});
}

tensor* qwen2_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv) {
    return builder(m, ctx, g, in, kv).decoder(glu::silu);
}

} // namespace tessera::arch
