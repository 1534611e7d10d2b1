// norm.cu: rms_norm: y = x / sqrt(mean(x^2) + eps) per row. One block per row (norm_threads); the sum of squares is a float block
// reduction (the CPU sums in double; the two differ by float rounding, about 1e-7 relative).
#include "backends/cuda/ops/ops.cuh"

namespace tessera::cuda {

namespace {

// x rows (ne0, rows over dims 1..3) strided; one block per row, thread t takes elements t, t + blockDim, ...
static __global__ void __launch_bounds__(1024)
    rms_norm_kernel(const float* x, shape4 sx, float* y, shape4 sy, float eps) {
    __shared__ float red[32];
    pdl_wait();
    pdl_trigger();
    const int64_t r = blockIdx.x;
    const float* xr = x + row_offset(sx, r);
    float* yr = y + row_offset(sy, r);
    const int64_t ne0 = sx.ne[0];
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
        const float v = xr[i * sx.nb[0]];
        ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss, red);
    const float s = 1.0f / sqrtf(ss / float(ne0) + eps);
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) yr[i * sy.nb[0]] = xr[i * sx.nb[0]] * s;
}

// Exact mode: the CPU's arithmetic (backends/cpu/ops/norm.cpp): squares in f32, summed in double (in another order
// than the CPU's sequential one: the double sums differ in their last bits, which the rounding of the mean to float
// absorbs but in ~1e-9 of rows), mean = float(sum / ne0), s = 1 / sqrt(mean + eps), y = x s.
static __global__ void __launch_bounds__(256) rms_norm_exact_kernel(const float* x, shape4 sx, float* y, shape4 sy,
                                                                    float eps) {
    __shared__ double red[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + row_offset(sx, r);
    float* yr = y + row_offset(sy, r);
    const int64_t ne0 = sx.ne[0];
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
        const float v = xr[i * sx.nb[0]];
        ss = __dadd_rn(ss, double(__fmul_rn(v, v)));
    }
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) ss = __dadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < int(blockDim.x / WARP_SIZE); w++) total = __dadd_rn(total, red[w]);
    const float mean = __double2float_rn(__ddiv_rn(total, double(ne0)));
    const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) yr[i * sy.nb[0]] = __fmul_rn(xr[i * sx.nb[0]], s);
}

void rms_norm_launch(const cuda_context& ctx, const float* x, shape4 sx, float* y, shape4 sy, float eps) {
    const int64_t n_rows = sx.ne[1] * sx.ne[2] * sx.ne[3];
    if (n_rows == 0) return;
    launch(ctx, rms_norm_kernel, unsigned(n_rows), norm_threads(sx.ne[0]), 0, x, sx, y, sy, eps);
}

} // namespace

void rms_norm(cuda_context& ctx, tensor& dst) {
    const tensor* a = dst.src[0];
    if (ctx.exact) {
        const shape4 sx = shape_of(*a, 4), sy = shape_of(dst, 4);
        const int64_t n_rows = sx.ne[1] * sx.ne[2] * sx.ne[3];
        if (n_rows == 0) return;
        rms_norm_exact_kernel<<<unsigned(n_rows), 256, 0, ctx.stream>>>(ctx.as<float>(a), sx, ctx.as<float>(&dst), sy,
                                                                      dst.op_params.f[0]);
        TS_CUDA_CHECK(cudaGetLastError());
        return;
    }
    rms_norm_launch(ctx, ctx.as<float>(a), shape_of(*a, 4), ctx.as<float>(&dst), shape_of(dst, 4), dst.op_params.f[0]);
}

} // namespace tessera::cuda
