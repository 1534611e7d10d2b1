// persist_proto.cu: how much of a decode step's time is kernel boundaries, and does a persistent kernel built on the
// graph path's GEMV core (many warps per SM, each lane loading its weight chunks straight from global memory) take
// it back? Standalone (#23; NOTES.md "Persistent decode"). The chain is the 32 layers of the 8B shape in q4_0 (split
// layout as backends/cuda: 16-byte chunks [n][k/32], f16 scales [n][k/32]; activations q8_1 as int8 + (d, d sum q)),
// per layer 8 phases as the decode graph's 8 kernels: quantize (add + norm stand-in), GEMV q/k/v (6144 x 4096),
// quantize (attention stand-in), GEMV o (4096 x 4096), quantize, GEMV gate/up (28672 x 4096, rows interleaved),
// GLU + quantize, GEMV down (4096 x 14336).
//   graph       one kernel a phase, programmatic dependent launch, one CUDA graph (as the decode path): the GEMV is
//               mmv_split_kernel's scheme (4-warp blocks, a row group of 2 rows per warp or split over k by S warps
//               so a launch has >= 48 warps an SM, two steps asked of L2 before the PDL wait)
//   persistent  one kernel, every block resident; the same GEMV code over work items handed out round robin, a grid
//               barrier (one counter) after each phase; before each barrier a warp asks L2 for the first steps of its
//               next GEMV item
//   the graph chain with its two norm positions as the decode's add + rms_norm kernel is shaped (one block of 1024
//   threads: norm1_kernel), and the graph chain without the quantize kernels (4 GEMV launches a layer): what the GEMVs alone reach.
// Both chains compute the same values (checked: the last output bit for bit, same k-splits), so the barriers hold.
// (The measured runs below had a scale fill that overflowed f16, which made every chain's values zero: the timings
// do not depend on the values, but the check compared zeros then; with the fill fixed it has not run yet.)
// Measured (H100, 2026-11-27, copy 2975-2995 GB/s; chain 3.93 GB), share of the copy bandwidth (us a layer):
//   graph, 8 kernels a layer                      77.4-77.6% (52.9-53.1)   without the L2 ask: 74.5-74.6%
//   graph, GEMVs only                             84.2-84.6% (48.6-48.8)   without the L2 ask: 82.4-82.7%
//   graph, norms in one block (the decode's)      72.3-72.4% (56.8-57.0)
//   graph, norms in 16 blocks                     74.8% (55.1)  -> norm.cu's add_norm_vec_kernel slices
//   graph, norms summed by every warp             64.0% (64.4)
//   persistent, 32 warps an SM, k-splits 4/4/1/4  62.9-64.0% (64.2-65.6); 1/2/1/2: 64.3-66.5% (61.8-63.8); L2 ask
//                                                 0 / 2 / 4 steps alike
// So a kernel boundary under PDL in a graph costs ~1 us (the 4 small kernels a layer: 4.3 us), no more than a grid
// barrier; the persistent chain loses ~10 us a layer to its 8 barriers (each waits for the slowest warp, as a kernel
// end does, and nothing starts early) and to 32 warps an SM. Decision (#23): no persistent decode on grid barriers;
// the step's remaining cost is in its small kernels (the real 8B step runs ~65 us a layer against this chain's 53).
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a persist_proto.cu -o persist_proto
// Run:   ./persist_proto [reps]
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "proto_check.cuh"

constexpr int R = 2;           // rows of a row group
constexpr int E = 4096, F = 14336, QKV = 6144, LAYERS = 32;

struct mat {
    const uint4* qs;   // [n][k/32]
    const __half* sc;  // [n][k/32]
    int n, k;
};

struct acts {
    int8_t* q;    // [k]
    __half2* ds;  // [k/32]
};

