// gemm.cu: prefill mul_mat on tensor cores for weights in the split layout (quant/format.cuh): y (n, cols) = W^T x.
// Two kernels, both 256 threads computing a 128 (weight rows) x 64 (activation columns) tile with 8 warps (4 x 2) of
// 32 x 32 sub-tiles, ldmatrix fragments, the weights' next k-step loaded into registers while the current one is
// multiplied and the activations' next step arriving by cp.async (two shared-memory stages):
//   gemm_q8_kernel (every format with mmq_unpack: q4_0, q4_1, q8_0, nvfp4, awq4): the CPU's numerics. The activations
//     are the q8_1 integers the GEMV and the CPU dot (split_activations); each weight chunk is unpacked to signed
//     bytes in shared memory, mma.sync m16n8k32 s8 (m16n8k16 per 16-element sub-block for nvfp4) gives each chunk's
//     exact integer sum, which is scaled per chunk and column as the reference's vec_dot does (d_w d_a sum [+ m s_a]).
//     Results then differ from the CPU only by the order of the f32 sums over chunks.
//   gemm_split_kernel (the ternary formats, and every format with TESSERA_CUDA_MMQ=0): weights dequantized to f16 in
//     shared memory by the format's dequant_split, f16 activations, mma.sync m16n8k16 f16 -> f32.
// Measured (H100, 2026-11-22, the f16 kernel): 7B q4_0 pp512 6.4k t/s end to end, ~86 TFLOP/s for the whole model.
// On Hopper (cuda_context::wgmma) gemm_split hands both cases to gemm_wgmma.cu instead, with f16 activations: the
// q8_1 values d q for the formats the int8 kernel takes (so still the CPU's activations, to within f16 rounding), x
// rounded to f16 for the others. These kernels remain for the other GPUs and with TESSERA_CUDA_WGMMA=0.
#include "backends/cuda/ops/mma.cuh"
#include "backends/cuda/ops/ops.cuh"

#include "backends/cuda/quant/formats.cuh"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace tessera::cuda {

namespace {

constexpr int BM = 128, BN = 64, BK = 32, PAD = 8, THREADS = 256;

// x rows (k, m, ne2, ne3 with strides) -> f16 [cols][k]
static __global__ void f16_rows_kernel(const float* x, shape4 sx, __half* y, int64_t total) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int64_t k = sx.ne[0], e = i % k, r = i / k;
    y[i] = __float2half_rn(x[row_offset(sx, r) + e * sx.nb[0]]);
}
// the same rows rounded to bf16 (the CPU's activations for bf16 weights)
static __global__ void bf16_rows_kernel(const float* x, shape4 sx, __nv_bfloat16* y, int64_t total) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= total) return;
    const int64_t k = sx.ne[0], e = i % k, r = i / k;
    y[i] = __float2bfloat16_rn(x[row_offset(sx, r) + e * sx.nb[0]]);
}

// q8_1 activations (split_activations: q [cols][k], (d, s) per 32) -> their values d q as f16 rows [cols][k], 8
// elements a thread; written right after split_activations' arrays (split_acts_bytes)
static __global__ void q8_f16_kernel(const int8_t* q, const __half2* ds, __half* y, int64_t n8) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const float d = __low2float(ds[i / 4]);
    const uint2 v = *reinterpret_cast<const uint2*>(q + i * 8);
    const int8_t* b = reinterpret_cast<const int8_t*>(&v);
    uint4 out;
    __half2* o = reinterpret_cast<__half2*>(&out);
#pragma unroll
    for (int j = 0; j < 4; j++) o[j] = __floats2half2_rn(float(b[2 * j]) * d, float(b[2 * j + 1]) * d);
    reinterpret_cast<uint4*>(y)[i] = out;
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

// A warp's 32 x 32 accumulators (2 m16 x 4 n8 tiles) to y, for both kernels' argument structs. C fragment: c0, c1
// at (row lane / 4, cols 2 (lane % 4) + 0, 1), c2, c3 eight rows further; rows past n and columns past the batch skipped.
template <class A>
__device__ __forceinline__ void store_tile(const A& a, const float (&acc)[2][4][4], int64_t row0, int64_t col0, int wm,
                                           int wn, int lane) {
    const int64_t cols = a.m * a.ne2 * a.ne3;
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int64_t r = row0 + wm * 32 + i * 16 + lane / 4 + (e / 2) * 8;
                const int64_t c = col0 + wn * 32 + j * 8 + 2 * (lane % 4) + (e % 2);
                if (r < a.n && c < cols)
                    a.y[column_offset(c, a.m, a.ne2, a.ne3, a.y_nb1, a.y_nb2, a.y_nb3) + r] = acc[i][j][e] * a.out_scale;
            }
}

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

    store_tile(a, acc, row0, col0, wm, wn, lane);
}

