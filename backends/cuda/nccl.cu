// nccl.cu: the backend group of CUDA devices (ggml-like/backend.h backend_group): one NCCL communicator per device,
// made together in this process (ncclCommInitAll), and all_reduce as ncclAllReduce on the member's stream, which a
// captured CUDA graph replays like any kernel. The only file that includes NCCL's header; without NCCL
// (TESSERA_HAS_NCCL undefined) making a group is one error. (No fmt here: nvcc rejects its compile-time format checks.)
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

class nccl_group final : public backend_group {
  public:
    explicit nccl_group(const std::vector<int>& devices) : devices_(devices), comms_(devices.size(), nullptr) {
        // NVLink multicast (NVLS) stays off unless the caller's environment says otherwise: on shared hosts a program
        // using it can take the GPUs out of service. Connections are made now, not at the first all-reduce: that one
        // may run inside a CUDA graph capture, where the set-up's allocations are not allowed.
        ::setenv("NCCL_NVLS_ENABLE", "0", 0);
        ::setenv("NCCL_RUNTIME_CONNECT", "0", 0);
        TS_NCCL_CHECK(ncclCommInitAll(comms_.data(), int(devices.size()), devices.data()));
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
            TS_NCCL_CHECK(ncclAllReduce(bufs[i], bufs[i], (1 << 20) / 4, ncclFloat32, ncclSum, comms_[i], streams[i]));
        TS_NCCL_CHECK(ncclGroupEnd());
        for (size_t i = 0; i < devices.size(); i++) {
            TS_CUDA_CHECK(cudaSetDevice(devices[i]));
            TS_CUDA_CHECK(cudaStreamSynchronize(streams[i]));
            TS_CUDA_CHECK(cudaStreamDestroy(streams[i]));
            TS_CUDA_CHECK(cudaFree(bufs[i]));
        }
    }
    ~nccl_group() override {
        for (ncclComm_t c : comms_)
            if (c) (void)ncclCommDestroy(c);
    }
    int size() const override { return int(devices_.size()); }
    void abort() override {
        for (ncclComm_t& c : comms_)
            if (c) {
                (void)ncclCommAbort(c);
                c = nullptr;
            }
    }
    ncclComm_t comm(int rank, int device) const {
        TS_ASSERT(rank >= 0 && rank < size());
        if (devices_[size_t(rank)] != device)
            throw error("NCCL group: rank " + std::to_string(rank) + " is device " +
                        std::to_string(devices_[size_t(rank)]) + ", not " + std::to_string(device));
        return comms_[size_t(rank)];
    }

  private:
    std::vector<int> devices_;
    std::vector<ncclComm_t> comms_;
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
    return g->comm(rank, device);
}

void nccl_all_reduce(void* comm, const float* x, float* y, size_t count, CUstream_st* stream) {
    TS_NCCL_CHECK(ncclAllReduce(x, y, count, ncclFloat32, ncclSum, static_cast<ncclComm_t>(comm), stream));
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

void nccl_all_reduce(void* comm, const float* x, float* y, size_t count, CUstream_st* stream) {
    (void)comm, (void)x, (void)y, (void)count, (void)stream;
    throw error("this build has no NCCL");
}

#endif

} // namespace tessera::cuda
