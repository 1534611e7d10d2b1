// elementwise.cu: add, mul, div (src1 broadcast), scale, clamp, silu, tanh, swiglu, geglu, relu2_glu, swiglu_oai,
// cpy (f32 -> f32/f16/bf16 into a strided view) and set_rows (f32 rows -> rows of f32/f16/bf16 at indices read on the
// device: the KV-cache write). One thread per element of dst; every tensor is addressed through its strides.
#include "backends/cuda/ops/ops.cuh"

#include "backends/cuda/ops/exact.cuh"
#include "ggml-like/fp16.h"

#include <cuda_fp16.h>

namespace tessera::cuda {

namespace {

constexpr int EW_THREADS = 256;

// (i0, i1, i2, i3) of the flat row-major index i over ne.
struct index4 {
    int64_t i[4];
};
__device__ __forceinline__ index4 unflatten(int64_t i, const int64_t* ne) {
    index4 r;
    r.i[0] = i % ne[0];
    i /= ne[0];
    r.i[1] = i % ne[1];
    i /= ne[1];
    r.i[2] = i % ne[2];
    r.i[3] = i / ne[2];
    return r;
}
__device__ __forceinline__ int64_t offset(const index4& x, const int64_t* nb) {
    return x.i[0] * nb[0] + x.i[1] * nb[1] + x.i[2] * nb[2] + x.i[3] * nb[3];
}

enum class binary_op { add, mul, div, swiglu, geglu, relu2, swiglu_oai, swiglu_oai_exact };
enum class unary_op { scale, silu, tanh, clamp };

__device__ __forceinline__ float silu_f(float x) {
    return x / (1.0f + expf(-x));
}

// dst[i] = a[i] op b[i mod b.ne] (broadcast of b over every dimension where b.ne[d] divides a.ne[d]).
// gelu: the f16 table (cuda_context::gelu_table), for geglu only; p0, p1: swiglu_oai's alpha and limit
template <binary_op OP>
static __global__ void binary_kernel(const float* a, shape4 sa, const float* b, shape4 sb, float* y, shape4 sy,
                                     int64_t n, const uint16_t* gelu, float p0, float p1) {
    pdl_wait();
    pdl_trigger();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const index4 x = unflatten(i, sy.ne);
    index4 xb;
    for (int d = 0; d < 4; d++) xb.i[d] = x.i[d] % sb.ne[d];
    const float va = a[offset(x, sa.nb)], vb = b[offset(xb, sb.nb)];
    float r;
    if constexpr (OP == binary_op::add)
        r = va + vb;
    else if constexpr (OP == binary_op::mul)
        r = va * vb;
    else if constexpr (OP == binary_op::div)
        r = va / vb;
    else if constexpr (OP == binary_op::swiglu_oai) { // the CPU's order (backends/cpu/ops/elementwise.cpp)
        const float x = p1 < va ? p1 : va, v = vb < -p1 ? -p1 : p1 < vb ? p1 : vb; // std::min, std::clamp
        r = x / (1.0f + expf(p0 * -x)) * (v + 1.0f);
    }
    else if constexpr (OP == binary_op::swiglu_oai_exact) { // exact mode: glibc's expf, every step rounded alone
        const float x = p1 < va ? p1 : va, v = vb < -p1 ? -p1 : p1 < vb ? p1 : vb;
        r = __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, expf_glibc(__fmul_rn(p0, -x)))), __fadd_rn(v, 1.0f));
    }
    else if constexpr (OP == binary_op::swiglu)
        r = silu_f(va) * vb;
    else if constexpr (OP == binary_op::geglu)
        r = geglu_f(va, vb, gelu);
    else
        r = relu2_glu_f(va, vb);
    y[offset(x, sy.nb)] = r;
}

// s: scale's factor, clamp's lower bound (s2 its upper one)
template <unary_op OP>
static __global__ void unary_kernel(const float* a, shape4 sa, float* y, shape4 sy, float s, float s2, int64_t n) {
    pdl_wait();
    pdl_trigger();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const index4 x = unflatten(i, sy.ne);
    const float v = a[offset(x, sa.nb)];
    float r;
    if constexpr (OP == unary_op::scale)
        r = v * s;
    else if constexpr (OP == unary_op::silu)
        r = silu_f(v);
    else if constexpr (OP == unary_op::tanh)
        r = tanhf(v);
    else { // std::max(std::min(v, hi), lo), NaN staying NaN
        const float m = s2 < v ? s2 : v;
        r = m < s ? s : m;
    }
    y[offset(x, sy.nb)] = r;
}

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) {
    return x;
}
template <> __device__ __forceinline__ uint16_t from_f32<uint16_t>(float x) {
    return __half_as_ushort(__float2half_rn(x)); // round to nearest even, as F16C and fp32_to_fp16
}
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float x) {
    return to_bf16(x);
} // ggml's rounding

