// nccl.cu: the backend group of CUDA devices (ggml-like/backend.h backend_group): one NCCL communicator per device,
// made together in this process (ncclCommInitAll), and all_reduce / all_gather as ncclAllReduce / ncclAllGather on
// the member's stream, which a captured CUDA graph replays like any kernel. The only file that includes NCCL's
// header; without NCCL (TESSERA_HAS_NCCL undefined) making a group is one error. (No fmt here: nvcc rejects its
// compile-time format checks.)
//
// Decode-sized calls (p2p.cuh p2p_fits: up to 64 rows, 1 MiB a row set) go over peer memory instead, where every pair
// of devices can reach each other: NCCL costs ~20 us a call and a 70B token makes 160 (2 H200, 2026-11-26: row decode
// 102.4 t/s through NCCL, 109.1 pulling over peer memory; then the push form of p2p.cuh fused with the residual add +
// rms_norm after it, now with the data as its own flag: 139.9, session 44).
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/common.cuh"
#include "backends/cuda/p2p.cuh"

#ifdef TESSERA_HAS_NCCL
#include <nccl.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace tessera::cuda {

#ifdef TESSERA_HAS_NCCL

namespace {

#define TS_NCCL_CHECK(expr)                                                                                            \
    do {                                                                                                               \
        const ncclResult_t ts_r_ = (expr);                                                                             \
        if (ts_r_ != ncclSuccess)                                                                                      \
            throw ::tessera::error(std::string("NCCL: ") + #expr + " failed: " + ncclGetErrorString(ts_r_) + " (" +   \
                                   ncclGetLastError(nullptr) + ")");                                                   \
    } while (0)

constexpr int64_t P2P_CAP = int64_t(1) << 18; // floats per sender slot (1 MiB): 32 tokens of an 8192-wide model
constexpr int P2P_THREADS = 512;

// One block per row: the row's partial sums into every peer's buffer, the block's share of emptying the previous
// call's, then the sum over the members into y.
__global__ void __launch_bounds__(P2P_THREADS) p2p_sum_kernel(p2p_args a, const float* x, float* y, int64_t ne0) {
    __shared__ p2p_call call;
    pdl_wait(); // x is the kernel before's result
    const int64_t r = blockIdx.x;
    const p2p_call c = p2p_begin(a, &call);
    const float* xr = x + r * ne0;
    for (int q = 0; q < a.n_ranks; q++)
        if (q != a.rank) {
            float* to = p2p_slot(a, q, a.rank, c.buf) + r * ne0;
            for (int64_t i = threadIdx.x; i < ne0; i += P2P_THREADS) to[i] = p2p_canonical(xr[i]);
        }
    p2p_clear_previous(a, c, r, gridDim.x);
    pdl_trigger();
    for (int64_t i = threadIdx.x; i < ne0; i += P2P_THREADS) y[r * ne0 + i] = p2p_sum_at(a, c, r * ne0 + i, xr[i]);
    p2p_end(a, c, gridDim.x, unsigned(gridDim.x * ne0));
}

// all_gather over peer memory: block (r, s) pushes its slice of row r of this member's part into every peer's buffer
// and writes it into y, empties its share of the previous call's buffer, then copies the peers' slices into y as they
// land. Every member's part is the same size (the graph's shapes are alike).
constexpr int64_t P2P_GATHER_SLICE = 4096; // floats a block
__global__ void __launch_bounds__(P2P_THREADS)
    p2p_gather_kernel(p2p_args a, const float* x, float* y, int64_t part, int64_t slice) {
    __shared__ p2p_call call;
    pdl_wait(); // x is the kernel before's result
    const int64_t r = blockIdx.x, lo = int64_t(blockIdx.y) * slice, hi = lo + slice < part ? lo + slice : part;
    const int64_t width = part * a.n_ranks;
    const p2p_call c = p2p_begin(a, &call);
    const float* xr = x + r * part;
    float* yr = y + r * width;
    for (int q = 0; q < a.n_ranks; q++)
        if (q != a.rank) {
            float* to = p2p_slot(a, q, a.rank, c.buf) + r * part;
            for (int64_t i = lo + threadIdx.x; i < hi; i += P2P_THREADS) to[i] = p2p_canonical(xr[i]);
        }
    for (int64_t i = lo + threadIdx.x; i < hi; i += P2P_THREADS) yr[a.rank * part + i] = p2p_canonical(xr[i]);
    p2p_clear_previous(a, c, int64_t(blockIdx.x) * gridDim.y + blockIdx.y, int64_t(gridDim.x) * gridDim.y);
    pdl_trigger();
    for (int q = 0; q < a.n_ranks; q++)
        if (q != a.rank) {
            const float* from = p2p_slot(a, a.rank, q, c.buf) + r * part;
            for (int64_t i = lo + threadIdx.x; i < hi; i += P2P_THREADS) yr[q * part + i] = p2p_wait_value(from + i);
        }
    p2p_end(a, c, gridDim.x * gridDim.y, unsigned(gridDim.x * part));
}

// What a member's backend holds (nccl_comm): its communicator and, with the peer path, the kernel's arguments.
struct member {
    ncclComm_t comm = nullptr;
    int n_ranks = 0;
    p2p_args p2p{}; // n_ranks 0: no peer path
};

class nccl_group final : public backend_group {
  public:
    explicit nccl_group(const std::vector<int>& devices) : devices_(devices), members_(devices.size()) {
        // NVLink multicast (NVLS) stays off unless the caller's environment says otherwise: on shared hosts a program
        // using it can take the GPUs out of service. Connections are made now, not at the first all-reduce: that one
        // may run inside a CUDA graph capture, where the set-up's allocations are not allowed.
        ::setenv("NCCL_NVLS_ENABLE", "0", 0);
        ::setenv("NCCL_RUNTIME_CONNECT", "0", 0);
        std::vector<ncclComm_t> comms(devices.size(), nullptr);
        TS_NCCL_CHECK(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()));
        for (size_t i = 0; i < devices.size(); i++) {
            members_[i].comm = comms[i];
            members_[i].n_ranks = int(devices.size());
        }
        // one all-reduce through every communicator, from this thread in one group, so that whatever NCCL still sets
        // up lazily happens here
        std::vector<void*> bufs(devices.size(), nullptr);
        std::vector<cudaStream_t> streams(devices.size(), nullptr);
        for (size_t i = 0; i < devices.size(); i++) {
            TS_CUDA_CHECK(cudaSetDevice(devices[i]));
            TS_CUDA_CHECK(cudaMalloc(&bufs[i], 1 << 20));
            TS_CUDA_CHECK(cudaMemset(bufs[i], 0, 1 << 20));
            TS_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[i], cudaStreamNonBlocking));
        }
        TS_NCCL_CHECK(ncclGroupStart());
        for (size_t i = 0; i < devices.size(); i++)
            TS_NCCL_CHECK(ncclAllReduce(bufs[i], bufs[i], (1 << 20) / 4, ncclFloat32, ncclSum, comms[i], streams[i]));
        TS_NCCL_CHECK(ncclGroupEnd());
        for (size_t i = 0; i < devices.size(); i++) {
            TS_CUDA_CHECK(cudaSetDevice(devices[i]));
            TS_CUDA_CHECK(cudaStreamSynchronize(streams[i]));
            TS_CUDA_CHECK(cudaStreamDestroy(streams[i]));
            TS_CUDA_CHECK(cudaFree(bufs[i]));
        }
        set_up_p2p();
    }
    ~nccl_group() override {
        for (member& m : members_)
            if (m.comm) (void)ncclCommDestroy(m.comm);
        for (size_t i = 0; i < p2p_mem_.size(); i++) {
            (void)cudaSetDevice(devices_[i]);
            (void)cudaFree(p2p_mem_[i]);
        }
    }
    int size() const override { return int(devices_.size()); }
    void abort() override {
        for (member& m : members_)
            if (m.comm) {
                (void)ncclCommAbort(m.comm);
                m.comm = nullptr;
            }
    }
    member* get(int rank, int device) {
        TS_ASSERT(rank >= 0 && rank < size());
        if (devices_[size_t(rank)] != device)
            throw error("NCCL group: rank " + std::to_string(rank) + " is device " +
                        std::to_string(devices_[size_t(rank)]) + ", not " + std::to_string(device));
        return &members_[size_t(rank)];
    }

  private:
    // Peer access between every pair, and each member's receive buffers (all words P2P_EMPTY) and state (zeroed);
    // left off (NCCL alone) when a pair cannot reach each other or there are too many members.
    void set_up_p2p() {
        const size_t n = devices_.size();
        if (n > size_t(P2P_MAX_RANKS)) return;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++) {
                int ok = 0;
                if (i != j && (cudaDeviceCanAccessPeer(&ok, devices_[i], devices_[j]) != cudaSuccess || !ok)) return;
            }
        const size_t buf_bytes = size_t(P2P_BUFFERS) * n * size_t(P2P_CAP) * sizeof(float);
        static_assert(P2P_EMPTY == 0xffffffffu, "the buffers are emptied by a byte memset of 0xff");
        p2p_mem_.assign(n, nullptr);
        for (size_t i = 0; i < n; i++) {
            TS_CUDA_CHECK(cudaSetDevice(devices_[i]));
            for (size_t j = 0; j < n; j++)
                if (i != j) {
                    const cudaError_t e = cudaDeviceEnablePeerAccess(devices_[j], 0);
                    if (e == cudaErrorPeerAccessAlreadyEnabled)
                        (void)cudaGetLastError();
                    else
                        TS_CUDA_CHECK(e);
                }
            TS_CUDA_CHECK(cudaMalloc(&p2p_mem_[i], buf_bytes + sizeof(p2p_state)));
            TS_CUDA_CHECK(cudaMemset(p2p_mem_[i], 0xff, buf_bytes));
            TS_CUDA_CHECK(cudaMemset(static_cast<uint8_t*>(p2p_mem_[i]) + buf_bytes, 0, sizeof(p2p_state)));
            TS_CUDA_CHECK(cudaDeviceSynchronize());
        }
        for (size_t i = 0; i < n; i++) {
            member& m = members_[i];
            m.p2p.rank = int(i);
            m.p2p.n_ranks = int(n);
            m.p2p.cap = P2P_CAP;
            for (size_t j = 0; j < n; j++) m.p2p.recv[j] = static_cast<float*>(p2p_mem_[j]);
            m.p2p.state = reinterpret_cast<p2p_state*>(static_cast<uint8_t*>(p2p_mem_[i]) + buf_bytes);
        }
    }

    std::vector<int> devices_;
    std::vector<member> members_;
    std::vector<void*> p2p_mem_; // per member: its receive buffers and state (set_up_p2p)
};

} // namespace

