// ops.h: builders that add one node to a context. Shapes are given as ggml `ne` (innermost first).
// Builders check shapes (TS_ASSERT: callers build graphs from validated models) and compute nothing.
#pragma once

#include "graph.h"
#include "score.h"

namespace tessera {

// ---- views (no computation; the result aliases a's memory) ----
tensor* view_1d(context& ctx, tensor* a, int64_t ne0, size_t offset);
tensor* view_2d(context& ctx, tensor* a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset);
tensor* view_3d(context& ctx, tensor* a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2,
                size_t offset);
tensor* reshape_2d(context& ctx, tensor* a, int64_t ne0, int64_t ne1); // a must be contiguous
tensor* reshape_3d(context& ctx, tensor* a, int64_t ne0, int64_t ne1, int64_t ne2);
// result dimension axis_i takes a's dimension i (ggml_permute convention)
tensor* permute(context& ctx, tensor* a, int axis0, int axis1, int axis2, int axis3);
tensor* transpose(context& ctx, tensor* a);

// ---- compute ----
// a (n_embd, n_rows) any computable type, ids (n) i32 -> (n_embd, n) f32. Batched (ggml's 3-D form): a (ne0, n_rows,
// n_b) f32, ids (n, n_b) -> (ne0, n, n_b), dst[:, i, b] = a[:, ids[i, b], b] (the chosen experts' router weights).
tensor* get_rows(context& ctx, tensor* a, tensor* ids);
// a (k, n, ...) weights of any computable type, b (k, m, ...) f32 -> (n, m, ...) f32; a broadcast over dims 2,3
tensor* mul_mat(context& ctx, tensor* a, tensor* b);
tensor* add(context& ctx, tensor* a, tensor* b); // b broadcast to a's shape (each b.ne[d] divides a.ne[d])
tensor* mul(context& ctx, tensor* a, tensor* b);
tensor* div(context& ctx, tensor* a, tensor* b); // a / b, b broadcast as for add
tensor* scale(context& ctx, tensor* a, float s);
tensor* rms_norm(context& ctx, tensor* a, float eps);

enum class rope_mode : int32_t { normal = 0, neox = 2 };
// Rotary embedding settings (ggml_rope_ext's). ext_factor != 0 is YaRN: each pair's angle blends the interpolated one
// (times freq_scale) and the extrapolated one by a ramp between the correction dimensions that beta_fast / beta_slow
// and n_ctx_orig give, and cos / sin are multiplied by attn_factor * (1 + 0.1 ln(1 / freq_scale)); with
// ext_factor == 0 they are multiplied by attn_factor alone.
struct rope_params {
    int n_rot = 0;
    rope_mode mode = rope_mode::normal;
    float freq_base = 10000.0f;
    float freq_scale = 1.0f;
    float ext_factor = 0.0f;
    float attn_factor = 1.0f;
    float beta_fast = 32.0f;
    float beta_slow = 1.0f;
    int n_ctx_orig = 0;
};
// YaRN's correction dimensions [lo, hi] (ggml_rope_yarn_corr_dims), kept in the rope node's parameters.
void rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]);
// a (head_dim, n_head, n_tok) f32, pos (n_tok) i32, freq_factors (n_rot/2) f32 or null.
// theta_i = pos * freq_scale * freq_base^(-2i/n_rot) / freq_factors[i]; normal rotates pairs (2i, 2i+1),
// neox rotates (i, i + n_rot/2). Dimensions >= n_rot pass through. op_params: i[0] n_rot, i[1] mode, f[2] base,
// f[3] scale, f[4] ext_factor, f[5] attn_factor, f[6..7] the correction dimensions.
tensor* rope(context& ctx, tensor* a, tensor* pos, tensor* freq_factors, const rope_params& rp);
tensor* rope(context& ctx, tensor* a, tensor* pos, tensor* freq_factors, int n_rot, rope_mode mode, float freq_base,
             float freq_scale);