// Element i in row-major order of src goes to element i in row-major order of dst (shapes may differ, counts agree).
template <class T> static __global__ void cpy_kernel(const float* x, shape4 sx, T* y, shape4 sy, int64_t n) {
    pdl_wait();
    pdl_trigger();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    y[offset(unflatten(i, sy.ne), sy.nb)] = from_f32<T>(x[offset(unflatten(i, sx.ne), sx.nb)]);
}

// Row r of x goes to row idx[r] of y (skipped outside [0, n_dst)); blockIdx.y walks the rows, x-threads the elements.
template <class T, class I>
static __global__ void set_rows_kernel(const float* x, int64_t x_nb1, T* y, int64_t y_nb1, int64_t n_dst,
                                       const I* idx, int64_t ne0, int64_t n_rows) {
    pdl_wait();
    pdl_trigger();
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= ne0) return;
    for (int64_t r = blockIdx.y; r < n_rows; r += gridDim.y) {
        const int64_t i = int64_t(idx[r]);
        if (i < 0 || i >= n_dst) continue;
        y[i * y_nb1 + c] = from_f32<T>(x[r * x_nb1 + c]);
    }
}

// Exact mode swiglu (the CPU's, backends/cpu/quant/vec_dot*.cpp): g / (1 + e^-g) u with ggml's expf over the whole
// 16-element groups of each row and glibc's expf over the row's tail. Contiguous rows only (supports() keeps the rest).
static __global__ void swiglu_exact_kernel(const float* g, const float* u, float* y, int64_t ne0, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = g[i];
    const float e = i % ne0 < ne0 - ne0 % 16 ? expf_ggml(__fsub_rn(0.0f, x)) : expf_glibc(-x);
    y[i] = __fmul_rn(__fdiv_rn(x, __fadd_rn(1.0f, e)), u[i]);
}

unsigned n_blocks(int64_t n) {
    return unsigned(ceil_div(n, EW_THREADS));
}

template <binary_op OP> void binary(cuda_context& ctx, tensor& dst, float p0 = 0.0f, float p1 = 0.0f) {
    const tensor* a = dst.src[0];
    const tensor* b = dst.src[1];
    const shape4 sy = shape_of(dst, 4);
    const int64_t n = dst.n_elements();
    if (n == 0) return;
    TS_ASSERT(OP != binary_op::geglu || ctx.gelu_table);
    launch(ctx, binary_kernel<OP>, n_blocks(n), EW_THREADS, 0, ctx.as<float>(a), shape_of(*a, 4), ctx.as<float>(b),
           shape_of(*b, 4), ctx.as<float>(&dst), sy, n, ctx.gelu_table, p0, p1);
}

template <unary_op OP> void unary(cuda_context& ctx, tensor& dst, float s, float s2 = 0.0f) {
    const tensor* a = dst.src[0];
    const int64_t n = dst.n_elements();
    if (n == 0) return;
    launch(ctx, unary_kernel<OP>, n_blocks(n), EW_THREADS, 0, ctx.as<float>(a), shape_of(*a, 4), ctx.as<float>(&dst),
           shape_of(dst, 4), s, s2, n);
}

template <class T> void cpy_as(cuda_context& ctx, tensor& dst) {
    const tensor* src = dst.src[0];
    const int64_t n = dst.n_elements();
    if (n == 0) return;
    launch(ctx, cpy_kernel<T>, n_blocks(n), EW_THREADS, 0, ctx.as<float>(src), shape_of(*src, 4), ctx.as<T>(&dst),
           shape_of(dst, sizeof(T)), n);
}

template <class T> void set_rows_as(cuda_context& ctx, tensor& dst) {
    const tensor* src = dst.src[0];
    const tensor* idx = dst.src[2];
    const int64_t ne0 = src->ne[0], n_rows = src->ne[1];
    if (ne0 == 0 || n_rows == 0) return;
    const dim3 grid(n_blocks(ne0), unsigned(n_rows < 65535 ? n_rows : 65535));
    const int64_t x_nb1 = int64_t(src->nb[1] / 4), y_nb1 = int64_t(dst.nb[1] / sizeof(T));
    if (idx->t == type::i32)
        launch(ctx, set_rows_kernel<T, int32_t>, grid, EW_THREADS, 0, ctx.as<float>(src), x_nb1, ctx.as<T>(&dst), y_nb1,
               dst.ne[1], ctx.as<int32_t>(idx), ne0, n_rows);
    else
        launch(ctx, set_rows_kernel<T, int64_t>, grid, EW_THREADS, 0, ctx.as<float>(src), x_nb1, ctx.as<T>(&dst), y_nb1,
               dst.ne[1], ctx.as<int64_t>(idx), ne0, n_rows);
}

} // namespace

