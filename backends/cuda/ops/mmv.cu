// mmv.cu: mul_mat for decode, a fused dequant GEMV: y (n, m) = W (k, n)^T x (k, m), 2..8 tokens reusing each weight
// chunk from registers for every column. Three paths:
//   split layout (every block format, weights repacked at upload; quant/format.cuh): x is quantized once to q8_1 as
//                int8 rows + (d, s) (quantize_split_kernel; q, k, v and gate, up share one), then
//                mmv_split_kernel<cuda_format<F>, NC, R, U, S>: S warps (1, 2 or 4: split over k where rows are few)
//                per R rows, lane l of part p taking chunks 32 p + l, 32 (S + p) + l, ... with one 8/16/32-byte load
//                each (for one column and 16-byte chunks, staged one step ahead in shared memory by cp.async:
//                split_stages). More than 8 columns go to the tensor-core GEMM (gemm.cu).
//   file layout (TESSERA_CUDA_SPLIT=0, q4_0/q4_1/q8_0): x to q8_1 blocks, mmv_q_kernel over the file's 18/20/34-byte
//                blocks with 2- and 4-byte loads (groups of 8 columns for larger m).
//   f32/f16/bf16 W: mmv_f_kernel<T, NC, V, G, BT> reads x in f32 and dots in f32, V elements per load; q, k, v (gate,
//                up) one launch, gate and up with the GLU after them in its epilogue (mul_mat_f_group).
// Measured (tests/bench/bench_mmv, one column, H100, 2026-11-23, session 10), share of the 3.0 TB/s copy bandwidth at
// (n, k) = (4096, 4096), (14336, 4096), (4096, 14336), three matrices a launch (as q/k/v, gate/up run): split q4_0
// 66/80/77%, q4_1 70/80/81%, q8_0 70/83/83%, nvfp4 57/67/67% (-/72/69% after session 11's cheaper sub-scales),
// awq4 65/79/81%, tq2_0 49/66/65%, i2_s 54/68/67%; f16 65/79/82%. One matrix a launch: 5-15 points lower (the
// launch boundary, ~3 us; NOTES.md). In a decode step the kernel is launched early (programmatic dependent launch,
// common.cuh) and asks L2 for its first chunks while the kernel before it runs.
#include "backends/cuda/ops/mma.cuh"
#include "backends/cuda/ops/ops.cuh"

#include "backends/cuda/quant/formats.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

namespace tessera::cuda {

namespace {

constexpr int MMV_THREADS = 128;
constexpr int MMV_MAX_COLS = 8;

// ---- activations -> q8_1 ----

// Element `lane` of q8_1 block g of x (rows (k, m, ne2, ne3), strides in floats; row r = (i3 ne2 + i2) m + i1, k / 32
// blocks each), one warp per block, quantized by quantize_q8_lane (ops.cuh: the CPU's integers).
__device__ __forceinline__ float q8_block_value(const float* x, const shape4& sx, int64_t g, int lane) {
    const int64_t kb = sx.ne[0] / 32, ib = g % kb, r = g / kb;
    return x[row_offset(sx, r) + (ib * 32 + lane) * sx.nb[0]];
}

// x -> q8_1 blocks (the file-layout GEMV)
static __global__ void quantize_q8_1_kernel(const float* x, shape4 sx, block_q8_1* y, int64_t n_blocks_total) {
    const int64_t g = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (g >= n_blocks_total) return;
    const q8_lane ql = quantize_q8_lane(q8_block_value(x, sx, g, lane));
    block_q8_1& b = y[g];
    b.qs[lane] = int8_t(ql.q);
    if (lane == 0) {
        b.d = f16{__half_as_ushort(__float2half_rn(ql.d))};
        b.s = f16{__half_as_ushort(__float2half_rn(ql.s))};
    }
}

void quantize_q8_1_launch(const float* x, shape4 sx, block_q8_1* y, cudaStream_t stream) {
    const int64_t n_blocks_total = sx.ne[0] / 32 * sx.ne[1] * sx.ne[2] * sx.ne[3];
    if (n_blocks_total == 0) return;
    constexpr int threads = 256;
    quantize_q8_1_kernel<<<unsigned(ceil_div(n_blocks_total * WARP_SIZE, threads)), threads, 0, stream>>>(
        x, sx, y, n_blocks_total);
    TS_CUDA_CHECK(cudaGetLastError());
}

// ---- the GEMV ----

struct mmv_args {
    const uint8_t* w;
    int64_t w_nb1, w_nb2, w_nb3; // bytes
    const void* x;               // q8_1 rows (quantized W) or f32 (float W)
    int64_t x_nb1, x_nb2, x_nb3; // floats (float W only; q8_1 rows are contiguous)
    float* y;
    int64_t y_nb1, y_nb2, y_nb3; // floats
    int64_t n, m, k;             // W rows, x columns, elements per row
    int64_t ne2, ne3, r2, r3;    // x's dims 2, 3; W is broadcast r2 (r3) times over dim 2 (3)
    int rows_per_block;
};

// Sums each column's partial over the threads of a row: true in thread lt < m_valid of a row below n, which gets
// column lt's sum in total. Called by every thread of the block (shared memory: a second call needs a barrier first).
template <int NC, int BT = MMV_THREADS>
__device__ __forceinline__ bool mmv_reduce(float (&sum)[NC], const mmv_args& a, int64_t row, int m_valid, float& total) {
    __shared__ float red[BT / WARP_SIZE][NC];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
#pragma unroll
    for (int j = 0; j < NC; j++) {
        sum[j] = warp_sum(sum[j]);
        if (lane == 0) red[warp][j] = sum[j];
    }
    __syncthreads();
    const int tpr = BT / a.rows_per_block, wpr = tpr / WARP_SIZE;
    const int lt = threadIdx.x % tpr, first_warp = threadIdx.x / tpr * wpr;
    if (row >= a.n || lt >= m_valid) return false;
    total = 0.0f;
    for (int w = 0; w < wpr; w++) total += red[first_warp + w][lt];
    return true;
}

// ... and writes y
template <int NC, int BT = MMV_THREADS>
__device__ __forceinline__ void mmv_reduce_store(float (&sum)[NC], const mmv_args& a, int64_t row, int64_t col0,
                                                 int m_valid, int64_t i2, int64_t i3) {
    float total;
    if (mmv_reduce<NC, BT>(sum, a, row, m_valid, total))
        a.y[i2 * a.y_nb2 + i3 * a.y_nb3 + (col0 + threadIdx.x % (BT / a.rows_per_block)) * a.y_nb1 + row] = total;
}

// Quantized W: grid (rows / rows_per_block, columns / NC, ne2 ne3).
template <class D, int NC> static __global__ void __launch_bounds__(MMV_THREADS) mmv_q_kernel(mmv_args a) {
    using act = typename D::act;
    const int tpr = MMV_THREADS / a.rows_per_block;
    const int64_t row = int64_t(blockIdx.x) * a.rows_per_block + threadIdx.x / tpr;
    const int lt = threadIdx.x % tpr;
    const int64_t col0 = int64_t(blockIdx.y) * NC;
    const int m_valid = int(a.m - col0 < NC ? a.m - col0 : NC);
    const int64_t i2 = blockIdx.z % a.ne2, i3 = blockIdx.z / a.ne2;
    const int64_t kb = a.k / 32;

    float sum[NC];
#pragma unroll
    for (int j = 0; j < NC; j++) sum[j] = 0.0f;
    if (row < a.n) {
        const auto* wb = reinterpret_cast<const typename D::block*>(a.w + (i2 / a.r2) * a.w_nb2 +
                                                                    (i3 / a.r3) * a.w_nb3 + row * a.w_nb1);
        const act* xb = static_cast<const act*>(a.x) + ((i3 * a.ne2 + i2) * a.m + col0) * kb;
#pragma unroll 4
        for (int64_t i = lt; i < kb * D::n_chunks; i += tpr) {
            const int64_t ib = i / D::n_chunks;
            const int c = int(i % D::n_chunks);
            const typename D::chunk wc = D::load(wb[ib], c);
#pragma unroll
            for (int j = 0; j < NC; j++)
                if (j < m_valid) sum[j] += D::dot(wc, xb[j * kb + ib], c);
        }
    }
    mmv_reduce_store<NC>(sum, a, row, col0, m_valid, i2, i3);
}

// V elements of W as floats.
template <class T, int V> __device__ __forceinline__ void load_w(const T* p, float (&w)[V]) {
    if constexpr (!std::is_same_v<T, float> && V == 8) { // f16 / bf16: one 16-byte load
        const uint4 v = *reinterpret_cast<const uint4*>(p);
        auto two = [](uint32_t u, float& lo, float& hi) {
            if constexpr (std::is_same_v<T, __half>) {
                const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u));
                lo = f.x, hi = f.y;
            } else {
                lo = __uint_as_float(u << 16), hi = __uint_as_float(u & 0xffff0000u);
            }
        };
        two(v.x, w[0], w[1]);
        two(v.y, w[2], w[3]);
        two(v.z, w[4], w[5]);
        two(v.w, w[6], w[7]);
    } else if constexpr (std::is_same_v<T, float> && V == 4) {
        const float4 v = *reinterpret_cast<const float4*>(p);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
    } else {
        static_assert(V == 1, "vector loads: 4 f32 or 8 f16/bf16 elements, or 1");
        if constexpr (std::is_same_v<T, float>)
            w[0] = *p;
        else if constexpr (std::is_same_v<T, __half>)
            w[0] = __half2float(*p);
        else
            w[0] = __bfloat162float(*p);
    }
}
template <int V> __device__ __forceinline__ void load_x(const float* p, float (&x)[V]) {
    if constexpr (V % 4 == 0) {
#pragma unroll
        for (int i = 0; i < V; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(p + i);
            x[i] = v.x, x[i + 1] = v.y, x[i + 2] = v.z, x[i + 3] = v.w;
        }
    } else {
        static_assert(V == 1, "activation loads: 4 or 8 floats, or 1");
        x[0] = *p;
    }
}

// The matrix of a grouped launch (mmv_f_group, split_group) this block takes: blocks [first_block[i],
// first_block[i + 1]) take matrix i of n_mat
__device__ __forceinline__ int group_member(const unsigned (&first_block)[3], int n_mat) {
    return n_mat > 2 && blockIdx.x >= first_block[2]   ? 2
           : n_mat > 1 && blockIdx.x >= first_block[1] ? 1
                                                       : 0;
}

// Up to 3 float matrices on the same activations in one launch (q, k, v; gate, up: mul_mat_f_group): blocks
// [first_block[i], first_block[i + 1]) take matrix i. One matrix is a group of one. With a GLU epilogue (G != none)
// the group is gate (m[0]) and up (m[1]) of equal rows, and each block takes the same rows of both: y = act(gate) up
// into glu_y (m[0]'s strides), the two products themselves written only where their y is not null.
struct mmv_f_group {
    mmv_args m[3];
    unsigned first_block[3];
    int n_mat;
    float* glu_y;
    const uint16_t* gelu; // geglu's f16 table
};

// V elements of W as loaded (one 16-byte load, or one element), converted by load_w's rules at use
template <class T, int V> struct w_raw {
    using type = std::conditional_t<V == 1, T, std::conditional_t<std::is_same_v<T, float>, float4, uint4>>;
};
template <class T, int V> __device__ __forceinline__ void raw_to_float(const typename w_raw<T, V>::type& r, float (&w)[V]) {
    load_w<T, V>(reinterpret_cast<const T*>(&r), w);
}

