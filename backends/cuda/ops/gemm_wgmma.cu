// gemm_wgmma.cu: prefill mul_mat on Hopper's warpgroup tensor-core MMA (wgmma.mma_async, sm_90a only), for every
// format with the split layout: y (n, cols) = W^T x with x given as f16 rows [cols][k] (gemm.cu prepares them: the
// q8_1 values d q rounded to f16 for the formats whose CPU dot takes q8_1 activations, so both backends multiply the
// same activations to within f16 rounding; x itself rounded to f16 for the others).
//
// Batches of 192 columns or more (prefill) go to gemm_wq_kernel (below, where the tile rule wq_plan allows): tiles of
// 64 or 128 weight rows x 256 columns, producer warpgroups (two at BM 64, one at 128: TMA for the activations,
// shared by the two CTAs of a cluster at BM 64, the weights dequantized into shared memory) and one or two consumer
// warpgroups that only issue wgmma. H200, 2026-11-28, pp512: 8B q4_0 30087 / 29989 t/s, 1B 127544 / 127355.
// Measured (H100, 2026-11-28, one call, 8B q4_0 pp512, two producers at BM 64, same greedy text with
// TESSERA_CUDA_WGMMA_WQ=0):
// 27911 / 27672 t/s vs 20479 with =0. Outside the model (tests/bench/wq_harness.cu, q4_0, m = 512, TFLOP/s, the old
// kernel in the same run): 4096^2 494-497 (BM 64) vs 307-311, 28672 x 4096 500 (BM 64) / 465-469 (BM 128) vs 389-395,
// 4096 x 14336 554 (BM 64) vs 277-278.
// Otherwise a 128 (weight rows) x TN (columns) tile per CTA of two warpgroups, each warpgroup 64 rows x TN columns
// with its accumulators in registers. TN = 128 (three stages, two CTAs an SM: stages()), or 64 (four stages, two CTAs
// an SM) when 128-column tiles would leave 45% of the SMs idle or more (1B's 2048-row matrices at 512 tokens; 8B's
// 4096-row ones, 128 tiles on 132 SMs, are 29% faster in 128-column tiles; see launch()). k advances 64 elements
// (two 32-element chunks, one 128-byte swizzle row of f16) a step:
//   activations  cp.async straight into the 128-byte-swizzled layout wgmma reads (16-byte piece c of row r at
//                r * 128 + (c ^ r % 8) * 16), ST - 2 steps ahead;
//   weights      each thread loads one chunk (and its scale group) of one row into registers three steps ahead
//                (two register sets), dequantizes it with the format's dequant_split (quant/<format>.cuh) one step
//                ahead and stores the 32 halves into the same swizzled layout; thread t writes row t / 2, so each
//                warpgroup writes exactly the 64 rows its own wgmma reads.
// Every format, nvfp4 and mxfp4 included, dequantizes inside the GEMM. nvfp4 and mxfp4 had been dequantized to f16
// rows first (a separate kernel, then a warp-specialized f16 GEMM), from when their decode was too slow to repeat
// per column tile (H100, session 7: 140 vs 275 TFLOP/s at 4096^2). With the byte_perm decode (e2m1x8_halves) and
// gemm_wq_kernel, measured (H200, 2026-11-29, 8B, two rounds in one call, perplexity equal to the last digit): pp512
// nvfp4 28192 / 28660 vs 17245 / 17245 t/s, mxfp4 28394 / 28303 vs 17011 / 16964; pp128 (gemm_wgmma_kernel's
// tiles) nvfp4 9140 / 9122 vs 7227 / 7249, mxfp4 9335 / 9341 vs 7144 / 7186. The dequantize-first path is deleted.
// Each step issues 4 x wgmma m64nTNk16 per warpgroup and leaves them running while the loads and the dequantization
// of the next steps go on; wgmma.wait_group 1 keeps one step in flight, so a stage is rewritten only two steps after
// the wgmma that read it (and after a barrier). fence.proxy.async makes the generic-proxy writes (st.shared and
// cp.async) visible to the tensor cores' async proxy. The epilogue writes each output once (no 64-bit divisions for
// a single batch: they had cost more than the GEMM).
// Grouped launches (gemm_wgmma_group: q, k, v or gate, up of one activation in prefill) put the matrices' row tiles
// one after the other in one grid; each CTA picks its matrix from its row tile. Measured (H100, 2026-11-26, pp512,
// grouped vs one launch a matrix, same text): Gemma-3-4B q4_0 21955-22370 vs 19427-19483 t/s, Qwen3-8B q4_0
// 15276-15344 vs 14535-14678, Llama-3-8B q8_0 15806-16015 vs 14304-14465.
// The grid runs column tiles fastest: the CTAs of one row tile run side by side, so its weights come from HBM once and
// from L2 for the other column tiles (at 14336 x 4096 the weights outgrow L2 otherwise).
// The kernel body exists only in the sm_90a build; wgmma_built() asks the device whether the running binary has it.
// Measured (H100, 2026-11-22, m = 512, TFLOP/s at 4096x4096 / 14336x4096 / 4096x14336; cuBLAS f16 615-827), session 8
// with the tile rule above: q4_0 317 / 289 / 321, q8_0 297 / 277 / 302, awq4 311 / 282 / 318, nvfp4 (first, the
// warp-specialized kernel) 341 / 317 / 343 (session 7, 64-column tiles at 4096 rows: q4_0 244 / 289 / 245; rows
// fastest: 248 / 280 / 249). The mma.sync kernels (TESSERA_CUDA_WGMMA=0): 151 / 136 / 166 for q4_0. A plain
// f16 GEMM with this pipeline reaches 485 / 349 / 472 (tests/bench/wgmma_proto.cu is where that was measured).
// Tried and set aside (branch wip/wgmma-rs): the weights dequantized straight into wgmma's A register fragments (no
// shared memory for A; activations written in the fragments' k order): 259 / 218 / 255 for q4_0 in one call against
// this kernel's 246 / 282 / 246 -- the dequantization then waits on the wgmma two steps back, and the register-held
// weight prefetch (two steps) is too short at 14336 rows.
// Split k now lives in gemm_wq_kernel's tail (wq_plan: the last wave's tiles only, at most one part a free SM).
// Tried and removed (session 20): split k for matrices whose tiles fill few SMs (Gemma-3-4B's o and down, 2560 rows:
// 80 tiles of 128 x 128 on 132 SMs), each of S CTAs a tile multiplying k / S and the last to finish summing the
// partials (written to the scratch, counted in ctx.counters) in split order. In the model (ncu, H100, pp512, us per
// launch), S = 3: o 94 vs 40 (64-column tiles) / 53 (128-column), down 160 vs 172 / 150; end to end 22.1k vs 24.5k
// t/s. A split CTA paid ~30 us more than its share of steps. In the model this kernel runs at ~1.5 us a step of 64 k
// (Gemma's q/k/v: 185 TFLOP/s; SM throughput ~20%, latency-bound at one CTA an SM), against ~0.85 us in isolation.
#include "backends/cuda/ops/mma.cuh"
#include "backends/cuda/ops/ops.cuh"

#include "backends/cuda/quant/formats.cuh"

#include <cudaTypedefs.h> // cuTensorMapEncodeTiled's type (the driver entry point, found at run time), CUtensorMap
#include <cuda_fp16.h>

#include <cstdlib>
#include <type_traits>

