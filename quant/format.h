// format.h: the contract every block format satisfies (concept block_format), the one list of formats
// (TS_BLOCK_FORMATS) and visit_format(), which turns a runtime type id into a template parameter once, at the edge.
// Plain element types (f32, f16, bf16) are not block formats; backends handle them beside the list.
// Row and whole-tensor helpers at the bottom: a tensor of a format with a per-tensor scale (i2_s) carries the scale in
// a tail after its rows, and its block functions work at unit scale.
#pragma once

#include "ggml-like/fp16.h"
#include "ggml-like/types.h"

#include "quant/awq4.h"
#include "quant/i2_s.h"
#include "quant/i8_s.h"
#include "quant/iq3_s.h"
#include "quant/iq3_xxs.h"
#include "quant/iq4_nl.h"
#include "quant/iq4_xs.h"
#include "quant/mxfp4.h"
#include "quant/nvfp4.h"
#include "quant/q2_k.h"
#include "quant/q3_k.h"
#include "quant/q4_0.h"
#include "quant/q4_1.h"
#include "quant/q4_k.h"
#include "quant/q5_0.h"
#include "quant/q5_1.h"
#include "quant/q5_k.h"
#include "quant/q6_k.h"
#include "quant/q8_0.h"
#include "quant/q8_1.h"
#include "quant/q8_k.h"
#include "quant/tq2_0.h"

#include <concepts>
#include <cstddef>

namespace tessera {

template <class F>
concept block_format = requires(const float* x, typename F::block& b, const typename F::block& cb,
                                const typename F::dot_block& a, float* y) {
    { F::id } -> std::convertible_to<type>;
    { F::name } -> std::convertible_to<const char*>;
    { F::block_size } -> std::convertible_to<int>;
    { F::type_size } -> std::convertible_to<int>;
    { F::dot_type } -> std::convertible_to<type>;
    { F::quantize(x, b) };
    { F::dequantize(cb, y) };
    { F::vec_dot(cb, a) } -> std::convertible_to<float>;
} && sizeof(typename F::block) == F::type_size;

// The one list: X(format) for every block format, in type-id order (ids >= 1024 are tessera's own).
#define TS_BLOCK_FORMATS(X)                                                                                            \
    X(q4_0) X(q4_1) X(q5_0) X(q5_1) X(q8_0) X(q8_1) X(q2_k) X(q3_k) X(q4_k) X(q5_k) X(q6_k) X(q8_k) X(iq3_xxs)       \
        X(iq4_nl) X(iq3_s) X(iq4_xs) X(tq2_0) X(i2_s) X(mxfp4) X(nvfp4) X(awq4) X(awq4_g64) X(i8_s)

#define TS_CHECK_FORMAT(F) static_assert(block_format<F>, #F " does not satisfy block_format");
TS_BLOCK_FORMATS(TS_CHECK_FORMAT)
#undef TS_CHECK_FORMAT

// Calls fn.template operator()<F>() for the block format whose id is t; returns false if t is not a block format.
template <class Fn> bool visit_format(type t, Fn&& fn) {
    switch (t) {
#define TS_VISIT_CASE(F)                                                                                               \
    case F::id: fn.template operator()<F>(); return true;
        TS_BLOCK_FORMATS(TS_VISIT_CASE)
#undef TS_VISIT_CASE
    default: return false;
    }
}

// format_of<t>::type is the block format whose id is t (compile time; e.g. the format of F::dot_type).
template <type T> struct format_of;
#define TS_FORMAT_OF(F)                                                                                                \
    template <> struct format_of<F::id> {                                                                              \
        using type = F;                                                                                                \
    };
TS_BLOCK_FORMATS(TS_FORMAT_OF)
#undef TS_FORMAT_OF

// Formats whose values carry one per-tensor scale (i2_s) say `static constexpr bool tensor_scaled = true` and provide
// absmean_scale(x, n), read_scale(data, n) and write_tail(data, n, scale); their block functions work at unit scale.
template <class F> constexpr bool tensor_scaled = requires { requires F::tensor_scaled; };

// Quantizes / dequantizes a whole row of n elements (n a multiple of F::block_size) with the reference functions.
// A format whose activations take one scale per row (i8_s) quantizes through its quantize_row.
template <class F> void quantize_row_ref(const float* x, void* y, int64_t n) {
    auto* b = static_cast<typename F::block*>(y);
    if constexpr (requires { F::quantize_row(x, b, n); })
        F::quantize_row(x, b, n);
    else
        for (int64_t i = 0; i < n / F::block_size; i++) F::quantize(x + i * F::block_size, b[i]);
}
template <class F> void dequantize_row_ref(const void* x, float* y, int64_t n) {
    auto* b = static_cast<const typename F::block*>(x);
    for (int64_t i = 0; i < n / F::block_size; i++) F::dequantize(b[i], y + i * F::block_size);
}
// Row dot product with the reference block dot: w (n elements of F) . a (n elements of F::dot_block's format).
template <class F> float vec_dot_row_ref(const void* w, const void* a, int64_t n) {
    auto* wb = static_cast<const typename F::block*>(w);
    auto* ab = static_cast<const typename F::dot_block*>(a);
    float sum = 0.0f;
    for (int64_t i = 0; i < n / F::block_size; i++) sum += F::vec_dot(wb[i], ab[i]);
    return sum;
}

// Row-level function table for a runtime type (block formats and f32/f16/bf16), for code off the hot path.
// For i2_s, rows are at unit scale (values code - 1): use the tensor functions below for whole tensors.
struct row_ops {
    void (*to_float)(const void* x, float* y, int64_t n);
    void (*from_float)(const float* x, void* y, int64_t n); // reference quantizer
    type dot_type;                                          // what activations are converted to for vec_dot
};
// nullptr when t has no format.
const row_ops* find_row_ops(type t);

// Whole tensors of n_rows rows of ne0 elements, with the reference functions: y holds tensor_bytes(t, ne0 * n_rows)
// bytes, the rows then the type's tail (i2_s: the absmean scale chosen over the whole tensor). Any type with row_ops
// (plain floats too); false when t has none.
bool quantize_tensor_ref(type t, const float* x, void* y, int64_t ne0, int64_t n_rows);
bool dequantize_tensor_ref(type t, const void* x, float* y, int64_t ne0, int64_t n_rows);
// The per-tensor scale of a tensor of n_elements whose rows start at data: i2_s's tail, 1 for every other type.
float read_tensor_scale(type t, const void* data, int64_t n_elements);

} // namespace tessera