// Float W: a block of BT threads takes rows_per_block rows, tpr threads each (G != none: the same row of gate and up,
// the GLU epilogue). Thread lt of a row takes elements [V lt, V lt + V), then V tpr further on, U = 4 such pieces of
// each row loaded before the first is used; the last fewer than U pieces loaded together too (predicated). Launched
// early (ctx.pdl), it asks L2 for its first U pieces while the kernel before runs. Each row's sum is taken in the same
// order (its pieces in order) whatever BT's split of k leaves it, in a group or with the epilogue.
// Measured (H100, 2026-11-26, 8B shape, f16, ncu per layer, with llama.cpp's CUDA build at 166.8 t/s tg128):
//   q, k, v one launch 23.5 us (vs 17.8 + 8.2 + 8.3 apart), gate + up + swiglu 81.6 (vs 44.2 + 44.7 + 4.2 apart),
//   down 45 (256 threads), o 18: tg128 157 -> 165.8 t/s (bf16 155 -> 166.4). Tried and slower: U = 8 (more registers,
//   fewer blocks: 154 t/s); two rows of one matrix a thread (150); 32 or 64 threads a row with U = 8 (132, 155).
// Also tried and dropped (H200, 2026-11-26, 8B f16 tg128, against 184.9-186.5 t/s for the GEMV then rope_kv's kernel,
// 21.9 + 4.3 us in ncu): q, k, v with the ropes and cache writes in the epilogue as mmv_split_kernel's, a rotation
// pair a block: both rows a thread 24.4-24.7 us in ncu, yet 185.5-185.7 t/s; a row a slot of a two-slot block
// 26.6-27.4 us, 182.4 t/s. (The fused kernel writes the rotated Q while other blocks still read x: it needed the
// memory plan to keep small inputs for a few nodes past their last reader.)
template <class T, int NC, int V, glu_act G = glu_act::none, int BT = MMV_THREADS>
static __global__ void __launch_bounds__(BT) mmv_f_kernel(mmv_f_group grp) {
    constexpr int U = V > 1 ? 4 : 1;
    constexpr int NM = G == glu_act::none ? 1 : 2; // rows a thread reads
    using raw_t = typename w_raw<T, V>::type;
    const int mi = G != glu_act::none ? 0 : group_member(grp.first_block, grp.n_mat);
    const mmv_args& a = mi == 0 ? grp.m[0] : mi == 1 ? grp.m[1] : grp.m[2];
    const int tpr = BT / a.rows_per_block;
    const int64_t row = int64_t(blockIdx.x - grp.first_block[mi]) * a.rows_per_block + threadIdx.x / tpr;
    const int lt = threadIdx.x % tpr;
    const int64_t col0 = int64_t(blockIdx.y) * NC;
    const int m_valid = int(a.m - col0 < NC ? a.m - col0 : NC);
    const int64_t i2 = blockIdx.z % a.ne2, i3 = blockIdx.z / a.ne2;
    const int64_t step = int64_t(tpr) * V;
    const T* wr[NM];
#pragma unroll
    for (int mm = 0; mm < NM; mm++) {
        const mmv_args& am = mm == 0 ? a : grp.m[1];
        wr[mm] = reinterpret_cast<const T*>(am.w + (i2 / am.r2) * am.w_nb2 + (i3 / am.r3) * am.w_nb3 +
                                            (row < a.n ? row : 0) * am.w_nb1);
    }
    if (V > 1 && row < a.n)
#pragma unroll
        for (int u = 0; u < U; u++)
            if (int64_t(lt) * V + u * step < a.k)
#pragma unroll
                for (int mm = 0; mm < NM; mm++) prefetch_l2(wr[mm] + int64_t(lt) * V + u * step);
    pdl_wait();
    pdl_trigger();

    float sum[NM][NC];
#pragma unroll
    for (int mm = 0; mm < NM; mm++)
#pragma unroll
        for (int j = 0; j < NC; j++) sum[mm][j] = 0.0f;
    if (row < a.n) {
        const float* xr = static_cast<const float*>(a.x) + i2 * a.x_nb2 + i3 * a.x_nb3 + col0 * a.x_nb1;
        // pieces i, i + step, ... (n of them, n <= U) of each row: loaded, then multiplied in order
        auto pieces = [&](int64_t i, int n) {
            raw_t w[U][NM];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (u < n)
#pragma unroll
                    for (int mm = 0; mm < NM; mm++) w[u][mm] = *reinterpret_cast<const raw_t*>(wr[mm] + i + u * step);
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (u >= n) break;
                float wf[NM][V];
#pragma unroll
                for (int mm = 0; mm < NM; mm++) raw_to_float<T, V>(w[u][mm], wf[mm]);
#pragma unroll
                for (int j = 0; j < NC; j++) {
                    if (j >= m_valid) continue;
                    float x[V];
                    load_x<V>(xr + j * a.x_nb1 + i + u * step, x);
#pragma unroll
                    for (int mm = 0; mm < NM; mm++)
#pragma unroll
                        for (int e = 0; e < V; e++) sum[mm][j] = fmaf(wf[mm][e], x[e], sum[mm][j]);
                }
            }
        };
        int64_t i = int64_t(lt) * V;
        for (; i + (U - 1) * step < a.k; i += U * step) pieces(i, U);
        if (i < a.k) pieces(i, int((a.k - i + step - 1) / step));
    }
    if constexpr (G == glu_act::none) {
        mmv_reduce_store<NC, BT>(sum[0], a, row, col0, m_valid, i2, i3);
    } else {
        float g, u;
        const bool mine = mmv_reduce<NC, BT>(sum[0], a, row, m_valid, g);
        __syncthreads(); // the first reduction's shared sums are read before the second writes them
        mmv_reduce<NC, BT>(sum[1], a, row, m_valid, u);
        if (mine) {
            const mmv_args& b = grp.m[1];
            const int64_t col = col0 + threadIdx.x % tpr;
            const int64_t o = i2 * a.y_nb2 + i3 * a.y_nb3 + col * a.y_nb1 + row;
            if (a.y) a.y[o] = g;
            if (b.y) b.y[i2 * b.y_nb2 + i3 * b.y_nb3 + col * b.y_nb1 + row] = u;
            grp.glu_y[o] = glu_apply<G>(g, u, grp.gelu);
        }
    }
}

// Rows per block: whole warps per row, about 8 work items per thread (32, 64 or 128 threads per row). One thread per
// item spent more on the block reduction than on loads: q4_0 4096 x 4096 ran at 20% of the copy bandwidth (2 items a
// thread, H100, 2026-11-22).
int rows_per_block(int64_t items_per_row) {
    return items_per_row >= 8 * 128 ? 1 : items_per_row >= 8 * 64 ? 2 : 4;
}

// Picks the column count NC (1, 2, 4 or 8) for m columns and calls launch.template operator()<NC>(grid, args); rows
// a block as rows_per_block() says for items_per_row, or rpb when given.
template <class Launch> void mmv_grid_launch(mmv_args a, int64_t items_per_row, Launch&& launch, int rpb = 0) {
    if (a.n == 0 || a.m == 0) return;
    a.rows_per_block = rpb > 0 ? rpb : rows_per_block(items_per_row);
    const int nc = a.m == 1 ? 1 : a.m == 2 ? 2 : a.m <= 4 ? 4 : MMV_MAX_COLS;
    const dim3 grid(unsigned(ceil_div(a.n, a.rows_per_block)), unsigned(ceil_div(a.m, nc)), unsigned(a.ne2 * a.ne3));
    TS_ASSERT(grid.y <= 65535 && grid.z <= 65535);
    switch (nc) {
    case 1:
        launch.template operator()<1>(grid, a);
        break;
    case 2:
        launch.template operator()<2>(grid, a);
        break;
    case 4:
        launch.template operator()<4>(grid, a);
        break;
    default:
        launch.template operator()<MMV_MAX_COLS>(grid, a);
        break;
    }
    TS_CUDA_CHECK(cudaGetLastError());
}

// y = W^T x for a block format F: x quantized into `scratch` first.
template <class F> void mmv_q_launch(mmv_args a, const float* x, shape4 sx, void* scratch, cudaStream_t stream) {
    using D = cuda_format<F>;
    static_assert(std::is_same_v<typename D::act, block_q8_1>,
                  "mmv: q8_1 activations only so far; a format with other activations adds its quantizer here");
    quantize_q8_1_launch(x, sx, static_cast<block_q8_1*>(scratch), stream);
    a.x = scratch;
    mmv_grid_launch(a, a.k / 32 * D::n_chunks, [&]<int NC>(dim3 grid, const mmv_args& args) {
        mmv_q_kernel<D, NC><<<grid, MMV_THREADS, 0, stream>>>(args);
    });
}

// Whether float W of type T and its activations take 16-byte loads (V = 4 floats or 8 halves of W, V floats of x):
// k % V == 0 and aligned rows; else one element a time.
template <class T> bool mmv_f_vec(const mmv_args& a) {
    constexpr int V = int(16 / sizeof(T));
    const auto aligned = [](const void* p, int64_t stride_bytes, int64_t to) {
        return reinterpret_cast<uintptr_t>(p) % uintptr_t(to) == 0 && stride_bytes % to == 0;
    };
    return a.k % V == 0 && aligned(a.w, a.w_nb1, 16) && aligned(a.w, a.w_nb2, 16) && aligned(a.w, a.w_nb3, 16) &&
           aligned(a.x, a.x_nb1 * 4, 16) && aligned(a.x, a.x_nb2 * 4, 16) && aligned(a.x, a.x_nb3 * 4, 16);
}

// n float matrices of type T (1-3, the same activations: m, k, ne2, ne3 and x alike) as one launch of mmv_f_kernel;
// glu != none: gate (ms[0]) and up (ms[1]) of equal rows with the GLU epilogue into glu_y. Groups and the epilogue
// need mmv_f_vec for every matrix (the caller checks); one matrix without it takes one element a load.
template <class T>
void mmv_f_launch(const cuda_context& ctx, const mmv_args* ms, int n, glu_act glu = glu_act::none,
                  float* glu_y = nullptr) {
    constexpr int V = int(16 / sizeof(T));
    const mmv_args& a0 = ms[0];
    if (a0.m == 0 || a0.ne2 * a0.ne3 == 0) return;
    mmv_f_group g{};
    g.n_mat = n;
    g.glu_y = glu_y;
    g.gelu = ctx.gelu_table;
    if (!mmv_f_vec<T>(a0)) {
        // the odd-shape fallback: one element per load, always 8 columns per block
        TS_ASSERT(n == 1 && glu == glu_act::none);
        if (a0.n == 0) return;
        g.m[0] = a0;
        g.m[0].rows_per_block = rows_per_block(a0.k);
        const dim3 grid(unsigned(ceil_div(a0.n, g.m[0].rows_per_block)), unsigned(ceil_div(a0.m, MMV_MAX_COLS)),
                        unsigned(a0.ne2 * a0.ne3));
        TS_ASSERT(grid.y <= 65535 && grid.z <= 65535);
        launch(ctx, mmv_f_kernel<T, MMV_MAX_COLS, 1>, grid, MMV_THREADS, 0, g);
        return;
    }
    // f16 / bf16: one row a block (against rows_per_block()'s 2 rows: H100, 8B shape, tg128 f16 157.6-158.0 vs 152
    // t/s, bf16 154.7-155.0 vs 146.3), 128 threads (4096 wide: 4 pieces each, one round of loads), 256 for rows of
    // more than 4 x 128 pieces (14336 wide: 7 pieces each, two rounds rather than four). Measured (H100, 2026-11-26,
    // 8B shape, tg128; ncu per layer): the down projection 45 us with 256 threads, 48 with 128, 52 with 512 (f16 tg128
    // 165.8 / 163.9 / 160.0 t/s); 256 threads for the 4096-wide rows too: 129.5 t/s. f32 keeps rows_per_block()'s
    // split, whose sums exact mode's tests hold to the CPU's (a MoE router's logits).
    const int bt = !std::is_same_v<T, float> && a0.k / V > 4 * 128 ? 256 : MMV_THREADS;
    const int rpb = std::is_same_v<T, float> ? rows_per_block(a0.k / V) : 1;
    unsigned blocks = 0;
    for (int j = 0; j < n; j++) {
        g.m[j] = ms[j];
        g.m[j].rows_per_block = rpb;
        g.first_block[j] = blocks;
        if (glu == glu_act::none || j == 0) blocks += unsigned(ceil_div(ms[j].n, rpb));
    }
    if (blocks == 0) return;
    const int nc = a0.m == 1 ? 1 : a0.m == 2 ? 2 : a0.m <= 4 ? 4 : MMV_MAX_COLS;
    const dim3 grid(blocks, unsigned(ceil_div(a0.m, nc)), unsigned(a0.ne2 * a0.ne3));
    TS_ASSERT(grid.y <= 65535 && grid.z <= 65535);
    const auto go = [&]<int NC>() {
        const auto by_bt = [&]<glu_act G>() {
            if constexpr (NC == 1) // decode; 2-8 columns take the 128-thread kernel
                if (bt == 256) return launch(ctx, mmv_f_kernel<T, NC, V, G, 256>, grid, 256, 0, g);
            launch(ctx, mmv_f_kernel<T, NC, V, G>, grid, MMV_THREADS, 0, g);
        };
        switch (glu) {
        case glu_act::none: by_bt.template operator()<glu_act::none>(); break;
        case glu_act::silu: by_bt.template operator()<glu_act::silu>(); break;
        case glu_act::gelu: by_bt.template operator()<glu_act::gelu>(); break;
        case glu_act::relu2: by_bt.template operator()<glu_act::relu2>(); break;
        }
    };
    switch (nc) {
    case 1: go.template operator()<1>(); break;
    case 2: go.template operator()<2>(); break;
    case 4: go.template operator()<4>(); break;
    default: go.template operator()<MMV_MAX_COLS>(); break;
    }
}

