// softmax.cu: y = softmax(x * scale + mask) per row; mask (n_kv, >= n_rows) is broadcast over dims 2, 3. A row whose
// every entry is masked gives zeros (as the CPU). One block per row, three passes through y (no row-size limit).
#include "backends/cuda/ops/ops.cuh"

#include "backends/cuda/ops/exact.cuh"

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

// Exact mode: the CPU's order (backends/cpu/ops/softmax.cpp, ggml_vec_soft_max_f32 on AVX-512): x s, then + mask,
// each rounded; e^(y - max) by ggml's expf over the whole groups of 16 and glibc's over the rest; each group's 16
// summed as _mm512_reduce_add_ps folds them and every partial sum added in double, in order (one thread: MoE routers'
// rows are short); then one multiplication by float(1 / sum).
static __global__ void __launch_bounds__(SOFTMAX_THREADS)
    soft_max_exact_kernel(const float* x, shape4 sx, const float* mask, int64_t mask_nb1, float* y, shape4 sy,
                          float scale) {
    __shared__ float red[32];
    __shared__ float inv_s;
    const int64_t r = blockIdx.x;
    const float* xr = x + row_offset(sx, r);
    const float* mr = mask ? mask + (r % sx.ne[1]) * mask_nb1 : nullptr;
    float* yr = y + row_offset(sy, r);
    const int64_t ne0 = sx.ne[0], nv = ne0 - ne0 % 16;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
        float v = __fmul_rn(xr[i * sx.nb[0]], scale);
        if (mr) v = __fadd_rn(v, mr[i]);
        yr[i * sy.nb[0]] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_max(mx, red);
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
        const float d = __fsub_rn(yr[i * sy.nb[0]], mx);
        yr[i * sy.nb[0]] = mx == -INFINITY ? 0.0f : i < nv ? expf_ggml(d) : expf_glibc(d);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0.0;
        int64_t i = 0;
        for (; i < nv; i += 16) {
            float h8[8], h4[4];
            for (int l = 0; l < 8; l++) h8[l] = __fadd_rn(yr[(i + l + 8) * sy.nb[0]], yr[(i + l) * sy.nb[0]]);
            for (int l = 0; l < 4; l++) h4[l] = __fadd_rn(h8[l + 4], h8[l]);
            sum = __dadd_rn(sum, double(__fadd_rn(__fadd_rn(h4[0], h4[2]), __fadd_rn(h4[1], h4[3]))));
        }
        for (; i < ne0; i++) sum = __dadd_rn(sum, double(yr[i * sy.nb[0]]));
        inv_s = mx == -INFINITY ? 0.0f : __double2float_rn(__ddiv_rn(1.0, sum));
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) yr[i * sy.nb[0]] = __fmul_rn(yr[i * sy.nb[0]], inv_s);
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
    if (ctx.exact) {
        const int64_t n_rows = a->ne[1] * a->ne[2] * a->ne[3];
        if (n_rows == 0) return;
        soft_max_exact_kernel<<<unsigned(n_rows), SOFTMAX_THREADS, 0, ctx.stream>>>(
            ctx.as<float>(a), shape_of(*a, 4), mask ? ctx.as<float>(mask) : nullptr,
            mask ? shape_of(*mask, 4).nb[1] : 0, ctx.as<float>(&dst), shape_of(dst, 4), dst.op_params.f[0]);
        TS_CUDA_CHECK(cudaGetLastError());
        return;
    }
    soft_max_launch(ctx.as<float>(a), shape_of(*a, 4), mask ? ctx.as<float>(mask) : nullptr,
                    mask ? shape_of(*mask, 4).nb[1] : 0, ctx.as<float>(&dst), shape_of(dst, 4), dst.op_params.f[0],
                    ctx.stream);
}

} // namespace tessera::cuda
