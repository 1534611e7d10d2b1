// p2p.cuh: the decode-sized all-reduce of a CUDA device group (nccl.cu) over peer memory, as device functions that a
// kernel runs for one row of floats per block: the standalone sum (nccl.cu p2p_sum_kernel) and the residual add +
// rms_norm that follows it in a layer (norm.cu add_norm_vec_kernel, fused by ops/fused.cu).
//
// Push, not pull: a block stores its row of partial sums straight into every peer's receive buffer (NVLink stores are
// posted: no round trip), then sets its word in each peer's flags (release, system scope) and waits for every peer's
// word in its own flags (acquire), then reads the peers' rows from its own memory and adds them to its own in rank
// order, ((x0 + x1) + x2) ...: every member gets the same bits. Per row a call counter in the member's own memory
// advances once a call that has the row, alike on every member (their graphs make the same calls in the same order),
// and the counter's parity picks one of two buffer halves: a member writes call c + 1's row while a slower peer may
// still read call c's, never call c - 1's (to be in call c + 1 it saw the peer's word of call c, so the peer had
// finished c - 1). Whether a call goes this way or through NCCL depends on its shape alone (p2p_fits), so all
// members take the same path.
#pragma once

#include <cstdint>

namespace tessera::cuda {

constexpr int P2P_MAX_RANKS = 8;
constexpr int P2P_MAX_ROWS = 64; // tokens of one call (decode and small batches); more go through NCCL

struct p2p_args {
    float* recv[P2P_MAX_RANKS];  // every member's receive buffer: [2 halves][n_ranks senders][cap floats]
    unsigned* flags[P2P_MAX_RANKS]; // every member's flags: [P2P_MAX_ROWS rows][P2P_MAX_RANKS senders], last call seen
    unsigned* count;             // this member's calls so far, per row
    int64_t cap;                 // floats per sender slot
    int rank = 0, n_ranks = 0;
};

// Shape-only (identical on every member): rows of ne0 floats fit the peer path.
inline bool p2p_fits(const p2p_args& a, int64_t ne0, int64_t rows) {
    return a.n_ranks > 1 && rows >= 1 && rows <= P2P_MAX_ROWS && ne0 >= 1 && rows * ne0 <= a.cap;
}

#ifdef __CUDACC__

__device__ __forceinline__ void p2p_st_release(unsigned* p, unsigned v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned p2p_ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// This block's call number for row r (after pdl_wait: the previous call's kernel has ended). Syncs the block.
__device__ __forceinline__ unsigned p2p_call(const p2p_args& a, int64_t r, unsigned* shared_call) {
    if (threadIdx.x == 0) {
        const unsigned c = a.count[r] + 1;
        a.count[r] = c;
        *shared_call = c;
    }
    __syncthreads();
    return *shared_call;
}

// Where member `to` receives sender `from`'s row r in call c.
__device__ __forceinline__ float* p2p_slot(const p2p_args& a, int to, int from, unsigned c, int64_t r, int64_t ne0) {
    return a.recv[to] + (int64_t(c & 1) * a.n_ranks + from) * a.cap + r * ne0;
}

// After every thread stored its part of row r into the peers' slots: tell each peer, wait for each peer's word. The
// barrier orders the block's stores before the release store (cumulative at system scope), so no fence.sys is needed
// (70B row decode on 2 H200 alike with one: 112.6 vs 113.3 t/s; with no waiting at all, wrong sums: 116.3).
__device__ __forceinline__ void p2p_signal_wait(const p2p_args& a, int64_t r, unsigned c) {
    __syncthreads();
    const int q = int(threadIdx.x);
    if (q < a.n_ranks && q != a.rank) {
        p2p_st_release(a.flags[q] + r * P2P_MAX_RANKS + a.rank, c);
        const unsigned* f = a.flags[a.rank] + r * P2P_MAX_RANKS + q;
        // a peer that never comes (it failed) ends this kernel with an error after 30 s rather than hanging
        uint64_t t0, t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
        while (int(p2p_ld_acquire(f) - c) < 0) {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
            if (t - t0 > 30000000000ull) __trap();
        }
    }
    __syncthreads();
}

// Element i of row r summed over the members in rank order, own = this member's value (after p2p_signal_wait).
__device__ __forceinline__ float p2p_sum_at(const p2p_args& a, int64_t r, unsigned c, int64_t ne0, int64_t i,
                                            float own) {
    float s = 0.0f;
    for (int q = 0; q < a.n_ranks; q++) {
        const float v = q == a.rank ? own : __ldcv(p2p_slot(a, a.rank, q, c, r, ne0) + i);
        s = q == 0 ? v : s + v;
    }
    return s;
}
__device__ __forceinline__ float4 p2p_sum_at4(const p2p_args& a, int64_t r, unsigned c, int64_t ne0, int64_t i4,
                                              float4 own) {
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int q = 0; q < a.n_ranks; q++) {
        const float4 v =
            q == a.rank ? own : __ldcv(reinterpret_cast<const float4*>(p2p_slot(a, a.rank, q, c, r, ne0)) + i4);
        if (q == 0)
            s = v;
        else
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    return s;
}

#endif

// The peer path's arguments of the member `handle` (nccl_comm's) for rows of ne0 floats, or nullptr when those go
// through NCCL (no peer access, too many rows, too large). nccl.cu.
const p2p_args* group_p2p(void* handle, int64_t ne0, int64_t rows);

} // namespace tessera::cuda