namespace tessera::cuda {

namespace {

constexpr int TM = 128, TK = 64, THREADS = 256;
constexpr int TILE_BYTES = 128 * TK * 2; // one operand's stage: 128 rows of 128 bytes, 16 KiB

template <int TN, int ST> constexpr size_t smem_bytes() {
    return size_t(ST) * (TILE_BYTES + TN * TK * 2) + 1024; // + the 1024-byte alignment of the swizzle atoms
}

// A further matrix of a grouped launch (gemm_wgmma_group): the same activations, its own weights and output.
struct wgmma_part {
    const uint8_t* qs;
    const uint8_t* sc;
    float* y;
    int64_t y_nb1, y_nb2, y_nb3, n;
    float out_scale;
    int tile0;         // its first row tile in the grid
    const float* bias; // IDS: its experts' biases (id_map::bias)
};

struct wgmma_args {
    const uint8_t* qs; // split weights (quantized A)
    const uint8_t* sc;
    const __half* x; // [cols][k]
    float* y;
    int64_t y_nb1, y_nb2, y_nb3;
    int64_t n, row_base, m, k, ne2, ne3; // n rows of this call, written at output rows row_base ..
    float out_scale;
    bool cols_fastest; // grid (column tiles, row tiles): the CTAs of one row tile run together, its weights read once
    int n_more = 0;    // grouped launch: row tiles from more[i].tile0 on are matrix i + 1's
    wgmma_part more[2] = {};
    id_map map = {}; // IDS: the pairs' tiles (blockIdx.x), experts' rows, output rows and epilogue
    // gemm_wq_kernel's split tail (wq_plan): grid rows from split_y0 on are the last row tiles, each ksplit times
    // (the cluster's rows together: y - split_y0 = ((t / CL) ksplit + p) CL + t % CL for tile split_y0 + t, part p
    // of k); each part's accumulators go to `part` (64 x 256 floats a consumer warpgroup), counted in `counters` (one
    // per split tile, back to 0 when done), and the last part to finish adds them in part order and stores
    int split_y0 = 1 << 30, ksplit = 1;
    float* part = nullptr;
    int* counters = nullptr;
    size_t part_bytes = 0, n_counters = 0; // what `part` and `counters` hold (none: no split)
};

// Stages of a CTA's pipeline (ST of gemm_wgmma_kernel). 64-column tiles: 4, two CTAs an SM. 128-column tiles: 3
// (97 KiB), so two CTAs share an SM and one's loads and dequantization run under the other's wgmma; the kernel had
// been latency-bound at one CTA an SM in 6 stages. Measured (H200, 2026-11-27, m = 512, bench_mmv TFLOP/s at 4096 x
// 4096 / 14336 x 4096 / 4096 x 14336, 6 stages -> 3): q4_0 270 / 265 / 290 -> 337 / 356 / 330, q4_1 267 / 265 / 286
// -> 331 / 356 / 335, q8_0 261 / 251 / 284 -> 301 / 332 / 294, awq4 274 / 267 / 298 -> 331 / 346 / 327; 8B pp512
// q4_0 16588-16633 -> 18736-18900 t/s, q8_0 16306-16328 -> 18419-18422. tq2_0 went both ways (293 / 265 / 327 ->
// 288 / 325 / 269): the ternary formats keep 6 stages.
template <class D, int TN> constexpr int stages() {
    if constexpr (TN == 64)
        return 4;
    else if constexpr (std::is_same_v<D, cuda_format<tq2_0>> || std::is_same_v<D, cuda_format<i2_s>>)
        return 6;
    else
        return 3;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// Shared-memory matrix descriptor of a K-major operand in the 128-byte swizzle: start address >> 4, leading byte
// offset (unused by this swizzle) 1, stride byte offset 1024 >> 4 (the next group of 8 rows), swizzle mode 1 (128 B).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
    return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// d (64 x N f32, the warpgroup's fragment: N / 2 floats a thread) += a (64 x 16 f16) b (N x 16 f16), both K-major
#define TS_R8(i)                                                                                                       \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]),        \
        "+f"(d[i + 7])
template <int N> __device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], uint64_t da, uint64_t db) {
    if constexpr (N == 128) {
        asm volatile("{\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                     "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
                     "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "
                     "%59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 0;\n"
                     "}\n"
                     : TS_R8(0), TS_R8(8), TS_R8(16), TS_R8(24), TS_R8(32), TS_R8(40), TS_R8(48), TS_R8(56)
                     : "l"(da), "l"(db));
    } else if constexpr (N == 256) {
        asm volatile("{\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                     "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
                     "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "
                     "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, "
                     "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, "
                     "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, "
                     "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
                     "%128, %129, 1, 1, 1, 0, 0;\n"
                     "}\n"
                     : TS_R8(0), TS_R8(8), TS_R8(16), TS_R8(24), TS_R8(32), TS_R8(40), TS_R8(48), TS_R8(56), TS_R8(64),
                       TS_R8(72), TS_R8(80), TS_R8(88), TS_R8(96), TS_R8(104), TS_R8(112), TS_R8(120)
                     : "l"(da), "l"(db));
    } else {
        static_assert(N == 64, "tiles of 64, 128 or 256 columns");
        asm volatile("{\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                     "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1, 1, 1, 0, 0;\n"
                     "}\n"
                     : TS_R8(0), TS_R8(8), TS_R8(16), TS_R8(24)
                     : "l"(da), "l"(db));
    }
}
#undef TS_R8

// One stage's wgmma for a warpgroup, issued asynchronously and committed as one group: d += (the 64 weight rows at
// a_rows: 128-byte swizzled, TK wide) x (the stage's activation tile at b_tile), TK / 16 k-steps. Both kernels below
// wait for it with wgmma.wait_group.
template <int TN> __device__ __forceinline__ void wgmma_stage(float (&d)[TN / 2], uint32_t a_rows, uint32_t b_tile) {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < TK / 16; kk++) wgmma_m64k16<TN>(d, smem_desc(a_rows + kk * 32), smem_desc(b_tile + kk * 32));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
#endif

// store_tile where y is one matrix (ne2 = ne3 = 1: column c at c * y_nb1): one pointer a thread, each store at a
// constant offset from it plus a multiple of y_nb1, bounds as predicates. A warp's store writes 4 runs of 8 floats
// (32-byte sectors).
template <int TN>
__device__ __forceinline__ void store_tile_one_matrix(const wgmma_args& a, const float (&d)[TN / 2], int64_t r0,
                                                      int64_t col0, int64_t cols) {
    const int w = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
    const int64_t r = r0 + w * 16 + lane / 4, c = col0 + 2 * (lane % 4);
    const bool ok0 = r < a.n, ok1 = r + 8 < a.n;
    const int c_lim = int(cols - c < TN ? cols - c : TN); // this thread's columns c + x exist for x < c_lim
    const int64_t ld = a.y_nb1;
    float* const y = a.y + a.row_base + r + c * ld;
    const float s = a.out_scale;
    if (ok1 && c_lim >= TN) { // a whole tile (all but the last row and column tiles): no predicates
#pragma unroll
        for (int j = 0; j < TN / 8; j++) {
            float* const yj = y + 8 * j * ld;
            yj[0] = d[4 * j] * s, yj[8] = d[4 * j + 2] * s, yj[ld] = d[4 * j + 1] * s, yj[ld + 8] = d[4 * j + 3] * s;
        }
        return;
    }
#pragma unroll
    for (int j = 0; j < TN / 8; j++) {
        float* const yj = y + 8 * j * ld;
        if (8 * j < c_lim) {
            if (ok0) yj[0] = d[4 * j] * s;
            if (ok1) yj[8] = d[4 * j + 2] * s;
        }
        if (8 * j + 1 < c_lim) {
            if (ok0) yj[ld] = d[4 * j + 1] * s;
            if (ok1) yj[ld + 8] = d[4 * j + 3] * s;
        }
    }
}

// A warpgroup's accumulators (64 rows from r0 x TN columns from col0) into y, each output once. Fragment: warp w of
// the warpgroup holds rows 16 w .. 16 w + 15; register 4 j + e is row lane / 4 + 8 (e / 2), column
// 8 j + 2 (lane % 4) + e % 2.
template <int TN>
__device__ __forceinline__ void store_tile(const wgmma_args& a, const float (&d)[TN / 2], int64_t r0, int64_t col0,
                                           int64_t cols) {
    if (a.ne2 * a.ne3 == 1) return store_tile_one_matrix<TN>(a, d, r0, col0, cols);
    const int w = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < TN / 2; i++) {
        const int j = i / 4, e = i % 4;
        const int64_t r = r0 + w * 16 + lane / 4 + 8 * (e / 2);
        const int64_t c = col0 + j * 8 + 2 * (lane % 4) + (e % 2);
        if (r < a.n && c < cols)
            a.y[column_offset(c, a.m, a.ne2, a.ne3, a.y_nb1, a.y_nb2, a.y_nb3) + a.row_base + r] = d[i] * a.out_scale;
    }
}