// ---- the split layout (weights repacked at upload; quant/format.cuh): 16-byte loads of values, scales apart ----

// Activations for the split kernels: qs [rows][k] int8 (16-byte loads), ds [rows][k / 32] (d, s) as half2; the same
// quantizer (quantize_q8_lane, ops.cuh: the CPU's integers).
static __global__ void quantize_split_kernel(const float* x, shape4 sx, int8_t* qs, __half2* ds, int64_t n_blocks) {
    pdl_wait();
    pdl_trigger();
    const int64_t g = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (g >= n_blocks) return;
    q8_store_warp(q8_block_value(x, sx, g, lane), lane, qs + g * 32, ds + g);
}

// The same with a scale per 256 values (split_acts' q8k; q8x4_store's gmax): a warp a 256-value block g (8 of the
// 32-value blocks, 8 values a lane), d and q as the CPU's q8_K takes them.
static __global__ void quantize_split_q8k_kernel(const float* x, shape4 sx, int8_t* qs, __half2* ds, int64_t n_blocks) {
    pdl_wait();
    pdl_trigger();
    const int64_t g = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / WARP_SIZE;
    const int lane = threadIdx.x % WARP_SIZE;
    if (g >= n_blocks) return;
    float v[8], amax = 0.0f;
#pragma unroll
    for (int c = 0; c < 8; c++) {
        v[c] = q8_block_value(x, sx, 8 * g + c, lane);
        amax = fmaxf(amax, fabsf(v[c]));
    }
    amax = warp_max(amax);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const float d = amax != 0.0f ? 1.0f / id : 0.0f;
#pragma unroll
    for (int c = 0; c < 8; c++) {
        const int q = __float2int_rn(v[c] * id);
        const int sum = warp_sum(q);
        qs[(8 * g + c) * 32 + lane] = int8_t(q);
        if (lane == 0) ds[8 * g + c] = __halves2half2(__float2half_rn(d), __float2half_rn(float(sum) * d));
    }
}

// The same for contiguous, 16-byte-aligned rows (x[32 g + i]), the usual case: a float4 a thread (q8x4_store), no
// index arithmetic; with xh also the values as f16 (the wgmma GEMM's activations). One warp a block with its 64-bit
// row divisions had cost the prefill 20 us a layer on the 8B (the attention output's q8_1, 512 tokens, H100).
// q8k: a scale per 256 values (n4 % 64 == 0).
static __global__ void quantize_split4_kernel(const float4* x, char4* qs, __half2* ds, uint2* xh, int64_t n4,
                                              bool q8k) {
    __shared__ float gmax[1024 / 64];
    pdl_wait();
    pdl_trigger();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const bool in = i < n4; // whole groups of 8 lanes are in or out; the out ones still take part in the shuffles
    const float4 x4 = in ? x[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float v[4] = {x4.x, x4.y, x4.z, x4.w};
    q8x4_store(v, i, in, qs, ds, xh, q8k ? block_q8k_amax(v, gmax) : -1.0f);
}

struct split_args {
    const uint8_t* qs; // weight chunks [n][k / 32][chunk_bytes]
    const uint8_t* sc; // weight scale groups [n][k / 32 / chunks_per_scale][scale_bytes]
    const int8_t* aq;  // activations [cols][k]
    const __half2* ads; // [cols][k / 32]
    float* y;
    int64_t y_nb1, y_nb2, y_nb3; // floats
    int64_t n, m, k, ne2, ne3;   // columns: m x ne2 x ne3 activation rows, W shared by all
    float out_scale;
};

constexpr int SPLIT_WARPS = 4; // warps per block of 128 threads; each warp takes R rows

// Up to 3 matrices with the same activations in one launch (q, k, v; gate, up: mul_mat_group): blocks
// [first_block[i], first_block[i + 1]) take matrix i. One matrix is a group of one.
struct split_group {
    split_args m[3];
    unsigned first_block[3];
    int n_mat;
    int prefetch; // steps of a lane's chunks asked of L2 before pdl_wait (ctx.pdl; TESSERA_CUDA_PREFETCH=0: none)
    // mmv_split_kernel's ROPE epilogue (m[0] = Q, m[1] = K, m[2] = V; heads of rope_hd values)
    rope_kv_params rope;
    int64_t rope_hd;
};

// The q, k, v GEMV's rope epilogue (rope_kv's work; mmv_split_kernel with ROPE): matrix mi (0 Q, 1 K, 2 V) in heads
// of hd rows, taken in rotation pairs. The pair at row0 (even): rows row0 and row0 + 1, except that in NEOX mode the
// pair at row0 of Q or K is a rotation pair of a head, (i, i + n_rot / 2) for pair slot i = (row0 % hd) / 2 below
// n_rot / 2, and two adjacent pass-through dimensions past n_rot for the slots after.
__device__ __forceinline__ void rope_pair_rows(const rope_kv_params& p, int64_t hd, int mi, int64_t row0,
                                               int64_t (&rows)[2]) {
    rows[0] = row0;
    rows[1] = row0 + 1;
    if (p.neox && mi < 2) {
        const int64_t half = p.n_rot / 2, base = row0 - row0 % hd, slot = row0 % hd / 2;
        rows[0] = slot < half ? base + slot : base + 2 * slot;
        rows[1] = slot < half ? base + slot + half : base + 2 * slot + 1;
    }
}

// ... and the pair's products y0, y1 (rows rows[0], rows[1] of matrix mi) for token t: the bias added (the add node's
// arithmetic: product + bias), Q and K rotated as rope_block (rope.cu) does, Q's result written, K's and V's rows
// written to their f16 caches (set_rows' conversion, round to nearest even) and K's result where asked.
__device__ __forceinline__ void rope_pair_store(const rope_kv_params& p, int64_t hd, int mi, const int64_t (&rows)[2],
                                                int64_t t, float y0, float y1) {
    const int64_t h = rows[0] / hd;                     // head
    const int64_t j0 = rows[0] % hd, j1 = rows[1] % hd; // the pair's dimensions in the head
    // rotated: normal mode's pairs below n_rot; NEOX's slots below n_rot / 2 (pair index = slot)
    const bool neox = p.neox && mi < 2;
    const int64_t pair = neox ? j0 : j0 / 2;
    const bool rotate = mi < 2 && (neox ? j1 - j0 == p.n_rot / 2 && j0 < p.n_rot / 2 : j0 < p.n_rot);
    if (const float* b = p.bias[mi]) {
        y0 += b[rows[0]];
        y1 += b[rows[1]];
    }
    if (rotate) {
        const float2 r = rope_rotate(y0, y1, rope_cos_sin(p.pos[t], pair, p.ang, p.ff));
        y0 = r.x;
        y1 = r.y;
    }
    if (mi == 0) {
        float* yr = p.yq + t * p.syq.nb[2] + h * p.syq.nb[1];
        yr[j0 * p.syq.nb[0]] = y0;
        yr[j1 * p.syq.nb[0]] = y1;
        return;
    }
    if (mi == 1 && p.yk) {
        float* yr = p.yk + t * p.syk.nb[2] + h * p.syk.nb[1];
        yr[j0 * p.syk.nb[0]] = y0;
        yr[j1 * p.syk.nb[0]] = y1;
    }
    const int64_t row = p.idx64 ? static_cast<const int64_t*>(p.idx)[t] : static_cast<const int32_t*>(p.idx)[t];
    __half* cache = mi == 1 ? p.kc : p.vc;
    if (row >= 0 && row < (mi == 1 ? p.kc_rows : p.vc_rows)) {
        __half* cr = cache + row * (mi == 1 ? p.kc_nb1 : p.vc_nb1);
        cr[rows[0]] = __float2half_rn(y0);
        cr[rows[1]] = __float2half_rn(y1);
    }
}

// This lane's share of R weight rows (chunks and scale groups at qrow, srow) dotted with NC activation rows acol[j]
// (the first ncol >= 1 of them; a caller that clamps its columns passes NC) of the split activations: chunks first,
// first + 32 S, ... of the row, U loads deep. Each column's sum is its own (no other column changes its order), so a
// column gives the same bits in any position.
template <class D, int R, int NC, int U, int S>
__device__ __forceinline__ void split_lane_sums(const uint8_t* const (&qrow)[R], const uint8_t* const (&srow)[R],
                                                const int8_t* aq, const __half2* ads, int64_t k,
                                                const int64_t (&acol)[NC], int ncol, int64_t first, float (&sum)[R][NC]) {
    using chunk_t = typename D::chunk_t;
    const int64_t nc = k / 32;
    constexpr int64_t stride = int64_t(WARP_SIZE) * S;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NC; j++) sum[r][j] = 0.0f;
#pragma unroll U
    for (int64_t c = first; c < nc; c += stride) {
        const int64_t g = c / D::chunks_per_scale;
        chunk_t q[R];
        // the scale group loaded beside the chunk, as a word: read through a pointer inside dot_split (before), its
        // load was scheduled after the chunk's arrival, a second round trip a step. With the column branch gone where
        // NC = 1 (below), measured (H200, 2026-11-29, 8B tg128, two rounds in one call, against c2f8c95 built beside,
        // the same greedy text): awq4 575.9 / 575.8 vs 529.5 / 534.6, tq2_0 770.2 / 775.7 vs 726.9 / 727.5, i2_s
        // 825.1 / 823.2 vs 791.2 / 801.4, nvfp4 513.9 / 512.0 vs 497.2 / 497.3, q8_0 382.7 / 382.7 vs 371.5 / 373.7,
        // q4_1 545.7 / 550.5 vs 538.9 / 539.6, q4_0 595.4 / 603.3 vs 596.1 / 599.5; 1B q4_0 2057 / 2063 vs 2042 /
        // 2047. Without the scale word (the branch alone) q4_0 lost 5% (566.8 / 562.1): ptxas's schedule decides.
        scale_word_t<D> sw[R];
#pragma unroll
        for (int r = 0; r < R; r++) {
            q[r] = ldg_chunk<chunk_t>(qrow[r] + c * int64_t(sizeof(chunk_t)));
            sw[r] = load_scale_word<D::scale_bytes>(srow[r] + g * D::scale_bytes);
        }
#pragma unroll
        for (int j = 0; j < NC; j++) {
            if (j > 0 && j >= ncol) break; // ncol >= 1: no branch between the steps' loads where NC = 1
            const int4* ap = reinterpret_cast<const int4*>(aq + acol[j] * k + c * 32);
            const int4 a0 = ap[0], a1 = ap[1];
            const float2 ds = __half22float2(ads[acol[j] * nc + c]);
#pragma unroll
            for (int r = 0; r < R; r++)
                sum[r][j] += D::dot_split(q[r], sw[r], int(c % D::chunks_per_scale), a0, a1, ds);
        }
    }
}