// ---- int8: the CPU's numerics ----

constexpr int MAGIC_BITS = 0x4B400000;    // 1.5 * 2^23 as a float's bits
constexpr float MAGIC_F = 12582912.0f;     // its value
constexpr int QBST = 3;                   // activation stages in shared memory
constexpr int QBK = 64;        // k elements per stage: two 32-element chunks
constexpr int QROW = QBK + 16; // bytes per shared row: 80, so the 8 rows of an ldmatrix land in distinct banks

__device__ __forceinline__ void cp_async4(void* dst, const void* src, bool valid) {
    const int n = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(n));
}

__device__ __forceinline__ void mma_s8_k32(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_s8_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%0, %1, %2, %3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0));
}

struct mmq_args {
    const uint8_t* qs;
    const uint8_t* sc;
    const int8_t* aq;    // [cols][k]
    const __half2* ads;  // [cols][k / 32] (d, s)
    float* y;
    int64_t y_nb1, y_nb2, y_nb3;
    int64_t n, m, k, ne2, ne3;
    float out_scale;
};

// IDS (mul_mat_id's prefill): block y is tile y of `map` (moe_route_kernel's, mmv.cu): up to BN (slot, token) pairs
// that chose one expert, whose matrix is rows expert n .. of the weight; column j of the tile is the activation row of
// the tile's pair j and its results go to that pair's output row (map's strides). Tiles past the count exit.
template <class D, bool IDS = false>
static __global__ void __launch_bounds__(THREADS, 2) gemm_q8_kernel(mmq_args a, id_map map) {
    using chunk_t = typename D::chunk_t;
    constexpr int SUB = D::mmq_sub, CPS = D::chunks_per_scale;
    __shared__ __align__(16) int8_t As[2][BM][QROW];
    __shared__ __align__(16) int8_t Bs[QBST][BN][QROW];
    __shared__ float Ad[2][2][BM][SUB]; // [stage][chunk][row][sub-block] weight scales
    __shared__ float Am[2][2][D::mmq_offset ? BM : 1];
    __shared__ __align__(16) __half2 Bds[QBST][2][BN]; // [stage][chunk][column] (d, s)
    const int tid = threadIdx.x, warp = tid / WARP_SIZE, lane = tid % WARP_SIZE;
    const int wm = warp % 4, wn = warp / 4;
    const int g = lane / 4, t = lane % 4; // fragment row group and thread in group
    const int64_t row0 = int64_t(blockIdx.x) * BM;
    int64_t col0 = int64_t(blockIdx.y) * BN, cols = a.m * a.ne2 * a.ne3, expert = 0;
    if constexpr (IDS) {
        if (int(blockIdx.y) >= *map.n_tiles) return; // uniform over the block
        const int4 tile = map.tiles[blockIdx.y];
        expert = tile.x, col0 = 0, cols = tile.z; // local columns 0 .. count of the tile
    }
    // activation row of local column c (a tile's pair: its slot's row of its token)
    auto act_row = [&](int64_t c) {
        if constexpr (IDS) {
            const int64_t p = map.pairs[map.tiles[blockIdx.y].y + c];
            return p % map.n_used % map.n_b + p / map.n_used * map.n_b;
        } else {
            return c;
        }
    };
    const int64_t nc = a.k / 32, ng = nc / CPS, steps = (nc + 1) / 2;

    // loads: one weight chunk per thread (row tid / 2, chunk tid % 2 of the step), 16 activation bytes per thread,
    // and the first 128 threads one (d, s) each
    const int a_row = tid / 2, a_cc = tid % 2;
    const int64_t w_row = expert * a.n + (row0 + a_row < a.n ? row0 + a_row : a.n - 1); // rows past n: never stored
    const uint8_t* q_row = a.qs + w_row * nc * int64_t(sizeof(chunk_t));
    const uint8_t* s_row = a.sc + w_row * ng * D::scale_bytes;
    const int b_row = tid / 4, b_piece = tid % 4;
    const bool b_col_valid = col0 + b_row < cols;
    const int8_t* b_src = a.aq + (b_col_valid ? act_row(col0 + b_row) : 0) * a.k + b_piece * 16;
    const int ds_cc = (tid / BN) % 2, ds_col = tid % BN;
    const bool ds_col_valid = tid < 2 * BN && col0 + ds_col < cols;
    const __half2* ds_src = a.ads + (ds_col_valid ? act_row(col0 + ds_col) : 0) * nc;

    auto load_b = [&](int stage, int64_t step) { // one commit group per step, empty past the last
        if (step >= steps) {
            cp_async_commit();
            return;
        }
        const bool v = b_col_valid && step * 2 + b_piece / 2 < nc;
        cp_async16(&Bs[stage][b_row][b_piece * 16], v ? b_src + step * QBK : a.aq, v);
        if (tid < 2 * BN) {
            const bool dv = ds_col_valid && step * 2 + ds_cc < nc;
            cp_async4(&Bds[stage][ds_cc][ds_col], dv ? ds_src + step * 2 + ds_cc : a.ads, dv);
        }
        cp_async_commit();
    };
    struct pending {
        chunk_t q;
        scale_word_t<D> scw;
        bool valid;
    };
    auto load_a = [&](int64_t step, pending& p) {
        const int64_t c = step * 2 + a_cc;
        p.valid = c < nc;
        if (p.valid) {
            p.q = ldg_chunk<chunk_t>(q_row + c * int64_t(sizeof(chunk_t)));
            p.scw = load_scale_word<D::scale_bytes>(s_row + (c / CPS) * D::scale_bytes);
        }
    };
    auto store_a = [&](int stage, int64_t step, const pending& p) {
        uint32_t v[8] = {};
        float d[2] = {0.0f, 0.0f}, m = 0.0f;
        if (p.valid) D::mmq_unpack(p.q, p.scw, int((step * 2 + a_cc) % CPS), v, d, m);
        uint4* dst = reinterpret_cast<uint4*>(&As[stage][a_row][a_cc * 32]);
        dst[0] = make_uint4(v[0], v[1], v[2], v[3]);
        dst[1] = make_uint4(v[4], v[5], v[6], v[7]);
#pragma unroll
        for (int s = 0; s < SUB; s++) Ad[stage][a_cc][a_row][s] = d[s];
        if constexpr (D::mmq_offset) Am[stage][a_cc][a_row] = m;
    };

    // Pipeline, two steps deep: the activations of steps s + 1 and s + 2 are in flight (cp.async, QBST stages) and the
    // weights of steps s + 1 and s + 2 in registers (two `pending`) while step s is multiplied; the weights of s + 1
    // are unpacked into the other shared stage at the end of step s.
    float acc[2][4][4] = {};
    pending p0, p1;
    load_a(0, p0);
    store_a(0, 0, p0);
    load_b(0, 0);
    load_b(1, 1);
    if (1 < steps) load_a(1, p1);
    // pl: free registers (step + 2 is loaded into them); ps: the weights of step + 1
    auto body = [&](int64_t step, pending& pl, const pending& ps) {
        const int stage = int(step & 1), bst = int(step % QBST);
        cp_async_wait_one();
        __syncthreads(); // step's activations and unpacked weights complete for everyone; older stages free
        load_b(int((step + 2) % QBST), step + 2);
        if (step + 2 < steps) load_a(step + 2, pl);
#pragma unroll
        for (int cc = 0; cc < 2; cc++) {
            uint32_t bf[2][4];
#pragma unroll
            for (int j = 0; j < 2; j++) // n8 tiles 2j, 2j+1: k 0..15 and 16..31 of each
                ldmatrix_x4(bf[j], &Bs[bst][wn * 32 + j * 16 + (lane % 8) + 8 * (lane / 16)][cc * 32 + 16 * ((lane / 8) % 2)]);
#pragma unroll
            for (int i = 0; i < 2; i++) { // one m16 tile at a time: half the integer accumulators live
                uint32_t af[4];
                ldmatrix_x4(af, &As[stage][wm * 32 + i * 16 + (lane % 16)][cc * 32 + (lane / 16) * 16]);
                // each chunk's integer sum starts at the bit pattern of 1.5 * 2^23: the s32 result read as a float is
                // then 12582912 + sum exactly (|sum| < 2^22 for every format), so no int -> float conversion (a
                // quarter-rate instruction) is needed
                int ci[SUB][4][4];
#pragma unroll
                for (int s = 0; s < SUB; s++)
#pragma unroll
                    for (int j = 0; j < 4; j++)
#pragma unroll
                        for (int e = 0; e < 4; e++) ci[s][j][e] = MAGIC_BITS;
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const uint32_t b0 = bf[j / 2][2 * (j % 2)], b1 = bf[j / 2][2 * (j % 2) + 1];
                    if constexpr (SUB == 1) {
                        mma_s8_k32(ci[0][j], af, b0, b1);
                    } else {
                        mma_s8_k16(ci[0][j], af[0], af[1], b0);
                        mma_s8_k16(ci[SUB - 1][j], af[2], af[3], b1);
                    }
                }
                // the chunk's scales: rows g, g + 8 of the m16 tile, columns 2t, 2t + 1 of each n8 tile
                float dw[2][SUB], mw[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = wm * 32 + i * 16 + g + 8 * h;
#pragma unroll
                    for (int s = 0; s < SUB; s++) dw[h][s] = Ad[stage][cc][r][s];
                    if constexpr (D::mmq_offset) mw[h] = Am[stage][cc][r];
                    else mw[h] = 0.0f;
                }
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int c = wn * 32 + j * 8 + 2 * t;
                    const float2 ds0 = __half22float2(Bds[bst][cc][c]), ds1 = __half22float2(Bds[bst][cc][c + 1]);
                    // d_a * 12582912 is exact (11 + 2 significant bits), so fma(d_a, magic + sum, -d_a * 12582912)
                    // is d_a * sum rounded once: two FMAs per output and chunk
                    const float nm0 = -ds0.x * MAGIC_F, nm1 = -ds1.x * MAGIC_F;
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const float2 ds = e % 2 ? ds1 : ds0;
                        const float nm = e % 2 ? nm1 : nm0;
                        const int h = e / 2;
                        float v = acc[i][j][e];
                        v = fmaf(dw[h][0], fmaf(ds.x, __int_as_float(ci[0][j][e]), nm), v);
                        if constexpr (SUB == 2) v = fmaf(dw[h][1], fmaf(ds.x, __int_as_float(ci[1][j][e]), nm), v);
                        if constexpr (D::mmq_offset) v = fmaf(mw[h], ds.y, v);
                        acc[i][j][e] = v;
                    }
                }
            }
        }
        if (step + 1 < steps) store_a(stage ^ 1, step + 1, ps); // the other stage was released by the barrier above
    };
    for (int64_t step = 0; step < steps; step += 2) { // by twos, so that p0 / p1 stay in registers
        body(step, p0, p1);
        if (step + 1 < steps) body(step + 1, p1, p0);
    }

    if constexpr (IDS) {
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int64_t r = row0 + wm * 32 + i * 16 + lane / 4 + (e / 2) * 8;
                    const int64_t c = wn * 32 + j * 8 + 2 * (lane % 4) + (e % 2);
                    if (r >= a.n || c >= cols) continue;
                    store_id(map, a.y, expert, map.tiles[blockIdx.y].y, r, c, acc[i][j][e] * a.out_scale);
                }
    } else {
        store_tile(a, acc, row0, col0, wm, wn, lane);
    }
}

