// arch.h: the architecture table. A family (general.architecture) is one file in llm/arch/ that reads its
// hyper-parameters and weights into a model and builds the forward graph of one batch from the shared blocks of
// blocks.h; adding one is one more file and one more row in arch.cpp.
#pragma once

#include "llm/model.h"

#include <string>
#include <string_view>

namespace tessera::arch {

// One member's share of a model split by rows over several backends (tensor parallelism, --split-mode row): each
// layer's query and KV heads and its feed-forward width divided evenly among the members. A member holds the rows of
// wq / wk / wv / ffn_gate / ffn_up (and their biases) for its heads and its share of the width, and the matching
// columns of wo and ffn_down, whose partial products the graph sums over the members (all_reduce) before the biases,
// post-norms and residual adds, which every member computes in full. Norms and token embeddings are shared; the
// output layer's vocabulary is split as evenly as the heads (each member's logits rows, gathered: all_gather), or,
// when the members do not divide it, computed by member 0 alone.
struct shard {
    int rank = 0, n_ranks = 1;
    hparams hp;                        // the member's head counts and widths
    std::vector<layer_weights> layers; // the member's slices (shared tensors as the model's)
    tensor* output = nullptr;          // the member's rows of the output matrix (null: member 0 computes all)
    tensor* output_b = nullptr;        // and of its bias, if any
    tensor* tok_embd = nullptr;        // the token table as the member looks it up: where its tied output is split, an
                                       // alias of the model's without flag_tied (no mul_mat layout of the whole table);
                                       // null: the model's
    std::unordered_map<const tensor*, tensor*> out_scale; // model::out_scale for the slices
    std::vector<tensor*> params;       // every weight the member reads, once each (its backend loads these)
    context ctx;                       // the slices' headers
    // The column slices (wo, ffn_down), gathered from the file into anonymous mappings. A backend that copies its
    // weights to memory of its own (CUDA) no longer needs them once loaded: release_host_copies() returns their pages
    // to the system (a 70B model: ~7 GB a member); the addresses stay mapped and read as zeros.
    struct mapping {
        void* p = nullptr;
        size_t n = 0;
        explicit mapping(size_t bytes);
        ~mapping();
        mapping(const mapping&) = delete;
        mapping& operator=(const mapping&) = delete;
    };
    std::vector<std::unique_ptr<mapping>> mem;
    void release_host_copies();
};
// Rank `rank` of n_ranks; throws tessera::error naming what cannot be split (head counts or widths not divisible by
// n_ranks, a block format cut inside a block). Mixture-of-experts layers split every expert's width (the router is
// every member's; member 0 adds the down projection's bias); sub-norms (BitNet) take the member's part of their
// weight.
std::unique_ptr<shard> make_shard(const model& m, int rank, int n_ranks);

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
    // tensor parallelism: the graph of this member (the member's weights and sizes; all_reduce after wo and
    // ffn_down; the logits of the member's vocabulary rows gathered on every member, or, when the output is not
    // split, only on member 0: the others' graphs end with the last layer). null: the whole model.
    const shard* part = nullptr;
};

// Reads the family's hyper-parameters and weights into m (m.file, m.voc are set); throws tessera::error naming the
// key or tensor that is missing or wrong.
using load_fn = void (*)(model& m);
// Builds the forward graph of one batch into g; returns the logits tensor (n_vocab, n_tok - first_output), or null
// for a tensor-parallel member other than 0 (batch_inputs::part; its graph still gathers its logits rows when the
// output is split).
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