// Staged steps (split_stages<D> = 2: the formats of 16-byte chunks, NC = 1): each lane's chunk and scale word of its
// next step are copied by cp.async into its own slot of shared memory while it dots the current one. In the register
// loop (split_lane_sums) ptxas issues a step's loads only once the step before is dotted, so a warp has one step in
// flight. The first step is issued before the PDL wait. A scale group of 1 or 2 bytes comes in the aligned 4-byte
// word that holds it (the scale arrays are padded to a 4-byte word: weight_copy_bytes).
// Measured (H200, tg128, 2026-11-29, two rounds in one call against the register loop): 8B q4_1 +8%, nvfp4 +6%,
// awq4 +3%, q4_0 +2%, mxfp4 even, 1B q4_0 +3%. 4 slots a lane instead of 2: slower than 2 for every format (q4_0
// -11%). Staged 8-byte chunks (tq2_0 -25%, i2_s even) and 32-byte ones (q8_0 -6%) lost, so those
// formats keep the register loop.
// The copies, the wait and the slot reads are volatile asm without a memory clobber: kept in order among themselves,
// while loads the compiler may hoist (e2m1_lows_loaded's) still leave the loop.
// (q4_K's 8-byte scale groups: the register loop, for now)
template <class D>
inline constexpr int split_stages = std::is_same_v<typename D::chunk_t, uint4> && D::scale_bytes <= 4 ? 2 : 0;
template <int B> __device__ __forceinline__ void cp_async_lane(uint32_t dst, const void* src) {
    static_assert(B == 4 || B == 16, "cp.async copies a chunk (16 bytes) or a scale word (4)");
    if constexpr (B == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src));
}
// shared-memory reads at 32-bit shared addresses
__device__ __forceinline__ uint32_t lds_u32(uint32_t a) {
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ uint4 lds_u4(uint32_t a) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
    return v;
}
template <class D, int R, int P> struct split_stage {
    typename D::chunk_t q[P][R][WARP_SIZE];
    uint32_t s[P][R][WARP_SIZE];
};
template <class D, int R, int P> __device__ __forceinline__ split_stage<D, R, P>& split_stage_of(int warp) {
    __shared__ split_stage<D, R, P> st[SPLIT_WARPS];
    return st[warp];
}
template <class D> __device__ __forceinline__ const uint8_t* scale_group_at(const uint8_t* srow, int64_t c) {
    return srow + (c / D::chunks_per_scale) * D::scale_bytes;
}
// A lane's slots: chunk (slot, r) at qa + slot QSLOT + r QROW, its scale word at sa + slot SSLOT + r SROW (shared
// addresses, computed once: split_stage_lane)
template <class D, int R, int P> struct split_stage_lane {
    static constexpr uint32_t QROW = WARP_SIZE * sizeof(typename D::chunk_t), QSLOT = R * QROW;
    static constexpr uint32_t SROW = WARP_SIZE * 4, SSLOT = R * SROW;
    uint32_t qa, sa;
    __device__ split_stage_lane(split_stage<D, R, P>& st, int lane)
        : qa(smem_addr(&st.q[0][0][lane])), sa(smem_addr(&st.s[0][0][lane])) {}
};
template <class D, int R, int P>
__device__ __forceinline__ void split_stage_issue(const split_stage_lane<D, R, P>& sl, const uint8_t* const (&qrow)[R],
                                                  const uint8_t* const (&srow)[R], int64_t c, int slot) {
    using chunk_t = typename D::chunk_t;
    using L = split_stage_lane<D, R, P>;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const uint8_t* src = qrow[r] + c * int64_t(sizeof(chunk_t));
        const uint32_t dst = sl.qa + uint32_t(slot) * L::QSLOT + r * L::QROW;
        cp_async_lane<16>(dst, src);
        if constexpr (D::scale_bytes > 0)
            cp_async_lane<4>(sl.sa + uint32_t(slot) * L::SSLOT + r * L::SROW,
                             reinterpret_cast<const void*>(uintptr_t(scale_group_at<D>(srow[r], c)) & ~uintptr_t(3)));
    }
}
// the lane's first P - 1 steps (or fewer), one commit group each
template <class D, int R, int P, int S>
__device__ __forceinline__ void split_stage_prologue(split_stage<D, R, P>& st, const uint8_t* const (&qrow)[R],
                                                     const uint8_t* const (&srow)[R], int64_t nc, int64_t first,
                                                     int lane) {
    const split_stage_lane<D, R, P> sl(st, lane);
#pragma unroll
    for (int p = 0; p < P - 1; p++) {
        const int64_t c = first + int64_t(p) * WARP_SIZE * S;
        if (c < nc) split_stage_issue<D, R, P>(sl, qrow, srow, c, p);
        cp_async_commit();
    }
}
template <class D, int R, int P, int S>
__device__ __forceinline__ void split_lane_sums_async(split_stage<D, R, P>& st, const uint8_t* const (&qrow)[R],
                                                      const uint8_t* const (&srow)[R], const int8_t* aq,
                                                      const __half2* ads, int64_t k, int64_t acol, int64_t first,
                                                      int lane, float (&sum)[R][1]) {
    using chunk_t = typename D::chunk_t;
    using L = split_stage_lane<D, R, P>;
    const int64_t nc = k / 32;
    constexpr int64_t stride = int64_t(WARP_SIZE) * S;
    // a 1- or 2-byte scale group's place in its word: the same at every step of the lane (a step moves its group by
    // a multiple of 4 bytes)
    static_assert(D::scale_bytes == 0 || D::scale_bytes == 4 ||
                      (stride % D::chunks_per_scale == 0 && stride / D::chunks_per_scale * D::scale_bytes % 4 == 0),
                  "a lane's scale group keeps its place in the word");
    const int steps = first < nc ? int((nc - 1 - first) / stride) + 1 : 0;
    const L sl(st, lane);
    uint32_t shift[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        sum[r][0] = 0.0f;
        shift[r] = uint32_t(uintptr_t(scale_group_at<D>(srow[r], first)) & 3) * 8;
    }
#pragma unroll 1
    for (int s = 0; s < steps; s++) {
        if (s + P - 1 < steps) split_stage_issue<D, R, P>(sl, qrow, srow, first + (s + P - 1) * stride, (s + P - 1) % P);
        cp_async_commit();
        cp_async_wait_group<P - 1>();
        const uint32_t slot = uint32_t(s % P);
        const int64_t c = first + s * stride;
        const int4* ap = reinterpret_cast<const int4*>(aq + acol * k + c * 32);
        const int4 a0 = ap[0], a1 = ap[1];
        const float2 ds = __half22float2(ads[acol * nc + c]);
#pragma unroll
        for (int r = 0; r < R; r++) {
            const chunk_t q = lds_u4(sl.qa + slot * L::QSLOT + r * L::QROW);
            uint32_t sw = 0;
            if constexpr (D::scale_bytes > 0) {
                sw = lds_u32(sl.sa + slot * L::SSLOT + r * L::SROW);
                if constexpr (D::scale_bytes < 4) sw >>= shift[r];
            }
            sum[r][0] += D::dot_split(q, sw, int(c % D::chunks_per_scale), a0, a1, ds);
        }
    }
}

// The lanes' sums of each warp added (warp_sum), then the S parts of a row group (warps warp .. warp + S - 1 of the
// block) added in part order in shared memory; true in the warp that holds the row group's sums (part 0). Every
// thread of the block must call it.
template <int R, int NC, int S> __device__ __forceinline__ bool split_parts_reduce(float (&sum)[R][NC], int warp, int lane) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NC; j++) sum[r][j] = warp_sum(sum[r][j]);
    if constexpr (S > 1) {
        __shared__ float part_sum[SPLIT_WARPS][R][NC];
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int j = 0; j < NC; j++) part_sum[warp][r][j] = sum[r][j];
        }
        __syncthreads();
        if (warp % S != 0) return false;
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int j = 0; j < NC; j++)
#pragma unroll
                for (int p = 1; p < S; p++) sum[r][j] += part_sum[warp + p][r][j];
    }
    return true;
}

// Grid (row groups / (4 / S), columns / NC). A row group is R rows, taken by S warps of the block: warp part p of a
// group takes chunks 32 p + l, 32 (S + p) + l, ... (lane l), so each step the group's warps read 32 S consecutive
// chunks (256 to 1024 bytes a warp), each lane with one 8/16/32-byte load, and each activation chunk a lane loads
// serves R rows. S > 1 (split over k) where the rows alone give too few warps to keep HBM busy (mmv_split_parts):
// the S partial sums of a row are added in shared memory, in part order. P > 0 (split_stages: NC = 1, 16-byte
// chunks): a lane's next step is copied into shared memory while it dots the current one (split_lane_sums_async).
//
// ROPE (q, k, v: rope_kv's work in the epilogue): a row group's two rows are a rotation pair of a head (adjacent rows
// in "normal" mode; rows i and i + n_rot / 2 of the head in NEOX mode), so the warp that has both sums adds their
// biases (qwen2's), rotates them (Q, K) and writes Q's result and K's and V's f16 cache rows itself, with the add's
// and rope_kv_kernel's arithmetic (rope.cu): the same bits as the GEMV followed by those kernels.
template <class D, int NC, int R, int U, int S, bool ROPE = false, int P = 0>
static __global__ void __launch_bounds__(SPLIT_WARPS * WARP_SIZE) mmv_split_kernel(split_group grp) {
    static_assert(S == 1 || S == 2 || S == 4, "a block's 4 warps take 4 / S row groups");
    static_assert(!ROPE || R == 2, "a rotation pair is a row group");
    using chunk_t = typename D::chunk_t;
    const int mi = group_member(grp.first_block, grp.n_mat);
    const split_args& a = mi == 0 ? grp.m[0] : mi == 1 ? grp.m[1] : grp.m[2];
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int part = warp % S;
    const int64_t row0 = (int64_t(blockIdx.x - grp.first_block[mi]) * (SPLIT_WARPS / S) + warp / S) * R;
    const int64_t cols = a.m * a.ne2 * a.ne3;
    const int64_t col0 = int64_t(blockIdx.y) * NC;
    const int64_t nc = a.k / 32, ng = nc / D::chunks_per_scale;
    const int64_t first = lane + int64_t(part) * WARP_SIZE;
    constexpr int64_t stride = int64_t(WARP_SIZE) * S;
    // the group's rows: row0, row0 + 1, ...; with the ROPE epilogue a rotation pair (rope_pair_rows)
    int64_t rows[R];
#pragma unroll
    for (int r = 0; r < R; r++) rows[r] = row0 + r;
    if constexpr (ROPE) rope_pair_rows(grp.rope, grp.rope_hd, mi, row0, rows);
    const uint8_t* qrow[R];
    const uint8_t* srow[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t row = rows[r] < a.n ? rows[r] : a.n - 1; // rows past n: computed, not stored
        qrow[r] = a.qs + row * nc * int64_t(sizeof(chunk_t));
        srow[r] = a.sc + row * ng * D::scale_bytes;
    }
    // Launched early (ctx.pdl): while the kernel before still runs, each lane asks L2 for the weight chunks (and
    // their scales) of its first steps (prefetch_steps), which no kernel writes; then it waits for the activations. Measured (H100,
    // 8B q4_0 tg128): 346 -> 351-353 t/s; the block's whole rows by cp.async.bulk.prefetch instead: 324-328 (slower
    // than none: 14336-row matrices ask for more than L2 keeps); to L1 instead of L2: 349-353. A staged kernel (P > 0)
    // copies its first step into shared memory instead (split_stage_prologue).
    if constexpr (P > 0) {
        static_assert(NC == 1, "staged steps: one column");
        split_stage_prologue<D, R, P, S>(split_stage_of<D, R, P>(warp), qrow, srow, nc, first, lane);
    } else if (grp.prefetch > 0) {
        for (int u = 0; u < grp.prefetch; u++) {
            const int64_t c = first + u * stride;
            if (c >= nc) break;
#pragma unroll
            for (int r = 0; r < R; r++) {
                prefetch_l2(qrow[r] + c * int64_t(sizeof(chunk_t)));
                if constexpr (D::scale_bytes > 0) // i2_s has none (sc may be null: never ask for an unmapped address)
                    prefetch_l2(srow[r] + (c / D::chunks_per_scale) * D::scale_bytes);
            }
        }
    }
    pdl_wait();
    pdl_trigger();
    int64_t acol[NC];
#pragma unroll
    for (int j = 0; j < NC; j++) acol[j] = min(col0 + j, cols - 1); // columns past cols: computed, not stored
    float sum[R][NC];
    if constexpr (P > 0)
        split_lane_sums_async<D, R, P, S>(split_stage_of<D, R, P>(warp), qrow, srow, a.aq, a.ads, a.k, acol[0], first,
                                          lane, sum);
    else
        split_lane_sums<D, R, NC, U, S>(qrow, srow, a.aq, a.ads, a.k, acol, NC, first, sum);
    if (!split_parts_reduce<R, NC, S>(sum, warp, lane)) return;
    if constexpr (ROPE) {
        if (lane != 0 || row0 >= a.n) return; // n is even: a pair is in or out whole
#pragma unroll
        for (int j = 0; j < NC; j++)
            if (col0 + j < cols)
                rope_pair_store(grp.rope, grp.rope_hd, mi, rows, col0 + j, sum[0][j] * a.out_scale,
                                sum[1][j] * a.out_scale);
    } else {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int j = 0; j < NC; j++) {
                const int64_t c = col0 + j;
                if (lane == 0 && row0 + r < a.n && c < cols)
                    a.y[column_offset(c, a.m, a.ne2, a.ne3, a.y_nb1, a.y_nb2, a.y_nb3) + row0 + r] =
                        sum[r][j] * a.out_scale;
            }
    }
}