__device__ __forceinline__ uint32_t sub_u4_bytes(uint32_t x, uint32_t z) {
    return (x + (0x80u - z) * 0x01010101u) ^ 0x80808080u;
}
__device__ __forceinline__ float dot_q4(const uint4& q, __half s, int4 a0, int4 a1, float2 ds) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    const int lo[4] = {a0.x, a0.y, a0.z, a0.w}, hi[4] = {a1.x, a1.y, a1.z, a1.w};
    int sumi = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        sumi = __dp4a(int(sub_u4_bytes(w[i] & 0x0F0F0F0Fu, 8)), lo[i], sumi);
        sumi = __dp4a(int(sub_u4_bytes((w[i] >> 4) & 0x0F0F0F0Fu, 8)), hi[i], sumi);
    }
    return float(sumi) * (__half2float(s) * ds.x);
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Item `item` of a GEMV in items of WPI warps: WPI / S row groups of R rows, S warps a group splitting k. Every warp
// of the block calls it (S > 1: a barrier). Part sums added in part order (the same bits in both chains).
template <int S, int WPI>
__device__ __forceinline__ void gemv_item(const mat& m, const acts& x, float* y, int item, int warp, int lane,
                                          float (*part)[R]) {
    const int g = item * (WPI / S) + warp / S, p = warp % S, row0 = g * R, nc = m.k / 32;
    const uint4* q[R];
    const __half* s[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int row = min(row0 + r, m.n - 1);
        q[r] = m.qs + int64_t(row) * nc;
        s[r] = m.sc + int64_t(row) * nc;
    }
    float sum[R] = {};
#pragma unroll 2
    for (int c = lane + 32 * p; c < nc; c += 32 * S) {
        uint4 w[R];
#pragma unroll
        for (int r = 0; r < R; r++) w[r] = __ldg(q[r] + c);
        const int4* ap = reinterpret_cast<const int4*>(x.q + c * 32);
        const int4 a0 = ap[0], a1 = ap[1];
        const float2 ds = __half22float2(x.ds[c]);
#pragma unroll
        for (int r = 0; r < R; r++) sum[r] += dot_q4(w[r], s[r][c], a0, a1, ds);
    }
#pragma unroll
    for (int r = 0; r < R; r++) sum[r] = warp_sum(sum[r]);
    if constexpr (S > 1) {
        if (lane == 0)
#pragma unroll
            for (int r = 0; r < R; r++) part[warp][r] = sum[r];
        __syncthreads();
        if (p == 0)
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int i = 1; i < S; i++) sum[r] += part[warp + i][r];
        __syncthreads(); // part is reused by the next item
    }
    if (p == 0 && lane == 0)
#pragma unroll
        for (int r = 0; r < R; r++)
            if (row0 + r < m.n) y[row0 + r] = sum[r];
}

// L2 hints for the first `steps` steps of a warp's share of item `item`
template <int S, int WPI>
__device__ __forceinline__ void gemv_prefetch(const mat& m, int item, int warp, int lane, int steps) {
    const int g = item * (WPI / S) + warp / S, p = warp % S, row0 = g * R, nc = m.k / 32;
    for (int u = 0; u < steps; u++) {
        const int c = lane + 32 * p + u * 32 * S;
        if (c >= nc) break;
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int row = min(row0 + r, m.n - 1);
            prefetch_l2(m.qs + int64_t(row) * nc + c);
            prefetch_l2(m.sc + int64_t(row) * nc + c);
        }
    }
}

// Element i of a q8_1 block held by lane `lane` (every lane of the warp calls it): the block's values as int8; d as if
// a norm had made the block's largest value 1 (the chain's values stay in range over 128 phases)
__device__ __forceinline__ void quant_lane(float v, acts x, int i, int lane) {
    const float amax = warp_max(fabsf(v));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    const int qv = __float2int_rn(v * id);
    const float qs = warp_sum(float(qv));
    x.q[i] = int8_t(qv);
    if (lane == 0) x.ds[i / 32] = __floats2half2_rn(1.0f / 127.0f, qs / 127.0f);
}

// q8_1 block b of y (GLU: y holds gate, up interleaved; the block's values silu(gate) up), one warp
template <bool GLU> __device__ __forceinline__ void quant_block(const float* y, acts x, int b, int lane) {
    float v;
    if constexpr (GLU) {
        const float2 gu = reinterpret_cast<const float2*>(y)[b * 32 + lane];
        v = gu.x / (1.0f + __expf(-gu.x)) * gu.y;
    } else {
        v = y[b * 32 + lane];
    }
    quant_lane(v, x, b * 32 + lane, lane);
}

// The decode graph's add + rms_norm (+ q8_1) kernel's shape: one block of 1024 threads for the whole row, y + res
// summed, the sum of squares over the block, then each warp's blocks quantized (res stays as it is here)
__global__ void __launch_bounds__(1024) norm1_kernel(const float* y, const float* res, acts x, int n) {
    __shared__ float red[32];
    pdl_wait();
    pdl_trigger();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float v[4], ss = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int i = threadIdx.x + j * 1024;
        v[j] = i < n ? y[i] + res[i] : 0.0f;
        ss += v[j] * v[j];
    }
    ss = warp_sum(ss);
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    ss = warp_sum(red[lane]);
    const float s = 1.0f / sqrtf(ss / float(n) + 1e-5f);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int i = threadIdx.x + j * 1024;
        if (j * 1024 >= n) break;
        quant_lane(v[j] * s, x, i, lane);
    }
}