// The matrix of row tile `row_tile` of a grouped launch (q, k, v or gate, up of one activation): a_in itself or one of
// a_in.more, with row_tile made relative to it.
[[maybe_unused]] __device__ __forceinline__ wgmma_args part_of(const wgmma_args& a_in, int64_t& row_tile) { // sm_90a
    wgmma_args a = a_in;
    for (int i = a_in.n_more - 1; i >= 0; i--)
        if (row_tile >= a_in.more[i].tile0) {
            const wgmma_part& p = a_in.more[i];
            a.qs = p.qs, a.sc = p.sc, a.y = p.y, a.y_nb1 = p.y_nb1, a.y_nb2 = p.y_nb2, a.y_nb3 = p.y_nb3, a.n = p.n;
            a.out_scale = p.out_scale;
            a.map.bias = p.bias;
            row_tile -= p.tile0;
            break;
        }
    return a;
}

// Chunk ib of a weight row (q, its scale word s) dequantized into 32 halves at piece ci * 4 .. ci * 4 + 3 of the
// 128-byte swizzled row `row` at `dst` (row * 128 bytes in); ib >= nb (k % 64 == 32: the last step's second chunk)
// writes zeros.
template <class D>
__device__ __forceinline__ void dequant_to_smem(const typename D::chunk_t& q, scale_word_t<D> s, int64_t ib, int64_t nb,
                                                uint8_t* dst, int row, int ci) {
    uint4 v[4];
    if (ib >= nb) {
        v[0] = v[1] = v[2] = v[3] = make_uint4(0, 0, 0, 0);
    } else {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            __half2 o[8];
            D::dequant_split(q, reinterpret_cast<const uint8_t*>(&s), int(ib % D::chunks_per_scale), h, o);
            v[2 * h] = *reinterpret_cast<const uint4*>(&o[0]);
            v[2 * h + 1] = *reinterpret_cast<const uint4*>(&o[4]);
        }
    }
    uint8_t* r = dst + row * 128;
#pragma unroll
    for (int j = 0; j < 4; j++) *reinterpret_cast<uint4*>(r + (((ci * 4 + j) ^ (row & 7)) << 4)) = v[j];
}

// TN columns a CTA (128 or 64), ST stages (stages(): up to 4 fit two CTAs on an SM). IDS (mul_mat_id's prefill, 64
// columns): the column tile is tile blockIdx.x of a.map (up to 64 pairs that chose one expert; past the count the CTA
// exits), the weights that expert's rows (expert * n ..), column c the activation row of the tile's pair c.
template <class D, int TN, int ST, bool IDS = false>
static __global__ void __launch_bounds__(THREADS, ST <= 4 ? 2 : 1) gemm_wgmma_kernel(const wgmma_args a_in) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    static_assert(!IDS || TN == 64, "pair tiles of 64");
    // the matrix of this CTA's row tile (a grouped launch: q, k, v or gate, up of one activation)
    int64_t row_tile = a_in.cols_fastest ? blockIdx.y : blockIdx.x;
    const wgmma_args a = part_of(a_in, row_tile);
    int64_t expert = 0;
    int first = 0, tile_cols = 0;
    if constexpr (IDS) {
        if (int(blockIdx.x) >= *a.map.n_tiles) return; // uniform over the block
        const int4 tile = a.map.tiles[blockIdx.x];
        expert = tile.x, first = tile.y, tile_cols = tile.z;
    }
    using chunk_t = typename D::chunk_t;
    constexpr int AHEAD = ST - 2;        // activation stages in flight
    constexpr int B_BYTES = TN * TK * 2; // one activation stage
    static_assert(AHEAD >= 1, "at least 3 stages");
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023) & ~1023u;
    uint8_t* const sm = smem_raw + (base - raw); // generic pointer to the aligned start
    const uint32_t sA = base, sB = base + ST * TILE_BYTES;

    const int tid = threadIdx.x, wg = tid / 128;
    const int64_t row0 = row_tile * TM;
    const int64_t col0 = IDS ? 0 : int64_t(a.cols_fastest ? blockIdx.x : blockIdx.y) * TN;
    const int64_t cols = IDS ? tile_cols : a.m * a.ne2 * a.ne3, nb = a.k / 32, ng = nb / D::chunks_per_scale;
    const int steps = int((nb + 1) / 2); // k % 64 == 32: the last step's second chunk is zeros

    // weights: chunk a_ci of each step for row a_row (rows past n read row n - 1 and are never stored)
    const int a_row = tid / 2, a_ci = tid % 2;
    const int64_t w_row = expert * a.n + (row0 + a_row < a.n ? row0 + a_row : a.n - 1);
    const uint8_t* q_row = a.qs + w_row * nb * int64_t(sizeof(chunk_t));
    const uint8_t* s_row = a.sc + w_row * ng * D::scale_bytes;
    auto load_w = [&](int step, chunk_t& q, scale_word_t<D>& s) {
        if (step >= steps) return;
        const int64_t ib = min(2 * int64_t(step) + a_ci, nb - 1);
        q = ldg_chunk<chunk_t>(q_row + ib * int64_t(sizeof(chunk_t)));
        s = load_scale_word<D::scale_bytes>(s_row + (ib / D::chunks_per_scale) * D::scale_bytes);
    };
    auto store_w = [&](int step, const chunk_t& q, scale_word_t<D> s) {
        if (step < steps)
            dequant_to_smem<D>(q, s, 2 * int64_t(step) + a_ci, nb, sm + (step % ST) * TILE_BYTES, a_row, a_ci);
    };
    // activations: TN rows x 8 pieces of 16 bytes a step; columns past the batch and k past the end are zero-filled
    // Thread tid moves pieces tid + i THREADS: row p / 8, piece c = tid % 8 (the same for every i), so the swizzled
    // offset, the source row and whether it exists are fixed per i; only the k offset moves.
    constexpr int XI = TN * 8 / THREADS;
    const int pc = tid % 8;
    const __half* x_src[XI];
    uint32_t x_dst[XI];
    bool x_ok[XI];
#pragma unroll
    for (int i = 0; i < XI; i++) {
        const int r = (tid + i * THREADS) / 8;
        x_ok[i] = col0 + r < cols;
        int64_t x_row = col0 + r;
        if constexpr (IDS) { // the pair's activation row: its slot's row of its token
            const int64_t p = x_ok[i] ? a.map.pairs[first + r] : 0;
            x_row = p % a.map.n_used % a.map.n_b + p / a.map.n_used * a.map.n_b;
        }
        x_src[i] = a.x + (x_ok[i] ? x_row * a.k + pc * 8 : 0);
        x_dst[i] = uint32_t(ST * TILE_BYTES + r * 128 + ((pc ^ (r & 7)) << 4));
    }
    auto load_x = [&](int step) {
        if (step < steps) {
            const int64_t e = int64_t(step) * TK;
            const bool k_ok = e + pc * 8 < a.k; // k % 64 == 32: the last step's upper half is zeros
#pragma unroll
            for (int i = 0; i < XI; i++) {
                const bool ok = x_ok[i] && k_ok;
                cp_async16(sm + (step % ST) * B_BYTES + x_dst[i], ok ? x_src[i] + e : x_src[i], ok);
            }
        }
        cp_async_commit(); // an empty group past the end keeps the count per step
    };

    float d[TN / 2];
#pragma unroll
    for (int i = 0; i < TN / 2; i++) d[i] = 0.0f;

    // One step: wait for its stage, issue its wgmma and, while they run, start the activations AHEAD steps ahead,
    // dequantize the next step's weights (held in q, s since three steps back) into their stage and refill q, s with
    // the weights three steps ahead. Two register sets take turns, so a chunk's load has two steps to arrive.
    auto body = [&](int step, chunk_t& q, scale_word_t<D>& s) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(AHEAD - 1));
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads(); // this step's stage complete for everyone; the wgmma two steps back done in both warpgroups
        const int stage = step % ST;
        wgmma_stage<TN>(d, sA + stage * TILE_BYTES + wg * 64 * 128, sB + stage * B_BYTES);
        load_x(step + AHEAD);
        store_w(step + 1, q, s);
        load_w(step + 3, q, s);
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
    };

    for (int i = 0; i < AHEAD; i++) load_x(i);
    chunk_t q0{}, q1{};
    scale_word_t<D> s0{}, s1{};
    load_w(0, q0, s0);
    load_w(1, q1, s1);
    store_w(0, q0, s0);
    load_w(2, q0, s0);
    for (int step = 0; step < steps; step += 2) { // step + 1 is stored from set (step + 1) % 2
        body(step, q1, s1);
        if (step + 1 < steps) body(step + 1, q0, s0);
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");

    if constexpr (IDS) {
        const int w = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
#pragma unroll
        for (int i = 0; i < TN / 2; i++) {
            const int j = i / 4, e = i % 4;
            const int64_t r = row0 + wg * 64 + w * 16 + lane / 4 + 8 * (e / 2);
            const int c = j * 8 + 2 * (lane % 4) + (e % 2);
            if (r < a.n && c < cols) store_id(a.map, a.y, expert, first, r, c, d[i] * a.out_scale);
        }
    } else {
        store_tile<TN>(a, d, row0 + wg * 64, col0, cols);
    }
#else
    (void)a_in;
    (void)D::scale_bytes, (void)D::chunks_per_scale, (void)&D::dequant_split; // referenced on sm_90a only
    __trap(); // never launched: wgmma_built() is false without the sm_90a code
#endif
}

