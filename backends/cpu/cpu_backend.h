// cpu_backend.h: the reference backend: host memory, a thread pool, and one switch over ops (cpu_backend.cpp).
#pragma once

#include "backends/cpu/host_group.h"
#include "backends/cpu/quant/repack.h"
#include "backends/cpu/thread_pool.h"
#include "ggml-like/backend.h"

#include <memory>
#include <vector>

namespace tessera::cpu {

struct cpu_options {
    int n_threads = 0;      // 0 = one per core, at most 8
    bool reference = false; // scalar reference kernels only (tests: the oracle)
    // repack block-format weights at load time into 16-row groups (quant/repack.h); same results, faster
    bool repack = true;
};

class cpu_backend final : public backend {
  public:
    explicit cpu_backend(cpu_options opt = {});
    std::string name() const override { return "cpu"; }
    bool host_memory() const override { return true; }
    std::unique_ptr<buffer> alloc(size_t bytes) override;
    std::unique_ptr<buffer> alloc_zeroed(size_t bytes) override;
    void set(tensor& t, const void* src, size_t offset, size_t size) override;
    void get(const tensor& t, void* dst, size_t offset, size_t size) override;
    bool supports(const tensor& node) const override;
    void load_weights(std::span<tensor* const> weights) override;
    void compute(graph& g) override;
    void join(std::shared_ptr<backend_group> group, int rank) override; // a host_group only
    // as llama.cpp (n_kv padded to 256): the decode graph then repeats for 256 tokens instead of being rebuilt and
    // planned every step, and the masked rows change no result (test_model's padded-KV tests: the same bits).
    // qwen3moe-small q4_0 decode, 2 threads: ~0.6 of 4.7 ms a token was the rebuild (this VM, 2026-11-25).
    int64_t kv_pad() const override { return 256; }
    double copy_gbs() override;
    size_t repacked_bytes() const { return repacked_.bytes(); }

    int n_threads() const { return pool_.n_threads(); }

  private:
    cpu_options opt_;
    thread_pool pool_;
    std::vector<uint8_t> work_;
    repack_store repacked_;
    std::shared_ptr<host_group> group_; // join(): all_reduce nodes sum over it as member rank_
    int rank_ = 0;
};

int default_n_threads();

} // namespace tessera::cpu
