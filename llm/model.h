// model.h: a model loaded from GGUF (hyper-parameters, tokenizer, weight tensors mapped from the file) and a
// session that evaluates tokens on a backend with a KV cache. Architectures live in llm/arch/ (one file each).
#pragma once

#include "ggml-like/backend.h"
#include "ggml-like/gguf.h"
#include "ggml-like/sched.h"
#include "ggml-like/score.h"
#include "llm/device.h"
#include "llm/kv_cache.h"
#include "llm/vocab.h"

#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace tessera {

// Hyper-parameters of a decoder-only transformer, as the architecture file read them (llm/arch/). Values that may
// differ per layer (head counts, feed-forward width, sliding window) are kept per layer; the scalar fields hold
// layer 0's value.
struct hparams {
    int64_t n_vocab = 0;
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_layer = 0;
    int64_t n_head = 0;
    int64_t n_head_kv = 0;
    int64_t n_ff = 0;
    int64_t head_dim = 0; // key/value length per head (layers with full attention)
    int64_t n_rot = 0;    // dimensions rope rotates (full-attention layers)
    float rms_eps = 1e-5f;

    // rope: theta_i = pos * freq_scale * base^(-2i/n_rot) / factor_i; YaRN blends interpolated and extrapolated
    // angles (ext_factor != 0) and multiplies cos/sin by attn_factor (rope op, ggml-like/ops.h)
    int32_t rope_mode = 0; // rope_mode::normal (llama) or neox (qwen, gemma, phi3, bitnet)
    float rope_freq_base = 10000.0f;
    float rope_freq_scale = 1.0f;
    float rope_ext_factor = 0.0f;
    float rope_attn_factor = 1.0f;
    float rope_beta_fast = 32.0f;
    float rope_beta_slow = 1.0f;
    int64_t rope_n_ctx_orig = 0; // the context the scaled rope was trained for (YaRN, LongRoPE's long/short choice)

    // sliding-window attention: layers with swa[il] attend to the last n_swa positions only, and rotate with their
    // own rope base and scale (gemma3's local layers)
    int64_t n_swa = 0;
    float rope_freq_base_swa = 10000.0f;
    float rope_freq_scale_swa = 1.0f;

    float embd_scale = 0.0f;      // multiplies the token embeddings when != 0 (gemma: sqrt(n_embd))
    float attn_scale = 0.0f;      // query scale; 0: 1/sqrt(head_dim)
    float final_softcap = 0.0f;   // logits = cap * tanh(logits / cap) when != 0

    std::vector<int64_t> head_l, head_kv_l, ff_l; // per layer (n_layer entries each)
    std::vector<uint8_t> swa_l;                   // per layer: 1 = sliding window

    // mixture of experts (qwen3moe, gpt-oss): n_expert feed-forward blocks of width ff_exp_l[il] per layer, of which
    // the router picks expert_used_l[il] per token (blocks.h, builder::moe_ffn)
    int64_t n_expert = 0;
    std::vector<int64_t> expert_used_l, ff_exp_l; // per layer; empty without experts
    // the router's gating (llama.cpp's llama_expert_gating_func_type): softmax over all experts' logits, then the
    // top k of the probabilities; or the top k of the logits, then a softmax over those k (gpt-oss)
    enum class gating : int32_t { softmax, softmax_weight } expert_gating = gating::softmax;
    bool expert_weights_norm = false;  // the k chosen weights divided by their sum (qwen3moe)
    float expert_weights_scale = 0.0f; // the chosen weights multiplied by this when != 0 and != 1