bool has_nccl() { return true; }

std::shared_ptr<backend_group> make_nccl_group(const std::vector<int>& devices) {
    if (devices.empty()) throw error("NCCL group: no devices");
    int prev = 0;
    TS_CUDA_CHECK(cudaGetDevice(&prev));
    auto g = std::make_shared<nccl_group>(devices);
    TS_CUDA_CHECK(cudaSetDevice(prev));
    return g;
}

void* nccl_comm(backend_group* group, int rank, int device) {
    auto* g = dynamic_cast<nccl_group*>(group);
    if (!g) throw error("a CUDA backend can only join a group of CUDA devices (NCCL)");
    return g->get(rank, device);
}

const p2p_args* group_p2p(void* handle, int64_t ne0, int64_t rows) {
    const auto* m = static_cast<const member*>(handle);
    return p2p_fits(m->p2p, ne0, rows) ? &m->p2p : nullptr;
}

void group_all_reduce(const cuda_context& ctx, void* handle, const float* x, float* y, int64_t ne0, int64_t rows) {
    auto* m = static_cast<member*>(handle);
    if (const p2p_args* a = group_p2p(handle, ne0, rows)) {
        launch(ctx, p2p_sum_kernel, dim3(unsigned(rows)), dim3(P2P_THREADS), 0, *a, x, y, ne0);
        ctx.p2p_launch = ctx.launches;
        return;
    }
    if (!m->comm) throw error("the GPU group was aborted after a failure");
    TS_NCCL_CHECK(ncclAllReduce(x, y, size_t(ne0 * rows), ncclFloat32, ncclSum, m->comm, ctx.stream));
}