bool set_rows_supported(const tensor& dst) {
    const tensor* src = dst.src[0];
    const tensor* idx = dst.src[2];
    return src->t == type::f32 && src->nb[0] == 4 && src->nb[1] % 4 == 0 && src->ne[2] == 1 && src->ne[3] == 1 &&
           (dst.t == type::f32 || dst.t == type::f16 || dst.t == type::bf16) && dst.nb[0] == type_size(dst.t) &&
           dst.nb[1] % type_size(dst.t) == 0 && (idx->t == type::i32 || idx->t == type::i64) &&
           idx->nb[0] == type_size(idx->t);
}

void add(cuda_context& ctx, tensor& dst) {
    binary<binary_op::add>(ctx, dst);
}
void mul(cuda_context& ctx, tensor& dst) {
    binary<binary_op::mul>(ctx, dst);
}
void div(cuda_context& ctx, tensor& dst) {
    binary<binary_op::div>(ctx, dst);
}
void swiglu_oai(cuda_context& ctx, tensor& dst) {
    if (ctx.exact) binary<binary_op::swiglu_oai_exact>(ctx, dst, dst.op_params.f[0], dst.op_params.f[1]);
    else binary<binary_op::swiglu_oai>(ctx, dst, dst.op_params.f[0], dst.op_params.f[1]);
}
void clamp(cuda_context& ctx, tensor& dst) {
    unary<unary_op::clamp>(ctx, dst, dst.op_params.f[0], dst.op_params.f[1]);
}
void swiglu(cuda_context& ctx, tensor& dst) {
    const tensor* g = dst.src[0];
    const tensor* u = dst.src[1];
    const auto dense = [&](const tensor* t) { return t->is_contiguous() && !t->view_src && t->ne[0] == dst.ne[0]; };
    if (ctx.exact && dense(g) && dense(u) && dense(&dst) && g->n_elements() == dst.n_elements() &&
        u->n_elements() == dst.n_elements()) {
        const int64_t n = dst.n_elements();
        if (n == 0) return;
        swiglu_exact_kernel<<<n_blocks(n), EW_THREADS, 0, ctx.stream>>>(ctx.as<float>(g), ctx.as<float>(u),
                                                                      ctx.as<float>(&dst), dst.ne[0], n);
        TS_CUDA_CHECK(cudaGetLastError());
        return;
    }
    binary<binary_op::swiglu>(ctx, dst);
}
void geglu(cuda_context& ctx, tensor& dst) {
    binary<binary_op::geglu>(ctx, dst);
}
void relu2_glu(cuda_context& ctx, tensor& dst) {
    binary<binary_op::relu2>(ctx, dst);
}
void tanh(cuda_context& ctx, tensor& dst) {
    unary<unary_op::tanh>(ctx, dst, 0.0f);
}
void scale(cuda_context& ctx, tensor& dst) {
    unary<unary_op::scale>(ctx, dst, dst.op_params.f[0]);
}
void silu(cuda_context& ctx, tensor& dst) {
    unary<unary_op::silu>(ctx, dst, 0.0f);
}

void cpy(cuda_context& ctx, tensor& dst) {
    switch (dst.t) {
    case type::f32:
        cpy_as<float>(ctx, dst);
        break;
    case type::f16:
        cpy_as<uint16_t>(ctx, dst);
        break;
    case type::bf16:
        cpy_as<bf16>(ctx, dst);
        break;
    default:
        TS_ASSERT(!"cpy: destination type not supported on CUDA (supports() lets it through?)");
    }
}

void set_rows(cuda_context& ctx, tensor& dst) {
    switch (dst.t) {
    case type::f32:
        set_rows_as<float>(ctx, dst);
        break;
    case type::f16:
        set_rows_as<uint16_t>(ctx, dst);
        break;
    case type::bf16:
        set_rows_as<bf16>(ctx, dst);
        break;
    default:
        TS_ASSERT(!"set_rows: destination type not supported on CUDA (supports() lets it through?)");
    }
}

} // namespace tessera::cuda