// mbarrier helpers of gemm_wq_kernel (below)
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// until the phase of parity `parity` of the barrier has completed
__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity) {
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT;\n"
                 "}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}
#endif

// ---- warp-specialized kernel for the block formats: tiles of BM (64 or 128) weight rows x 256 columns ----
// Warpgroups 0 .. WQ_NP - 1 produce, producer g the steps g, g + WQ_NP, ...: one thread asks the tensor-memory
// accelerator (TMA) for the step's activation tile (64 k x 256 columns of the f16 rows through a tensor map, landing
// in the 128-byte swizzle; columns past the batch and k past the end read zeros), and every thread dequantizes BM / 64
// weight chunks of 32 values into the stage's swizzle (thread p: row (p + 128 j) / 2, chunk p % 2 of the step), their
// bytes loaded into registers WQ_R of its steps ahead. The next WQ_NP .. warpgroups multiply 64 weight rows x 256
// columns each (wgmma m64n256k16, 128 accumulators a thread) and do nothing else. A stage passes through two mbarriers:
// `full` (the TMA's bytes, plus 128 producer arrivals after each thread's fence.proxy.async) and `empty` (every
// consumer thread, once wgmma.wait_group shows its wgmma on the stage done). One CTA an SM. At BM 64 two CTAs of
// consecutive row tiles (same column tile) form a cluster: each one's TMA loads half the activation tile's columns and
// multicasts it into both CTAs' stages (each `full` still expects the whole tile), so the activations are read from L2
// once per 128 weight rows (a 64 x 256 tile alone reads 512 activation bytes a k against 36 weight bytes: ~9 TB/s of L2
// at 550 TFLOP/s). A stage is then free only when both CTAs' consumers are done with it: `empty` counts one arrival per
// consumer warp of every CTA of the cluster. Measured (H200, 2026-11-28, wq_harness, m = 512, TFLOP/s, without -> with
// clusters, bit-equal): q4_0 28672 x 4096 522 -> 548, 4096 x 14336 563 -> 585, 4096^2 508 -> 513, 1B's shapes within
// -1.5%; q8_0 494 -> 515, 538 -> 552; BM 128 in clusters of two: no faster (271 / 406 / 474 -> 271 / 408 / 473). In the
// model (same call, pp512, the tile rule below): 8B q4_0 29159 / 29366 -> 30087 / 29989 t/s, 1B 126463 / 123712 ->
// 127544 / 127355. Against gemm_wgmma_kernel's 128 x 128 tiles: a weight row is dequantized once per 256 columns (half
// the work a FLOP), and the multiplying warps no longer wait on the loads and the dequantization of their own threads.
// The producers set the pace: a step's chain (the weights' registers, dequantization, stores, fence.proxy.async,
// arrive) is long, so at BM 64 two producer warpgroups take turns (two warps of producer a scheduler). Measured (H100,
// 2026-11-28, wq_harness, m = 512, TFLOP/s at 4096^2 / 6144 x 4096 / 28672 x 4096 / 4096 x 14336, BM 64, two rounds,
// results bit-equal): q4_0 431-497 / 343-410 / 453-500 / 491-554 with one producer -> two, q8_0 408-477 /
// 322-390 / 429-468 / 454-532; 8B q4_0 pp512 27911 / 27672 t/s (the tile rule unchanged). The activations by
// cp.async had cost a producer ~70 of ~220 instructions a step (16 pieces of 16 bytes a thread, with 64-bit
// addresses): hence the TMA. The kernel's code
// is kept small: with two dequantization paths in the unrolled producer loop and an epilogue of per-output column
// arithmetic (20k SASS instructions against the prototype's 1.6k), ncu showed the warps stalled on instruction fetch
// (no_instruction 3.65 cycles an issue vs 0.11) and the kernel at half the prototype's speed (4096^2 q4_0, m = 512:
// 91 vs 45 us). The epilogue of one output matrix stores the fragment straight from registers, one pointer a thread
// (store_tile_one_matrix); batches (ne2 * ne3 > 1) go through shared memory in a loop (each column's rows as
// consecutive floats), whose per-output column arithmetic stays out of the unrolled code.
// WQ_EPI_LD: floats a column of the epilogue's buffer (64 rows + 4: the fragment's stores hit 32 distinct banks)
constexpr int WQ_BN = 256, WQ_EPI_LD = 68;
[[maybe_unused]] constexpr int WQ_R = 4; // used by the sm_90a code only
// producer warpgroups: two at BM 64 (each takes every other step), one at BM 128 (a second would leave the consumers
// 128 registers a thread)
template <int BM> constexpr int WQ_NP = BM == 64 ? 2 : 1;
template <int BM> constexpr int WQ_THREADS = 128 * (BM / 64 + WQ_NP<BM>);
template <int BM> constexpr int WQ_ST = BM == 64 ? 5 : 4; // 200 / 192 KiB of stages
// CTAs a cluster (consecutive row tiles of one column tile, sharing its activation tile by TMA multicast): two at BM
// 64, one at 128 (two measured no faster there)
template <int BM> constexpr int WQ_CL = BM == 64 ? 2 : 1;
template <int BM>
constexpr size_t WQ_SMEM = size_t(WQ_ST<BM>) * size_t(BM * 128 + WQ_BN * 128) + size_t(2 * WQ_ST<BM>) * 8 + 1024;
static_assert(size_t(WQ_ST<64>) * (64 * 128 + WQ_BN * 128) >= size_t(WQ_BN) * WQ_EPI_LD * 4 &&
                  size_t(WQ_ST<128>) * (128 * 128 + WQ_BN * 128) >= size_t(2 * WQ_BN) * WQ_EPI_LD * 4,
              "the epilogue's buffers fit in the stages");

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// this thread's arrival on `bar`, and `bytes` more for the phase to wait for (a TMA's)
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
// the box of `map` at (c0 innermost, c1) into shared memory at dst, its bytes counted on `bar`
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
                 "%3}], [%4];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
// the same box into dst of every CTA of the cluster in `mask`, its bytes counted on each one's `bar`
__device__ __forceinline__ void tma_load_2d_multicast(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                                      uint32_t bar, uint16_t mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
                 "[%0], [%1, {%2, %3}], [%4], %5;\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar), "h"(mask)
                 : "memory");
}
// one arrival on the barrier at offset `bar` of the cluster's CTA `rank`
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
    asm volatile("{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\nmbarrier.arrive.shared::cluster.b64 _, "
                 "[ra];\n}\n" ::"r"(bar),
                 "r"(rank)
                 : "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// A split tile's part (kpart of a.ksplit): consumer warpgroup c's accumulators (thread t of its 128) go to the part's
// slot of a.part as 64 rows x WQ_BN columns, column after column; the tile's counter says which part ended last, and
// that CTA adds every part's values in part order (so the sum does not depend on which part ends last) and stores
// them, a warp 32 consecutive rows of a column. Every consumer thread calls it.
template <int NC>
__device__ __forceinline__ void wq_split_store(const wgmma_args& a, const float (&d)[WQ_BN / 2], int slot, int kpart,
                                               int c, int t, int64_t r0, int64_t col0, int64_t cols) {
    constexpr int TILE = 64 * WQ_BN; // floats of a warpgroup's part
    const int ks = a.ksplit;
    auto slot_of = [&](int p) { return a.part + ((size_t(slot) * ks + p) * NC + c) * TILE; };
    const int w = t / 32, lane = t % 32;
    float* mine = slot_of(kpart);
    // fragment register 4 j + e: row lane / 4 + 8 (e / 2), column 8 j + 2 (lane % 4) + e % 2
#pragma unroll
    for (int i = 0; i < WQ_BN / 2; i++) {
        const int j = i / 4, e = i % 4;
        mine[(j * 8 + 2 * (lane % 4) + e % 2) * 64 + w * 16 + lane / 4 + 8 * (e / 2)] = d[i];
    }
    __threadfence(); // the values are visible before the count says so
    __shared__ int last;
    asm volatile("bar.sync 1, %0;\n" ::"n"(NC * 128) : "memory");
    if (c == 0 && t == 0) {
        int* cnt = a.counters + slot;
        last = atomicAdd(cnt, 1) == ks - 1;
        if (last) *cnt = 0; // every part has counted: ready for the next launch
    }
    asm volatile("bar.sync 1, %0;\n" ::"n"(NC * 128) : "memory");
    if (!last) return;
    __threadfence();
    // 8 float4s of every part a thread in flight at once (a loop of one load after the other had waited on L2 for
    // each: 2048^2 at 70 TFLOP/s instead of 213; 16 at once measured 2-4% slower than 8 at every split shape)
    constexpr int U = 8;
#pragma unroll 1
    for (int i0 = 4 * t; i0 < TILE; i0 += 4 * 128 * U) {
        float4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) v[u] = __ldcg(reinterpret_cast<const float4*>(slot_of(0) + i0 + 4 * 128 * u));
        for (int p = 1; p < ks; p++)
#pragma unroll
            for (int u = 0; u < U; u++) {
                const float4 x = __ldcg(reinterpret_cast<const float4*>(slot_of(p) + i0 + 4 * 128 * u));
                v[u].x += x.x, v[u].y += x.y, v[u].z += x.z, v[u].w += x.w;
            }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int i = i0 + 4 * 128 * u, cc = i / 64, rr = i % 64; // 4 rows of a column
            const int64_t col = col0 + cc, r = r0 + rr;
            if (col >= cols) continue;
            float* y = a.y + column_offset(col, a.m, a.ne2, a.ne3, a.y_nb1, a.y_nb2, a.y_nb3) + a.row_base + r;
            const float e[4] = {v[u].x, v[u].y, v[u].z, v[u].w};
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (r + j < a.n) y[j] = e[j] * a.out_scale;
        }
    }
}
#endif

