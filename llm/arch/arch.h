// arch.h: what every architecture file provides: reading its hyper-parameters and weights into a model, and building
// the forward graph of one batch. Only llama for now (arch/llama.cpp).
#pragma once

#include "llm/model.h"

namespace tessera::arch {

struct batch_inputs {
    tensor* ids = nullptr;  // (n_tok) i32 token ids
    tensor* pos = nullptr;  // (n_tok) i32 positions
    tensor* mask = nullptr; // (n_kv, n_tok) f32: 0 where token t may attend to cache row j, -inf elsewhere
    tensor* kv_idx = nullptr; // (n_tok) i32: the cache rows the batch's K and V go to (n_past, n_past + 1, ...)
    int64_t n_tok = 0;
    // cache rows already filled; the batch writes rows [n_past, n_past + n_tok). Checks only: the graph must not
    // depend on it (it reaches the graph through pos, mask and kv_idx), since the session runs one graph again for
    // every batch of the same n_tok, n_kv and first_output (session::decode_batch)
    int64_t n_past = 0;
    int64_t n_kv = 0;       // cache rows attention reads: n_past + n_tok, or more when padded (masked past those)
    int64_t first_output = 0; // logits are computed for tokens [first_output, n_tok)
};

void llama_load(model& m);
// Returns the logits tensor (n_vocab, n_tok - first_output).
tensor* llama_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);

} // namespace tessera::arch
