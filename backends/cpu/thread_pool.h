// thread_pool.h: a fixed set of worker threads that run one job on all threads at once (ith, nth), with a spinning
// barrier for steps inside the job. One wake-up per graph, not per node: a decode graph has ~500 nodes and a
// condition-variable round trip per node would cost more than the token itself.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tessera::cpu {

class thread_pool {
  public:
    explicit thread_pool(int n_threads);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int n_threads() const { return n_threads_; }
    // Runs job(ith, n_threads) on every thread (the caller is thread 0) and returns when all are done.
    void run(const std::function<void(int ith, int nth)>& job);
    // Called by all n_threads threads inside a job: returns once every thread has arrived.
    void barrier();

  private:
    void worker(int ith);

    int n_threads_;
    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable cv_;
    const std::function<void(int, int)>* job_ = nullptr;
    uint64_t job_gen_ = 0;
    bool stop_ = false;
    // each counter on a cache line of its own: with 16 threads spinning on the barrier's generation, an arrival's
    // fetch_add on a word of the same line would take the line from every spinner (ggml's threadpool does the same)
    alignas(64) std::atomic<int> n_done_{0};
    // barrier state
    alignas(64) std::atomic<int> n_arrived_{0};
    alignas(64) std::atomic<uint32_t> barrier_gen_{0};
};

} // namespace tessera::cpu