bool mmq_enabled() {
    static const bool enabled = env_switch_on("TESSERA_CUDA_MMQ");
    return enabled;
}

} // namespace

bool gemm_uses_q8(type t) {
    bool int8 = false;
    visit_format(t, [&]<class F>() { int8 = has_mmq<F>::value && mmq_enabled(); });
    return int8;
}

// the activations (the largest form: q8_1 and its f16 values)
size_t gemm_split_work_size(int64_t k, int64_t cols) {
    return (split_acts_bytes(k, cols) + size_t(k) * size_t(cols) * sizeof(__half) + 255) / 256 * 256;
}

bool gemm_split_wanted(int64_t cols) {
    return cols > 8;
}

__half* gemm_f16_target(const cuda_context& ctx, const tensor& node) {
    const tensor* w = node.src[0];
    const tensor* x = node.src[1];
    const int64_t cols = x->ne[1] * x->ne[2] * x->ne[3];
    if (node.o != op::mul_mat || !ctx.wgmma || ctx.exact || !mul_mat_quantizes_split(ctx, node) ||
        !gemm_split_wanted(cols) || !gemm_uses_q8(w->t))
        return nullptr;
    return reinterpret_cast<__half*>(static_cast<uint8_t*>(ctx.scratch) + split_acts_bytes(x->ne[0], cols));
}