// This thread's share of sum((y + res)^2) over a row of n floats: float4s first, first + step, ...
__device__ __forceinline__ float sq_sum(const float* y, const float* res, int n, int first, int step) {
    const float4* y4 = reinterpret_cast<const float4*>(y);
    const float4* r4 = reinterpret_cast<const float4*>(res);
    float ss = 0.0f;
#pragma unroll 8
    for (int i = first; i < n / 4; i += step) {
        const float4 a = y4[i], b = r4[i];
        const float h0 = a.x + b.x, h1 = a.y + b.y, h2 = a.z + b.z, h3 = a.w + b.w;
        ss += h0 * h0 + h1 * h1 + h2 * h2 + h3 * h3;
    }
    return ss;
}

// The same work spread over 16 blocks of 256 threads: every block sums the whole row's squares (the same order in
// each: one s for the row), then quantizes its own 256 values
__global__ void __launch_bounds__(256) norm16_kernel(const float* y, const float* res, acts x, int n) {
    __shared__ float red[8];
    pdl_wait();
    pdl_trigger();
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float ss = warp_sum(sq_sum(y, res, n, threadIdx.x, 256));
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    ss = warp_sum(lane < 8 ? red[lane] : 0.0f);
    const float s = 1.0f / sqrtf(ss / float(n) + 1e-5f);
    for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) {
        quant_lane((y[i] + res[i]) * s, x, i, lane);
    }
}

// Every warp sums the whole row's squares itself (no shared memory, no block barrier), then quantizes its own block
__global__ void __launch_bounds__(256) normw_kernel(const float* y, const float* res, acts x, int n) {
    pdl_wait();
    pdl_trigger();
    const int lane = threadIdx.x % 32, b = blockIdx.x * 8 + threadIdx.x / 32;
    const float ss = warp_sum(sq_sum(y, res, n, lane, 32));
    if (b >= n / 32) return;
    const float s = 1.0f / sqrtf(ss / float(n) + 1e-5f);
    const int i = b * 32 + lane;
    quant_lane((y[i] + res[i]) * s, x, i, lane);
}

int parts_for(int n, int k, int n_sm) { // mmv_split_parts: >= 48 warps an SM, every lane keeps a chunk
    const int groups = (n + R - 1) / R, nc = k / 32;
    int s = 1;
    while (s < 4 && groups * s < 48 * n_sm && nc >= 64 * s) s *= 2;
    return s;
}

// ---- graph chain ----

template <int S> __global__ void __launch_bounds__(128) gemv_kernel(mat m, acts x, float* y, int pf) {
    __shared__ float part[4][R];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (pf > 0) gemv_prefetch<S, 4>(m, blockIdx.x, warp, lane, pf);
    pdl_wait();
    pdl_trigger();
    gemv_item<S, 4>(m, x, y, blockIdx.x, warp, lane, part);
}

template <bool GLU> __global__ void __launch_bounds__(256) quant_kernel(const float* y, acts x, int nb) {
    pdl_wait();
    pdl_trigger();
    const int b = blockIdx.x * 8 + threadIdx.x / 32;
    if (b < nb) quant_block<GLU>(y, x, b, threadIdx.x % 32);
}

template <class K, class... A> void launch_pdl(K kernel, int grid, int block, cudaStream_t st, bool pdl, A... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(grid));
    cfg.blockDim = dim3(unsigned(block));
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

struct layer {
    mat qkv, o, gu, down;
};

struct bufs {
    acts x;               // the current q8_1 input
    float *y_qkv, *y_o, *y_gu, *y_down;
};

void gemv_launch(const mat& m, acts x, float* y, int n_sm, cudaStream_t st, int pf) {
    const int S = parts_for(m.n, m.k, n_sm), items = (m.n + (4 / S) * R - 1) / ((4 / S) * R);
    if (S == 1) launch_pdl(gemv_kernel<1>, items, 128, st, true, m, x, y, pf);
    else if (S == 2) launch_pdl(gemv_kernel<2>, items, 128, st, true, m, x, y, pf);
    else launch_pdl(gemv_kernel<4>, items, 128, st, true, m, x, y, pf);
}
void quant_launch(const float* y, acts x, int n, bool glu, cudaStream_t st) {
    const int nb = n / 32;
    if (glu) launch_pdl(quant_kernel<true>, (nb + 7) / 8, 256, st, true, y, x, nb);
    else launch_pdl(quant_kernel<false>, (nb + 7) / 8, 256, st, true, y, x, nb);
}