// a (n_kv, n_rows, ...) f32; mask (n_kv, >= n_rows) f32 or null, broadcast over dims 2,3
tensor* soft_max(context& ctx, tensor* a, tensor* mask, float scale);
tensor* silu(context& ctx, tensor* a);
tensor* swiglu(context& ctx, tensor* gate, tensor* up); // silu(gate) * up
tensor* geglu(context& ctx, tensor* gate, tensor* up);  // gelu(gate) * up, gelu's tanh approximation
tensor* relu2_glu(context& ctx, tensor* gate, tensor* up); // relu(gate)^2 * up
// gpt-oss's clamped SwiGLU (ggml_swiglu_oai): x = min(gate, limit), y = clamp(up, -limit, limit),
// x / (1 + e^(-alpha x)) * (y + 1), with libm's expf. op_params.f[0] alpha, f[1] limit.
tensor* swiglu_oai(context& ctx, tensor* gate, tensor* up, float alpha, float limit);
tensor* clamp(context& ctx, tensor* a, float lo, float hi); // max(min(a, hi), lo), as ggml
// a (n, rows...) f32 -> (1, rows...): each row summed in double, then rounded (ggml_sum_rows)
tensor* sum_rows(context& ctx, tensor* a);
// Per-row perplexity / KL-divergence words (score.h) of logits (n_vocab, n_rows) f32 for targets (n_rows) i32; base
// (kld_record_size(n_vocab) / 2, n_rows) i32 holds the base file's records in compare mode (nullptr otherwise).
// dst: i32 (score_row_words(mode, n_vocab), n_rows), op_params.i[0] = mode.
tensor* score(context& ctx, tensor* logits, tensor* targets, tensor* base, score_mode mode);
// Expert routing (mixture-of-experts feed-forward), as ggml's ops:
// top_k: a (n, rows) f32 -> i32 (k, rows), the indices of each row's k largest values in the order ggml's CPU gives
// them. The experts' outputs are summed in this order, so it matters for the bits: ggml_top_k (sorted = false):
// std::partial_sort by value, descending, then the first two swapped; ggml_argsort_top_k (sorted = true, what
// llama.cpp's build_moe_ffn uses): std::sort of the whole row, descending, the first k. k <= n; op_params.i[0] =
// sorted.
tensor* top_k(context& ctx, tensor* a, int64_t k, bool sorted = false);
// mul_mat_id: experts (k, n, n_expert) weights of any computable type, b (k, n_b, n_tok) f32 with n_b = n_used (each
// chosen expert its own activations) or 1 (shared), ids (n_used, n_tok) i32 in [0, n_expert)
//   -> (n, n_used, n_tok) f32: dst[:, i, t] = experts[:, :, ids[i, t]]^T b[:, i % n_b, t].
tensor* mul_mat_id(context& ctx, tensor* experts, tensor* b, tensor* ids);
// add_id: a (n, n_used, n_tok) f32 + b (n, n_expert) f32 at each slot's expert, ids (n_used, n_tok) i32 in
// [0, n_expert): dst[:, i, t] = a[:, i, t] + b[:, ids[i, t]] (ggml_add_id: gpt-oss's per-expert biases).
tensor* add_id(context& ctx, tensor* a, tensor* b, tensor* ids);
tensor* tanh(context& ctx, tensor* a);
// a (contiguous f32) summed element by element over the members of the backend group its backend joined
// (backend::join, tensor parallelism): each member computes a share of a matmul's inner dimension, and every member
// ends with the whole sum, the same bits on each.
tensor* all_reduce(context& ctx, tensor* a);
// a (ne0, rows: contiguous f32) of every member of the backend group its backend joined (n_members of them), side by
// side in rank order: (ne0 * n_members, rows), the same on every member. Each member computes a share of a matmul's
// rows (the output layer's vocabulary).
tensor* all_gather(context& ctx, tensor* a, int n_members);
// rms_norm of a part of each row: a (w, rows, ...) f32, sum_sq (1, rows, ...) f32 each whole row's sum of squares
// (width >= w values; a member's partial sums after all_reduce) -> a * 1 / sqrt(sum_sq / width + eps), the mean taken
// in f32. A sub-norm over a width that tensor parallelism divides (BitNet's attn_sub_norm / ffn_sub_norm).
tensor* rms_norm_part(context& ctx, tensor* a, tensor* sum_sq, int64_t width, float eps);
// Writes a (converted to dst's type) into the memory dst views; returns a tensor aliasing dst.
tensor* cpy(context& ctx, tensor* a, tensor* dst);
// ggml_set_rows: row i of a (ne0, n) f32 goes to row idx[i] of dst (ne0, n_rows), converted to dst's type as cpy
// converts (f16: round to nearest even); idx (n) i32 or i64, usually a graph input the caller fills (the KV-cache
// slots of a batch). Rows idx[i] outside [0, n_rows) are skipped. Returns a tensor aliasing dst (all of it). Unlike a
// cpy into a view at an offset, the graph does not change with the row numbers, so a backend can replay it.
tensor* set_rows(context& ctx, tensor* dst, tensor* a, tensor* idx);
// Attention over a KV cache (the core of llama.cpp's flash_attn_ext):
//   q (hd, n_head, n_tok) f32; k, v (hd, n_head_kv, n_kv) f16/f32 (views of the cache; strides free);
//   mask (n_kv, n_tok) f32 additive (0 / -inf) or null; sinks (n_head) f32 or null (src[4]).
//   dst (hd, n_head, n_tok) f32: O = softmax(scale * Q K^T + mask) V, query head h uses KV head h / (n_head/n_head_kv).
// Sinks (gpt-oss): one learned logit per head joins each softmax's denominator with no value of its own,
// O = sum_j e^(s_j - M) v_j / (sum_j e^(s_j - M) + e^(sink_h - M)), M the max over the scores and the sink.
tensor* attention(context& ctx, tensor* q, tensor* k, tensor* v, tensor* mask, float scale, tensor* sinks = nullptr);

} // namespace tessera