// The q8_1 activations of x (for weights of type w) as f16 rows (the wgmma GEMM's input), once for q, k, v (gate, up)
static const __half* q8_f16_acts(cuda_context& ctx, const tensor& x, type w, int64_t k, int64_t cols) {
    auto* xh = reinterpret_cast<__half*>(static_cast<uint8_t*>(ctx.scratch) + split_acts_bytes(k, cols));
    const split_acts acts = split_activations(ctx, x, w, xh);
    if (ctx.act_form != cuda_context::act_split_q8_f16) {
        const int64_t n8 = cols * k / 8;
        q8_f16_kernel<<<unsigned(ceil_div(n8, 256)), 256, 0, ctx.stream>>>(acts.q, acts.ds, xh, n8);
        TS_CUDA_CHECK(cudaGetLastError());
        ctx.act_form = cuda_context::act_split_q8_f16;
    }
    return xh;
}

size_t gemm_split_group(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i) {
    if (!ctx.wgmma || ctx.exact) return 0;
    const mat_group g = find_mat_group(ctx, nodes, i);
    if (g.n < 2 || !mul_mat_quantizes_split(ctx, *g.dsts[0])) return 0; // (the others: the same activation and type)
    const split_weight* const* ws = g.ws;
    const int64_t k = ws[0]->k, cols = g.x->ne[1] * g.x->ne[2] * g.x->ne[3];
    if (!gemm_split_wanted(cols) || !gemm_uses_q8(ws[0]->t)) return 0;
    TS_ASSERT(ctx.scratch_size >= gemm_split_work_size(k, cols));
    gemm_wgmma_group(ctx, ws, g.dsts, g.n, q8_f16_acts(ctx, *g.x, ws[0]->t, k, cols));
    return size_t(g.n);
}

