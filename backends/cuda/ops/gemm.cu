// gemm.cu: prefill mul_mat on tensor cores for weights in the split layout (quant/format.cuh): y (n, cols) = W^T x.
// Each block of 256 threads computes a 128 (weight rows) x 64 (activation columns) tile, one 32-element quant block
// of k at a time: the weight tile is dequantized to f16 into shared memory by the format's dequant_split (one half
// block per thread), the activations (converted to f16 once, f16_rows_kernel) arrive by cp.async, and 8 warps (4 x 2)
// each multiply a 32 x 32 sub-tile with mma.sync m16n8k16 (f16 in, f32 accumulate) from ldmatrix fragments. Two
// shared-memory stages: the next k-block is loaded while the current one is multiplied.
// Numerics: f16 activations (not q8_1 as decode and the CPU): results agree with the CPU to f16 rounding of x.
// Measured (H100, 2026-11-22): 7B q4_0 pp512 6.4k t/s end to end, ~86 TFLOP/s for the whole model; a first version
// (2 stages, one 32-element chunk per k step, dequantization not overlapped with the MMAs).
#include "backends/cuda/ops/ops.cuh"

#include "backends/cuda/quant/formats.cuh"

#include <cuda_fp16.h>

namespace tessera::cuda {

namespace {

constexpr int BM = 128, BN = 64, BK = 32, PAD = 8, THREADS = 256;

// x rows (k, m, ne2, ne3 with strides) -> f16 [cols][k]
static __global__ void f16_rows_kernel(const float* x, shape4 sx, __half* y, int64_t total) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int64_t k = sx.ne[0], e = i % k, r = i / k;
    const int64_t i1 = r % sx.ne[1], i2 = (r / sx.ne[1]) % sx.ne[2], i3 = r / (sx.ne[1] * sx.ne[2]);
    y[i] = __float2half_rn(x[i1 * sx.nb[1] + i2 * sx.nb[2] + i3 * sx.nb[3] + e * sx.nb[0]]);
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
    return uint32_t(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
    const int n = valid ? 16 : 0; // 0: fill with zeros
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

struct gemm_args {
    const uint8_t* qs;
    const uint8_t* sc;
    const __half* x; // [cols][k]
    float* y;
    int64_t y_nb1, y_nb2, y_nb3;
    int64_t n, m, k, ne2, ne3;
    float out_scale;
};

template <class D> static __global__ void __launch_bounds__(THREADS) gemm_split_kernel(gemm_args a) {
    using chunk_t = typename D::chunk_t;
    __shared__ __align__(16) __half As[2][BM][BK + PAD];
    __shared__ __align__(16) __half Bs[2][BN][BK + PAD];
    const int tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int wm = warp % 4, wn = warp / 4; // warp's 32 x 32 sub-tile
    const int64_t row0 = int64_t(blockIdx.x) * BM, col0 = int64_t(blockIdx.y) * BN;
    const int64_t cols = a.m * a.ne2 * a.ne3, nb = a.k / 32, ng = nb / D::chunks_per_scale;

    // this thread's share of the loads: half of one weight chunk, 16 bytes of one activation row
    const int a_row = tid / 2, a_half = tid % 2;
    const int64_t w_row = row0 + a_row < a.n ? row0 + a_row : a.n - 1; // rows past n: loaded, never stored
    const uint8_t* q_row = a.qs + w_row * nb * int64_t(sizeof(chunk_t));
    const uint8_t* s_row = a.sc + w_row * ng * D::scale_bytes;
    const int b_row = tid / 4, b_chunk = tid % 4;
    const bool b_valid = col0 + b_row < cols;
    const __half* b_src = a.x + (b_valid ? col0 + b_row : 0) * a.k + b_chunk * 8;

    auto load_b = [&](int stage, int64_t ib) {
        cp_async16(&Bs[stage][b_row][b_chunk * 8], b_src + ib * 32, b_valid);
        cp_async_commit();
    };
    auto load_a = [&](int64_t ib, chunk_t& q) { q = ldg_chunk<chunk_t>(q_row + ib * int64_t(sizeof(chunk_t))); };
    auto store_a = [&](int stage, int64_t ib, const chunk_t& q) {
        __half2 h[8];
        D::dequant_split(q, s_row + (ib / D::chunks_per_scale) * D::scale_bytes, int(ib % D::chunks_per_scale), a_half,
                         h);
        uint4* dst = reinterpret_cast<uint4*>(&As[stage][a_row][a_half * 16]);
        dst[0] = *reinterpret_cast<const uint4*>(&h[0]);
        dst[1] = *reinterpret_cast<const uint4*>(&h[4]);
    };

    float acc[2][4][4] = {};
    chunk_t q;
    load_a(0, q);
    store_a(0, 0, q);
    load_b(0, 0);
    for (int64_t ib = 0; ib < nb; ib++) {
        const int stage = int(ib & 1);
        cp_async_wait_all();
        __syncthreads(); // stage `stage` complete for everyone; the other stage is free
        if (ib + 1 < nb) {
            load_b(stage ^ 1, ib + 1);
            load_a(ib + 1, q); // in flight while this stage is multiplied
        }
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            uint32_t af[2][4], bf[2][4];
#pragma unroll
            for (int i = 0; i < 2; i++)
                ldmatrix_x4(af[i], &As[stage][wm * 32 + i * 16 + (lane % 16)][kk + (lane / 16) * 8]);
#pragma unroll
            for (int j = 0; j < 2; j++) // two n8 tiles per x4: rows n0 + (lane % 8) + 8 (lane / 16), k + 8 (lane / 8 % 2)
                ldmatrix_x4(bf[j], &Bs[stage][wn * 32 + j * 16 + (lane % 8) + 8 * (lane / 16)][kk + 8 * ((lane / 8) % 2)]);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) mma_16816(acc[i][j], af[i], bf[j / 2][2 * (j % 2)], bf[j / 2][2 * (j % 2) + 1]);
        }
        if (ib + 1 < nb) store_a(stage ^ 1, ib + 1, q); // the other stage was released by the barrier above
    }

