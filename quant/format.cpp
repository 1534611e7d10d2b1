// format.cpp: row-level function tables built from TS_BLOCK_FORMATS plus the plain float types.
#include "quant/format.h"

namespace tessera {

namespace {

void f32_to_float(const void* x, float* y, int64_t n) { std::memcpy(y, x, size_t(n) * 4); }
void f32_from_float(const float* x, void* y, int64_t n) { std::memcpy(y, x, size_t(n) * 4); }
void f16_to_float(const void* x, float* y, int64_t n) {
    auto* h = static_cast<const uint16_t*>(x);
    for (int64_t i = 0; i < n; i++) y[i] = fp16_to_fp32(h[i]);
}
void f16_from_float(const float* x, void* y, int64_t n) {
    auto* h = static_cast<uint16_t*>(y);
    for (int64_t i = 0; i < n; i++) h[i] = fp32_to_fp16(x[i]);
}
void bf16_to_float(const void* x, float* y, int64_t n) {
    auto* h = static_cast<const uint16_t*>(x);
    for (int64_t i = 0; i < n; i++) y[i] = bf16_to_fp32(h[i]);
}
void bf16_from_float(const float* x, void* y, int64_t n) {
    auto* h = static_cast<uint16_t*>(y);
    for (int64_t i = 0; i < n; i++) h[i] = fp32_to_bf16(x[i]);
}

} // namespace

const row_ops* find_row_ops(type t) {
    static const row_ops f32_ops{f32_to_float, f32_from_float, type::f32};
    static const row_ops f16_ops{f16_to_float, f16_from_float, type::f16};
    static const row_ops bf16_ops{bf16_to_float, bf16_from_float, type::bf16};
    switch (t) {
    case type::f32: return &f32_ops;
    case type::f16: return &f16_ops;
    case type::bf16: return &bf16_ops;
    default: break;
    }
    const row_ops* r = nullptr;
    visit_format(t, [&]<class F>() {
        static const row_ops ops{dequantize_row_ref<F>, quantize_row_ref<F>, F::dot_type};
        r = &ops;
    });
    return r;
}

} // namespace tessera