// How many steps of its chunks each lane of a GEMV launched early asks L2 for while it waits, at most:
// TESSERA_CUDA_PREFETCH=N (0: none, a side-by-side switch); 2 by default (prefetch_for).
int prefetch_steps() {
    static const int steps = [] {
        const char* e = std::getenv("TESSERA_CUDA_PREFETCH");
        return e && *e ? std::max(std::atoi(e), 0) : 2;
    }();
    return steps;
}

// The steps a lane asks L2 for before its PDL wait: half of its steps of a row (nc chunks in S parts), rounded up,
// at most prefetch_steps(). Measured (H200, 2026-11-28, two rounds alternated, tg128) with 1 and 2 steps on every
// matrix: the 1B (1 or 2 steps a lane: this rule gives it 1 everywhere) 2077 / 2077 at 1 vs 2019 / 2055 at 2; the
// 8B (4 to 7 steps, o 2: this rule gives 2, o 1) 582.5 / 584.0 at 1 vs 584.6 / 585.6 at 2; 3 steps cost the 8B 3.7%.
int prefetch_for(int64_t nc, int S) {
    const int64_t steps = ceil_div(nc, int64_t(WARP_SIZE) * S);
    return int(std::min<int64_t>(prefetch_steps(), (steps + 1) / 2));
}

// TESSERA_CUDA_MMV_PARTS=1, 2 or 4: every split GEMV with that many warps per row group (benchmarks); unset or any
// other value: chosen per launch by mmv_split_parts
int forced_split_parts() {
    static const int v = [] {
        const char* e = std::getenv("TESSERA_CUDA_MMV_PARTS");
        const int n = e ? std::atoi(e) : 0;
        return n == 1 || n == 2 || n == 4 ? n : 0;
    }();
    return v;
}

// Warps per row group (S of mmv_split_kernel) for `groups` row groups of nc chunks each. One warp a group while that
// gives at least 18 warps for each SM; else the k-split that gets there (at most 4), as long as every lane keeps at
// least one chunk of a row. A warp has only ~2 loads of a row in flight, so HBM needs many warps, but every split
// also shortens a warp's stream against its fixed costs (the PDL wait, the reductions, the stores). Measured (H200,
// 2026-11-28, tests/bench/env_ab.sh, tg128, two rounds alternated in one call) with the threshold at 48 / 24 / 16 /
// 12 / 8 / no split (TESSERA_CUDA_MMV_WARPS=N, TESSERA_CUDA_MMV_PARTS=1): 8B q4_0 555 / 571 / 584-586 / 570 / 568 /
// 565, the same at depth 4096 473 / 479 / 487-491; a 70B row member's shapes (8192 wide, 5120 q/k/v rows, FF 14336)
// 146.0 / 146.2 / 148.0 / 148.0 / 148.0 / 148.2; 1B 2013-2043 at 48 and 16 (the same kernels), 1961-1987 at 8, 1867-
// 1895 unsplit. At 16 the 8B's q/k/v (3072 groups) run unsplit, o (2048 groups) in 2 parts and down in 2, not 4.
// The measured boundary lies between the 8B's o (2048 groups on 132 SMs: wants 2 parts) and the member's q/k/v (2560:
// wants 1), i.e. 15.5 to 19.4 warps an SM; 18 sits inside it with margin both ways and picks the same splits as 16
// on all three files. On the staged GEMV (H200, 2026-11-29, same method): 8B q4_0 623 / 605 / 575 at 18 / 24 / 32,
// awq4 628 / 610 / 582, nvfp4 556 / 543 / 518, q8_0 384 / 375 / 370; 1B 2143-2189 at 12 to 32 (noise).
// (H100, session 6, against no split: 1B 1520-1537 vs 1335-1391, 8B 407-415 vs 378-382.)
int mmv_split_parts(int64_t groups, int64_t nc, int n_sm) {
    if (const int f = forced_split_parts()) return f;
    static const int64_t warps_per_sm = [] {
        const char* e = std::getenv("TESSERA_CUDA_MMV_WARPS");
        return e && std::atoi(e) > 0 ? int64_t(std::atoi(e)) : int64_t(18);
    }();
    int s = 1;
    while (s < 4 && groups * s < warps_per_sm * std::max(n_sm, 1) && nc >= int64_t(WARP_SIZE) * 2 * s) s *= 2;
    return s;
}

// y_i = W_i^T x for 1 to 3 split weights of format F with the same x (quantized: acts), in one launch; with rope
// (three: q, k, v), rope_kv's work in the epilogue instead of writing y.
template <class F>
void mmv_split_launch(const cuda_context& ctx, const split_weight* const* w, split_args* args, int n_mat,
                      split_acts acts, const rope_kv_params* rope = nullptr, int64_t rope_hd = 0) {
    using D = cuda_format<F>;
    constexpr int R = 2;
    int64_t groups = 0;
    for (int i = 0; i < n_mat; i++) groups += ceil_div(args[i].n, R);
    const int S = mmv_split_parts(groups, args[0].k / 32, ctx.n_sm);
    split_group grp{};
    unsigned blocks = 0;
    for (int i = 0; i < n_mat; i++) {
        split_args& a = args[i];
        a.qs = w[i]->qs;
        a.sc = w[i]->sc;
        a.aq = acts.q;
        a.ads = acts.ds;
        a.out_scale = w[i]->out_scale;
        grp.m[i] = a;
        grp.first_block[i] = blocks;
        blocks += unsigned(ceil_div(a.n, SPLIT_WARPS / S * R));
    }
    grp.n_mat = n_mat;
    grp.prefetch = ctx.pdl ? prefetch_for(args[0].k / 32, S) : 0;
    if (rope) {
        TS_ASSERT(n_mat == 3 && rope_hd > 0 && rope_hd % 2 == 0 && args[0].n % 2 == 0 && args[1].n % 2 == 0 &&
                  args[2].n % 2 == 0);
        grp.rope = *rope;
        grp.rope_hd = rope_hd;
    }
    const int64_t cols = args[0].m * args[0].ne2 * args[0].ne3;
    if (cols == 0 || blocks == 0) return;
    const int nc = cols == 1 ? 1 : cols == 2 ? 2 : cols <= 4 ? 4 : MMV_MAX_COLS;
    const dim3 grid(blocks, unsigned(ceil_div(cols, nc)));
    TS_ASSERT(grid.y <= 65535);
    const dim3 block(SPLIT_WARPS * WARP_SIZE);
    // U = 2: a lane's chunk loads unrolled 2 deep. 4 deep (all of a 4096-wide row's chunks of a lane in flight at
    // once) measured slower (H100, 2026-11-22: q4_0 4096x4096 40% vs 44% of the copy bandwidth, 7B tg128 276 vs 282).
    constexpr int U = 2;
    const auto pick = [&]<int NC, bool RP>() {
        if constexpr (NC == 1 && split_stages<D> > 0) {
            constexpr int P = split_stages<D>;
            return S == 1 ? mmv_split_kernel<D, NC, R, U, 1, RP, P>
                 : S == 2 ? mmv_split_kernel<D, NC, R, U, 2, RP, P>
                          : mmv_split_kernel<D, NC, R, U, 4, RP, P>;
        }
        return S == 1 ? mmv_split_kernel<D, NC, R, U, 1, RP> : S == 2 ? mmv_split_kernel<D, NC, R, U, 2, RP>
                                                                      : mmv_split_kernel<D, NC, R, U, 4, RP>;
    };
    const auto pick_nc = [&]<bool RP>() {
        return nc == 1   ? pick.template operator()<1, RP>()
               : nc == 2 ? pick.template operator()<2, RP>()
               : nc == 4 ? pick.template operator()<4, RP>()
                         : pick.template operator()<MMV_MAX_COLS, RP>();
    };
    launch(ctx, rope ? pick_nc.template operator()<true>() : pick_nc.template operator()<false>(), grid, block, 0,
           grp);
}

// ---- mul_mat_id: the experts' matrices against the (slot, token) pairs that chose them ----

// The pairs grouped by expert and cut into tiles of at most nc pairs of one expert (moe_route_kernel), for
// mmv_id_kernel: pairs[] holds pair ids t * n_used + i, an expert's pairs one after another; tile y is (expert,
// first pair, count). With `direct` (decode: a few tokens) there is no grouping: tile y is pair y itself, its expert
// read from ids.
struct id_args {
    const uint8_t* qs; // the experts' chunks, expert after expert ([n_expert][n][k / 32][chunk_bytes])
    const uint8_t* sc; // their scale groups, likewise
    const int8_t* aq;  // activations: n_b rows a token, [n_tok][n_b][k]
    const __half2* ads;
    float* y;
    int64_t y_nb1, y_nb2; // floats between slots, tokens
    int64_t n, k, n_expert, n_used, n_b;
    const int32_t* ids; // (n_used, n_tok), ids_nb1 ints between tokens
    int64_t ids_nb1;
    bool direct;
    const int* pairs;
    const int4* tiles; // (expert, first pair, count, -)
    const int* n_tiles;
    float out_scale;
    // a second matrix of the same shape and format against the same pairs (gate and up: mul_mat_id_group): tiles
    // tiles_per_mat and on take qs2, sc2, y2
    const uint8_t* qs2;
    const uint8_t* sc2;
    float* y2;
    float out_scale2;
    int64_t tiles_per_mat;
    // the epilogue (id_map's): the experts' biases of each matrix (or null), bias_nb1 floats an expert; the pairs'
    // weights (or null), slot + token pw_nb1
    const float* bias;
    const float* bias2;
    int64_t bias_nb1;
    const float* pw;
    int64_t pw_nb1;
};

// Tile y's expert and its pairs' activation rows, output offsets and weight offsets (the first ncol of NC); false
// past the last tile
template <int NC>
__device__ __forceinline__ bool id_tile(const id_args& a, int64_t y, int64_t& expert, int64_t (&acol)[NC],
                                        int64_t (&ycol)[NC], int64_t (&wcol)[NC], int& ncol) {
    int64_t first = y;
    if (a.direct) {
        const int64_t i = y % a.n_used, t = y / a.n_used;
        expert = a.ids[i + t * a.ids_nb1];
        ncol = 1;
    } else {
        if (y >= *a.n_tiles) return false;
        const int4 tile = a.tiles[y];
        expert = tile.x;
        first = tile.y;
        ncol = min(tile.z, NC);
    }
#pragma unroll
    for (int j = 0; j < NC; j++) {
        const int64_t p = j < ncol ? (a.direct ? first : int64_t(a.pairs[first + j])) : 0;
        const int64_t i = p % a.n_used, t = p / a.n_used;
        acol[j] = i % a.n_b + t * a.n_b;
        ycol[j] = i * a.y_nb1 + t * a.y_nb2;
        wcol[j] = i + t * a.pw_nb1;
    }
    return expert >= 0 && expert < a.n_expert; // a bad id (not from top_k) computes nothing: its rows stay NaN
}