void gemm_split(cuda_context& ctx, const split_weight& w, tensor& dst) {
    const tensor* x = dst.src[1];
    const shape4 sx = shape_of(*x, 4), sy = shape_of(dst, 4);
    const int64_t m = x->ne[1], ne2 = x->ne[2], ne3 = x->ne[3], cols = m * ne2 * ne3, total = cols * w.k;
    if (total == 0 || w.n == 0) return;
    TS_ASSERT(ctx.scratch_size >= gemm_split_work_size(w.k, cols));
    if (ctx.wgmma && gemm_uses_q8(w.t)) { // the q8_1 values as f16: the CPU's activations to within f16 rounding
        gemm_wgmma(ctx, w, q8_f16_acts(ctx, *x, w.t, w.k, cols), dst);
        return;
    }
    const dim3 grid(unsigned(ceil_div(w.n, BM)), unsigned(ceil_div(cols, BN)));
    TS_ASSERT(grid.y <= 65535);
    if (gemm_uses_q8(w.t)) {
        const split_acts acts = split_activations(ctx, *x, w.t);
        const mmq_args a{w.qs, w.sc, acts.q, acts.ds, ctx.as<float>(&dst), sy.nb[1], sy.nb[2], sy.nb[3],
                         w.n,  m,    w.k,    ne2,     ne3,     w.out_scale};
        visit_format(w.t, [&]<class F>() {
            if constexpr (has_mmq<F>::value) gemm_q8_kernel<cuda_format<F>><<<grid, THREADS, 0, ctx.stream>>>(a, id_map{});
        });
        TS_CUDA_CHECK(cudaGetLastError());
        return;
    }
    gemm_args a{};
    a.qs = w.qs;
    a.sc = w.sc;
    a.out_scale = w.out_scale;
    a.y = ctx.as<float>(&dst);
    a.y_nb1 = sy.nb[1];
    a.y_nb2 = sy.nb[2];
    a.y_nb3 = sy.nb[3];
    a.n = w.n;
    a.m = m;
    a.k = w.k;
    a.ne2 = ne2;
    a.ne3 = ne3;
    auto* xh = static_cast<__half*>(ctx.scratch);
    if (!(ctx.act_src == x && ctx.act_form == cuda_context::act_f16)) { // q, k, v (gate, up) share one conversion
        f16_rows_kernel<<<unsigned(ceil_div(total, 256)), 256, 0, ctx.stream>>>(ctx.as<float>(x), sx, xh, total);
        TS_CUDA_CHECK(cudaGetLastError());
        ctx.act_src = x;
        ctx.act_form = cuda_context::act_f16;
    }
    a.x = xh;
    if (ctx.wgmma) {
        gemm_wgmma(ctx, w, xh, dst);
        return;
    }
    const bool known = visit_format(w.t, [&]<class F>() {
        if constexpr (has_split<F>::value)
            gemm_split_kernel<cuda_format<F>><<<grid, THREADS, 0, ctx.stream>>>(a);
        else
            TS_ASSERT(!"gemm_split: format without a split layout");
    });
    TS_ASSERT(known);
    TS_CUDA_CHECK(cudaGetLastError());
}

