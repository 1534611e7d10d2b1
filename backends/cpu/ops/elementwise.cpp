// elementwise.cpp: add, mul, div (with broadcast of src1), scale, clamp, silu, swiglu, geglu, relu2_glu, swiglu_oai,
// tanh, cpy (with type conversion), set_rows.
#include "ops.h"

#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "ggml-like/gelu.h"
#include "quant/format.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::cpu {

namespace {

// Calls fn(dst_row, i1, i2, i3) for this thread's rows of dst (f32 rows of ne0).
template <class Fn> void for_f32_rows(const compute_params& p, tensor& dst, Fn&& fn) {
    for_rows(p, dst, [&](int64_t i1, int64_t i2, int64_t i3) { fn(at<float>(dst, 0, i1, i2, i3), i1, i2, i3); });
}

// f32 -> dst's type for cpy and set_rows: the format's row function, or for f16 (the KV cache) the CPU's vector one
// (F16C, the same rounding)
from_float_fn row_from_float(type t, bool reference) {
    if (t == type::f16)
        if (const cpu_type_ops* ops = find_cpu_ops(t, reference)) return ops->act_from_float;
    const row_ops* to = find_row_ops(t);
    TS_ASSERT(to != nullptr);
    return to->from_float;
}

template <class Op> void binary(const compute_params& p, tensor& dst, Op op) {
    const tensor& a = *dst.src[0];
    const tensor& b = *dst.src[1];
    TS_ASSERT(a.t == type::f32 && b.t == type::f32);
    for_f32_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        const float* z = at<float>(b, 0, i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
        const int64_t n = dst.ne[0], nb0 = b.ne[0];
        const size_t xs = a.nb[0] / 4, zs = b.nb[0] / 4;
        if (xs == 1 && zs == 1 && nb0 == n) // the common case, in a form the compiler vectorizes
            for (int64_t i = 0; i < n; i++) y[i] = op(x[i], z[i]);
        else
            for (int64_t i = 0; i < n; i++) y[i] = op(x[i * xs], z[(i % nb0) * zs]);
    });
}

} // namespace

void add(const compute_params& p, tensor& dst) {
    binary(p, dst, [](float x, float y) { return x + y; });
}

void mul(const compute_params& p, tensor& dst) {
    binary(p, dst, [](float x, float y) { return x * y; });
}

void div(const compute_params& p, tensor& dst) {
    binary(p, dst, [](float x, float y) { return x / y; });
}

void clamp(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const float lo = dst.op_params.f[0], hi = dst.op_params.f[1];
    for_f32_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        const size_t xs = a.nb[0] / 4;
        for (int64_t i = 0; i < dst.ne[0]; i++) y[i] = std::max(std::min(x[i * xs], hi), lo);
    });
}

void scale(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const float s = dst.op_params.f[0];
    for_f32_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        const size_t xs = a.nb[0] / 4;
        for (int64_t i = 0; i < dst.ne[0]; i++) y[i] = x[i * xs] * s;
    });
}

// silu and swiglu use ggml's expf (float_kernels) so that results agree with llama.cpp bit for bit
void silu(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    TS_ASSERT(a.nb[0] == 4);
    const float_kernels& fk = find_float_kernels(p.reference);
    for_f32_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        fk.silu(at<float>(a, 0, i1, i2, i3), y, dst.ne[0]);
    });
}

void swiglu(const compute_params& p, tensor& dst) {
    const tensor& g = *dst.src[0];
    const tensor& u = *dst.src[1];
    TS_ASSERT(g.nb[0] == 4 && u.nb[0] == 4);
    const float_kernels& fk = find_float_kernels(p.reference);
    for_f32_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        fk.swiglu(at<float>(g, 0, i1, i2, i3), at<float>(u, 0, i1, i2, i3), y, dst.ne[0]);
    });
}

// gelu(g) * u with ggml's f16 table (ggml-like/gelu.h)
void geglu(const compute_params& p, tensor& dst) {
    const tensor& g = *dst.src[0];
    const tensor& u = *dst.src[1];
    TS_ASSERT(g.nb[0] == 4 && u.nb[0] == 4);
    const uint16_t* table = gelu_f16_table();
    for_f32_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(g, 0, i1, i2, i3);
        const float* z = at<float>(u, 0, i1, i2, i3);
        for (int64_t i = 0; i < dst.ne[0]; i++) {
            // ggml: 0 for x <= -10 (not 0 * u, which may be -0), x * u for x >= 10, else the table's value times u
            y[i] = x[i] <= -10.0f ? 0.0f : x[i] >= 10.0f ? x[i] * z[i] : fp16_to_fp32(table[fp32_to_fp16(x[i])]) * z[i];
        }
    });
}