    int64_t n_head_at(int64_t il) const { return head_l.empty() ? n_head : head_l[size_t(il)]; }
    int64_t n_head_kv_at(int64_t il) const { return head_kv_l.empty() ? n_head_kv : head_kv_l[size_t(il)]; }
    int64_t n_ff_at(int64_t il) const { return ff_l.empty() ? n_ff : ff_l[size_t(il)]; }
    int64_t n_expert_used_at(int64_t il) const { return expert_used_l.empty() ? 0 : expert_used_l[size_t(il)]; }
    int64_t n_ff_exp_at(int64_t il) const { return ff_exp_l.empty() ? 0 : ff_exp_l[size_t(il)]; }
    bool is_swa(int64_t il) const { return n_swa > 0 && !swa_l.empty() && swa_l[size_t(il)] != 0; }
    bool any_swa() const {
        for (int64_t il = 0; il < n_layer; il++)
            if (is_swa(il)) return true;
        return false;
    }
    int64_t n_embd_kv(int64_t il) const { return head_dim * n_head_kv_at(il); }
    int64_t n_embd_kv() const { return n_embd_kv(0); } // layer 0's (all layers' when uniform)
    bool uniform() const; // the same head counts and widths in every layer
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
    tensor* q_norm = nullptr;    // (head_dim) per-head RMSNorm of Q and K before rope (qwen3, gemma3)
    tensor* k_norm = nullptr;
    tensor* attn_post_norm = nullptr; // (n_embd) on the attention output before the residual (gemma)
    tensor* attn_sub_norm = nullptr;  // (n_head * head_dim) on the attention result before wo (bitnet)
    tensor* ffn_norm = nullptr;  // (n_embd)
    tensor* ffn_gate = nullptr;  // (n_embd, n_ff)
    tensor* ffn_up = nullptr;    // (n_embd, n_ff)
    tensor* ffn_down = nullptr;  // (n_ff, n_embd)
    tensor* ffn_post_norm = nullptr; // (n_embd) on the feed-forward output before the residual (gemma)
    tensor* ffn_sub_norm = nullptr;  // (n_ff) on the gated activation before ffn_down (bitnet)
    tensor* attn_sinks = nullptr;    // (n_head) one logit per head joining the attention softmax (gpt-oss)
    // mixture of experts, in place of ffn_gate / ffn_up / ffn_down:
    tensor* ffn_gate_inp = nullptr;    // (n_embd, n_expert) the router
    tensor* ffn_gate_inp_b = nullptr;  // (n_expert) optional router bias (gpt-oss)
    tensor* ffn_gate_exps = nullptr;   // (n_embd, n_ff_exp, n_expert)
    tensor* ffn_up_exps = nullptr;     // (n_embd, n_ff_exp, n_expert)
    tensor* ffn_down_exps = nullptr;   // (n_ff_exp, n_embd, n_expert)
    tensor* ffn_gate_exps_b = nullptr; // (n_ff_exp, n_expert) optional per-expert biases (gpt-oss)
    tensor* ffn_up_exps_b = nullptr;   // (n_ff_exp, n_expert)
    tensor* ffn_down_exps_b = nullptr; // (n_embd, n_expert)
};

// progress(fraction done) during load; may be empty
using progress_fn = std::function<void(float)>;

namespace arch {
struct family;
struct shard;
}

class model {
  public:
    // Maps the file, reads hyper-parameters and tokenizer, checks every tensor's name, shape and type.
    static std::unique_ptr<model> load(const std::string& path, const progress_fn& progress = {});

    std::string path;
    std::string arch;        // general.architecture
    const arch::family* family = nullptr; // its row of the architecture table (llm/arch/arch.h)
    std::string name;        // general.name or the file name
    gguf_file file;
    vocab voc;
    hparams hp;

    context weights;         // tensor headers; data points into the mapped file
    tensor* tok_embd = nullptr;    // (n_embd, n_vocab)
    tensor* output_norm = nullptr; // (n_embd)
    tensor* output = nullptr;      // (n_embd, n_vocab); == tok_embd when tied
    tensor* output_b = nullptr;    // (n_vocab) optional bias of the output matrix (qwen2, phi3)
    tensor* rope_freqs = nullptr;  // (n_rot/2) optional: divisors of each pair's frequency (llama 3.1)
    tensor* rope_long = nullptr;   // (n_rot/2) optional LongRoPE factors (phi3) for contexts past rope_n_ctx_orig
    tensor* rope_short = nullptr;  // and within it
    std::vector<layer_weights> layers;
    std::vector<tensor*> params;   // every weight tensor above, once each (a session's backend loads these)

    // Per-tensor output multipliers of NVFP4 checkpoints (`blk.N.ffn_up.scale`, f32 [1]): y = (W x) * scale.
    std::unordered_map<const tensor*, tensor*> out_scale;

    uint64_t n_params = 0;
    uint64_t n_bytes = 0; // weight bytes
    std::string type_summary() const; // most common weight type ("q4_1")

