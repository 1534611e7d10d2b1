// softmax.cu: y = softmax(x * scale + mask) per row; mask (n_kv, >= n_rows) is broadcast over dims 2, 3. A row whose
// every entry is masked gives zeros (as the CPU). One block per row, three passes through y (no row-size limit).
#include "backends/cuda/ops/ops.cuh"

namespace tessera::cuda {

namespace {

constexpr int SOFTMAX_THREADS = 256;

// m = max_i(x_i s + mask_i); y_i = exp(x_i s + mask_i - m) / sum_j exp(...)
static __global__ void __launch_bounds__(SOFTMAX_THREADS)
    soft_max_kernel(const float* x, shape4 sx, const float* mask, int64_t mask_nb1, float* y, shape4 sy, float scale) {
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + row_offset(sx, r);
    const float* mr = mask ? mask + (r % sx.ne[1]) * mask_nb1 : nullptr;
    float* yr = y + row_offset(sy, r);
    const int64_t ne0 = sx.ne[0];
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
        const float v = xr[i * sx.nb[0]] * scale + (mr ? mr[i] : 0.0f);
        yr[i * sy.nb[0]] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
        const float e = mx == -INFINITY ? 0.0f : expf(yr[i * sy.nb[0]] - mx);
        yr[i * sy.nb[0]] = e;
        sum += e;
    }
    sum = block_sum(sum, red);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) yr[i * sy.nb[0]] *= inv;
}

void soft_max_launch(const float* x, shape4 sx, const float* mask, int64_t mask_nb1, float* y, shape4 sy, float scale,
                     cudaStream_t stream) {
    const int64_t n_rows = sx.ne[1] * sx.ne[2] * sx.ne[3];
    if (n_rows == 0) return;
    soft_max_kernel<<<unsigned(n_rows), SOFTMAX_THREADS, 0, stream>>>(x, sx, mask, mask_nb1, y, sy, scale);
    TS_CUDA_CHECK(cudaGetLastError());
}

} // namespace

void soft_max(cuda_context& ctx, tensor& dst) {
    const tensor* a = dst.src[0];
    const tensor* mask = dst.src[1];
    soft_max_launch(ctx.as<float>(a), shape_of(*a, 4), mask ? ctx.as<float>(mask) : nullptr,
                    mask ? shape_of(*mask, 4).nb[1] : 0, ctx.as<float>(&dst), shape_of(dst, 4), dst.op_params.f[0],
                    ctx.stream);
}

} // namespace tessera::cuda
