// common.cuh: what every CUDA source of the backend shares: TS_CUDA_CHECK, warp reductions, ceil_div, and
// cuda_context, the per-compute state an op reads (stream, device pointers of tensors, scratch memory).
// The backend itself (buffers, weights, the compute() switch) is in cuda_backend.cu; ops are in ops/.
#pragma once

#include "backends/cuda/cuda_backend.h"
#include "ggml-like/error.h"
#include "ggml-like/tensor.h"

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tessera::cuda {

// Throws tessera::error naming the call site, the failed expression and CUDA's error name and text.
[[noreturn]] void cuda_fail(const char* file, int line, const char* expr, cudaError_t e);

} // namespace tessera::cuda

// Every CUDA runtime call goes through this; every kernel launch is followed by TS_CUDA_CHECK(cudaGetLastError()).
#define TS_CUDA_CHECK(expr)                                                                                            \
    do {                                                                                                               \
        const cudaError_t ts_err_ = (expr);                                                                            \
        if (ts_err_ != cudaSuccess) ::tessera::cuda::cuda_fail(__FILE__, __LINE__, #expr, ts_err_);                    \
    } while (0)

namespace tessera::cuda {

constexpr int WARP_SIZE = 32;

constexpr int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

// Sum / max over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ int warp_sum(int x) {
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
// Offset in elements of result column c = i1 + m (i2 + ne2 i3), rows at strides nb1, nb2, nb3 (elements). One batch
// (ne2 ne3 == 1, always in a model) takes no division: the three 64-bit divisions, per output, had cost the prefill
// GEMMs more than their MMAs.
__device__ __forceinline__ int64_t column_offset(int64_t c, int64_t m, int64_t ne2, int64_t ne3, int64_t nb1,
                                                 int64_t nb2, int64_t nb3) {
    if (ne2 * ne3 == 1) return c * nb1;
    return (c / (m * ne2)) * nb3 + ((c / m) % ne2) * nb2 + (c % m) * nb1;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// Sum / max over a whole thread block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `red` is shared scratch of 32 floats; the function syncs before returning, so `red` can be reused right away.
__device__ __forceinline__ float block_sum(float x, float* red) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, n_warps = blockDim.x / WARP_SIZE;
    x = warp_sum(x);
    if (lane == 0) red[warp] = x;
    __syncthreads();
    x = lane < n_warps ? red[lane] : 0.0f;
    x = warp_sum(x);
    __syncthreads();
    return x;
}
__device__ __forceinline__ float block_max(float x, float* red) {
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, n_warps = blockDim.x / WARP_SIZE;
    x = warp_max(x);
    if (lane == 0) red[warp] = x;
    __syncthreads();
    x = lane < n_warps ? red[lane] : -INFINITY;
    x = warp_max(x);
    __syncthreads();
    return x;
}

// Programmatic dependent launch (Hopper, sm_90+). A kernel launched by `launch` below with ctx.pdl set may start while
// the kernel before it on the stream still runs: it must call pdl_wait() before it reads anything an earlier kernel
// wrote or writes anything at all (before that it may only read weights, which no kernel writes). pdl_wait returns once
// every earlier kernel has finished and its writes are visible; in a kernel launched normally it returns at once.
// pdl_trigger() lets the next kernel start launching (once every block of this one has called it or exited); each
// kernel calls it right after its wait, so at most two kernels are resident: one running, the next one waiting (a GEMV
// meanwhile pulls its weights into L2). Below sm_90 both are no-ops.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Whether p may be read or written with 16-byte vector accesses (float4, uint4, cp.async 16).
inline bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}
// Asks L2 for the 32-byte sector holding p (a hint; nothing waits for it).
__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Element strides and sizes of a tensor, in elements of `elem_bytes` (kernels index with these).
struct shape4 {
    int64_t ne[4];
    int64_t nb[4]; // in elements, not bytes
};
// nb[d] / elem_bytes; TS_ASSERTs that every stride is a whole number of elements.
shape4 shape_of(const tensor& t, size_t elem_bytes);

// Element offset of row r of a tensor whose rows run over dims 1..3 (r = i1 + ne1 (i2 + ne2 i3)).
__host__ __device__ __forceinline__ int64_t row_offset(const shape4& s, int64_t r) {
    const int64_t i1 = r % s.ne[1], i2 = (r / s.ne[1]) % s.ne[2], i3 = r / (s.ne[1] * s.ne[2]);
    return i1 * s.nb[1] + i2 * s.nb[2] + i3 * s.nb[3];
}

// Allows `kernel` `bytes` of dynamic shared memory past the default 48 KiB. The setting belongs to the current device,
// so it is made once per kernel, size and device (several GPUs: each its own).
inline void allow_dynamic_smem(const void* kernel, int bytes) {
    static std::mutex mu;
    static std::set<std::tuple<const void*, int, int>> done;
    int dev = 0;
    TS_CUDA_CHECK(cudaGetDevice(&dev));
    std::lock_guard lk(mu);
    if (!done.count({kernel, bytes, dev})) {
        TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
        done.insert({kernel, bytes, dev});
    }
}

// The driver API's function `name` at its CUDA 12.0 signature, found through the runtime (nothing links to libcuda,
// which CI lacks); nullptr where the driver has none (the refused query's error cleared: it is not sticky).
inline void* driver_entry_point(const char* name) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess && q == cudaDriverEntryPointSuccess ? fn : nullptr;
}