template <class D, int BM>
static __global__ void __launch_bounds__(WQ_THREADS<BM>, 1)
    gemm_wq_kernel(const wgmma_args a_in, const __grid_constant__ CUtensorMap x_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int ST = WQ_ST<BM>, A_BYTES = BM * 128, B_BYTES = WQ_BN * 128, NC = BM / 64, NP = WQ_NP<BM>;
    constexpr int CL = WQ_CL<BM>;
    static_assert(CL == 1 || CL == 2, "clusters of one or two row tiles");
    using chunk_t = typename D::chunk_t;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023) & ~1023u;
    uint8_t* const sm = smem_raw + (base - raw);
    const uint32_t sA = base, sB = base + ST * A_BYTES, bars = sB + ST * B_BYTES;
    auto full = [&](int st) { return bars + 8 * st; };
    auto empty = [&](int st) { return bars + 8 * (ST + st); };

    int64_t row_tile = blockIdx.y; // column tiles fastest: a row tile's CTAs run together, its weights read once
    int kpart = 0, slot = -1;      // a split tile's part of k, and the tile's number among the split ones
    if (int(blockIdx.y) >= a_in.split_y0) {
        const int rel = int(blockIdx.y) - a_in.split_y0, cl = rel / CL, t = cl / a_in.ksplit * CL + rel % CL;
        kpart = cl % a_in.ksplit;
        row_tile = a_in.split_y0 + t;
        slot = t * int(gridDim.x) + int(blockIdx.x);
    }
    const wgmma_args a = part_of(a_in, row_tile);
    const int tid = threadIdx.x, wg = tid / 128;
    const int64_t row0 = row_tile * BM, col0 = int64_t(blockIdx.x) * WQ_BN;
    const int64_t cols = a.m * a.ne2 * a.ne3, nb = a.k / 32, ng = nb / D::chunks_per_scale;
    const int all_steps = int((nb + 1) / 2); // k % 64 == 32: the last step's second chunk is zeros
    // this CTA's steps: s0 .. s0 + steps - 1 (all of them but in a split tile); `step` below counts from s0
    const int ks = slot >= 0 ? a_in.ksplit : 1;
    const int s0 = kpart * all_steps / ks, steps = (kpart + 1) * all_steps / ks - s0;

    if (tid == 0) {
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&x_map)) : "memory");
        for (int st = 0; st < ST; st++) {
            mbar_init(full(st), 128 + 1);                           // the producers, and the TMA's expect_tx
            mbar_init(empty(st), CL == 1 ? 128 * NC : 4 * NC * CL); // threads; in a cluster, warps of every CTA
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    if constexpr (CL == 1)
        __syncthreads();
    else
        cluster_sync(); // the partner's barriers are initialized before anything arrives on them
    const uint32_t rank = CL == 1 ? 0 : cluster_rank();

    if (wg < NP) {
        constexpr int WI = BM / 64; // weight chunks a thread a step
        const int p = tid % 128, ci = p % 2;
        const int my = (steps - wg + NP - 1) / NP; // this producer's steps: wg + NP i
        int w_r[WI];
        const uint8_t* q_row[WI];
        const uint8_t* s_row[WI];
#pragma unroll
        for (int j = 0; j < WI; j++) {
            w_r[j] = (p + 128 * j) / 2; // rows past n read row n - 1 and are never stored
            const int64_t w_row = row0 + w_r[j] < a.n ? row0 + w_r[j] : a.n - 1;
            q_row[j] = a.qs + w_row * nb * int64_t(sizeof(chunk_t));
            s_row[j] = a.sc + w_row * ng * D::scale_bytes;
        }
        chunk_t q[WQ_R][WI];
        scale_word_t<D> sw[WQ_R][WI];
        auto load_w = [&](int step, int r) {
            if (step >= steps) return;
#pragma unroll
            for (int j = 0; j < WI; j++) {
                const int64_t ib = min(2 * int64_t(s0 + step) + ci, nb - 1);
                q[r][j] = ldg_chunk<chunk_t>(q_row[j] + ib * int64_t(sizeof(chunk_t)));
                sw[r][j] = load_scale_word<D::scale_bytes>(s_row[j] + (ib / D::chunks_per_scale) * D::scale_bytes);
            }
        };
#pragma unroll
        for (int r = 0; r < WQ_R; r++) load_w(wg + NP * r, r);
        for (int i0 = 0; i0 < my; i0 += WQ_R) {
#pragma unroll
            for (int r = 0; r < WQ_R; r++) {
                const int i = i0 + r, step = wg + NP * i;
                if (i >= my) break;
                const int stage = step % ST;
                if (step >= ST) mbar_wait(empty(stage), unsigned(step / ST + 1) & 1u);
                if (p == 0) {
                    mbar_arrive_expect_tx(full(stage), B_BYTES);
                    if constexpr (CL == 1)
                        tma_load_2d(sB + stage * B_BYTES, &x_map, (s0 + step) * TK, int(col0), full(stage));
                    else // this CTA's share of the columns, into every CTA of the cluster
                        tma_load_2d_multicast(sB + stage * B_BYTES + rank * (B_BYTES / CL), &x_map, (s0 + step) * TK,
                                              int(col0 + rank * (WQ_BN / CL)), full(stage), uint16_t((1 << CL) - 1));
                }
                uint8_t* ast = sm + stage * A_BYTES;
#pragma unroll
                for (int j = 0; j < WI; j++)
                    dequant_to_smem<D>(q[r][j], sw[r][j], 2 * int64_t(s0 + step) + ci, nb, ast, w_r[j], ci);
                load_w(step + NP * WQ_R, r);
                asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
                mbar_arrive(full(stage));
            }
        }
        return;
    }

    // ---- consumers: warpgroup c = wg - NP multiplies rows 64 c .. 64 c + 63 of the tile ----
    const int c = wg - NP;
    float d[WQ_BN / 2];
#pragma unroll
    for (int i = 0; i < WQ_BN / 2; i++) d[i] = 0.0f;
    int stage = 0, prev = ST - 1;
    unsigned phase = 0;
    for (int step = 0; step < steps; step++) {
        mbar_wait(full(stage), phase);
        wgmma_stage<WQ_BN>(d, sA + stage * A_BYTES + c * 64 * 128, sB + stage * B_BYTES);
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if constexpr (CL == 1) {
            if (step > 0) mbar_arrive(empty(prev));
        } else if (step > 0 && step - 1 + ST < steps && tid % 32 == 0) {
            // a warp's release of step - 1's stage, to each CTA's producers (whose TMA writes into every CTA); only
            // for steps a producer still waits on, so nothing arrives at a CTA that may have finished
#pragma unroll
            for (int r = 0; r < CL; r++) mbar_arrive_cluster(empty(prev), uint32_t(r));
        }
        prev = stage;
        if (++stage == ST) stage = 0, phase ^= 1;
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    const int64_t r0 = row0 + c * 64;
    if (slot >= 0) {
        wq_split_store<NC>(a, d, slot, kpart, c, tid % 128, r0, col0, cols);
        return;
    }
    if (a.ne2 * a.ne3 == 1) { // the same for every thread
        store_tile_one_matrix<WQ_BN>(a, d, r0, col0, cols);
        return;
    }
    // batches: every consumer's wgmma is done before the stages become the epilogue's buffers (the producer's last
    // TMA and stores were all consumed)
    asm volatile("bar.sync 1, %0;\n" ::"n"(NC * 128) : "memory");
    float* buf = reinterpret_cast<float*>(sm) + c * WQ_BN * WQ_EPI_LD;
    const int t = tid % 128, w = t / 32, lane = t % 32;
    // fragment register 4 j + e: row lane / 4 + 8 (e / 2), column 8 j + 2 (lane % 4) + e % 2
#pragma unroll
    for (int i = 0; i < WQ_BN / 2; i++) {
        const int j = i / 4, e = i % 4;
        buf[(j * 8 + 2 * (lane % 4) + e % 2) * WQ_EPI_LD + w * 16 + lane / 4 + 8 * (e / 2)] = d[i];
    }
    asm volatile("bar.sync 1, %0;\n" ::"n"(NC * 128) : "memory");
    // each column's 64 rows as consecutive floats: a warp writes 128 contiguous bytes
#pragma unroll 1
    for (int i = t; i < 64 * WQ_BN; i += 128) {
        const int cc = i / 64, rr = i % 64;
        const int64_t col = col0 + cc, r = r0 + rr;
        if (r < a.n && col < cols)
            a.y[column_offset(col, a.m, a.ne2, a.ne3, a.y_nb1, a.y_nb2, a.y_nb3) + a.row_base + r] =
                buf[cc * WQ_EPI_LD + rr] * a.out_scale;
    }
#else
    (void)a_in;
    (void)x_map;
    __trap();
#endif
}

static __global__ void wgmma_probe_kernel(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    *out = 1;
#else
    *out = 0;
#endif
}

// shared memory past 48 KiB: smem_bytes of the kernel's stages (stages())
template <class D, int TN> void allow_smem() {
    TS_CUDA_CHECK(cudaFuncSetAttribute(gemm_wgmma_kernel<D, TN, stages<D, TN>()>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(smem_bytes<TN, stages<D, TN>()>())));
}
template <class D> void allow_smem_wq() {
    TS_CUDA_CHECK(
        cudaFuncSetAttribute(gemm_wq_kernel<D, 64>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(WQ_SMEM<64>)));
    TS_CUDA_CHECK(
        cudaFuncSetAttribute(gemm_wq_kernel<D, 128>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(WQ_SMEM<128>)));
}
template <class F> void allow_smem() {
    if constexpr (has_split<F>::value) {
        allow_smem<cuda_format<F>, 64>();
        allow_smem<cuda_format<F>, 128>();
        allow_smem_wq<cuda_format<F>>();
    }
    if constexpr (has_mmq<F>::value)
        TS_CUDA_CHECK(cudaFuncSetAttribute(gemm_wgmma_kernel<cuda_format<F>, 64, stages<cuda_format<F>, 64>(), true>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(smem_bytes<64, stages<cuda_format<F>, 64>()>())));
}

// TESSERA_CUDA_WGMMA_TN=64 / =128: every GEMM with tiles of that many columns (benchmarks); 0 (unset, or any other
// value): chosen per shape
int forced_tile_cols() {
    static const int v = [] {
        const char* e = std::getenv("TESSERA_CUDA_WGMMA_TN");
        const int n = e ? std::atoi(e) : 0;
        return n == 64 || n == 128 ? n : 0;
    }();
    return v;
}

// TESSERA_CUDA_WGMMA_WQ=0: the block formats by gemm_wgmma_kernel's tiles only (benchmarks)
bool wq_enabled() {
    static const bool on = env_switch_on("TESSERA_CUDA_WGMMA_WQ");
    return on;
}

// Row tiles of rows_per_tile over the launch's matrices; sets each further matrix's first tile
int64_t set_row_tiles(wgmma_args& a, int rows_per_tile) {
    int64_t tiles = ceil_div(a.n, rows_per_tile);
    for (int i = 0; i < a.n_more; i++) {
        a.more[i].tile0 = int(tiles);
        tiles += ceil_div(a.more[i].n, rows_per_tile);
    }
    return tiles;
}

template <class D>
constexpr bool wq_ties_to_64 = std::is_same_v<D, cuda_format<nvfp4>> || std::is_same_v<D, cuda_format<mxfp4>>;

// TESSERA_CUDA_WQ_SPLIT=0: no split tail (side-by-side runs)
bool wq_split_enabled() {
    static const bool on = env_switch_on("TESSERA_CUDA_WQ_SPLIT");
    return on;
}

// gemm_wq_kernel's launch: BM (0: gemm_wgmma_kernel's tiles instead), and the split tail: the row tiles from
// split_y0 on (whole clusters; wgmma_args::split_y0) each taken by ksplit CTAs, one part of k each
struct wq_choice {
    int bm = 0;
    int split_y0 = 1 << 30, ksplit = 1;
};

// A CTA's time in k steps of its tile: its steps plus the pipeline's start (~2 us at ~0.5 us a step), and for a split
// part what the cut costs besides: a sweep of every (rows, parts) at 2048^2, 2048 x 8192 and 6144 x 4096 (H200,
// 2026-12-02, q4_0, m = 512) fits 13 to 21 steps (7-9 us: the partial sums' round trip, the last part's reads, a
// shorter pipeline); 12 keeps the cuts that measured faster (2048^2 +4-9%) and is still optimistic for the rest. The
// plan's estimates run ahead of the measurements (6144 x 4096: -21% estimated, -9% measured), and 14336 x 4096 in
// halves measured -3% in one run and +7% in another.
constexpr double WQ_START_STEPS = 4.0, WQ_SUM_STEPS = 12.0;

// The time until the last CTA ends, in steps, of `full` whole tiles (ft steps each) and then `units` (at most n_sm)
// split parts (pt steps), one CTA an SM, each CTA in grid order on the SM that is free first
double wq_makespan(int64_t full, int64_t units, double ft, double pt, int n_sm) {
    const int64_t w = full / n_sm, rem = full % n_sm;
    const double end_full = double(rem > 0 ? w + 1 : w) * ft;
    if (units == 0) return end_full;
    if (units <= n_sm - rem) return std::max(end_full, double(w) * ft + pt);
    return double(w + 1) * ft + pt;
}

// The tile rule (BM 0: gemm_wgmma_kernel's tiles): gemm_wq_kernel's tiles are 256 columns wide, so only for batches
// of 192 columns or more, and only where 64-row tiles give at least a quarter of the SMs a CTA. Without the split:
// BM = 128 where its waves, weighted by a CTA's rows, come out no longer than 64-row tiles' (ties to 128, but see
// below). At 512 columns on 132 SMs: 4096 rows 64 (128 CTAs); 6144 (q, k, v of the 8B) 128 (96 CTAs in one wave
// rather than 192 in two, a tie); 28672 (8B gate + up) 64 (7 waves of 64 rows vs 4 of 128); 16384 (1B gate + up) 128
// (a tie); 2048 (1B o, down) 64.
// Measured (wq_harness.cu, H200, 2026-11-28, q4_0, m = 512, TFLOP/s BM 64 (clusters of two) / BM 128 / the 128 x
// 128 kernel): 4096^2 513 / 271 / 306, 6144 x 4096 415 / 408 / 288, 28672 x 4096 548 / 474 / 395, 4096 x 14336
// 585 / 292 / 275, 16384 x 2048 469 / 480 / 370, 2048^2 221 / 123 / 142, 2048 x 8192 300 / 146 / 162. In the model
// (H200, same call, pp512, two rounds): 8B q4_0 29159 / 29366 t/s against 28223 / 28237 with session 33's rule (BM
// 64 handicapped 15%, and only where 64-row tiles give half the SMs a CTA: the 1B's 2048-row matrices had gone to
// the 128 x 128 kernel), 1B q4_0 126463 / 123712 vs 106962 / 102339.
// For the E2M1 formats (nvfp4, mxfp4) ties go to 64: their decode sets the pace of BM 128's one producer warpgroup.
// Measured (H200, 2026-11-29, wq_harness, m = 512, TFLOP/s BM 64 / 128, results bit-equal): nvfp4 6144 x 4096 384 /
// 318, 16384 x 2048 435 / 392; mxfp4 393 / 319, 449 / 406 (q4_0 408 / 397, 457 / 471); in the model (same call, two
// rounds, perplexity equal to the last digit) 1B nvfp4 pp512 118875 / 119442 vs 110122 / 110164 t/s with ties to 128.
// With the split tail (a.part and a.counters given, wq_split_enabled): the last wave's tiles, where it leaves SMs
// idle, cut into 2 to 4 parts of k (the parts of all split tiles at most one CTA an SM, 8 steps a part at least),
// choosing the BM and cut with the shortest estimated time (wq_makespan, weighted by rows as above; a cut only where
// it saves 3%). At 512 columns on 132 SMs: 6144 rows BM 64 with the last 30 row tiles in halves (132 whole CTAs,
// then 120 halves), 14336 rows the last 26 in halves, 2048 rows (1B o, down) all 32 in halves.
// Measured (H200, 2026-12-02, wq_harness, m = 512, TFLOP/s without -> with the split): q4_0 6144 x 4096 397 -> 449,
// 14336 x 4096 462 -> 497, 2048^2 214 -> 223, 2048 x 8192 297 -> 441; q8_0 353 -> 421, 407 -> 463, 204 -> 212, 285 ->
// 417; the shapes it leaves whole unchanged. In the model (same call, pp512, two rounds alternated): 8B q4_0 30608 /
// 29795 vs 29168 / 29478 t/s, 1B 121594 / 121954 vs 118756 / 117757; with the final WQ_SUM_STEPS (another call):
// 8B q8_0 28314 / 28569 vs 27426 / 27812, nvfp4 28947 / 28893 vs 28649 / 28748, 1B q8_0 117175 / 115942 vs
// 109943 / 109175. The parts' sum is another f32 order than one CTA's: the 8B's perplexity (random weights, 4 x 512)
// 204530 vs 204259, rounding noise through the q8_1 activations. The sum's first version read the parts one float
// after the other: 2048^2 at 70 TFLOP/s (each load waited on L2).
wq_choice wq_plan(const wgmma_args& a, int64_t cols, int n_sm, bool ties_to_64) {
    wq_choice ch;
    if (cols < 192 || forced_tile_cols() || !wq_enabled()) return ch;
    const int64_t col_tiles = ceil_div(cols, WQ_BN);
    auto row_tiles = [&](int bm) {
        int64_t t = ceil_div(a.n, bm);
        for (int i = 0; i < a.n_more; i++) t += ceil_div(a.more[i].n, bm);
        return t;
    };
    const int64_t t64 = row_tiles(64) * col_tiles, t128 = row_tiles(128) * col_tiles;
    if (4 * t64 < n_sm) return ch;
    const bool split = wq_split_enabled() && a.part && a.counters && n_sm > 0;
    if (!split) {
        const int64_t w128 = ceil_div(t128, n_sm) * 128, w64 = ceil_div(t64, n_sm) * 64;
        ch.bm = w128 < w64 || (w128 == w64 && !ties_to_64) ? 128 : 64;
        return ch;
    }
    const int steps = int((a.k / 32 + 1) / 2);
    const double ft = steps + WQ_START_STEPS;
    wq_choice best[2];
    double score[2];
    for (int b = 0; b < 2; b++) {
        const int bm = b == 0 ? 64 : 128, cl = bm == 64 ? WQ_CL<64> : WQ_CL<128>;
        const int64_t rows = ceil_div(row_tiles(bm), cl) * cl; // the grid's row tiles, whole clusters
        best[b].bm = bm;
        double m = wq_makespan(rows * col_tiles, 0, ft, 0.0, n_sm);
        const double whole = m;
        for (int ks = 2; ks <= 4 && steps / ks >= 8; ks++) {
            const double pt = double(steps) / ks + WQ_START_STEPS + WQ_SUM_STEPS;
            for (int64_t rt = cl; rt <= rows; rt += cl) {
                const int64_t units = rt * col_tiles * ks;
                if (units > n_sm || size_t(rt * col_tiles) > a.n_counters ||
                    size_t(units) * size_t(bm) * WQ_BN * sizeof(float) > a.part_bytes)
                    break;
                const double mk = wq_makespan((rows - rt) * col_tiles, units, ft, pt, n_sm);
                if (mk < m && mk < 0.97 * whole) m = mk, best[b].split_y0 = int(rows - rt), best[b].ksplit = ks;
            }
        }
        score[b] = m * bm / 64;
    }
    const bool to128 = score[1] < score[0] * (1 - 1e-9) || (score[1] <= score[0] * (1 + 1e-9) && !ties_to_64);
    return best[to128 ? 1 : 0];
}

// The driver's cuTensorMapEncodeTiled, nullptr where it has none; first asked by wgmma_built(), outside any capture.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const auto encode =
        reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(driver_entry_point("cuTensorMapEncodeTiled"));
    return encode;
}

