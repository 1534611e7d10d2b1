// backend.h: the small interface every backend implements (CPU, CUDA), and graph execution on one.
#pragma once

#include "alloc.h"
#include "graph.h"

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>

namespace tessera {

// Memory owned by a backend (host memory for the CPU, device memory for CUDA).
struct buffer {
    virtual ~buffer() = default;
    virtual void* base() = 0;
    virtual size_t size() const = 0;
};

// Backends that compute one model together, each a share of every layer (tensor parallelism: --split-mode row).
// all_reduce nodes (ops.h) sum a tensor over the members. Made for backends of one kind (llm/device.h make_group:
// host memory for CPU backends, NCCL for CUDA devices); each member joins it with its rank before computing, and the
// members' graphs run at the same time, one thread each (their all_reduce nodes meet).
struct backend_group {
    virtual ~backend_group() = default;
    virtual int size() const = 0;
    // A member failed while the others may wait for it in an all_reduce: end the group's pending work (NCCL: abort
    // the communicators) so that they return instead of hanging; the group is unusable afterwards.
    virtual void abort() {}
};

// Called after each node is computed (debugging, layer-by-layer comparison); reads the node through backend::get.
using eval_callback = std::function<void(const tensor& node)>;

struct backend {
    virtual ~backend() = default;
    virtual std::string name() const = 0;
    virtual std::unique_ptr<buffer> alloc(size_t bytes) = 0;
    // Memory that reads as zeros until written (the KV cache: attention may load rows no batch has written yet, masked
    // out, and those must not hold NaN / Inf bit patterns). The CPU maps fresh pages, which the OS zeroes lazily.
    virtual std::unique_ptr<buffer> alloc_zeroed(size_t bytes) = 0;
    // Attention reads the KV cache in multiples of this many rows (the rows past the filled ones are masked with
    // -inf): then a decode graph stays the same from one token to the next, and a backend that replays captured
    // graphs (CUDA) can skip rebuilding them. 1: exactly the filled rows. (CPU and CUDA: 256, as llama.cpp pads.)
    virtual int64_t kv_pad() const { return 1; }
    // How many nodes after node i one of this backend's kernels may compute at node i (a fused chain): graph_runner
    // then plans memory with that lag (plan_memory_for). 0: none.
    virtual size_t fusion_window() const { return 0; }
    // Host memory for what get() copies out and set() copies in, such as the logits of every step: memory the
    // backend copies to and from without staging (CUDA: page-locked; a 128k-vocabulary logits row then comes back in
    // ~15 us instead of ~75). Plain heap memory by default.
    virtual std::unique_ptr<buffer> alloc_host(size_t bytes);
    // Whether this backend computes in host memory (the CPU): the scheduler then gives it compute memory from another
    // backend's alloc_host(), so that copies between the two go straight in and out of it (sched.cpp).
    virtual bool host_memory() const { return false; }
    // Copies between host memory and a tensor's storage (offset/size in bytes inside the tensor).
    virtual void set(tensor& t, const void* src, size_t offset, size_t size) = 0;
    virtual void get(const tensor& t, void* dst, size_t offset, size_t size) = 0;
    // Whether this backend can compute `node` (op + types of its sources).
    virtual bool supports(const tensor& node) const = 0;
    // Weights: tensors flagged flag_param whose data is host memory (the mapped model file). A backend with memory
    // of its own copies each one there once and reads that copy whenever a graph uses the tensor; the tensors
    // themselves are left unchanged (a CPU session may share them). The CPU reads them in place: nothing to do.
    virtual void load_weights(std::span<tensor* const> weights) { (void)weights; }
    // Op offload (sched.h): `copy` (no flags, this backend's memory of weight_copy_bytes(w)) is to hold weight w
    // (host memory) for the split about to run, in whatever layout this backend's kernels read a loaded weight in;
    // ordered after the work already queued. forget_weight_copies(): the copies of the last prepare() are gone.
    virtual size_t weight_copy_bytes(const tensor& w) const { return w.n_bytes(); }
    virtual void set_weight_copy(tensor& copy, const tensor& w) { set(copy, w.data, 0, w.n_bytes()); }
    virtual void forget_weight_copies() {}
    // Computes g.nodes in order; every tensor's data must already be bound.
    virtual void compute(graph& g) = 0;
    // The same for a graph this backend computed last, of which nothing has changed since but the data of its inputs
    // (no node, shape, parameter or address): a decode step after the one before. A backend that checks a graph
    // against the one it captured before replaying it (CUDA) may skip that check. By default compute(g).
    virtual void compute_again(graph& g) { compute(g); }
    virtual void synchronize() {}
    // The bandwidth of this backend's memory as a large copy moves it, bytes read + bytes written a second, in GB/s
    // (the roofline `tessera bench --roofline` sets decode speeds against), measured on the spot in under a second;
    // 0 where unknown.
    virtual double copy_gbs() { return 0.0; }
    // Joins a group as member `rank` (backend_group); a backend that cannot take part throws tessera::error.
    virtual void join(std::shared_ptr<backend_group> group, int rank);
    void set_eval_callback(eval_callback cb) { on_eval = std::move(cb); }

  protected:
    eval_callback on_eval;
};

// g's memory plan for be: with be's fusion window as the lag (plan_memory) unless that needs more than half again the
// memory of none, and more than 64 MiB more.
memory_plan plan_memory_for(const backend& be, const graph& g);

// Runs graphs on one backend, keeping one compute buffer that grows as needed.
class graph_runner {
  public:
    explicit graph_runner(backend& be) : be_(be) {}
    // Plans memory, binds it, and checks every node is supported; after this, inputs can be set.
    void prepare(graph& g);
    void compute(graph& g) { be_.compute(g); }
    void compute_again(graph& g) { be_.compute_again(g); } // backend::compute_again's promise
    size_t buffer_size() const { return buf_ ? buf_->size() : 0; }

  private:
    backend& be_;
    std::unique_ptr<buffer> buf_;
};

} // namespace tessera