// relu(g)^2 * u, in ggml's order: relu, square, then the product with u
void relu2_glu(const compute_params& p, tensor& dst) {
    const tensor& g = *dst.src[0];
    const tensor& u = *dst.src[1];
    TS_ASSERT(g.nb[0] == 4 && u.nb[0] == 4);
    for_f32_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(g, 0, i1, i2, i3);
        const float* z = at<float>(u, 0, i1, i2, i3);
        for (int64_t i = 0; i < dst.ne[0]; i++) {
            const float r = x[i] > 0.0f ? x[i] : 0.0f;
            y[i] = (r * r) * z[i];
        }
    });
}

// gpt-oss's clamped SwiGLU in ggml's order: the gate capped above at limit, up clamped to [-limit, limit],
// x / (1 + expf(alpha * -x)) * (y + 1) with libm's expf
void swiglu_oai(const compute_params& p, tensor& dst) {
    const tensor& g = *dst.src[0];
    const tensor& u = *dst.src[1];
    TS_ASSERT(g.nb[0] == 4 && u.nb[0] == 4);
    const float alpha = dst.op_params.f[0], limit = dst.op_params.f[1];
    for_f32_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* gv = at<float>(g, 0, i1, i2, i3);
        const float* uv = at<float>(u, 0, i1, i2, i3);
        for (int64_t i = 0; i < dst.ne[0]; i++) {
            const float x = std::min(gv[i], limit);
            const float v = std::clamp(uv[i], -limit, limit);
            const float e = std::exp(alpha * (-x));
            const float glu = x / (1.0f + e);
            y[i] = glu * (v + 1.0f);
        }
    });
}

void tanh(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    for_f32_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        const size_t xs = a.nb[0] / 4;
        for (int64_t i = 0; i < dst.ne[0]; i++) y[i] = std::tanh(x[i * xs]);
    });
}

// cpy: src (any shape with the same element count, f32 or f16) -> dst (f32/f16/bf16/quantized, rows contiguous).
// Elements are taken in row-major order of src and written in row-major order of dst.
void cpy(const compute_params& p, tensor& dst) {
    const tensor& src = *dst.src[0];
    TS_ASSERT(src.t == type::f32);
    const from_float_fn from_float = row_from_float(dst.t, p.reference);
    const int64_t ne0 = dst.ne[0];
    if (same_shape(src, dst) && src.nb[0] == 4) {
        for_rows(p, dst, [&](int64_t i1, int64_t i2, int64_t i3) { // row by row
            from_float(at<float>(src, 0, i1, i2, i3), at<uint8_t>(dst, 0, i1, i2, i3), ne0);
        });
        return;
    }
    // general: one thread, element by element through a row buffer
    if (p.ith != 0) return;
    TS_ASSERT(src.is_contiguous());
    std::vector<float> row(static_cast<size_t>(ne0));
    const float* x = static_cast<const float*>(src.data);
    for (int64_t r = 0; r < dst.n_rows(); r++) {
        const int64_t i3 = r / (dst.ne[2] * dst.ne[1]);
        const int64_t i2 = (r / dst.ne[1]) % dst.ne[2];
        const int64_t i1 = r % dst.ne[1];
        for (int64_t i = 0; i < ne0; i++) row[size_t(i)] = x[r * ne0 + i];
        from_float(row.data(), at<uint8_t>(dst, 0, i1, i2, i3), ne0);
    }
}

// set_rows: row i of src (f32) -> row idx[i] of dst, converted by the same row function as cpy (so an f16 cache gets
// the same bits either way). Threads take rows of src; rows whose index is outside dst are skipped.
void set_rows(const compute_params& p, tensor& dst) {
    const tensor& src = *dst.src[0];
    const tensor& idx = *dst.src[2];
    TS_ASSERT(src.t == type::f32 && src.nb[0] == 4 && (idx.t == type::i32 || idx.t == type::i64));
    const from_float_fn from_float = row_from_float(dst.t, p.reference);
    int64_t r0, r1;
    split(src.ne[1], p.ith, p.nth, r0, r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i = idx.t == type::i32 ? int64_t(*at<int32_t>(idx, r)) : *at<int64_t>(idx, r);
        if (i < 0 || i >= dst.ne[1]) continue;
        from_float(at<float>(src, 0, r), at<uint8_t>(dst, 0, i), dst.ne[0]);
    }
}

} // namespace tessera::cpu