// The activation rows x ([cols][k] f16) as a TMA tensor for gemm_wq_kernel: boxes of TK x WQ_BN in the 128-byte
// swizzle, zeros outside. False where the driver has no cuTensorMapEncodeTiled or refuses the tensor (the caller
// then takes gemm_wgmma_kernel).
bool x_tensor_map(const __half* x, int64_t k, int64_t cols, CUtensorMap& map, int cl) {
    const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
    if (!encode || cols >= (int64_t(1) << 31) || k >= (int64_t(1) << 31)) return false;
    const cuuint64_t dims[2] = {cuuint64_t(k), cuuint64_t(cols)}, strides[1] = {cuuint64_t(k) * sizeof(__half)};
    const cuuint32_t box[2] = {TK, cuuint32_t(WQ_BN / cl)}, elem_strides[2] = {1, 1};
    return encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, const_cast<__half*>(x), dims, strides, box, elem_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// gemm_wq_kernel<D, BM> over the column tiles x the row tiles (set_row_tiles(a, BM) done), the row tiles rounded up
// to whole clusters (a last odd tile's partner multiplies rows past the end and stores nothing); x_map's boxes
// WQ_BN / WQ_CL<BM> columns wide
template <class D, int BM>
void launch_wq(const wgmma_args& a, const CUtensorMap& x_map, int64_t cols, int64_t row_tiles, cudaStream_t stream) {
    constexpr int CL = WQ_CL<BM>;
    cudaLaunchConfig_t cfg{};
    const int64_t rows = ceil_div(row_tiles, CL) * CL; // a split tail's row tiles ksplit times
    cfg.gridDim = dim3(unsigned(ceil_div(cols, WQ_BN)),
                       unsigned(a.ksplit > 1 ? a.split_y0 + (rows - a.split_y0) * a.ksplit : rows));
    TS_ASSERT(cfg.gridDim.y <= 65535);
    cfg.blockDim = dim3(WQ_THREADS<BM>);
    cfg.dynamicSmemBytes = WQ_SMEM<BM>;
    cfg.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1, attr.val.clusterDim.y = CL, attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = CL > 1 ? 1 : 0;
    TS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemm_wq_kernel<D, BM>, a, x_map));
}

