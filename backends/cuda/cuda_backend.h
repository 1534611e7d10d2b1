// cuda_backend.h: the CUDA backend (device buffers, weights uploaded once, one stream, one switch over ops) and the
// list of CUDA devices. Plain C++: included by code that is not compiled by nvcc (llm/device.cpp).
// Kernels live in ops/*.cu; each block format's device fast path in quant/<format>.cuh.
#pragma once

#include "ggml-like/backend.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

struct CUstream_st;    // cudaStream_t, without including the CUDA headers
struct CUgraphExec_st; // cudaGraphExec_t

namespace tessera::cuda {

struct device_info {
    int id = 0;
    std::string name; // "NVIDIA H100 80GB HBM3"
    int cc_major = 0, cc_minor = 0;
    size_t free_bytes = 0, total_bytes = 0;
    int n_sm = 0;
};

// The CUDA devices this process can use; empty when there is none or no driver. Never throws: `why`, when given,
// receives the reason an empty list came back ("no CUDA-capable device is detected").
std::vector<device_info> list_devices(std::string* why = nullptr);

// A 2-D block-format weight repacked at upload into the split layout (quant/format.cuh): all blocks' values, then
// all their scales; mul_mat reads it with 16-byte loads (ops/mmv.cu).
struct split_weight {
    type t;
    int64_t k = 0, n = 0; // elements per row, rows
    const uint8_t* qs = nullptr;
    const uint8_t* sc = nullptr;
    float out_scale = 1.0f; // a per-tensor factor on the output (i2_s's tail scale)
};

// Whether the CUDA backend can compute with weights of type t (mul_mat, get_rows); for picking a device per model.
bool supports_weight_type(type t);

// Tensor parallelism over several devices (backends/cuda/nccl.cu): whether this build has NCCL; a group of the given
// devices, one communicator each (throws tessera::error without NCCL or when NCCL fails); the handle a member's
// all_reduce nodes run through (common.cuh group_all_reduce).
bool has_nccl();
std::shared_ptr<backend_group> make_nccl_group(const std::vector<int>& devices);
void* nccl_comm(backend_group* group, int rank, int device);

class cuda_backend final : public backend {
  public:
    // Throws tessera::error when the device cannot be used.
    // exact: reproduce the CPU's results bit for bit where the ops can (also TESSERA_CUDA_EXACT=1)
    explicit cuda_backend(int device = 0, bool exact = false);
    ~cuda_backend() override;
    std::string name() const override { return "cuda"; }
    std::unique_ptr<buffer> alloc(size_t bytes) override;
    std::unique_ptr<buffer> alloc_zeroed(size_t bytes) override;
    std::unique_ptr<buffer> alloc_host(size_t bytes) override;
    int64_t kv_pad() const override { return 256; }
    // the longest chain ops/fused.cu runs as one kernel, views included (the routing of a mixture's token: up to 16)
    size_t fusion_window() const override;
    void set(tensor& t, const void* src, size_t offset, size_t size) override;
    void get(const tensor& t, void* dst, size_t offset, size_t size) override;
    bool supports(const tensor& node) const override;
    void load_weights(std::span<tensor* const> weights) override;
    // op offload: a weight of the CPU's layers goes up in the file's layout and is split on the device (upload_split),
    // from a page-locked copy of its bytes while such copies fit a budget (set_weight_copy), else from the file's
    // pages; mul_mat finds the copy in split_ like a loaded weight
    size_t weight_copy_bytes(const tensor& w) const override;
    void set_weight_copy(tensor& copy, const tensor& w) override;
    void forget_weight_copies() override;
    void compute(graph& g) override;
    void compute_again(graph& g) override;
    void synchronize() override;
    double copy_gbs() override;
    void join(std::shared_ptr<backend_group> group, int rank) override; // a group from make_nccl_group

    const device_info& info() const { return info_; }
    // computes that captured a CUDA graph, and that launched the last captured one again unchanged (compute())
    int64_t graphs_captured() const { return graphs_captured_; }
    int64_t graphs_reused() const { return graphs_reused_; }
    size_t weight_bytes() const { return weights_buf_ ? weights_buf_->size() : 0; }