// Grid (row groups of one expert / (4 / S), tiles): mmv_split_kernel's loop over the tile's expert matrix, each
// weight chunk loaded once for the tile's pairs. The ids come from the kernel before (no early prefetch).
template <class D, int NC, int R, int U, int S>
static __global__ void __launch_bounds__(SPLIT_WARPS * WARP_SIZE) mmv_id_kernel(id_args a) {
    using chunk_t = typename D::chunk_t;
    pdl_wait();
    pdl_trigger();
    int64_t expert = 0, acol[NC], ycol[NC], wcol[NC];
    int ncol = 0;
    const bool second = blockIdx.y >= a.tiles_per_mat;
    if (!id_tile<NC>(a, blockIdx.y - (second ? a.tiles_per_mat : 0), expert, acol, ycol, wcol, ncol))
        return; // uniform over the block
    const uint8_t* qs = second ? a.qs2 : a.qs;
    const uint8_t* sc = second ? a.sc2 : a.sc;
    float* y = second ? a.y2 : a.y;
    const float out_scale = second ? a.out_scale2 : a.out_scale;
    const float* bias = second ? a.bias2 : a.bias;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int64_t row0 = (int64_t(blockIdx.x) * (SPLIT_WARPS / S) + warp / S) * R;
    const int64_t nc = a.k / 32, ng = nc / D::chunks_per_scale;
    const uint8_t* qrow[R];
    const uint8_t* srow[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int64_t row = expert * a.n + (row0 + r < a.n ? row0 + r : a.n - 1); // rows past n: computed, not stored
        qrow[r] = qs + row * nc * int64_t(sizeof(chunk_t));
        srow[r] = sc + row * ng * D::scale_bytes;
    }
    float sum[R][NC];
    split_lane_sums<D, R, NC, U, S>(qrow, srow, a.aq, a.ads, a.k, acol, ncol, lane + int64_t(warp % S) * WARP_SIZE,
                                    sum);
    if (!split_parts_reduce<R, NC, S>(sum, warp, lane)) return;
    if (lane != 0) return;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int j = 0; j < NC; j++)
            if (j < ncol && row0 + r < a.n)
                y[ycol[j] + row0 + r] =
                    id_epilogue(sum[r][j] * out_scale, bias, expert * a.bias_nb1 + row0 + r, a.pw, wcol[j]);
}

// Float experts (f32 / f16 / bf16, the file's layout, expert e at w + e w_nb2 bytes): one warp a row, tile = pair
// (direct); x f32 rows [n_tok][n_b][k]. The dot in f32 in lane order (not ggml's order: the fast path's tolerance).
template <class T>
static __global__ void __launch_bounds__(MMV_THREADS) mmv_id_f_kernel(id_args a, const uint8_t* w, int64_t w_nb1,
                                                                       int64_t w_nb2, const float* x) {
    pdl_wait();
    pdl_trigger();
    int64_t expert = 0, acol[1], ycol[1], wcol[1];
    int ncol = 0;
    if (!id_tile<1>(a, blockIdx.y, expert, acol, ycol, wcol, ncol)) return;
    const int64_t row = int64_t(blockIdx.x) * (MMV_THREADS / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    if (row >= a.n) return;
    const int lane = threadIdx.x % WARP_SIZE;
    const T* wr = reinterpret_cast<const T*>(w + expert * w_nb2 + row * w_nb1);
    const float* xr = x + acol[0] * a.k;
    float s = 0.0f;
    for (int64_t i = lane; i < a.k; i += WARP_SIZE) {
        float wv[1];
        load_w<T, 1>(wr + i, wv);
        s = fmaf(wv[0], xr[i], s);
    }
    s = warp_sum(s);
    if (lane == 0) a.y[ycol[0] + row] = s;
}

// Which experts the pairs chose, as id_args' pairs and tiles: per expert a count (shared-memory atomics), its first
// pair and first tile (an exclusive scan over the experts in order: each thread a run of experts, warps' shuffles,
// then the warps' totals), each expert's run cut into tiles of nc, then each pair to its slot. One block of
// ROUTE_BLOCK threads; 2 n_expert ints of shared memory.
constexpr int ROUTE_BLOCK = 1024;
static __global__ void __launch_bounds__(ROUTE_BLOCK) moe_route_kernel(const int32_t* ids, int64_t ids_nb1,
                                                                        int64_t n_used, int64_t n_tok, int n_expert,
                                                                        int nc, int* pairs, int4* tiles, int* n_tiles) {
    extern __shared__ int route_s[]; // count [n_expert], start [n_expert]
    __shared__ int warp_c[ROUTE_BLOCK / WARP_SIZE], warp_t[ROUTE_BLOCK / WARP_SIZE];
    int* cnt = route_s;
    int* start = route_s + n_expert;
    pdl_wait();
    pdl_trigger();
    const int64_t n_pairs = n_used * n_tok;
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int64_t p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        const int32_t e = ids[p % n_used + p / n_used * ids_nb1];
        if (e >= 0 && e < n_expert) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    // this thread's experts e0 .. e1: their pairs and tiles, then everything before them
    const int per = (n_expert + ROUTE_BLOCK - 1) / ROUTE_BLOCK;
    const int e0 = min(n_expert, int(threadIdx.x) * per), e1 = min(n_expert, e0 + per);
    int c = 0, t = 0;
    for (int e = e0; e < e1; e++) {
        c += cnt[e];
        t += (cnt[e] + nc - 1) / nc;
    }
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    int ci = c, ti = t; // inclusive within the warp
#pragma unroll
    for (int o = 1; o < WARP_SIZE; o *= 2) {
        const int cu = __shfl_up_sync(0xffffffffu, ci, o), tu = __shfl_up_sync(0xffffffffu, ti, o);
        if (lane >= o) ci += cu, ti += tu;
    }
    if (lane == WARP_SIZE - 1) warp_c[warp] = ci, warp_t[warp] = ti;
    __syncthreads();
    if (warp == 0) {
        int wc = warp_c[lane], wt = warp_t[lane]; // ROUTE_BLOCK / WARP_SIZE == WARP_SIZE warps
#pragma unroll
        for (int o = 1; o < WARP_SIZE; o *= 2) {
            const int cu = __shfl_up_sync(0xffffffffu, wc, o), tu = __shfl_up_sync(0xffffffffu, wt, o);
            if (lane >= o) wc += cu, wt += tu;
        }
        warp_c[lane] = wc, warp_t[lane] = wt; // inclusive over the warps
    }
    __syncthreads();
    int at = ci - c + (warp ? warp_c[warp - 1] : 0), nt = ti - t + (warp ? warp_t[warp - 1] : 0);
    for (int e = e0; e < e1; e++) {
        start[e] = at;
        for (int f = 0; f < cnt[e]; f += nc) tiles[nt++] = make_int4(e, at + f, min(nc, cnt[e] - f), 0);
        at += cnt[e];
    }
    if (threadIdx.x == ROUTE_BLOCK - 1) *n_tiles = warp_t[WARP_SIZE - 1];
    __syncthreads(); // every count read
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int64_t p = threadIdx.x; p < n_pairs; p += blockDim.x) {
        const int32_t e = ids[p % n_used + p / n_used * ids_nb1];
        if (e >= 0 && e < n_expert) pairs[start[e] + atomicAdd(&cnt[e], 1)] = int(p);
    }
}
static_assert(ROUTE_BLOCK == WARP_SIZE * WARP_SIZE, "one warp scans the warps' totals");

// Tiles of NC pairs at most: every expert's last tile may be partial
int64_t id_max_tiles(int64_t n_pairs, int64_t n_expert, int nc) {
    return n_pairs / nc + std::min(n_expert, n_pairs);
}
constexpr int ID_NC = MMV_MAX_COLS;

// Whether mul_mat_id of n_tok tokens takes pair after pair (decode) rather than grouping them by expert
bool id_direct(int64_t n_tok) {
    return n_tok <= 8;
}

// Bytes after the activations: the route (n_tiles, tiles, pairs)
size_t id_route_bytes(int64_t n_pairs, int64_t n_expert) {
    return 256 + size_t(id_max_tiles(n_pairs, n_expert, ID_NC)) * sizeof(int4) + size_t(n_pairs) * sizeof(int);
}

// The decode GEMV's arguments for node `dst` (a mul_mat of split weight sw)
split_args gemv_args(cuda_context& ctx, const split_weight& sw, tensor& dst) {
    const tensor* x = dst.src[1];
    const shape4 sy = shape_of(dst, 4);
    split_args a{};
    a.y = ctx.as<float>(&dst);
    a.y_nb1 = sy.nb[1];
    a.y_nb2 = sy.nb[2];
    a.y_nb3 = sy.nb[3];
    a.n = sw.n;
    a.m = x->ne[1];
    a.k = sw.k;
    a.ne2 = x->ne[2];
    a.ne3 = x->ne[3];
    return a;
}

bool split_enabled() {
    static const bool enabled = env_switch_on("TESSERA_CUDA_SPLIT");
    return enabled;
}

bool has_split_type(type t) {
    bool ok = false;
    visit_format(t, [&]<class F>() { ok = has_split<F>::value; });
    return ok;
}

} // namespace

size_t split_acts_bytes(int64_t k, int64_t cols) {
    const size_t q = (size_t(cols * k) + 255) / 256 * 256, ds = size_t(cols * (k / 32)) * sizeof(__half2);
    return q + (ds + 255) / 256 * 256;
}

split_acts split_activation_ptrs(const cuda_context& ctx, const tensor& x) {
    const int64_t k = x.ne[0], cols = x.ne[1] * x.ne[2] * x.ne[3];
    split_acts acts;
    acts.q = static_cast<int8_t*>(ctx.scratch);
    acts.ds = reinterpret_cast<__half2*>(static_cast<uint8_t*>(ctx.scratch) + (size_t(cols * k) + 255) / 256 * 256);
    TS_ASSERT(k % 32 == 0 && ctx.scratch_size >= split_acts_bytes(k, cols));
    return acts;
}

bool mul_mat_quantizes_split(const cuda_context& ctx, const tensor& node) {
    const tensor* w = node.src[0];
    const tensor* x = node.src[1];
    if (!ctx.split || w->view_src || ctx.split->find(w) == ctx.split->end()) return false;
    if (x->t != type::f32 || !x->is_contiguous() || x->ne[0] % 32 != 0) return false;
    if (node.o == op::mul_mat_id) return true; // every split path of mul_mat_id takes the q8_1 activations
    return node.o == op::mul_mat && (!gemm_split_wanted(x->ne[1] * x->ne[2] * x->ne[3]) || gemm_uses_q8(w->t));
}

bool acts_q8k(type w) {
    bool q8k = false;
    visit_format(w, [&]<class F>() { q8k = F::dot_type == type::q8_k; });
    return q8k;
}

split_acts split_activations(cuda_context& ctx, const tensor& x, type w, __half* xh) {
    const shape4 sx = shape_of(x, 4);
    const int64_t k = x.ne[0], cols = x.ne[1] * x.ne[2] * x.ne[3], n_blocks = k / 32 * cols;
    split_acts acts = split_activation_ptrs(ctx, x);
    acts.q8k = acts_q8k(w);
    TS_ASSERT(!acts.q8k || k % 256 == 0);
    if (ctx.act_src == &x && ctx.act_q8k == acts.q8k &&
        (ctx.act_form == cuda_context::act_split_q8 || ctx.act_form == cuda_context::act_split_q8_f16))
        return acts; // q, k, v (gate, up) share them
    const float* xp = ctx.as<float>(&x);
    const bool vec = x.is_contiguous() && aligned16(xp) && aligned16(xh);
    if (n_blocks > 0) {
        constexpr int threads = 256;
        if (vec)
            launch(ctx, quantize_split4_kernel, unsigned(ceil_div(n_blocks * 8, threads)), threads, 0,
                   reinterpret_cast<const float4*>(xp), reinterpret_cast<char4*>(const_cast<int8_t*>(acts.q)),
                   const_cast<__half2*>(acts.ds), reinterpret_cast<uint2*>(xh), n_blocks * 8, acts.q8k);
        else if (acts.q8k)
            launch(ctx, quantize_split_q8k_kernel, unsigned(ceil_div(n_blocks / 8 * WARP_SIZE, threads)), threads, 0,
                   xp, sx, const_cast<int8_t*>(acts.q), const_cast<__half2*>(acts.ds), n_blocks / 8);
        else
            launch(ctx, quantize_split_kernel, unsigned(ceil_div(n_blocks * WARP_SIZE, threads)), threads, 0, xp, sx,
                   const_cast<int8_t*>(acts.q), const_cast<__half2*>(acts.ds), n_blocks);
    }
    ctx.act_src = &x;
    ctx.act_form = vec && xh ? cuda_context::act_split_q8_f16 : cuda_context::act_split_q8;
    ctx.act_q8k = acts.q8k;
    return acts;
}

