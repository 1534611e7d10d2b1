// elementwise.cpp: add, mul (with broadcast of src1), scale, silu, swiglu, cpy (with type conversion).
#include "ops.h"

#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "quant/format.h"

#include <cmath>
#include <vector>

namespace tessera::cpu {

namespace {

// Calls fn(dst_row, a_row, b_row, i1, i2, i3) for this thread's rows of dst (f32 rows of ne0).
template <class Fn> void for_rows(const compute_params& p, tensor& dst, Fn&& fn) {
    const int64_t n_rows = dst.n_rows();
    int64_t r0, r1;
    split(n_rows, p.ith, p.nth, r0, r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i3 = r / (dst.ne[2] * dst.ne[1]);
        const int64_t i2 = (r / dst.ne[1]) % dst.ne[2];
        const int64_t i1 = r % dst.ne[1];
        fn(at<float>(dst, 0, i1, i2, i3), i1, i2, i3);
    }
}

template <class Op> void binary(const compute_params& p, tensor& dst, Op op) {
    const tensor& a = *dst.src[0];
    const tensor& b = *dst.src[1];
    TS_ASSERT(a.t == type::f32 && b.t == type::f32);
    for_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        const float* z = at<float>(b, 0, i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
        const int64_t n = dst.ne[0], nb0 = b.ne[0];
        const size_t xs = a.nb[0] / 4, zs = b.nb[0] / 4;
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

void scale(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const float s = dst.op_params.f[0];
    for_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        const size_t xs = a.nb[0] / 4;
        for (int64_t i = 0; i < dst.ne[0]; i++) y[i] = x[i * xs] * s;
    });
}

// e^x as ggml's AVX-512 kernel computes it (the Arm optimized-routines polynomial, max error ~1.5 ulp): n = round(x /
// ln2), b = x - n ln2 (in two fused steps), e^b by a degree-5 polynomial, then scaled by 2^n. We use the same steps so
// that silu, and through it the q8 activations of ffn_down, agree with llama.cpp bit for bit.
static inline float expf_ggml(float x) {
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                      std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                             u, std::fma(0x1.ffffecp-1f, b, 1.0f));
    if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    return std::ldexp(j, int(n));
}

// silu(x) = x / (1 + e^-x)
static inline float silu_f(float x) { return x / (1.0f + expf_ggml(0.0f - x)); }

void silu(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    for_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        const size_t xs = a.nb[0] / 4;
        for (int64_t i = 0; i < dst.ne[0]; i++) y[i] = silu_f(x[i * xs]);
    });
}

void swiglu(const compute_params& p, tensor& dst) {
    const tensor& g = *dst.src[0];
    const tensor& u = *dst.src[1];
    for_rows(p, dst, [&](float* y, int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(g, 0, i1, i2, i3);
        const float* z = at<float>(u, 0, i1, i2, i3);
        const size_t xs = g.nb[0] / 4, zs = u.nb[0] / 4;
        for (int64_t i = 0; i < dst.ne[0]; i++) y[i] = silu_f(x[i * xs]) * z[i * zs];
    });
}

// cpy: src (any shape with the same element count, f32 or f16) -> dst (f32/f16/bf16/quantized, rows contiguous).
// Elements are taken in row-major order of src and written in row-major order of dst.
void cpy(const compute_params& p, tensor& dst) {
    const tensor& src = *dst.src[0];
    TS_ASSERT(src.t == type::f32);
    const row_ops* to = find_row_ops(dst.t);
    TS_ASSERT(to != nullptr);
    const int64_t ne0 = dst.ne[0];
    if (same_shape(src, dst) && src.nb[0] == 4) {
        // row by row
        int64_t r0, r1;
        split(dst.n_rows(), p.ith, p.nth, r0, r1);
        for (int64_t r = r0; r < r1; r++) {
            const int64_t i3 = r / (dst.ne[2] * dst.ne[1]);
            const int64_t i2 = (r / dst.ne[1]) % dst.ne[2];
            const int64_t i1 = r % dst.ne[1];
            to->from_float(at<float>(src, 0, i1, i2, i3), at<uint8_t>(dst, 0, i1, i2, i3), ne0);
        }
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
        to->from_float(row.data(), at<uint8_t>(dst, 0, i1, i2, i3), ne0);
    }
}

} // namespace tessera::cpu