    // C fragment: c0, c1 at (row lane / 4, cols 2 (lane % 4) + 0, 1), c2, c3 eight rows further
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = row0 + wm * 32 + i * 16 + lane / 4 + (e / 2) * 8;
                const int64_t c = col0 + wn * 32 + j * 8 + 2 * (lane % 4) + (e % 2);
                if (r < a.n && c < cols) {
                    const int64_t i1 = c % a.m, i2 = (c / a.m) % a.ne2, i3 = c / (a.m * a.ne2);
                    a.y[i3 * a.y_nb3 + i2 * a.y_nb2 + i1 * a.y_nb1 + r] = acc[i][j][e] * a.out_scale;
                }
            }
}

} // namespace

size_t gemm_split_work_size(int64_t k, int64_t cols) {
    return size_t(k) * size_t(cols) * sizeof(__half);
}

bool gemm_split_wanted(int64_t cols) {
    return cols > 8;
}

void gemm_split(cuda_context& ctx, const split_weight& w, tensor& dst) {
    const tensor* x = dst.src[1];
    const shape4 sx = shape_of(*x, 4), sy = shape_of(dst, 4);
    gemm_args a{};
    a.qs = w.qs;
    a.sc = w.sc;
    a.out_scale = w.out_scale;
    a.y = ctx.as<float>(&dst);
    a.y_nb1 = sy.nb[1];
    a.y_nb2 = sy.nb[2];
    a.y_nb3 = sy.nb[3];
    a.n = w.n;
    a.m = x->ne[1];
    a.k = w.k;
    a.ne2 = x->ne[2];
    a.ne3 = x->ne[3];
    const int64_t cols = a.m * a.ne2 * a.ne3, total = cols * a.k;
    if (total == 0 || a.n == 0) return;
    TS_ASSERT(ctx.scratch_size >= gemm_split_work_size(a.k, cols));
    auto* xh = static_cast<__half*>(ctx.scratch);
    if (!(ctx.act_src == x && ctx.act_form == cuda_context::act_f16)) { // q, k, v (gate, up) share one conversion
        f16_rows_kernel<<<unsigned(ceil_div(total, 256)), 256, 0, ctx.stream>>>(ctx.as<float>(x), sx, xh, total);
        TS_CUDA_CHECK(cudaGetLastError());
        ctx.act_src = x;
        ctx.act_form = cuda_context::act_f16;
    }
    a.x = xh;
    const dim3 grid(unsigned(ceil_div(a.n, BM)), unsigned(ceil_div(cols, BN)));
    TS_ASSERT(grid.y <= 65535);
    const bool known = visit_format(w.t, [&]<class F>() {
        if constexpr (has_split<F>::value)
            gemm_split_kernel<cuda_format<F>><<<grid, THREADS, 0, ctx.stream>>>(a);
        else
            TS_ASSERT(!"gemm_split: format without a split layout");
    });
    TS_ASSERT(known);
    TS_CUDA_CHECK(cudaGetLastError());
}

} // namespace tessera::cuda
