// format.cpp: row-level function tables built from TS_BLOCK_FORMATS plus the plain float types.
#include "quant/format.h"

#include <vector>

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

bool quantize_tensor_ref(type t, const float* x, void* y, int64_t ne0, int64_t n_rows) {
    const row_ops* ops = find_row_ops(t);
    if (!ops) return false;
    const size_t row_bytes = row_size(t, ne0);
    auto* out = static_cast<uint8_t*>(y);
    float scale = 1.0f;
    visit_format(t, [&]<class F>() {
        if constexpr (tensor_scaled<F>) scale = F::absmean_scale(x, ne0 * n_rows);
    });
    std::vector<float> row(scale != 1.0f ? size_t(ne0) : 0);
    for (int64_t r = 0; r < n_rows; r++) {
        const float* xr = x + r * ne0;
        if (!row.empty()) {
            for (int64_t i = 0; i < ne0; i++) row[size_t(i)] = xr[i] / scale;
            xr = row.data();
        }
        ops->from_float(xr, out + size_t(r) * row_bytes, ne0);
    }
    visit_format(t, [&]<class F>() {
        if constexpr (tensor_scaled<F>) F::write_tail(y, ne0 * n_rows, scale);
    });
    return true;
}

bool dequantize_tensor_ref(type t, const void* x, float* y, int64_t ne0, int64_t n_rows) {
    const row_ops* ops = find_row_ops(t);
    if (!ops) return false;
    const size_t row_bytes = row_size(t, ne0);
    const float scale = read_tensor_scale(t, x, ne0 * n_rows);
    for (int64_t r = 0; r < n_rows; r++) {
        ops->to_float(static_cast<const uint8_t*>(x) + size_t(r) * row_bytes, y + r * ne0, ne0);
        if (scale != 1.0f)
            for (int64_t i = 0; i < ne0; i++) y[r * ne0 + i] *= scale;
    }
    return true;
}

float read_tensor_scale(type t, const void* data, int64_t n_elements) {
    float scale = 1.0f;
    visit_format(t, [&]<class F>() {
        if constexpr (tensor_scaled<F>) scale = F::read_scale(data, n_elements);
    });
    return scale;
}

} // namespace tessera