namespace {

// mul_mat_group, and with rope mul_mat_group_rope (exactly three matrices, or nothing launched)
size_t group_launch(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i, const rope_kv_params* rope,
                    int64_t rope_hd) {
    if (ctx.exact) return 0;
    const mat_group grp = find_mat_group(ctx, nodes, i);
    const split_weight* const* ws = grp.ws;
    tensor* const* dsts = grp.dsts;
    const int n = grp.n;
    const tensor* x = grp.x;
    if (n < 2 || (rope && n != 3)) return 0;
    const int64_t cols = x->ne[1] * x->ne[2] * x->ne[3];
    if (rope && (x->ne[2] != 1 || x->ne[3] != 1 || ws[0]->n % 2 != 0 || ws[1]->n % 2 != 0 || ws[2]->n % 2 != 0))
        return 0;
    if (gemm_split_wanted(cols) || x->t != type::f32 || x->ne[0] % 32 != 0) return 0;
    TS_ASSERT(ctx.scratch_size >= mul_mat_work_size(*dsts[0]));
    split_args args[3];
    for (int j = 0; j < n; j++) args[j] = gemv_args(ctx, *ws[j], *dsts[j]);
    const split_acts acts = split_activations(ctx, *x, ws[0]->t);
    bool launched = false;
    visit_format(ws[0]->t, [&]<class F>() {
        if constexpr (has_split<F>::value) {
            mmv_split_launch<F>(ctx, ws, args, n, acts, rope, rope_hd);
            launched = true;
        }
    });
    TS_ASSERT(launched);
    return size_t(n);
}

// The run of mul_mat nodes from nodes[i] on (at most 3) that read one activation, each taken while
// fits(node, its place in the run) says yes: into d, how many. The groupers (find_mat_group, mul_mat_f_group) differ
// only in what fits.
template <class Fits> int mat_run(const std::vector<tensor*>& nodes, size_t i, tensor* (&d)[3], Fits&& fits) {
    int n = 0;
    for (size_t j = i; j < nodes.size() && n < 3; j++) {
        tensor* dn = nodes[j];
        if (dn->o != op::mul_mat || (n > 0 && dn->src[1] != d[0]->src[1]) || !fits(*dn, n)) break;
        d[n++] = dn;
    }
    return n;
}

} // namespace

mat_group find_mat_group(const cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i) {
    mat_group g;
    if (!ctx.split) return g;
    // split weights of one type and k
    g.n = mat_run(nodes, i, g.dsts, [&](const tensor& d, int j) {
        const tensor* w = d.src[0];
        if (w->view_src) return false;
        const auto it = ctx.split->find(w);
        if (it == ctx.split->end() || (j > 0 && (it->second.t != g.ws[0]->t || it->second.k != g.ws[0]->k)))
            return false;
        g.ws[j] = &it->second;
        return true;
    });
    if (g.n > 0) g.x = g.dsts[0]->src[1];
    return g;
}

size_t mul_mat_group(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i) {
    return group_launch(ctx, nodes, i, nullptr, 0);
}

bool mul_mat_group_rope(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i, const rope_kv_params& p,
                        int64_t hd) {
    return group_launch(ctx, nodes, i, &p, hd) == 3;
}

bool split_eligible(const tensor& w) {
    if (!split_enabled() || !has_split_type(w.t) || !(w.flags & flag_param) || w.view_src) return false;
    // 3-D: a mixture's experts, each an (k, n) matrix after the other, for mul_mat_id
    return w.ne[3] == 1 && w.is_contiguous() && w.ne[0] % block_size(w.t) == 0 && w.ne[0] % 32 == 0;
}

namespace {

bool is_float_weight(type t) {
    return t == type::f32 || t == type::f16 || t == type::bf16;
}

} // namespace

bool weight_type_supported(type t) {
    bool ok = is_float_weight(t);
    visit_format(t, [&]<class F>() { ok = cuda_format<F>::available || (split_enabled() && has_split<F>::value); });
    return ok;
}

bool mul_mat_supported(const tensor& dst) {
    const tensor& w = *dst.src[0];
    const tensor& x = *dst.src[1];
    if (x.t != type::f32 || x.nb[0] != 4 || dst.nb[0] != 4 || w.nb[0] != type_size(w.t)) return false;
    if (w.ne[2] == 0 || w.ne[3] == 0 || x.ne[2] % w.ne[2] != 0 || x.ne[3] % w.ne[3] != 0) return false;
    // formats with only the split layout: the weight must be one the upload splits
    bool file_layout = is_float_weight(w.t);
    visit_format(w.t, [&]<class F>() { file_layout = cuda_format<F>::available; });
    if (split_eligible(w) && w.ne[2] != 1) return false; // experts, split for mul_mat_id: mul_mat's split weights are 2-D
    return file_layout ? weight_type_supported(w.t) : split_eligible(w);
}

size_t mul_mat_work_size(const tensor& dst) {
    const tensor& w = *dst.src[0];
    const tensor& x = *dst.src[1];
    const int64_t cols = x.ne[1] * x.ne[2] * x.ne[3];
    if (is_float_weight(w.t)) // cuBLAS's f16 / bf16 activations; exact mode's halves too (float_exact)
        return std::max(gemm_float_work_size(dst),
                        w.t != type::f32 ? (size_t(x.ne[0]) * size_t(cols) * sizeof(__half) + 255) / 256 * 256 : 0);
    // q8_1 blocks, or the split activations (as many bytes, plus the alignment of their second array), or the f16
    // activations of the prefill GEMM
    return std::max(size_t(x.ne[0] / 32) * size_t(cols) * sizeof(block_q8_1) + 256,
                    gemm_split_work_size(x.ne[0], cols));
}

namespace {

// mmv_args of mul_mat node dst with W in the file's layout (float weights; the file-layout block formats)
mmv_args file_args(const cuda_context& ctx, tensor& dst) {
    const tensor* w = dst.src[0];
    const tensor* x = dst.src[1];
    mmv_args a{};
    a.w = ctx.ptr(w);
    a.w_nb1 = int64_t(w->nb[1]);
    a.w_nb2 = int64_t(w->nb[2]);
    a.w_nb3 = int64_t(w->nb[3]);
    const shape4 sx = shape_of(*x, 4), sy = shape_of(dst, 4);
    a.x = ctx.ptr(x);
    a.x_nb1 = sx.nb[1];
    a.x_nb2 = sx.nb[2];
    a.x_nb3 = sx.nb[3];
    a.y = ctx.as<float>(&dst);
    a.y_nb1 = sy.nb[1];
    a.y_nb2 = sy.nb[2];
    a.y_nb3 = sy.nb[3];
    a.n = w->ne[1];
    a.m = x->ne[1];
    a.k = w->ne[0];
    a.ne2 = x->ne[2];
    a.ne3 = x->ne[3];
    a.r2 = x->ne[2] / w->ne[2];
    a.r3 = x->ne[3] / w->ne[3];
    return a;
}

// dense: contiguous rows, nothing between them (so two such tensors of one shape share their strides)
bool dense_f32(const tensor* t) {
    return t->t == type::f32 && t->is_contiguous();
}

} // namespace

size_t mul_mat_f_group(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
                       const std::unordered_map<const tensor*, int>& uses) {
    if (ctx.exact) return 0;
    // 2-3 mul_mats of float weights of one type and k, one activation of <= 8 columns (the GEMV), 2-D weights
    tensor* d[3] = {};
    mmv_args a[3];
    const int n = mat_run(nodes, i, d, [&](tensor& dn, int j) {
        const tensor* w = dn.src[0];
        if (!is_float_weight(w->t) || w->ne[2] != 1 || w->ne[3] != 1 || !mul_mat_supported(dn) ||
            gemm_float_wanted(ctx, dn) || (j > 0 && (w->t != d[0]->src[0]->t || w->ne[0] != d[0]->src[0]->ne[0])))
            return false;
        a[j] = file_args(ctx, dn);
        return w->t == type::f32   ? mmv_f_vec<float>(a[j])
               : w->t == type::f16 ? mmv_f_vec<__half>(a[j])
                                   : mmv_f_vec<__nv_bfloat16>(a[j]);
    });
    if (n < 2) return 0;
    const tensor* x = d[0]->src[1];
    if (x->ne[1] * x->ne[2] * x->ne[3] > MMV_MAX_COLS) return 0;
    // gate, up -> swiglu / geglu / relu2_glu of the two: the GLU in the GEMV's epilogue; the products themselves
    // written only where something else reads them
    glu_act glu = glu_act::none;
    tensor* gn = n == 2 && i + 2 < nodes.size() ? nodes[i + 2] : nullptr;
    if (gn && gn->src[0] == d[0] && gn->src[1] == d[1] && d[0]->src[0]->ne[1] == d[1]->src[0]->ne[1] &&
        dense_f32(gn) && dense_f32(d[0]) && dense_f32(d[1]) && gn->ne[0] == d[0]->ne[0] && gn->ne[1] == d[0]->ne[1] &&
        gn->ne[2] == d[0]->ne[2] && gn->ne[3] == d[0]->ne[3]) {
        glu = gn->o == op::swiglu                     ? glu_act::silu
              : gn->o == op::geglu && ctx.gelu_table ? glu_act::gelu
              : gn->o == op::relu2_glu               ? glu_act::relu2
                                                     : glu_act::none;
    }
    // the kernel computes nodes i + 1 .. before their turn: the memory plan may have put their results where x was
    // (x's last reader having run by then in graph order); then they are not grouped
    const auto bytes_of = [&](const tensor* t) {
        const uintptr_t lo = reinterpret_cast<uintptr_t>(ctx.ptr(t));
        return std::pair<uintptr_t, uintptr_t>{lo, lo + t->n_bytes()};
    };
    const auto [xlo, xhi] = bytes_of(x);
    const auto clear_of_x = [&](const tensor* t) {
        const auto [lo, hi] = bytes_of(t);
        return hi <= xlo || xhi <= lo;
    };
    if (glu != glu_act::none && !clear_of_x(gn)) glu = glu_act::none;
    for (int j = 1; j < n; j++)
        if (!clear_of_x(d[j])) return 0;
    float* glu_y = nullptr;
    if (glu != glu_act::none) {
        glu_y = ctx.as<float>(gn);
        for (int j = 0; j < 2; j++) {
            const auto it = uses.find(d[j]);
            if (it != uses.end() && it->second == 1 && !(d[j]->flags & flag_output)) a[j].y = nullptr;
        }
    }
    ctx.act_src = nullptr;
    ctx.act_form = cuda_context::act_none;
    switch (d[0]->src[0]->t) {
    case type::f32: mmv_f_launch<float>(ctx, a, n, glu, glu_y); break;
    case type::f16: mmv_f_launch<__half>(ctx, a, n, glu, glu_y); break;
    default: mmv_f_launch<__nv_bfloat16>(ctx, a, n, glu, glu_y); break;
    }
    return glu != glu_act::none ? 3 : size_t(n);
}