// the two norm positions: mode 1 quant_kernel, 2 norm1_kernel (one block), 3 norm16_kernel, 4 normw_kernel
void norm_launch(int mode, const float* y, const float* res, acts x, cudaStream_t st) {
    if (mode == 1) quant_launch(y, x, E, false, st);
    else if (mode == 2) launch_pdl(norm1_kernel, 1, 1024, st, true, y, res, x, E);
    else if (mode == 3) launch_pdl(norm16_kernel, 16, 256, st, true, y, res, x, E);
    else if (mode == 4) launch_pdl(normw_kernel, E / 32 / 8, 256, st, true, y, res, x, E);
}

// mode 0: GEMVs only; else the quantize kernels between them, the norm positions as norm_launch's
void graph_chain(const std::vector<layer>& L, const bufs& b, int n_sm, cudaStream_t st, int mode, int pf) {
    const bool quant = mode > 0;
    for (const layer& l : L) {
        norm_launch(mode, b.y_down, b.y_o, b.x, st);
        gemv_launch(l.qkv, b.x, b.y_qkv, n_sm, st, pf);
        if (quant) quant_launch(b.y_qkv, b.x, E, false, st);
        gemv_launch(l.o, b.x, b.y_o, n_sm, st, pf);
        norm_launch(mode, b.y_o, b.y_down, b.x, st);
        gemv_launch(l.gu, b.x, b.y_gu, n_sm, st, pf);
        if (quant) quant_launch(b.y_gu, b.x, F, true, st);
        gemv_launch(l.down, b.x, b.y_down, n_sm, st, pf);
    }
}

// ---- persistent chain ----

constexpr int PWARPS = 32; // warps of a persistent block
constexpr int MAX_LAYERS = LAYERS;

struct persist_args {
    layer L[MAX_LAYERS];
    int n_layers;
    bufs b;
    unsigned* bar;
    int S[4]; // parts per GEMV: qkv, o, gu, down
    int pf;   // steps asked of L2 before a barrier
};

__device__ __forceinline__ void grid_sync(unsigned* bar, unsigned target) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(bar) : "memory");
        unsigned v;
        do {
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(bar) : "memory");
        } while (v < target);
        __threadfence();
    }
    __syncthreads();
}

template <int S>
__device__ __forceinline__ void p_gemv(const mat& m, const acts& x, float* y, int warp, int lane, float (*part)[R]) {
    const int items = (m.n + (PWARPS / S) * R - 1) / ((PWARPS / S) * R);
    for (int it = blockIdx.x; it < items; it += gridDim.x) gemv_item<S, PWARPS>(m, x, y, it, warp, lane, part);
}
__device__ __forceinline__ void p_gemv_any(int S, const mat& m, const acts& x, float* y, int warp, int lane,
                                           float (*part)[R]) {
    if (S == 1) p_gemv<1>(m, x, y, warp, lane, part);
    else if (S == 2) p_gemv<2>(m, x, y, warp, lane, part);
    else p_gemv<4>(m, x, y, warp, lane, part);
}
__device__ __forceinline__ void p_prefetch(int S, const mat& m, int warp, int lane, int steps) {
    if (steps <= 0) return;
    const int items = (m.n + (PWARPS / S) * R - 1) / ((PWARPS / S) * R);
    if (int(blockIdx.x) >= items) return;
    if (S == 1) gemv_prefetch<1, PWARPS>(m, blockIdx.x, warp, lane, steps);
    else if (S == 2) gemv_prefetch<2, PWARPS>(m, blockIdx.x, warp, lane, steps);
    else gemv_prefetch<4, PWARPS>(m, blockIdx.x, warp, lane, steps);
}
template <bool GLU> __device__ __forceinline__ void p_quant(const float* y, acts x, int n, int lane) {
    const int gw = blockIdx.x * PWARPS + threadIdx.x / 32, nw = gridDim.x * PWARPS;
    for (int b = gw; b < n / 32; b += nw) quant_block<GLU>(y, x, b, lane);
}

