// model.h: a model loaded from GGUF (hyper-parameters, tokenizer, weight tensors mapped from the file) and a
// session that evaluates tokens on a backend with a KV cache. Architectures live in llm/arch/ (one file each).
#pragma once

#include "ggml-like/backend.h"
#include "ggml-like/gguf.h"
#include "llm/device.h"
#include "llm/kv_cache.h"
#include "llm/vocab.h"

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera {

struct hparams {
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t n_ff = 0;
    int64_t head_dim = 0; // key/value length per head
    int64_t n_rot = 0;
    float rms_eps = 1e-5f;
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;
    int32_t rope_mode = 0; // rope_mode::normal for llama

    int64_t n_embd_kv() const { return head_dim * n_head_kv; }
};

struct layer_weights {
    tensor* attn_norm = nullptr; // (n_embd)
    tensor* wq = nullptr;        // (n_embd, n_head * head_dim)
    tensor* wk = nullptr;        // (n_embd, n_head_kv * head_dim)
    tensor* wv = nullptr;        // (n_embd, n_head_kv * head_dim)
    tensor* wo = nullptr;        // (n_head * head_dim, n_embd)
    tensor* bq = nullptr;        // optional biases
    tensor* bk = nullptr;
    tensor* bv = nullptr;
    tensor* bo = nullptr;
    tensor* ffn_norm = nullptr;  // (n_embd)
    tensor* ffn_gate = nullptr;  // (n_embd, n_ff)
    tensor* ffn_up = nullptr;    // (n_embd, n_ff)
    tensor* ffn_down = nullptr;  // (n_ff, n_embd)
};

// progress(fraction done) during load; may be empty
using progress_fn = std::function<void(float)>;

class model {
  public:
    // Maps the file, reads hyper-parameters and tokenizer, checks every tensor's name, shape and type.
    static std::unique_ptr<model> load(const std::string& path, const progress_fn& progress = {});

    std::string path;
    std::string arch;        // general.architecture
    std::string name;        // general.name or the file name
    gguf_file file;
    vocab voc;
    hparams hp;

    context weights;         // tensor headers; data points into the mapped file
    tensor* tok_embd = nullptr;    // (n_embd, n_vocab)
    tensor* output_norm = nullptr; // (n_embd)
    tensor* output = nullptr;      // (n_embd, n_vocab); == tok_embd when tied
    tensor* rope_freqs = nullptr;  // (n_rot/2) optional
    std::vector<layer_weights> layers;
    std::vector<tensor*> params;   // every weight tensor above, once each (a session's backend loads these)

    // Per-tensor output multipliers of NVFP4 checkpoints (`blk.N.ffn_up.scale`, f32 [1]): y = (W x) * scale.
    std::unordered_map<const tensor*, tensor*> out_scale;

    uint64_t n_params = 0;
    uint64_t n_bytes = 0; // weight bytes
    std::string type_summary() const; // most common weight type ("q4_1")

    // Looks up a tensor, checks its shape (ne, missing dims 1) and that it is computable; throws tessera::error.
    tensor* require(const std::string& tname, std::initializer_list<int64_t> ne, bool required = true);

  private:
    model(gguf_file f);
    std::vector<bool> used_;
};

struct session_params {
    int64_t n_ctx = 0;    // 0: the model's training context, at most 4096
    int64_t n_batch = 512; // tokens per graph
    int n_threads = 0;    // 0: one per core (at most 8)
    device_type device = device_type::cpu; // the CLI picks CUDA when a GPU is present (cli/options.cpp)
    // Attention reads the KV cache in multiples of this many rows (masked past the filled ones), so that the decode
    // graph stays the same for that many tokens. 0: the backend's choice (backend::kv_pad: CUDA 256, the CPU 1).
    int64_t kv_pad = 0;
    // CUDA: reproduce the CPU's results bit for bit (quantized mul_mat, norms, rope, attention), slower; the
    // same as TESSERA_CUDA_EXACT=1 (backends/cuda/common.cuh). No effect on the CPU.
    bool exact = false;
};

// Evaluation state: backend, KV cache and reusable graph memory. Not thread-safe.
class session {
  public:
    session(const model& m, const session_params& p);
    ~session();

    // Evaluates `tokens` at positions [n_past, n_past + n). Returns logits (n_vocab) for the last token, or for every
    // token (n * n_vocab, row per token) when all_logits. Throws tessera::error when the context would overflow.
    std::span<const float> decode(std::span<const token> tokens, bool all_logits = false) {
        return decode_from(tokens, all_logits ? 0 : int64_t(tokens.size()) - 1);
    }
    // Same, returning the logits of tokens[first_output..n) only ((n - first_output) * n_vocab): the output layer is
    // computed for those rows alone (perplexity scores the second half of each chunk).
    std::span<const float> decode_from(std::span<const token> tokens, int64_t first_output);

    int64_t n_past() const { return kv_.n_used; }
    int64_t n_ctx() const { return kv_.n_ctx; }
    void clear() { kv_.n_used = 0; }
    void truncate(int64_t n) { kv_.n_used = std::min(kv_.n_used, n); } // forget positions >= n
    const model& mdl() const { return m_; }
    backend& be() { return *be_; }
    int n_threads() const; // CPU threads; 0 on other devices

  private:
    // evaluates one graph; writes the logits of batch rows [first_output, n) at logits_ + logits_offset
    void decode_batch(std::span<const token> tokens, int64_t first_output, size_t logits_offset);

    const model& m_;
    session_params p_;
    std::unique_ptr<backend> be_;
    std::unique_ptr<graph_runner> runner_;
    kv_cache kv_;
    // logits of the last decode, n_logits_ floats, in memory the backend copies into directly (backend::alloc_host)
    std::unique_ptr<buffer> logits_;
    size_t n_logits_ = 0;
    // The last batch's graph, planned and bound: a batch of the same shape (tokens, KV length, first output: a decode
    // step, token after token, while the padded KV length stays) runs it again with new inputs, without building.
    struct batch_graph;
    std::unique_ptr<batch_graph> last_;
};

} // namespace tessera