  private:
    device_info info_;
    CUstream_st* stream_ = nullptr;
    std::unique_ptr<buffer> weights_buf_;                 // every weight, one after another
    std::unordered_map<const tensor*, uint8_t*> weights_; // host tensor -> its copy in weights_buf_
    std::unordered_map<const tensor*, split_weight> split_; // host tensor -> its split copy in weights_buf_
    // op offload: per CPU-held weight a page-locked copy of its bytes (none: read from the file's pages), the offset
    // of its scale groups in the split layout and out_scale; the copies of the current splits registered in split_
    struct offload_source {
        bool made = false;
        std::unique_ptr<buffer> mem;
        size_t sc_offset = 0;
        float out_scale = 1.0f;
    };
    std::unordered_map<const tensor*, offload_source> offload_src_;
    size_t pinned_left_ = SIZE_MAX; // bytes op offload may still page-lock (SIZE_MAX: not yet counted)
    // upload_split's device staging: two halves, a run of rows in the file's layout each; the copy stream fills one
    // while split_rows_kernel reads the other on the backend's stream
    struct upload_stage {
        std::unique_ptr<buffer> mem;
        size_t half = 0;
        CUstream_st* copies = nullptr;
        void* filled[2] = {nullptr, nullptr}; // cudaEvent_t: the copy into a half done
        void* read[2] = {nullptr, nullptr};   // cudaEvent_t: the kernel that read a half done
        upload_stage();
        ~upload_stage();
    };
    std::unique_ptr<upload_stage> stage_;
    void upload_split(const tensor& w, const uint8_t* src, uint8_t* qs, uint8_t* sc);
    std::vector<const tensor*> streamed_;
    std::unique_ptr<buffer> scratch_;                     // per-node scratch (quantized activations)
    // Captured CUDA graphs (compute()), one per graph the backend computes in turn: a session whose model is split
    // over backends (-ngl) hands this backend one graph per split it holds, step after step, and each replays its own.
    struct captured {
        CUgraphExec_st* exec = nullptr; // the graph's launches
        std::vector<uintptr_t> shape;   // graph_shape() of what exec holds
        // graph_signature() of the graph exec was captured from (empty: none); a graph with the same signature
        // launches exec as it is, without capturing (a decode step, token after token)
        std::vector<uint64_t> sig;
        // the graph sig was last taken or checked from, and the scratch then: compute_again() of that graph, with the
        // scratch in place, launches exec without taking the signature (TESSERA_CUDA_REPLAY=0: it always does)
        const graph* g = nullptr;
        const void* scratch = nullptr;
        int64_t used = 0; // the compute that last launched it (the least recently used one is captured over)
    };
    static constexpr size_t max_captured = 4;
    std::vector<captured> captured_;
    std::vector<uint64_t> next_sig_;
    int64_t n_computes_ = 0;
    void launch_exec(captured& c);
    void replay(graph& g); // compute_again's fast path: the graph's exec launched as it is
    void timed(void (cuda_backend::*f)(graph&), graph& g);
    int64_t graphs_captured_ = 0, graphs_reused_ = 0;
    // TESSERA_CUDA_EXACT=1: the CPU's results bit for bit where the ops can (common.cuh, cuda_context::exact)
    bool exact_ = false;
    std::shared_ptr<backend_group> group_; // join(): all_reduce nodes run through comm_ (nccl_comm's handle)
    void* comm_ = nullptr;
    bool wgmma_ = false; // prefill GEMMs on wgmma (cuda_context::wgmma)
    bool pdl_ = false;   // programmatic dependent launches (cuda_context::pdl)
    std::unordered_map<const tensor*, std::vector<uint8_t>> host_inputs_; // exact mode: i32 inputs as set()
    std::unique_ptr<buffer> gelu_table_; // cuda_context::gelu_table
    std::unique_ptr<buffer> exact_buf_;                                   // exact mode: rope's angle tables
    std::unique_ptr<buffer> counters_; // zeroed block counters (cuda_context::counters)
    std::unique_ptr<buffer> gemm_part_; // the prefill GEMM's partial sums (cuda_context::gemm_part)
    void* cublas_ = nullptr;           // cuda_context::cublas (made for the first graph with an f16 / bf16 GEMM)
    void graph_signature(const graph& g, std::vector<uint64_t>& sig) const;
    void launch_nodes(graph& g);
    // TESSERA_CUDA_PROFILE=1: GPU time per op (mul_mat per weight type and kernel), printed when the backend goes
    struct profile_data {
        std::map<std::string, std::pair<double, int64_t>> by_op; // ms, calls
    };
    std::unique_ptr<profile_data> profile_;
    // TESSERA_CUDA_PROFILE=host: where the host's time goes per compute (launching vs the rest vs waiting)
    struct host_profile {
        double compute_s = 0, between_s = 0, get_s = 0, sig_s = 0, launch_s = 0, capture_s = 0;
        int64_t calls = 0;
        // GPU time of the unchanged graphs launched again: events recorded around cudaGraphLaunch, read in get()
        double graph_gpu_s = 0;
        int64_t graph_gpu_n = 0;
        void* ev[2] = {nullptr, nullptr}; // cudaEvent_t
        bool ev_pending = false;
        std::chrono::steady_clock::time_point last_end;
    };
    std::unique_ptr<host_profile> host_prof_;
    void print_profile() const;
    void compute_impl(graph& g);
};

} // namespace tessera::cuda
