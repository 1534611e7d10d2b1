// tensor.h: struct tensor (shape, strides, type, and the op that produces it) and the op list.
// Builders for ops live in ops.h; arenas and graphs in graph.h; nothing here computes.
#pragma once

#include "types.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tessera {

// Every op a graph node can hold. Each backend's compute() has one `case` per value and no `default:`.
enum class op : uint8_t {
    none,      // leaf: weights, inputs, caches
    view,      // view/reshape/permute/transpose of src[0]: no computation, data aliases view_src
    get_rows,  // dst[:, i] = dequant(src0[:, src1[i]])                         src1: i32 ids
    mul_mat,   // dst (n_out, n_tok) = src0 (n_in, n_out)^T @ src1 (n_in, n_tok)
    add,       // dst = src0 + src1 (src1 broadcast over rows/dims)
    mul,       // dst = src0 * src1 (broadcast)
    scale,     // dst = src0 * op_params.f[0]
    rms_norm,  // dst = src0 / sqrt(mean(src0^2) + eps), per row
    rope,      // rotary embedding, src1 = positions (i32), src2 = optional frequency factors
    soft_max,  // dst = softmax(src0 * scale + mask), src1 = optional mask (n_kv, n_tok)
    silu,      // dst = src0 * sigmoid(src0)
    swiglu,    // dst = silu(src0) * src1
    geglu,     // dst = gelu(src0) * src1, gelu's tanh form looked up by src0 rounded to f16 (as ggml's CPU computes it)
    relu2_glu, // dst = relu(src0)^2 * src1 (BitNet b1.58's squared-ReLU gate)
    tanh,      // dst = tanh(src0) (soft-capping: cap * tanh(x / cap))
    cpy,       // writes src0 converted into the tensor src1 views (e.g. the KV cache); dst aliases src1
    set_rows,  // row src2[i] of src1 = src0 row i converted to src1's type (the KV-cache write); dst aliases src1
    attention, // dst (hd, n_head, n_tok) = softmax(scale * Q K^T + mask) V over the KV cache; see ops.h
    score,     // dst i32 (words, n_rows): perplexity / KL-divergence words of each row of logits (score.h)
    top_k,     // dst i32 (k, rows): the indices of each row's k largest values (ggml's order, see ops.h)
    mul_mat_id, // dst (n, n_used, n_tok) = expert src2[i, t] of src0 (k, n, n_expert) applied to src1 (k, *, n_tok)
    add_id,     // dst[:, i, t] = src0[:, i, t] + src1[:, src2[i, t]] (a per-expert bias added to each chosen slot)
    sum_rows,   // dst (1, rows) = the sum of each row of src0, in double
    div,        // dst = src0 / src1 (broadcast)
    clamp,      // dst = max(min(src0, op_params.f[1]), op_params.f[0])
    swiglu_oai, // dst = x / (1 + e^(-alpha x)) * (y + 1), x = min(src0, limit), y = clamp(src1, -limit, limit)
    all_reduce, // dst = src0 summed over the backends of a group (tensor parallelism; backend.h, backend_group)
    rms_norm_part, // dst = src0 / sqrt(src1 / op_params.i[1] + op_params.f[0]) per row: src1 (1, rows) holds each
                   // row's sum of squares over a width op_params.i[1] of which src0 is a part (tensor parallelism)
    all_gather, // dst (ne0 x op_params.i[0], rows) = the group's op_params.i[0] members' src0 (ne0, rows) side by side
                // in rank order, row by row (tensor parallelism: each member's share of the output's vocabulary)
};
const char* op_name(op o);

constexpr int TS_MAX_DIMS = 4;
constexpr int TS_MAX_SRC = 5; // attention: q, k, v, mask, sinks
constexpr int TS_MAX_OP_PARAMS = 8;

enum tensor_flags : uint32_t {
    flag_input = 1,     // set by the caller before compute (token ids, positions, masks)
    flag_output = 2,    // read after compute; the allocator never reuses its memory
    flag_param = 4,     // weights: data comes from the model file / backend weight buffer
    flag_embedding = 8, // the token embedding table, read by get_rows in the file's layout; alone, nothing else reads
                        // it, so backends prepare no matmul layout of it (no repacked or split copy)
    flag_tied = 16,     // with flag_embedding: the table is also the output matrix (tied embeddings), which backends
                        // prepare as any matmul weight besides (llama.cpp loads such an output as a second copy, which
                        // its CPU backend repacks like every other matrix)
};

struct tensor {
    type t = type::f32;
    int64_t ne[TS_MAX_DIMS] = {1, 1, 1, 1}; // elements per dimension, ne[0] innermost
    size_t nb[TS_MAX_DIMS] = {0, 0, 0, 0};  // byte stride per dimension (nb[0] = type size for scalar types)

    op o = op::none;
    union {
        int32_t i[TS_MAX_OP_PARAMS];
        float f[TS_MAX_OP_PARAMS];
    } op_params = {};
    tensor* src[TS_MAX_SRC] = {};

    tensor* view_src = nullptr; // for views and cpy: the tensor whose memory this one aliases
    size_t view_offs = 0;       // byte offset into view_src

    void* data = nullptr;
    uint32_t flags = 0;
    char name[64] = {};

    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
    size_t n_bytes() const; // bytes spanned, respecting strides
    size_t row_bytes() const { return row_size(t, ne[0]); }
    bool is_contiguous() const;
    bool is_view() const { return view_src != nullptr; }
    // a token table that only get_rows reads (not the tied output): backends prepare no matmul layout of it
    bool lookup_only() const { return (flags & flag_embedding) && !(flags & flag_tied); }
    void set_name(const std::string& s);

    template <class T> T* as() { return static_cast<T*>(data); }
    template <class T> const T* as() const { return static_cast<const T*>(data); }
};

bool same_shape(const tensor& a, const tensor& b);
std::string shape_str(const tensor& t); // "576 x 49152"

} // namespace tessera
