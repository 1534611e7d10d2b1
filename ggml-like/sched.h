// sched.h: one graph computed on several backends (llama.cpp's -ngl N: the first layers on the CPU, the rest on a
// GPU). The caller says where the weights and the caches live; every node goes where the data it reads lives, the
// graph is cut into runs of nodes on one backend (splits), and what a split reads from another backend is copied
// into its own memory before it runs.
#pragma once

#include "backend.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

namespace tessera {

class scheduler {
  public:
    // backends[0] is the one every node can fall back to (the CPU): a node another backend does not support runs
    // there. The backends are not owned.
    explicit scheduler(std::vector<backend*> backends);
    ~scheduler();

    // Where each leaf with data lives: the index of the backend that holds it (a KV cache) or reads it (a weight,
    // which every backend of its layer loads; weights are never copied while computing). -1: no preference (read on
    // backend 0).
    using home_fn = std::function<int(const tensor& leaf)>;

    // Places every node, cuts the graph into splits, adds the boundary copies (the split's nodes then read the
    // copies: this rewrites their src pointers, so a graph is prepared once), plans and binds each backend's memory.
    // Placement: a node that reads a weight or a cache goes to that leaf's backend; any other node stays with the
    // node before it (the first nodes with the first placed one); a view stays with the tensor it aliases; an input
    // (a leaf without data) lives with its first reader, and set() / get() below find it there.
    void prepare(graph& g, const home_fn& home);
    // Op offload (llama.cpp's, on by default there): a mul_mat (mul_mat_id) whose weight lives on backends[0] (the
    // CPU's layers of -ngl N, the experts of --n-cpu-moe) and that multiplies at least min_batch tokens runs on
    // backends[target] instead, its weight
    // copied there for the split (host memory -> device each time: worth it where a batch's GEMM on the GPU, upload
    // included, beats the CPU's, as for a prompt). The copies of a split share one buffer of the target backend, sized
    // for the split needing most and reused by every split. target < 1: off. Call before prepare().
    void set_op_offload(int target, int64_t min_batch) {
        offload_target_ = target;
        offload_min_batch_ = min_batch;
    }
    size_t n_offloaded() const { return n_offloaded_; } // mul_mats the last prepare() offloaded
    // Runs the splits in order, each after its copies. `again`: the graph ran last and only its inputs changed
    // (backend::compute_again's promise), passed on to backends that hold a single split. A host backend (the CPU)
    // computes in page-locked memory of a device backend, so copies go straight between the two; a device still
    // reading host memory is waited for before a host split runs and at the end. The op-offload weights of the next
    // split on another backend are sent while the current one computes (the target's stream orders them after its
    // earlier kernels, the last readers of the one weight slot).
    void compute(graph& g, bool again = false);

    // The backend holding t's memory (after prepare): inputs are set and outputs read through it.
    backend& backend_of(const tensor& t) const;
    int placement(const tensor& node) const; // index into the backends (tests, logs)
    size_t n_splits() const { return splits_.size(); }
    size_t n_copies() const; // tensors copied across backends per compute
    size_t buffer_size(int b) const;

  private:
    struct copy {
        tensor* from;
        tensor* to;
        int from_backend;
    };
    struct split {
        int b = 0;
        graph g;                  // the split's nodes (views included), in the whole graph's order
        std::vector<copy> copies; // done before the split runs
        std::vector<copy> weight_copies; // op offload: weights from host memory, into weight_slots_[b]
    };

    std::vector<backend*> backends_;
    std::vector<std::unique_ptr<buffer>> buffers_; // one compute buffer per backend, grown as needed
    std::unique_ptr<context> copies_ctx_;          // the copy tensors of the graph prepared last
    std::vector<split> splits_;
    std::unordered_map<const tensor*, int> where_; // nodes and inputs -> backend
    const graph* prepared_ = nullptr;
    // host memory for copies between two device backends (a host backend's side is copied straight from or into):
    // pageable on purpose, as a backend's set() from pageable memory is done with it when it returns (from
    // page-locked memory CUDA's would still be reading while the next copy fills it)
    std::vector<uint8_t> staging_;
    int offload_target_ = -1;
    int64_t offload_min_batch_ = 32;
    size_t n_offloaded_ = 0;
    std::vector<std::unique_ptr<buffer>> weight_slots_; // per backend: the offloaded weights of one split at a time
    std::vector<char> reading_host_, weights_sent_;      // compute()'s per-call state
    // TESSERA_SCHED_PROFILE=1: per backend, the wall time of its splits (each waited for), of the activation copies
    // into it and of the op-offload weight copies into it, printed to stderr when the scheduler goes. The weights sent
    // ahead (while the split before computes) are not waited for: their time shows in the next wait.
    struct profile {
        std::vector<double> compute_s, copy_s, weight_s;
        std::vector<size_t> copy_bytes, weight_bytes, n_splits;
        int64_t graphs = 0;
    };
    std::unique_ptr<profile> prof_;
};

} // namespace tessera