void group_all_gather(const cuda_context& ctx, void* handle, const float* x, float* y, int64_t part, int64_t rows,
                      int members) {
    auto* m = static_cast<member*>(handle);
    if (members != m->n_ranks)
        throw error("all_gather over " + std::to_string(members) + " members in a group of " +
                    std::to_string(m->n_ranks));
    if (const p2p_args* a = group_p2p(handle, part, rows)) {
        const int64_t slices = ceil_div(part, P2P_GATHER_SLICE);
        TS_ASSERT(slices <= 65535);
        launch(ctx, p2p_gather_kernel, dim3(unsigned(rows), unsigned(slices)), dim3(P2P_THREADS), 0, *a, x, y, part,
               P2P_GATHER_SLICE);
        ctx.p2p_launch = ctx.launches;
        return;
    }
    if (!m->comm) throw error("the GPU group was aborted after a failure");
    // NCCL gathers whole buffers rank after rank: one call a row, its members side by side, grouped 512 calls at a
    // time (a prompt's rows, a bounded launch each)
    for (int64_t r0 = 0; r0 < rows; r0 += 512) {
        TS_NCCL_CHECK(ncclGroupStart());
        for (int64_t r = r0; r < std::min(rows, r0 + 512); r++)
            TS_NCCL_CHECK(ncclAllGather(x + r * part, y + r * part * members, size_t(part), ncclFloat32, m->comm,
                                        ctx.stream));
        TS_NCCL_CHECK(ncclGroupEnd());
    }
}

#else

bool has_nccl() { return false; }

std::shared_ptr<backend_group> make_nccl_group(const std::vector<int>& devices) {
    (void)devices;
    throw error("--split-mode row needs NCCL, and this build has none (install NCCL, e.g. the nvidia-nccl-cu13 wheel, "
                "and configure again; --split-mode layer works without it)");
}

void* nccl_comm(backend_group* group, int rank, int device) {
    (void)group, (void)rank, (void)device;
    throw error("this build has no NCCL");
}

void group_all_gather(const cuda_context& ctx, void* handle, const float* x, float* y, int64_t part, int64_t rows,
                      int members) {
    (void)ctx, (void)handle, (void)x, (void)y, (void)part, (void)rows, (void)members;
    throw error("this build has no NCCL");
}

const p2p_args* group_p2p(void* handle, int64_t ne0, int64_t rows) {
    (void)handle, (void)ne0, (void)rows;
    return nullptr;
}

void group_all_reduce(const cuda_context& ctx, void* handle, const float* x, float* y, int64_t ne0, int64_t rows) {
    (void)ctx, (void)handle, (void)x, (void)y, (void)ne0, (void)rows;
    throw error("this build has no NCCL");
}

#endif

} // namespace tessera::cuda