    // Looks up a tensor, checks its shape (ne, missing dims 1) and that it is computable; throws tessera::error.
    tensor* require(const std::string& tname, std::initializer_list<int64_t> ne, bool required = true);
    // Splits a weight matrix into consecutive row ranges of the given counts (a fused attn_qkv or gate+up tensor), or
    // a vector into consecutive element ranges (its bias): each part is a weight of its own pointing into the
    // parent's data, which stops being one.
    std::vector<tensor*> split_rows(tensor* w, std::initializer_list<int64_t> rows);

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
    // graph stays the same for that many tokens. 0: the backend's choice (backend::kv_pad: 256 on CPU and CUDA).
    int64_t kv_pad = 0;
    // CUDA: reproduce the CPU's results bit for bit (quantized mul_mat, norms, rope, attention), slower; the
    // same as TESSERA_CUDA_EXACT=1 (backends/cuda/common.cuh). No effect on the CPU.
    bool exact = false;
    // -ngl, as llama.cpp counts: the last N layers on the GPU (`device` cuda), the rest on the CPU, the output layer
    // counting as one more (N = 1: the output alone; N >= n_layer + 1, or -1: everything). A layer's KV cache lives
    // with it; the token embeddings stay on the CPU unless the output layer shares them and is offloaded.
    int n_gpu_layers = -1;
    // --n-cpu-moe: the experts (ffn_{gate,up,down}_exps, their biases) of the first N layers stay in host memory and
    // the CPU computes them; everything else as -ngl says
    int n_cpu_moe = 0;
    // llama.cpp's op offload (--no-op-offload turns it off): with some layers on the CPU (-ngl N, --n-cpu-moe), a
    // matmul of theirs over a batch of >= 32 tokens runs on the GPU, its weight copied there for it (a prompt's
    // GEMMs: the GPU's speed at the cost of the upload)
    bool op_offload = true;
    // Several GPUs, as llama.cpp's --split-mode / --tensor-split / --main-gpu: none: main_gpu alone; layer: the
    // offloaded layers (and the output) in consecutive runs over the GPUs, in proportion to tensor_split (llama.cpp's
    // rule); row: every layer divided over the GPUs by its heads and feed-forward width (tensor parallelism: one graph
    // per GPU run by a thread of its own, the partial sums of wo and ffn_down added across GPUs by NCCL; arch::shard).
    enum class split_mode { none, layer, row } split = split_mode::none;
    std::vector<float> tensor_split = {}; // a share per GPU in device order (0 or missing: unused); empty: equal shares
    int main_gpu = 0;                // split none: the GPU; row: the one computing the output layer (rank 0)
    // What stands in for GPU i (tests: CPU backends, checking -ngl and the splits without a GPU), and how many GPUs
    // there are then; null: CUDA device i of the machine's gpu_count().
    std::function<std::unique_ptr<backend>(int gpu)> gpu_backend = {};
    int n_gpus = 1;
};

// Evaluation state: backend, KV cache and reusable graph memory. Not thread-safe.
class session {
  public:
    session(const model& m, const session_params& p);
    ~session();
    session(const session&) = delete; // the placement function refers to this object
    session& operator=(const session&) = delete;

    // Evaluates `tokens` at positions [n_past, n_past + n). Returns logits (n_vocab) for the last token, or for every
    // token (n * n_vocab, row per token) when all_logits. Throws tessera::error when the context would overflow.
    std::span<const float> decode(std::span<const token> tokens, bool all_logits = false) {
        return decode_from(tokens, all_logits ? 0 : int64_t(tokens.size()) - 1);
    }
    // Same, returning the logits of tokens[first_output..n) only ((n - first_output) * n_vocab): the output layer is
    // computed for those rows alone (perplexity scores the second half of each chunk).
    std::span<const float> decode_from(std::span<const token> tokens, int64_t first_output);
    // Same evaluation, but the logits stay on the backend: each output row i (token first_output + i) is scored there
    // against targets[i] (the token it should predict) in `mode` (ggml-like/score.h), and only those words come back:
    // (n - first_output) * score_row_words(mode, n_vocab) int32s, row by row. `base` holds one base-file record
    // (kld_record_size(n_vocab) u16) per output row in compare mode. seq_len > 0: the tokens are independent
    // sequences of seq_len tokens each, packed from an empty cache (llama-perplexity's several chunks in one batch):
    // token i is at position i % seq_len and attends to its own sequence only.
    std::span<const int32_t> score_from(std::span<const token> tokens, int64_t first_output,
                                        std::span<const int32_t> targets, score_mode mode,
                                        std::span<const uint16_t> base = {}, int64_t seq_len = 0);

