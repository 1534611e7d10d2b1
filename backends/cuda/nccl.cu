// nccl.cu: the backend group of CUDA devices (ggml-like/backend.h backend_group): one NCCL communicator per device,
// made together in this process (ncclCommInitAll), and all_reduce as ncclAllReduce on the member's stream, which a
// captured CUDA graph replays like any kernel. The only file that includes NCCL's header; without NCCL
// (TESSERA_HAS_NCCL undefined) making a group is one error. (No fmt here: nvcc rejects its compile-time format checks.)
//
// Experiment (session 17, not yet run on GPUs; TESSERA_CUDA_P2P_ALLREDUCE=1 turns it on): decode-sized all-reduces
// (<= p2p_cap floats) as one kernel over peer memory instead of NCCL. Each member copies its partial sums into its
// own exchange buffer, tells every peer per block (a counter in the peer's memory, release / acquire at system
// scope), waits for theirs, then reads every member's buffer over NVLink and adds them in rank order: every member
// gets the same bits. A fixed grid, so that every call advances every block's counter alike; two buffer halves by
// the counter's parity, so that a member may write call k + 1's values while a slower peer still reads call k's. It
// takes part in programmatic dependent launch like the other kernels. To measure against NCCL (70B row decode on 2
// H200: NCCL costs ~20 us a call, 160 a token); then keep the winner and delete the other and the switch.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/common.cuh"

#ifdef TESSERA_HAS_NCCL
#include <nccl.h>
#endif

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

constexpr int P2P_MAX_RANKS = 8;
constexpr int P2P_BLOCKS = 16;   // every call: each block's counter advances once a call
constexpr int P2P_THREADS = 512;
constexpr int64_t p2p_cap = int64_t(1) << 18; // floats per buffer half (1 MiB): 32 tokens of an 8192-wide model

struct p2p_args {
    const float* x;
    float* y;
    int64_t n;
    float* bufs[P2P_MAX_RANKS];     // every member's exchange buffer: two halves of p2p_cap floats
    unsigned* flags[P2P_MAX_RANKS]; // every member's flags: [P2P_BLOCKS][P2P_MAX_RANKS], the last call seen per peer
    unsigned* count;                // this member's calls so far, per block
    int rank, n_ranks;
};

__device__ __forceinline__ void st_release_sys(unsigned* p, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_acquire_sys(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__global__ void __launch_bounds__(P2P_THREADS) p2p_all_reduce_kernel(p2p_args a) {
    pdl_wait(); // x is the kernel before's result
    const int b = int(blockIdx.x);
    const int64_t per = (a.n + P2P_BLOCKS - 1) / P2P_BLOCKS;
    const int64_t lo = min(a.n, int64_t(b) * per), hi = min(a.n, lo + per);
    __shared__ unsigned call;
    if (threadIdx.x == 0) {
        call = a.count[b] + 1;
        a.count[b] = call;
    }
    __syncthreads();
    const unsigned e = call;
    const int64_t half = int64_t(e & 1) * p2p_cap;
    float* mine = a.bufs[a.rank] + half;
    for (int64_t i = lo + threadIdx.x; i < hi; i += P2P_THREADS) mine[i] = a.x[i];
    __syncthreads(); // the block's values are written; one thread per peer tells it, then waits for its word
    const int q = int(threadIdx.x);
    if (q < a.n_ranks && q != a.rank) {
        __threadfence_system();
        st_release_sys(a.flags[q] + b * P2P_MAX_RANKS + a.rank, e);
        const unsigned* f = a.flags[a.rank] + b * P2P_MAX_RANKS + q;
        while (int(ld_acquire_sys(f) - e) < 0) {
        }
    }
    __syncthreads();
    pdl_trigger();
    for (int64_t i = lo + threadIdx.x; i < hi; i += P2P_THREADS) {
        float s = 0.0f;
        for (int r = 0; r < a.n_ranks; r++) {
            const float v = r == a.rank ? a.x[i] : __ldcv(a.bufs[r] + half + i); // peer memory, never a stale line
            s = r == 0 ? v : s + v;
        }
        a.y[i] = s;
    }
}

// What a member's backend holds (nccl_comm): its communicator and, with the peer path, the kernel's arguments.
struct member {
    ncclComm_t comm = nullptr;
    bool p2p = false;
    p2p_args args{};
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
        for (size_t i = 0; i < devices.size(); i++) members_[i].comm = comms[i];
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
        if (const char* e = std::getenv("TESSERA_CUDA_P2P_ALLREDUCE"); e && std::string(e) == "1") set_up_p2p();
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
    // Peer access between every pair, and each member's exchange buffer, flags and counts (zeroed); left off when a
    // pair cannot reach each other or there are too many members.
    void set_up_p2p() {
        const size_t n = devices_.size();
        if (n > size_t(P2P_MAX_RANKS)) return;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++) {
                int ok = 0;
                if (i != j && (cudaDeviceCanAccessPeer(&ok, devices_[i], devices_[j]) != cudaSuccess || !ok)) return;
            }
        const size_t buf_bytes = size_t(2 * p2p_cap) * sizeof(float);
        const size_t flag_bytes = size_t(P2P_BLOCKS * P2P_MAX_RANKS) * sizeof(unsigned);
        const size_t bytes = buf_bytes + flag_bytes + size_t(P2P_BLOCKS) * sizeof(unsigned);
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
            TS_CUDA_CHECK(cudaMalloc(&p2p_mem_[i], bytes));
            TS_CUDA_CHECK(cudaMemset(p2p_mem_[i], 0, bytes));
            TS_CUDA_CHECK(cudaDeviceSynchronize());
        }
        for (size_t i = 0; i < n; i++) {
            member& m = members_[i];
            m.p2p = true;
            m.args.rank = int(i);
            m.args.n_ranks = int(n);
            for (size_t j = 0; j < n; j++) {
                auto* base = static_cast<uint8_t*>(p2p_mem_[j]);
                m.args.bufs[j] = reinterpret_cast<float*>(base);
                m.args.flags[j] = reinterpret_cast<unsigned*>(base + buf_bytes);
            }
            m.args.count = reinterpret_cast<unsigned*>(static_cast<uint8_t*>(p2p_mem_[i]) + buf_bytes + flag_bytes);
        }
    }

    std::vector<int> devices_;
    std::vector<member> members_;
    std::vector<void*> p2p_mem_; // per member: its exchange buffer, flags, counts (set_up_p2p)
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

void group_all_reduce(const cuda_context& ctx, void* handle, const float* x, float* y, int64_t count) {
    auto* m = static_cast<member*>(handle);
    if (m->p2p && count <= p2p_cap) {
        p2p_args a = m->args;
        a.x = x;
        a.y = y;
        a.n = count;
        launch(ctx, p2p_all_reduce_kernel, dim3(P2P_BLOCKS), dim3(P2P_THREADS), 0, a);
        return;
    }
    if (!m->comm) throw error("the GPU group was aborted after a failure");
    TS_NCCL_CHECK(ncclAllReduce(x, y, size_t(count), ncclFloat32, ncclSum, m->comm, ctx.stream));
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

void group_all_reduce(const cuda_context& ctx, void* handle, const float* x, float* y, int64_t count) {
    (void)ctx, (void)handle, (void)x, (void)y, (void)count;
    throw error("this build has no NCCL");
}

#endif

} // namespace tessera::cuda
