// format.h: the contract every block format satisfies (concept block_format), the one list of formats
// (TS_BLOCK_FORMATS) and visit_format(), which turns a runtime type id into a template parameter once, at the edge.
// Plain element types (f32, f16, bf16) are not block formats; backends handle them beside the list.
#pragma once

#include "ggml-like/fp16.h"
#include "ggml-like/types.h"

#include "quant/q4_0.h"
#include "quant/q4_1.h"
#include "quant/q8_0.h"
#include "quant/q8_1.h"

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

// The one list: X(format) for every block format, in GGUF-id order.
#define TS_BLOCK_FORMATS(X) X(q4_0) X(q4_1) X(q8_0) X(q8_1)

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

// Quantizes / dequantizes a whole row of n elements (n a multiple of F::block_size) with the reference functions.
template <class F> void quantize_row_ref(const float* x, void* y, int64_t n) {
    auto* b = static_cast<typename F::block*>(y);
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
struct row_ops {
    void (*to_float)(const void* x, float* y, int64_t n);
    void (*from_float)(const float* x, void* y, int64_t n); // reference quantizer
    type dot_type;                                          // what activations are converted to for vec_dot
};
// nullptr when t has no format.
const row_ops* find_row_ops(type t);

} // namespace tessera