    int64_t n_past() const { return ranks_[0].kv.n_used; }
    int64_t n_ctx() const { return ranks_[0].kv.n_ctx; }
    void clear() { truncate(0); }
    void truncate(int64_t n) { // forget positions >= n
        for (rank& r : ranks_) r.kv.n_used = std::min(r.kv.n_used, n);
    }
    const model& mdl() const { return m_; }
    backend& be() { return *main_; } // the backend returning the logits (the GPU's with -ngl and splits)
    // the GPU backend: the main one where the output layer is on a GPU; with -ngl 0 the one running the CPU layers'
    // offloaded matmuls. be() when no GPU takes part.
    backend& gpu() const { return cpu_ && main_ == cpu_ && backends_.size() > 1 ? *backends_[1] : *main_; }
    // Called after every node each backend computes (layer dumps: compare --layers, AWQ calibration), with the
    // backend that holds the node, to read it through; empty: none. Several GPUs by rows: member 0's nodes only (its
    // layer outputs are the whole model's; its other nodes hold its share).
    using node_callback = std::function<void(backend& holder, const tensor& node)>;
    void set_eval_callback(const node_callback& cb);
    // backends the last graph ran on in turn (-ngl: 2; tensor parallelism: those of one member)
    size_t n_splits() const { return ranks_[0].sched->n_splits(); }
    size_t n_members() const { return ranks_.size(); } // tensor parallelism: GPUs computing every layer together
    // matmuls of the CPU's layers the last graph ran on the GPU (op offload)
    size_t n_offloaded() const { return ranks_[0].sched->n_offloaded(); }
    // "cpu", "cuda", or with -ngl / --n-cpu-moe "cuda+cpu" and what is offloaded ("ngl 10/31", "cpu-moe 4"), with
    // several GPUs "cuda x2 layer" / "cuda x2 row"
    std::string backend_label() const;
    int n_threads() const; // CPU threads; 0 on other devices

  private:
    // What a batch scores instead of returning logits (score_from): targets and base records of its output rows.
    struct scoring {
        score_mode mode;
        const int32_t* targets;
        const uint16_t* base; // compare mode
    };
    // checks shared by decode_from and score_from
    void check_batch(std::span<const token> tokens, int64_t first_output) const;
    // evaluates one graph; writes the logits of batch rows [first_output, n) at logits_ + out_offset, or with `sc` their
    // score words at scores_ + out_offset; seq_len as score_from's
    void decode_batch(std::span<const token> tokens, int64_t first_output, size_t out_offset,
                      const scoring* sc = nullptr, int64_t seq_len = 0);

    const model& m_;
    session_params p_;
    std::vector<std::unique_ptr<backend>> backends_; // every backend: the CPU first when it takes layers, the GPUs
    backend* main_ = nullptr;     // be()
    backend* cpu_ = nullptr;      // with -ngl / --n-cpu-moe: the CPU backend taking the other layers; null otherwise
    int n_gpus_used_ = 1;
    struct batch_graph;
    // One member of the tensor-parallel group (one without tensor parallelism): its backends, the weights it reads
    // (part: its share; null: the model's), KV cache, scheduler and last graph.
    struct rank {
        std::vector<backend*> bes;
        std::unique_ptr<arch::shard> part;
        kv_cache kv;
        std::unique_ptr<scheduler> sched;
        scheduler::home_fn home; // where each weight and cache lives (sched.h)
        std::unique_ptr<batch_graph> last;
    };
    std::deque<rank> ranks_; // stable addresses: each rank's home function refers to it
    std::shared_ptr<backend_group> group_;
    class rank_threads; // tensor parallelism: a thread per member past the first, computing its graph
    std::unique_ptr<rank_threads> threads_;
    // logits of the last decode, n_logits_ floats, in memory the backend copies into directly (backend::alloc_host)
    std::unique_ptr<buffer> logits_;
    size_t n_logits_ = 0;
    std::unique_ptr<buffer> scores_; // score_from's words, likewise
    size_t n_scores_ = 0;
    // rank::last is the last batch's graph, planned and bound: a batch of the same shape (tokens, KV length, first
    // output: a decode step, token after token, while the padded KV length stays) runs it again with new inputs.
    void make_backends();
    void place_layers(rank& r);
};

} // namespace tessera
