// awq.h: activation-aware weight quantization (AWQ, Lin et al. 2023, as AutoAWQ does it) for `tessera quantize
// --calib`: run the model on calibration text, collect per-input-channel mean |x| and a sample of input rows for every
// linear layer, grid-search the exponent a of s = mean|x|^a per layer group to minimize ||W X - Q(W diag(s)) diag(1/s)
// X||^2 on the sample, and fold the scales into the preceding op. The file conversion itself is quant/quantize.h.
//
// Groups and where their scales go (llama), with the graph node whose output is the group's input:
//   q, k, v    input "attn_norm-L"  (n_embd)              1/s into attn_norm.weight, s into the q, k, v columns
//   o          input "kqv_out-L"    (n_head * head_dim)   1/s into v's rows, s into o's columns; with GQA a v row
//                                                         feeds n_head / n_head_kv heads, so s is shared by them
//   gate, up   input "ffn_norm-L"   (n_embd)              1/s into ffn_norm.weight, s into the gate, up columns
//   down       input "ffn_swiglu-L" (n_ff)                1/s into up's rows, s into down's columns
#pragma once

#include "llm/model.h"
#include "quant/quantize.h"

#include <array>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace tessera {

enum class awq_group { qkv, o, gate_up, down };
inline constexpr int awq_n_groups = 4;
const char* awq_group_name(awq_group g); // "qkv", "o", "gate_up", "down"

// What the model's linear layers saw on the calibration text: per layer and group, mean |x| per input channel and
// a sample of whole input rows (tokens taken at a fixed stride over the text).
struct awq_stats {
    struct entry {
        std::vector<double> sum_abs; // (n_in) sum of |x| over all tokens
        std::vector<float> sample;   // (n_sample, n_in) row-major
        int64_t n_in = 0, n_sample = 0;
    };
    std::vector<std::array<entry, awq_n_groups>> layers; // [il][group]
    int64_t n_tokens = 0;
    std::vector<float> mean_abs(int64_t il, awq_group g) const;
};

struct awq_params {
    int64_t n_ctx = 512;    // tokens per evaluated chunk
    int64_t n_sample = 256; // input rows kept per layer group for the error measurement
    int n_grid = 20;        // a = 0, 1/n_grid, ..., 1
    int n_threads = 0;      // 0: one per hardware thread
};

// Runs `m` on `tokens` in chunks of p.n_ctx (each chunk from an empty cache) and records the inputs of every linear
// layer through the backend's eval callback. progress(tokens done, total).
awq_stats awq_collect(const model& m, std::span<const token> tokens, const awq_params& p,
                      const std::function<void(int64_t, int64_t)>& progress = {});

// Scales of one layer, one vector per group: qkv (n_embd), o (n_head_kv * head_dim, shared by the heads of a KV
// group), gate_up (n_embd), down (n_ff). An empty vector means no scaling for that group.
struct awq_layer_scales {
    std::array<std::vector<float>, awq_n_groups> s;
};

// The tensor multipliers that fold `scales` into the model exactly (in f32): W diag(s) for the consumers, 1/s into
// the producer (norm weight or the rows of v / up). Shapes are checked; tessera::error on a mismatch.
std::map<std::string, tensor_scaling> awq_fold(const model& m, const std::vector<awq_layer_scales>& scales);

struct awq_layer_report {
    int64_t il = 0;
    awq_group group = awq_group::qkv;
    float alpha = 0;     // best exponent
    double err_rtn = 0;  // ||W X - Q(W) X||^2 on the sample (a = 0)
    double err_best = 0; // the same with the best a
};

struct awq_result {
    std::vector<awq_layer_scales> scales;
    std::vector<awq_layer_report> reports;
};

// The grid search per layer and group. `type_of(name)` is the type each weight will be quantized to (the plan's,
// fallbacks included). progress(steps done, total).
awq_result awq_search(const model& m, const awq_stats& st, const std::function<type(const std::string&)>& type_of,
                      const awq_params& p, const std::function<void(int64_t, int64_t)>& progress = {});

} // namespace tessera
