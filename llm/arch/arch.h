// arch.h: the architecture table. A family (general.architecture) is one file in llm/arch/ that reads its
// hyper-parameters and weights into a model and builds the forward graph of one batch from the shared blocks of
// blocks.h; adding one is one more file and one more row in arch.cpp.
#pragma once

#include "llm/model.h"

#include <string>
#include <string_view>

namespace tessera::arch {

struct batch_inputs {
    tensor* ids = nullptr;  // (n_tok) i32 token ids
    tensor* pos = nullptr;  // (n_tok) i32 positions
    tensor* mask = nullptr; // (n_kv, n_tok) f32: 0 where token t may attend to cache row j, -inf elsewhere
    tensor* mask_swa = nullptr; // the same for sliding-window layers (only when the model has some)
    tensor* kv_idx = nullptr; // (n_tok) i32: the cache rows the batch's K and V go to (n_past, n_past + 1, ...)
    int64_t n_tok = 0;
    // cache rows already filled; the batch writes rows [n_past, n_past + n_tok). Checks only: the graph must not
    // depend on it (it reaches the graph through pos, mask and kv_idx), since the session runs one graph again for
    // every batch of the same n_tok, n_kv and first_output (session::decode_batch)
    int64_t n_past = 0;
    int64_t n_kv = 0;       // cache rows attention reads: n_past + n_tok, or more when padded (masked past those)
    int64_t first_output = 0; // logits are computed for tokens [first_output, n_tok)
};

// Reads the family's hyper-parameters and weights into m (m.file, m.voc are set); throws tessera::error naming the
// key or tensor that is missing or wrong.
using load_fn = void (*)(model& m);
// Builds the forward graph of one batch into g; returns the logits tensor (n_vocab, n_tok - first_output).
using build_fn = tensor* (*)(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);

struct family {
    const char* name; // general.architecture, as llama.cpp writes it
    load_fn load;
    build_fn build;
};

const family* find_family(std::string_view name); // null when unsupported
std::string family_names();                      // "llama, qwen2, ..." for error messages

// One pair per file in llm/arch/.
void llama_load(model& m);
tensor* llama_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);
void qwen2_load(model& m);
tensor* qwen2_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);
void qwen3_load(model& m);
tensor* qwen3_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);
void gemma3_load(model& m);
tensor* gemma3_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);
void phi3_load(model& m);
tensor* phi3_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);
void qwen3moe_load(model& m);
tensor* qwen3moe_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);
void gpt_oss_load(model& m);
tensor* gpt_oss_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);
void bitnet_load(model& m);
tensor* bitnet_build(const model& m, context& ctx, graph& g, const batch_inputs& in, kv_cache& kv);

} // namespace tessera::arch