bool gemm_id_available(type t) {
    bool ok = false;
    visit_format(t, [&]<class F>() { ok = has_mmq<F>::value && mmq_enabled(); });
    return ok;
}

size_t gemm_id_acts_bytes(int64_t k, int64_t cols) {
    return gemm_split_work_size(k, cols);
}

void gemm_id(cuda_context& ctx, const split_weight* const* w, float* const* y, const float* const* bias, int n,
             const tensor& x, const id_map& map, int64_t max_tiles) {
    const int64_t k = w[0]->k, cols = x.ne[1] * x.ne[2] * x.ne[3];
    if (max_tiles == 0 || w[0]->n == 0) return;
    TS_ASSERT(max_tiles <= 65535 && x.ne[0] == k);
    if (ctx.wgmma && !ctx.exact) { // the exact mode keeps the integer kernel: each chunk's sum exact as the CPU's
        gemm_wgmma_id(ctx, w, y, bias, n, q8_f16_acts(ctx, x, w[0]->t, k, cols), map, max_tiles);
        return;
    }
    const split_acts acts = split_activations(ctx, x, w[0]->t);
    for (int i = 0; i < n; i++) {
        const dim3 grid(unsigned(ceil_div(w[i]->n, BM)), unsigned(max_tiles));
        const mmq_args a{w[i]->qs, w[i]->sc, acts.q, acts.ds, y[i], 0, 0, 0, w[i]->n, 0, w[i]->k, 1, 1,
                         w[i]->out_scale};
        id_map m = map;
        m.bias = bias[i];
        const bool known = visit_format(w[i]->t, [&]<class F>() {
            if constexpr (has_mmq<F>::value)
                gemm_q8_kernel<cuda_format<F>, true><<<grid, THREADS, 0, ctx.stream>>>(a, m);
            else
                TS_ASSERT(!"gemm_id: a format without mmq_unpack");
        });
        TS_ASSERT(known);
        TS_CUDA_CHECK(cudaGetLastError());
    }
}

bool gemm_float_shape(const tensor& node) {
    const tensor* w = node.src[0];
    const tensor* x = node.src[1];
    const int64_t cols = x->ne[1] * x->ne[2] * x->ne[3];
    // the output's columns one stride apart (cuBLAS's ldc), within int range
    const bool even = node.t == type::f32 && node.nb[0] == 4 && node.nb[1] % 4 == 0 &&
                      (node.ne[2] == 1 || node.nb[2] == node.nb[1] * size_t(node.ne[1])) &&
                      (node.ne[3] == 1 || node.nb[3] == node.nb[2] * size_t(node.ne[2])) &&
                      node.nb[1] / 4 <= size_t(INT32_MAX) && w->ne[1] <= INT32_MAX && cols <= INT32_MAX &&
                      w->ne[0] <= INT32_MAX;
    // f32 weights (a mixture's router): x read as it is, so its rows must be contiguous
    const bool f32 = w->t == type::f32 && x->is_contiguous();
    return (w->t == type::f16 || w->t == type::bf16 || f32) && w->ne[2] == 1 && w->ne[3] == 1 && !w->view_src &&
           w->nb[1] == size_t(w->ne[0]) * type_size(w->t) && w->ne[0] % 32 == 0 && x->t == type::f32 &&
           gemm_split_wanted(cols) && even;
}

namespace {

void cublas_check(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) throw error(std::string("CUDA: ") + what + " failed: " + cublasGetStatusString(s));
}