__global__ void __launch_bounds__(PWARPS * 32, 1) persist_kernel(persist_args a) {
    __shared__ float part[PWARPS][R];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    unsigned target = 0;
    const bufs& b = a.b;
    auto sync = [&] {
        target += gridDim.x;
        grid_sync(a.bar, target);
    };
    for (int l = 0; l < a.n_layers; l++) {
        const layer& L = a.L[l];
        // the layer's 4 GEMVs, each after the quantize phase of its input (gate / up's output through the GLU)
        const mat* m[4] = {&L.qkv, &L.o, &L.gu, &L.down};
        const float* in[4] = {b.y_down, b.y_qkv, b.y_o, b.y_gu};
        float* out[4] = {b.y_qkv, b.y_o, b.y_gu, b.y_down};
        for (int p = 0; p < 4; p++) {
            if (p == 3) p_quant<true>(in[p], b.x, F, lane);
            else p_quant<false>(in[p], b.x, E, lane);
            p_prefetch(a.S[p], *m[p], warp, lane, a.pf);
            sync();
            p_gemv_any(a.S[p], *m[p], b.x, out[p], warp, lane, part);
            sync();
        }
    }
}

// ---- set-up ----

__global__ void fill_kernel(uint32_t* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        uint32_t s = uint32_t(i) * 2654435761u ^ seed;
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        p[i] = s;
    }
}
__global__ void scales_kernel(__half* p, size_t n, float v) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        p[i] = __float2half(v * (0.75f + 0.5f * float((uint32_t(i) * 2654435761u) >> 24) / 255.0f));
}

mat make_mat(int n, int k, uint32_t seed) {
    const size_t chunks = size_t(n) * (k / 32);
    uint4* qs = nullptr;
    __half* sc = nullptr;
    CK(cudaMalloc(&qs, chunks * 16));
    CK(cudaMalloc(&sc, chunks * 2));
    fill_kernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(qs), chunks * 4, seed);
    scales_kernel<<<1024, 256>>>(sc, chunks, 1.0f / std::sqrt(21.0f * float(k)));
    CK(cudaGetLastError());
    return {qs, sc, n, k};
}

size_t mat_bytes(const mat& m) { return size_t(m.n) * (m.k / 32) * 18; }

template <class Fn> double time_ms(Fn fn, cudaStream_t st, int reps) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    fn();
    CK(cudaStreamSynchronize(st));
    std::vector<double> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0, st));
        fn();
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return t[t.size() / 2];
}