template <class D> void launch(wgmma_args a, int64_t cols, int n_sm, cudaStream_t stream) {
    CUtensorMap x_map;
    const wq_choice ch = wq_plan(a, cols, n_sm, wq_ties_to_64<D>);
    const int bm = ch.bm;
    if (bm && x_tensor_map(a.x, a.k, cols, x_map, bm == 64 ? WQ_CL<64> : WQ_CL<128>)) {
        const int64_t row_tiles = set_row_tiles(a, bm);
        a.ksplit = ch.ksplit, a.split_y0 = ch.split_y0;
        if (bm == 64)
            launch_wq<D, 64>(a, x_map, cols, row_tiles, stream);
        else
            launch_wq<D, 128>(a, x_map, cols, row_tiles, stream);
        return;
    }
    // 128-column tiles where they give at least 55% of the SMs a tile, else 64-column ones. Measured (H100, m = 512,
    // q4_0, TFLOP/s, 6 stages then: stages()): 4096 x 4096, 128 tiles on 132 SMs, 317 in 128-column tiles vs 246 in
    // 64-column ones; 1B's 2048-row matrices (64 tiles) the other way (end to end 71k vs 66.5k t/s); Gemma-3-4B's
    // 2560-row o and down (80 tiles) in 128-column tiles: pp512 25549 vs 24307 t/s with 64 (session 20; a 3/4 rule
    // before). At 3 stages (H100, 2026-11-28, 8B q4_0 pp512, two rounds in one call): this rule 18997 / 18986 t/s;
    // 64-column tiles for o and down too (their 128 tiles one CTA an SM): 18471 / 18676 (ncu: o + down 311 -> 319
    // us a layer); also for q/k/v: 18324 / 18563
    const int forced = forced_tile_cols();
    const int64_t all_rows = set_row_tiles(a, TM); // row tiles, those of a grouped launch's further matrices included
    const bool wide = forced ? forced == 128 : 20 * all_rows * ceil_div(cols, 128) >= 11 * int64_t(n_sm);
    const unsigned row_tiles = unsigned(all_rows), col_tiles = unsigned(ceil_div(cols, wide ? 128 : 64));
    const dim3 grid = a.cols_fastest ? dim3(col_tiles, row_tiles) : dim3(row_tiles, col_tiles);
    TS_ASSERT(grid.y <= 65535);
    if (wide)
        gemm_wgmma_kernel<D, 128, stages<D, 128>()><<<grid, THREADS, smem_bytes<128, stages<D, 128>()>(), stream>>>(a);
    else
        gemm_wgmma_kernel<D, 64, stages<D, 64>()><<<grid, THREADS, smem_bytes<64, stages<D, 64>()>(), stream>>>(a);
    TS_CUDA_CHECK(cudaGetLastError());
}

} // namespace