// A switch for side-by-side measurements: NAME=0 turns a CUDA path off; anything else (or unset) leaves it on.
inline bool env_switch_on(const char* name) {
    const char* e = std::getenv(name);
    return !(e && std::string(e) == "0");
}

// What an op needs while a graph is computed. Owned by cuda_backend; ops read it, never keep it.
struct cuda_context {
    cudaStream_t stream = nullptr;
    int device = 0;
    int n_sm = 0;
    // host tensor (a weight flagged flag_param) -> its copy in device memory (backend::load_weights)
    const std::unordered_map<const tensor*, uint8_t*>* weights = nullptr;
    // weights also (or only) held in the split layout
    const std::unordered_map<const tensor*, split_weight>* split = nullptr;
    void* scratch = nullptr; // device memory of scratch_size bytes, at least work_size(node) for every node
    size_t scratch_size = 0;
    // the activations mul_mat last converted into scratch: their source and form (act_split_q8: q8_1 for the split
    // GEMV, act_f16: f16 for the GEMM, act_split_q8_f16: q8_1 and its values d q as f16 for the wgmma GEMM,
    // act_bf16: bf16, for bf16 weights); a mul_mat of the same source right after (q, k, v; gate, up) reuses them
    enum act_form_t { act_none, act_split_q8, act_f16, act_split_q8_f16, act_bf16 };
    // prefill GEMMs on wgmma (Hopper, sm_90a code present; TESSERA_CUDA_WGMMA=0: off)
    bool wgmma = false;
    // exact mode (TESSERA_CUDA_EXACT=1): ops reproduce the CPU's float results bit for bit where they can (mul_mat of
    // the mmq formats, rms_norm, swiglu, rope, attention); no fusion, no CUDA graphs
    bool exact = false;
    // exact mode: host copies of the small integer inputs (positions), by tensor (rope builds its angles on the host)
    const std::unordered_map<const tensor*, std::vector<uint8_t>>* host_inputs = nullptr;
    const uint16_t* gelu_table = nullptr; // ggml's 65536-entry f16 gelu table (ggml-like/gelu.h), for geglu
    void* exact_buf = nullptr; // exact mode: device memory for rope's angle table (exact_buf_size bytes)
    size_t exact_buf_size = 0;
    const tensor* act_src = nullptr;
    act_form_t act_form = act_none;
    bool act_q8k = false; // the split q8_1 forms: a scale per 256 values (split_acts' q8k)
    // kernels launched through launch() may start before the one ahead of them ends (pdl_wait above): compute
    // capability 9.0+, not in exact mode; TESSERA_CUDA_PDL=0: off
    bool pdl = false;
    // zeroed counters (n_counters ints) a kernel may count blocks in, as long as it sets them back to 0 before it
    // ends (attention.cu's split decode kernel: which block finishes last)
    int* counters = nullptr;
    size_t n_counters = 0;
    // the prefill GEMM's partial sums where it splits its last tiles over k (gemm_wgmma.cu, wq_plan): gemm_part_bytes
    // (null, 0: no split)
    float* gemm_part = nullptr;
    size_t gemm_part_bytes = 0;
    // the device group this backend is a member of (nccl_comm's handle; null alone): all_reduce nodes
    void* group = nullptr;
    // kernels launched through launch() so far, and that count just after the last kernel that made a call of the
    // group's peer-memory all-reduce or gather (p2p.cuh): add+norm begins its call before pdl_wait only when another
    // kernel came between (norm.cu); equal at first, so not before this context's first launch (an earlier
    // context's last kernel may have been such a call)
    mutable uint64_t launches = 0, p2p_launch = 0;
    // a cuBLAS handle on `stream` with its own workspace (cublas_create, gemm.cu): f16 / bf16 weights' prefill GEMM;
    // null until a graph has such a node
    void* cublas = nullptr;

    // Device address of t's first element: a weight's copy, a view into a weight's copy, or t.data (device memory
    // bound by the graph runner or allocated by this backend).
    uint8_t* ptr(const tensor* t) const;
    template <class T> T* as(const tensor* t) const { return reinterpret_cast<T*>(ptr(t)); }
};

// Launches kernel<<<grid, block, smem, ctx.stream>>>(args...), as a programmatic dependent launch when ctx.pdl: only
// for kernels that call pdl_wait() as described above. Checks the launch.
template <class... P, class... A>
void launch(const cuda_context& ctx, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = ctx.stream;
    cfg.attrs = attr;
    cfg.numAttrs = ctx.pdl ? 1 : 0;
    TS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
    ctx.launches++;
}

// x (rows of ne0 floats) summed over the members of a device group into y (nccl.cu), on ctx.stream: decode-sized
// calls over peer memory (p2p.cuh), larger ones through NCCL; handle: nccl_comm's (cuda_context::group).
void group_all_reduce(const cuda_context& ctx, void* handle, const float* x, float* y, int64_t ne0, int64_t rows);
// x (rows of `part` floats) of every member side by side in rank order into y (rows of part x members floats), on
// ctx.stream (nccl.cu): over peer memory where it fits (p2p.cuh), else through NCCL; members: the group's size.
void group_all_gather(const cuda_context& ctx, void* handle, const float* x, float* y, int64_t part, int64_t rows,
                      int members);

// Scratch bytes a node needs (mul_mat: its activations quantized to q8_1, and as f16 for the wgmma GEMM).
size_t work_size(const tensor& node);

} // namespace tessera::cuda