void mul_mat(cuda_context& ctx, tensor& dst) {
    const tensor* w = dst.src[0];
    const tensor* x = dst.src[1];
    if (ctx.split && !w->view_src) {
        if (auto it = ctx.split->find(w); it != ctx.split->end()) {
            const split_weight& sw = it->second;
            TS_ASSERT(sw.k == w->ne[0] && sw.n == w->ne[1] && w->ne[2] == 1 && w->ne[3] == 1);
            TS_ASSERT(ctx.scratch_size >= mul_mat_work_size(dst));
            if (ctx.exact && gemm_exact_available(w->t)) {
                gemm_exact(ctx, sw, *w, dst);
                return;
            }
            if (gemm_split_wanted(x->ne[1] * x->ne[2] * x->ne[3])) {
                gemm_split(ctx, sw, dst);
                return;
            }
            split_args a = gemv_args(ctx, sw, dst);
            const split_weight* ws[1] = {&sw};
            const split_acts acts = split_activations(ctx, *x, w->t);
            const bool known = visit_format(w->t, [&]<class F>() {
                if constexpr (has_split<F>::value)
                    mmv_split_launch<F>(ctx, ws, &a, 1, acts);
                else
                    TS_ASSERT(!"mul_mat: a split weight of a format without a split kernel");
            });
            TS_ASSERT(known);
            return;
        }
    }
    if (ctx.exact && float_exact_available(dst)) {
        float_exact(ctx, dst);
        return;
    }
    if (gemm_float_wanted(ctx, dst)) {
        gemm_float(ctx, dst);
        return;
    }
    mmv_args a = file_args(ctx, dst);
    switch (w->t) { // the float GEMV reads x as it is: activations left in the scratch stay
    case type::f32:
        mmv_f_launch<float>(ctx, &a, 1);
        return;
    case type::f16:
        mmv_f_launch<__half>(ctx, &a, 1);
        return;
    case type::bf16:
        mmv_f_launch<__nv_bfloat16>(ctx, &a, 1);
        return;
    default:
        break;
    }
    ctx.act_src = nullptr; // the path below quantizes into the scratch
    ctx.act_form = cuda_context::act_none;
    const shape4 sx = shape_of(*x, 4);
    TS_ASSERT(ctx.scratch_size >= mul_mat_work_size(dst));
    const bool known = visit_format(w->t, [&]<class F>() {
        if constexpr (cuda_format<F>::available)
            mmv_q_launch<F>(a, ctx.as<float>(x), sx, ctx.scratch, ctx.stream);
        else
            TS_ASSERT(!"mul_mat: format without a CUDA path (supports() lets it through?)");
    });
    TS_ASSERT(known);
}

namespace {

// id_args of mul_mat_id node dst without its weights' pointers and its route (mul_mat_id fills them)
id_args id_args_of(const cuda_context& ctx, const tensor& dst) {
    const tensor* w = dst.src[0];
    const tensor* ids = dst.src[2];
    id_args a{};
    a.y = ctx.as<float>(&dst);
    a.y_nb1 = int64_t(dst.nb[1] / 4);
    a.y_nb2 = int64_t(dst.nb[2] / 4);
    a.n = w->ne[1];
    a.k = w->ne[0];
    a.n_expert = w->ne[2];
    a.n_used = ids->ne[0];
    a.n_b = dst.src[1]->ne[1];
    a.ids = ctx.as<int32_t>(ids);
    a.ids_nb1 = int64_t(ids->nb[1] / 4);
    a.out_scale = 1.0f;
    return a;
}

// mmv_id_kernel over `tiles` tiles of each of n_mat (1, 2) matrices of one shape. The k split follows the launch's
// whole work (as the dense q / k / v group's), so two matrices in one launch may split k less than each alone and sum
// in another f32 order than the unfused graph. Measured (H100, gpt-oss-20b tg128): 507 t/s, against 469 with one
// matrix's split (the unfused bits).
void id_launch(const cuda_context& ctx, type t, const id_args& a, int64_t tiles, int n_mat) {
    constexpr int R = 2, U = 2;
    const int S = mmv_split_parts(ceil_div(a.n, R) * tiles * n_mat, a.k / 32, ctx.n_sm);
    const dim3 grid(unsigned(ceil_div(a.n, SPLIT_WARPS / S * R)), unsigned(tiles * n_mat));
    TS_ASSERT(grid.y <= 65535);
    const bool known = visit_format(t, [&]<class F>() {
        if constexpr (has_split<F>::value) {
            using D = cuda_format<F>;
            const auto pick = [&]<int NC>() {
                return S == 1 ? mmv_id_kernel<D, NC, R, U, 1> : S == 2 ? mmv_id_kernel<D, NC, R, U, 2>
                                                                      : mmv_id_kernel<D, NC, R, U, 4>;
            };
            launch(ctx, a.direct ? pick.template operator()<1>() : pick.template operator()<ID_NC>(), grid,
                   SPLIT_WARPS * WARP_SIZE, 0, a);
        } else {
            TS_ASSERT(!"mul_mat_id: a split weight of a format without a split kernel");
        }
    });
    TS_ASSERT(known);
}

} // namespace

bool mul_mat_id_supported(const tensor& dst) {
    const tensor& w = *dst.src[0];
    const tensor& x = *dst.src[1];
    const tensor& ids = *dst.src[2];
    if (x.t != type::f32 || !x.is_contiguous() || ids.t != type::i32 || ids.nb[0] != 4 || dst.nb[0] != 4) return false;
    if (w.ne[3] != 1 || w.ne[2] > 8192 || (x.ne[1] != 1 && x.ne[1] != ids.ne[0])) return false;
    const int64_t n_pairs = ids.ne[0] * ids.ne[1];
    if (is_float_weight(w.t)) return w.nb[0] == type_size(w.t) && n_pairs <= 65535;
    return split_eligible(w) && id_max_tiles(n_pairs, w.ne[2], ID_NC) <= 65535;
}

size_t mul_mat_id_work_size(const tensor& dst) {
    const tensor& w = *dst.src[0];
    const tensor& x = *dst.src[1];
    const tensor& ids = *dst.src[2];
    if (is_float_weight(w.t)) return 0;
    const size_t acts = (gemm_id_acts_bytes(x.ne[0], x.ne[1] * x.ne[2]) + 255) / 256 * 256;
    return acts + (id_direct(ids.ne[1]) ? 0 : id_route_bytes(ids.ne[0] * ids.ne[1], w.ne[2]));
}

// dst (n, n_used, n_tok) = each (slot, token)'s expert matrix times its activation row. Float weights: a plain
// kernel, pair by pair; split weights: mul_mat_id_fused.
void mul_mat_id(cuda_context& ctx, tensor& dst) {
    const tensor* w = dst.src[0];
    const tensor* x = dst.src[1];
    const tensor* ids = dst.src[2];
    const int64_t n_pairs = ids->ne[0] * ids->ne[1];
    if (n_pairs == 0 || w->ne[1] == 0) return;
    if (!is_float_weight(w->t)) {
        if (ctx.exact && gemm_exact_available(w->t)) { // the CPU's row kernels pair by pair
            TS_ASSERT(ctx.split && !w->view_src && ctx.scratch_size >= mul_mat_id_work_size(dst));
            const auto it = ctx.split->find(w);
            TS_ASSERT(it != ctx.split->end());
            gemm_exact(ctx, it->second, *w, dst);
            return;
        }
        tensor* d = &dst;
        mul_mat_id_fused(ctx, &d, nullptr, nullptr, 1, nullptr);
        return;
    }
    if (ctx.exact) {
        float_id_exact(ctx, dst);
        return;
    }
    id_args a = id_args_of(ctx, dst);
    a.direct = true;
    const dim3 grid(unsigned(ceil_div(a.n, MMV_THREADS / WARP_SIZE)), unsigned(n_pairs));
    const uint8_t* wp = ctx.ptr(w);
    const int64_t nb1 = int64_t(w->nb[1]), nb2 = int64_t(w->nb[2]);
    if (w->t == type::f32) launch(ctx, mmv_id_f_kernel<float>, grid, MMV_THREADS, 0, a, wp, nb1, nb2, ctx.as<float>(x));
    else if (w->t == type::f16) launch(ctx, mmv_id_f_kernel<__half>, grid, MMV_THREADS, 0, a, wp, nb1, nb2, ctx.as<float>(x));
    else launch(ctx, mmv_id_f_kernel<__nv_bfloat16>, grid, MMV_THREADS, 0, a, wp, nb1, nb2, ctx.as<float>(x));
}

bool mul_mat_id_fusable(const cuda_context& ctx, const tensor& d) {
    const tensor* w = d.src[0];
    return d.o == op::mul_mat_id && ctx.split && !is_float_weight(w->t) && !w->view_src &&
           ctx.split->find(w) != ctx.split->end();
}

// Split weights, pair by pair for a few tokens (mmv_id_kernel; a fused norm may have left the q8_1 activations),
// else grouped by expert (moe_route_kernel, once for all n matrices): onto the tensor-core GEMM in tiles of 64 pairs
// (gemm_id) where the format has one, else mmv_id_kernel in tiles of 8.
void mul_mat_id_fused(cuda_context& ctx, tensor* const* d, float* const* y_in, const tensor* const* bias, int n,
                      const tensor* pw) {
    TS_ASSERT(n >= 1 && n <= 2);
    const tensor& dst = *d[0];
    const tensor* w = dst.src[0];
    const tensor* x = dst.src[1];
    const tensor* ids = dst.src[2];
    const int64_t n_used = ids->ne[0], n_tok = ids->ne[1], n_pairs = n_used * n_tok;
    if (n_pairs == 0 || w->ne[1] == 0) return;
    TS_ASSERT(ctx.split && !w->view_src && ctx.scratch_size >= mul_mat_id_work_size(dst));
    const split_weight* sw[2] = {};
    float* y[2] = {};
    const float* bp[2] = {};
    for (int i = 0; i < n; i++) {
        TS_ASSERT(mul_mat_id_fusable(ctx, *d[i]) && d[i]->src[0]->t == w->t && d[i]->src[1] == x &&
                  d[i]->src[2] == ids);
        sw[i] = &ctx.split->find(d[i]->src[0])->second;
        y[i] = y_in && y_in[i] ? y_in[i] : ctx.as<float>(d[i]);
        bp[i] = bias && bias[i] ? ctx.as<float>(bias[i]) : nullptr;
    }
    id_args a = id_args_of(ctx, dst);
    a.bias_nb1 = bias && bias[0] ? int64_t(bias[0]->nb[1] / 4) : 0;
    a.pw = pw ? ctx.as<float>(pw) : nullptr;
    a.pw_nb1 = pw ? int64_t(pw->nb[2] / 4) : 0;
    a.direct = id_direct(n_tok);
    int64_t tiles = n_pairs;
    if (!a.direct) {
        const bool mma = gemm_id_available(w->t);
        const int nc = mma ? gemm_id_tile : ID_NC;
        uint8_t* r = static_cast<uint8_t*>(ctx.scratch) + (gemm_id_acts_bytes(a.k, a.n_b * n_tok) + 255) / 256 * 256;
        tiles = id_max_tiles(n_pairs, a.n_expert, nc);
        int* n_tiles = reinterpret_cast<int*>(r);
        int4* tile = reinterpret_cast<int4*>(r + 256);
        int* pairs = reinterpret_cast<int*>(r + 256 + size_t(id_max_tiles(n_pairs, a.n_expert, ID_NC)) * sizeof(int4));
        launch(ctx, moe_route_kernel, 1, ROUTE_BLOCK, size_t(2 * a.n_expert) * sizeof(int), a.ids, a.ids_nb1, n_used,
               n_tok, int(a.n_expert), nc, pairs, tile, n_tiles);
        a.n_tiles = n_tiles;
        a.tiles = tile;
        a.pairs = pairs;
        if (mma) {
            id_map map;
            map.tiles = tile;
            map.n_tiles = n_tiles;
            map.pairs = pairs;
            map.n_used = n_used;
            map.n_b = a.n_b;
            map.y_nb1 = a.y_nb1;
            map.y_nb2 = a.y_nb2;
            map.bias_nb1 = a.bias_nb1;
            map.pw = a.pw;
            map.pw_nb1 = a.pw_nb1;
            split_weight we[2];
            const split_weight* wp[2] = {};
            for (int i = 0; i < n; i++) {
                we[i] = *sw[i];
                we[i].n = a.n; // rows of one expert
                wp[i] = &we[i];
            }
            gemm_id(ctx, wp, y, bp, n, *x, map, tiles);
            return;
        }
    }
    const split_acts acts = split_activations(ctx, *x, sw[0]->t);
    a.aq = acts.q;
    a.ads = acts.ds;
    a.tiles_per_mat = tiles;
    const int launches = tiles * n > 65535 ? n : 1; // grid.y: both matrices in one launch where they fit
    for (int l = 0; l < launches; l++) {
        const int i = l, more = launches == 1 ? n : 1;
        a.qs = sw[i]->qs, a.sc = sw[i]->sc, a.y = y[i], a.out_scale = sw[i]->out_scale, a.bias = bp[i];
        if (more == 2)
            a.qs2 = sw[1]->qs, a.sc2 = sw[1]->sc, a.y2 = y[1], a.out_scale2 = sw[1]->out_scale, a.bias2 = bp[1];
        id_launch(ctx, w->t, a, tiles, more);
    }
}

} // namespace tessera::cuda