bool wgmma_built(int cc_major, int cc_minor) {
    if (cc_major != 9 || cc_minor != 0) return false; // the sm_90a instructions exist on compute capability 9.0 only
    int* flag = nullptr;
    int got = 0;
    TS_CUDA_CHECK(cudaMalloc(&flag, sizeof(int)));
    wgmma_probe_kernel<<<1, 1>>>(flag);
    cudaError_t e = cudaGetLastError();
    if (e == cudaSuccess) e = cudaMemcpy(&got, flag, sizeof(int), cudaMemcpyDeviceToHost);
    TS_CUDA_CHECK(cudaFree(flag));
    TS_CUDA_CHECK(e);
    if (got != 1) return false;
        // the kernels' shared memory is past the default 48 KiB: allowed once here, outside any stream capture
#define TS_ALLOW_SMEM(F) allow_smem<F>();
    TS_BLOCK_FORMATS(TS_ALLOW_SMEM)
#undef TS_ALLOW_SMEM
    (void)tensor_map_encoder();
    return true;
}

namespace {

// gemm_wq_kernel's split tail: the partial sums' memory and the counters (wgmma_args::part)
void split_space(const cuda_context& ctx, wgmma_args& a) {
    a.part = ctx.gemm_part;
    a.part_bytes = ctx.gemm_part_bytes;
    a.counters = ctx.counters;
    a.n_counters = ctx.n_counters;
}

// TESSERA_CUDA_WGMMA_ORDER=0: row tiles fastest (the previous order, for benchmarks)
bool cols_fastest() {
    static const bool on = env_switch_on("TESSERA_CUDA_WGMMA_ORDER");
    return on;
}

} // namespace

void gemm_wgmma(cuda_context& ctx, const split_weight& w, const __half* x, tensor& dst) {
    const tensor* xt = dst.src[1];
    const shape4 sy = shape_of(dst, 4);
    const int64_t m = xt->ne[1], ne2 = xt->ne[2], ne3 = xt->ne[3], cols = m * ne2 * ne3;
    if (cols == 0 || w.n == 0) return;
    TS_ASSERT(w.k % 32 == 0);
    wgmma_args a{w.qs, w.sc, x,   ctx.as<float>(&dst), sy.nb[1],      sy.nb[2], sy.nb[3], w.n, 0, m,
                 w.k,  ne2,  ne3, w.out_scale,         cols_fastest()};
    split_space(ctx, a);
    const bool known = visit_format(w.t, [&]<class F>() {
        if constexpr (has_split<F>::value) {
            launch<cuda_format<F>>(a, cols, ctx.n_sm, ctx.stream);
        } else {
            TS_ASSERT(!"gemm_wgmma: a format without the split layout");
        }
    });
    TS_ASSERT(known);
}

} // namespace tessera::cuda

namespace tessera::cuda {

void gemm_wgmma_group(cuda_context& ctx, const split_weight* const* w, tensor* const* dst, int n, const __half* x) {
    TS_ASSERT(n >= 1 && n <= 3);
    const tensor* xt = dst[0]->src[1];
    const int64_t m = xt->ne[1], ne2 = xt->ne[2], ne3 = xt->ne[3], cols = m * ne2 * ne3;
    if (cols == 0) return;
    const shape4 sy = shape_of(*dst[0], 4);
    wgmma_args a{w[0]->qs, w[0]->sc, x,   ctx.as<float>(dst[0]), sy.nb[1],      sy.nb[2], sy.nb[3], w[0]->n, 0, m,
                 w[0]->k,  ne2,      ne3, w[0]->out_scale,       cols_fastest()};
    for (int i = 1; i < n; i++) { // (launch sets each matrix's first row tile for the tiles it picks)
        TS_ASSERT(w[i]->t == w[0]->t && w[i]->k == w[0]->k);
        const shape4 si = shape_of(*dst[i], 4);
        a.more[i - 1] = wgmma_part{w[i]->qs, w[i]->sc, ctx.as<float>(dst[i]), si.nb[1], si.nb[2],
                                   si.nb[3], w[i]->n,  w[i]->out_scale,       0,        nullptr};
    }
    a.n_more = n - 1;
    split_space(ctx, a);
    visit_format(w[0]->t, [&]<class F>() {
        if constexpr (has_split<F>::value) launch<cuda_format<F>>(a, cols, ctx.n_sm, ctx.stream);
    });
}

void gemm_wgmma_id(cuda_context& ctx, const split_weight* const* w, float* const* y, const float* const* bias, int n,
                   const __half* x, const id_map& map, int64_t max_tiles) {
    TS_ASSERT(n >= 1 && n <= 3 && max_tiles <= 65535);
    wgmma_args a{w[0]->qs, w[0]->sc, x, y[0], 0, 0, 0, w[0]->n, 0, 1, w[0]->k, 1, 1, w[0]->out_scale, true};
    a.map = map;
    a.map.bias = bias[0];
    int tile = int(ceil_div(w[0]->n, TM));
    for (int i = 1; i < n; i++) {
        TS_ASSERT(w[i]->t == w[0]->t && w[i]->k == w[0]->k);
        a.more[i - 1] = wgmma_part{w[i]->qs, w[i]->sc, y[i], 0, 0, 0, w[i]->n, w[i]->out_scale, tile, bias[i]};
        tile += int(ceil_div(w[i]->n, TM));
    }
    a.n_more = n - 1;
    if (max_tiles == 0 || tile == 0) return;
    const dim3 grid{unsigned(max_tiles), unsigned(tile)};
    const bool known = visit_format(w[0]->t, [&]<class F>() {
        if constexpr (has_mmq<F>::value)
            gemm_wgmma_kernel<cuda_format<F>, 64, stages<cuda_format<F>, 64>(), true>
                <<<grid, THREADS, smem_bytes<64, stages<cuda_format<F>, 64>()>(), ctx.stream>>>(a);
        else
            TS_ASSERT(!"gemm_wgmma_id: a format without mmq_unpack");
    });
    TS_ASSERT(known);
    TS_CUDA_CHECK(cudaGetLastError());
}

} // namespace tessera::cuda