constexpr size_t CUBLAS_WORKSPACE = size_t(32) << 20; // what cuBLAS asks for on Hopper

struct cublas_state {
    cublasHandle_t h = nullptr;
    void* ws = nullptr;
};

} // namespace

void cublas_destroy(void* handle) {
    auto* st = static_cast<cublas_state*>(handle);
    if (!st) return;
    if (st->h) (void)cublasDestroy(st->h);
    if (st->ws) (void)cudaFree(st->ws);
    delete st;
}

void* cublas_create(cudaStream_t stream) {
    auto* st = new cublas_state;
    try {
        cublas_check(cublasCreate(&st->h), "cublasCreate");
        TS_CUDA_CHECK(cudaMalloc(&st->ws, CUBLAS_WORKSPACE));
        cublas_check(cublasSetStream(st->h, stream), "cublasSetStream");
        // its own workspace: nothing allocated while a CUDA graph is captured
        cublas_check(cublasSetWorkspace(st->h, st->ws, CUBLAS_WORKSPACE), "cublasSetWorkspace");
    } catch (...) {
        cublas_destroy(st);
        throw;
    }
    return st;
}

bool gemm_float_wanted(const cuda_context& ctx, const tensor& node) {
    return ctx.cublas && !ctx.exact && gemm_float_shape(node);
}

// the activations [cols][k] as f16 or bf16
size_t gemm_float_work_size(const tensor& node) {
    if (!gemm_float_shape(node) || node.src[0]->t == type::f32) return 0;
    const tensor* x = node.src[1];
    return (size_t(x->ne[0]) * size_t(x->ne[1] * x->ne[2] * x->ne[3]) * sizeof(__half) + 255) / 256 * 256;
}

void gemm_float(cuda_context& ctx, tensor& dst) {
    const tensor* w = dst.src[0];
    const tensor* x = dst.src[1];
    const int64_t k = w->ne[0], n = w->ne[1], cols = x->ne[1] * x->ne[2] * x->ne[3], total = cols * k;
    if (total == 0 || n == 0) return;
    TS_ASSERT(ctx.scratch_size >= gemm_float_work_size(dst));
    const bool bf16 = w->t == type::bf16;
    TS_ASSERT(ctx.cublas);
    const float one = 1.0f, zero = 0.0f;
    if (w->t == type::f32) { // f32 throughout (no TF32: CUBLAS_COMPUTE_32F in the default math mode)
        cublas_check(cublasGemmEx(static_cast<cublas_state*>(ctx.cublas)->h, CUBLAS_OP_T, CUBLAS_OP_N, int(n),
                                  int(cols), int(k), &one, ctx.ptr(w), CUDA_R_32F, int(k), ctx.ptr(x), CUDA_R_32F,
                                  int(k), &zero, ctx.ptr(&dst), CUDA_R_32F, int(dst.nb[1] / 4), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx");
        return;
    }
    // y (n x cols, column-major, ldc the output's column stride) = W^T (W: k x n column-major, as stored) x
    const auto form = bf16 ? cuda_context::act_bf16 : cuda_context::act_f16;
    void* xa = ctx.scratch;
    if (!(ctx.act_src == x && ctx.act_form == form)) { // q, k, v (gate, up) share one conversion
        const shape4 sx = shape_of(*x, 4);
        const unsigned blocks = unsigned(ceil_div(total, 256));
        if (bf16)
            bf16_rows_kernel<<<blocks, 256, 0, ctx.stream>>>(ctx.as<float>(x), sx, static_cast<__nv_bfloat16*>(xa),
                                                             total);
        else
            f16_rows_kernel<<<blocks, 256, 0, ctx.stream>>>(ctx.as<float>(x), sx, static_cast<__half*>(xa), total);
        TS_CUDA_CHECK(cudaGetLastError());
        ctx.act_src = x;
        ctx.act_form = form;
    }
    const cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_16F;
    cublas_check(cublasGemmEx(static_cast<cublas_state*>(ctx.cublas)->h, CUBLAS_OP_T, CUBLAS_OP_N, int(n),
                              int(cols), int(k), &one, ctx.ptr(w), t, int(k), xa, t, int(k), &zero,
                              ctx.ptr(&dst), CUDA_R_32F, int(dst.nb[1] / 4), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
}

} // namespace tessera::cuda
