// moe.cu: the expert-routing ops beside mul_mat_id (mmv.cu): top_k (which experts a token takes, in the CPU's order),
// add_id (a per-expert bias on each chosen slot) and sum_rows (the chosen weights' sum, to renormalize them).
#include "backends/cuda/ops/ops.cuh"
#include "ggml-like/top_k_row.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace tessera::cuda {

namespace {

constexpr int TOPK_MAX = 2048; // row length top_k sorts in shared memory (experts: up to a few hundred)

// One block per row: the row (padded to a power of two with -inf past its end, which sorts last) bitonic-sorted in
// shared memory, the first k indices written; ggml_top_k's order (sorted = 0) swaps the first two, as the CPU.
static __global__ void top_k_kernel(const float* a, int64_t a_nb1, int n, int p2, int32_t* y, int64_t y_nb1, int k,
                                    bool sorted) {
    __shared__ float v_s[TOPK_MAX];
    __shared__ int i_s[TOPK_MAX];
    pdl_wait();
    pdl_trigger();
    const float* x = a + blockIdx.x * a_nb1;
    for (int i = threadIdx.x; i < p2; i += blockDim.x) {
        v_s[i] = i < n ? x[i] : -INFINITY;
        i_s[i] = i < n ? i : INT32_MAX;
    }
    __syncthreads();
    bitonic_sort_desc(v_s, i_s, p2);
    int32_t* yr = y + blockIdx.x * y_nb1;
    for (int i = threadIdx.x; i < k; i += blockDim.x) yr[i] = i_s[!sorted && k > 1 && i < 2 ? 1 - i : i];
}

// dst[:, i, t] = a[:, i, t] + b[:, ids[i, t]], one thread per element (an id outside b gives NaN)
static __global__ void add_id_kernel(const float* a, shape4 sa, const float* b, int64_t b_nb1, int64_t n_b_rows,
                                     const int32_t* ids, int64_t ids_nb1, float* y, shape4 sy, int64_t n) {
    pdl_wait();
    pdl_trigger();
    const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= n) return;
    const int64_t j = e % sy.ne[0], i = e / sy.ne[0] % sy.ne[1], t = e / (sy.ne[0] * sy.ne[1]);
    const int32_t id = ids[i + t * ids_nb1];
    const float bias = id >= 0 && id < n_b_rows ? b[id * b_nb1 + j] : NAN;
    y[j * sy.nb[0] + i * sy.nb[1] + t * sy.nb[2]] = a[j * sa.nb[0] + i * sa.nb[1] + t * sa.nb[2]] + bias;
}

// One warp per row: the row summed in double (as the CPU, ggml_vec_sum_f32's double), then rounded
static __global__ void sum_rows_kernel(const float* a, shape4 sa, float* y, shape4 sy, int64_t rows) {
    pdl_wait();
    pdl_trigger();
    const int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (r >= rows) return;
    const float* x = a + row_offset(sa, r);
    double s = 0.0;
    for (int64_t i = lane; i < sa.ne[0]; i += WARP_SIZE) s += double(x[i * sa.nb[0]]);
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[row_offset(sy, r)] = float(s);
}

} // namespace

bool top_k_supported(const tensor& dst) {
    const tensor& a = *dst.src[0];
    return a.t == type::f32 && a.nb[0] == 4 && a.ne[0] <= TOPK_MAX && a.ne[2] == 1 && a.ne[3] == 1 &&
           dst.is_contiguous();
}

namespace {

// Exact mode: the rows to the host and the CPU backend's own routine over them (top_k_row.h: libstdc++'s order among
// equal values, which the bitonic sort does not give), the indices back. Exact mode never captures, so it may wait.
void top_k_on_host(cuda_context& ctx, tensor& dst) {
    const tensor* a = dst.src[0];
    const int64_t n = a->ne[0], rows = a->ne[1], k = dst.ne[0];
    std::vector<float> x(size_t(n * rows));
    std::vector<int32_t> y(size_t(k * rows)), idx;
    TS_CUDA_CHECK(cudaMemcpy2DAsync(x.data(), size_t(n) * 4, ctx.as<float>(a), a->nb[1], size_t(n) * 4, size_t(rows),
                                    cudaMemcpyDeviceToHost, ctx.stream));
    TS_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    for (int64_t r = 0; r < rows; r++)
        top_k_row(x.data() + r * n, n, k, dst.op_params.i[0] != 0, y.data() + r * k, idx);
    TS_CUDA_CHECK(cudaMemcpy2DAsync(ctx.as<int32_t>(&dst), dst.nb[1], y.data(), size_t(k) * 4, size_t(k) * 4,
                                    size_t(rows), cudaMemcpyHostToDevice, ctx.stream));
    TS_CUDA_CHECK(cudaStreamSynchronize(ctx.stream)); // y is freed on return
}

} // namespace

void top_k(cuda_context& ctx, tensor& dst) {
    const tensor* a = dst.src[0];
    const int n = int(a->ne[0]);
    int p2 = 1;
    while (p2 < n) p2 *= 2;
    if (a->ne[1] == 0 || dst.ne[0] == 0) return;
    TS_ASSERT(a->ne[1] <= INT32_MAX);
    if (ctx.exact) {
        top_k_on_host(ctx, dst);
        return;
    }
    launch(ctx, top_k_kernel, unsigned(a->ne[1]), std::min(p2 / 2 > 32 ? p2 / 2 : 32, 1024), 0, ctx.as<float>(a),
           int64_t(a->nb[1] / 4), n, p2, ctx.as<int32_t>(&dst), int64_t(dst.nb[1] / 4), int(dst.ne[0]),
           dst.op_params.i[0] != 0);
}

void add_id(cuda_context& ctx, tensor& dst) {
    const tensor* a = dst.src[0];
    const tensor* b = dst.src[1];
    const tensor* ids = dst.src[2];
    const int64_t n = dst.n_elements();
    if (n == 0) return;
    constexpr int threads = 256;
    launch(ctx, add_id_kernel, unsigned(ceil_div(n, threads)), threads, 0, ctx.as<float>(a), shape_of(*a, 4),
           ctx.as<float>(b), int64_t(b->nb[1] / 4), b->ne[1], ctx.as<int32_t>(ids), int64_t(ids->nb[1] / 4),
           ctx.as<float>(&dst), shape_of(dst, 4), n);
}

void sum_rows(cuda_context& ctx, tensor& dst) {
    const tensor* a = dst.src[0];
    const int64_t rows = a->ne[1] * a->ne[2] * a->ne[3];
    if (rows == 0) return;
    constexpr int threads = 256;
    launch(ctx, sum_rows_kernel, unsigned(ceil_div(rows * WARP_SIZE, threads)), threads, 0, ctx.as<float>(a),
           shape_of(*a, 4), ctx.as<float>(&dst), shape_of(dst, 4), rows);
}

} // namespace tessera::cuda
