// thread_pool.cpp: workers sleep on a condition variable between jobs and spin (then yield) at barriers.
#include "thread_pool.h"

#include <sched.h>

namespace tessera::cpu {

thread_pool::thread_pool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
    for (int i = 1; i < n_threads_; i++) threads_.emplace_back([this, i] { worker(i); });
}

thread_pool::~thread_pool() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
}

void thread_pool::run(const std::function<void(int, int)>& job) {
    if (n_threads_ == 1) {
        job(0, 1);
        return;
    }
    n_done_.store(0, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lk(mu_);
        job_ = &job;
        job_gen_++;
    }
    cv_.notify_all();
    job(0, n_threads_);
    // wait for the workers (spin briefly, then yield: jobs are short)
    for (int spins = 0; n_done_.load(std::memory_order_acquire) != n_threads_ - 1; spins++)
        if (spins > 1000) sched_yield();
}

void thread_pool::worker(int ith) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int, int)>* job;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [&] { return stop_ || job_gen_ != seen; });
            if (stop_) return;
            seen = job_gen_;
            job = job_;
        }
        (*job)(ith, n_threads_);
        n_done_.fetch_add(1, std::memory_order_acq_rel);
    }
}

void thread_pool::barrier() {
    if (n_threads_ == 1) return;
    const uint32_t gen = barrier_gen_.load(std::memory_order_acquire);
    if (n_arrived_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
        n_arrived_.store(0, std::memory_order_relaxed);
        barrier_gen_.fetch_add(1, std::memory_order_acq_rel);
        return;
    }
    for (int spins = 0; barrier_gen_.load(std::memory_order_acquire) == gen; spins++)
        if (spins > 20000) sched_yield(); // ~10 us of spinning: a node rarely takes longer to finish on the other threads
}

} // namespace tessera::cpu