int main(int argc, char** argv) {
    const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    const int n_sm = prop.multiProcessorCount;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    std::vector<layer> L;
    size_t bytes = 0;
    for (int l = 0; l < LAYERS; l++) {
        layer x{make_mat(QKV, E, 4 * l + 1), make_mat(E, E, 4 * l + 2), make_mat(2 * F, E, 4 * l + 3),
                make_mat(E, F, 4 * l + 4)};
        bytes += mat_bytes(x.qkv) + mat_bytes(x.o) + mat_bytes(x.gu) + mat_bytes(x.down);
        L.push_back(x);
    }
    bufs b{};
    CK(cudaMalloc(&b.x.q, F));
    CK(cudaMalloc(&b.x.ds, F / 32 * sizeof(__half2)));
    CK(cudaMalloc(&b.y_qkv, QKV * 4));
    CK(cudaMalloc(&b.y_o, E * 4));
    CK(cudaMalloc(&b.y_gu, 2 * F * 4));
    CK(cudaMalloc(&b.y_down, F * 4));
    unsigned* bar = nullptr;
    CK(cudaMalloc(&bar, 4));
    std::vector<float> x0(E);
    for (int i = 0; i < E; i++) x0[i] = std::sin(0.37f * float(i)) + 0.1f;
    auto reset = [&] { CK(cudaMemcpyAsync(b.y_down, x0.data(), E * 4, cudaMemcpyHostToDevice, st)); };
    CK(cudaDeviceSynchronize());

    // copy bandwidth: 1 GiB device to device
    double copy_gbs = 0;
    {
        const size_t n = size_t(1) << 30;
        void *s = nullptr, *d = nullptr;
        CK(cudaMalloc(&s, n));
        CK(cudaMalloc(&d, n));
        const double ms = time_ms([&] { CK(cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, st)); }, st, 5);
        copy_gbs = 2.0 * double(n) / (ms * 1e-3) / 1e9;
        CK(cudaFree(s));
        CK(cudaFree(d));
    }
    std::printf("%s, %d SMs; copy %.0f GB/s; chain: %d layers of the 8B shape, q4_0, %.2f GB\n", prop.name, n_sm,
                copy_gbs, LAYERS, double(bytes) / 1e9);
    auto report = [&](const char* what, double ms) {
        const double gbs = double(bytes) / (ms * 1e-3) / 1e9;
        std::printf("  %-52s %8.3f ms  %7.0f GB/s  %5.1f%% of copy  (%.1f us a layer)\n", what, ms, gbs,
                    100.0 * gbs / copy_gbs, 1e3 * ms / LAYERS);
    };

    // graph chains: with the quantize kernels (the decode's 8 kernels a layer) and GEMVs alone (4 a layer)
    std::vector<float> out_graph(E), out_persist(E);
    for (int pf : {2, 0}) {
        for (int mode : {1, 0, 2, 3, 4}) {
            if (pf == 0 && mode >= 2) continue;
            const bool quant = mode == 1;
            cudaGraph_t g;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            graph_chain(L, b, n_sm, st, mode, pf);
            CK(cudaStreamEndCapture(st, &g));
            CK(cudaGraphInstantiate(&ge, g, 0));
            if (quant && pf == 2) {
                reset();
                CK(cudaGraphLaunch(ge, st));
                CK(cudaMemcpyAsync(out_graph.data(), b.y_down, E * 4, cudaMemcpyDeviceToHost, st));
                CK(cudaStreamSynchronize(st));
            }
            const double ms = time_ms([&] { CK(cudaGraphLaunch(ge, st)); }, st, reps);
            char name[96];
            std::snprintf(name, sizeof name, "graph, %s, L2 ask %d",
                          mode == 1   ? "8 kernels a layer"
                          : mode == 0 ? "GEMVs only"
                          : mode == 2 ? "8 a layer, norms in one block"
                          : mode == 3 ? "8 a layer, norms in 16 blocks"
                                      : "8 a layer, norms summed per warp",
                          pf);
            report(name, ms);
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(g));
        }
    }

    // persistent chain
    int occ = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, persist_kernel, PWARPS * 32, 0));
    cudaFuncAttributes fa{};
    CK(cudaFuncGetAttributes(&fa, persist_kernel));
    persist_args pa{};
    for (int l = 0; l < LAYERS; l++) pa.L[l] = L[size_t(l)];
    pa.n_layers = LAYERS;
    pa.b = b;
    pa.bar = bar;
    const int grid = n_sm * occ;
    std::printf("persistent: %d blocks of %d warps (%d an SM, %d registers)\n", grid, PWARPS, occ, fa.numRegs);
    auto parts = [&](int warps_per_sm, int n, int k) {
        const int groups = (n + R - 1) / R, nc = k / 32;
        int s = 1;
        while (s < 4 && groups * s < warps_per_sm * n_sm && nc >= 64 * s) s *= 2;
        return s;
    };
    bool checked = false;
    for (int wps : {48, PWARPS * occ, 16}) { // 48 first: the graph's k-splits, for the check
        for (int pf : {0, 2, 4}) {
            pa.S[0] = parts(wps, QKV, E);
            pa.S[1] = parts(wps, E, E);
            pa.S[2] = parts(wps, 2 * F, E);
            pa.S[3] = parts(wps, E, F);
            pa.pf = pf;
            auto run = [&] {
                CK(cudaMemsetAsync(bar, 0, 4, st));
                persist_kernel<<<grid, PWARPS * 32, 0, st>>>(pa);
                CK(cudaGetLastError());
            };
            if (!checked) {
                reset();
                run();
                CK(cudaMemcpyAsync(out_persist.data(), b.y_down, E * 4, cudaMemcpyDeviceToHost, st));
                CK(cudaStreamSynchronize(st));
                int diff = 0, bad = 0;
                double mx = 0;
                for (int i = 0; i < E; i++) {
                    if (!std::isfinite(out_graph[size_t(i)])) bad++;
                    if (std::memcmp(&out_graph[size_t(i)], &out_persist[size_t(i)], 4) != 0) diff++;
                    mx = std::max(mx, double(std::fabs(out_graph[size_t(i)])));
                }
                std::printf("check: persistent vs graph, last down output: %d of %d values differ (max |y| %.3g, %d not "
                            "finite)\n", diff, E, mx, bad);
                checked = true;
            }
            const double ms = time_ms(run, st, reps);
            char name[96];
            std::snprintf(name, sizeof name, "persistent, S %d/%d/%d/%d, L2 ask %d", pa.S[0], pa.S[1], pa.S[2],
                          pa.S[3], pf);
            report(name, ms);
        }
    }
    return 0;
}
