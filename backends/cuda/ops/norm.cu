// norm.cu: rms_norm: y = x / sqrt(mean(x^2) + eps) per row. One block per row (norm_threads); the sum of squares is a float block
// reduction (the CPU sums in double; the two differ by float rounding, about 1e-7 relative).
#include "backends/cuda/ops/ops.cuh"

namespace tessera::cuda {

namespace {


// x rows (ne0, rows over dims 1..3) strided; one block per row, thread t takes elements t, t + blockDim, ...
static __global__ void __launch_bounds__(1024)
    rms_norm_kernel(const float* x, shape4 sx, float* y, shape4 sy, float eps) {
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const int64_t i1 = r % sx.ne[1], i2 = (r / sx.ne[1]) % sx.ne[2], i3 = r / (sx.ne[1] * sx.ne[2]);
    const float* xr = x + i1 * sx.nb[1] + i2 * sx.nb[2] + i3 * sx.nb[3];
    float* yr = y + i1 * sy.nb[1] + i2 * sy.nb[2] + i3 * sy.nb[3];
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

void rms_norm_launch(const float* x, shape4 sx, float* y, shape4 sy, float eps, cudaStream_t stream) {
    const int64_t n_rows = sx.ne[1] * sx.ne[2] * sx.ne[3];
    if (n_rows == 0) return;
    rms_norm_kernel<<<unsigned(n_rows), norm_threads(sx.ne[0]), 0, stream>>>(x, sx, y, sy, eps);
    TS_CUDA_CHECK(cudaGetLastError());
}

} // namespace

void rms_norm(cuda_context& ctx, tensor& dst) {
    const tensor* a = dst.src[0];
    rms_norm_launch(ctx.as<float>(a), shape_of(*a, 4), ctx.as<float>(&dst), shape_of(dst, 4), dst.op_params.f[0],
                    ctx.stream);
}

} // namespace tessera::cuda
