// p2p.cuh: the decode-sized all-reduce (and all-gather) of a CUDA device group (nccl.cu) over peer memory, as device
// functions that the kernels of one call run: the standalone sum (nccl.cu p2p_sum_kernel, one block a row), the
// residual add + rms_norm that follows it in a layer (norm.cu add_norm_vec_kernel, fused by ops/fused.cu; up to 16
// blocks a row) and the gather of the output layer's logits rows (nccl.cu p2p_gather_kernel: copies, no sums).
//
// Push, and the data is its own flag (no separate flag words, no release / acquire round trip): every word of a
// member's receive buffers holds P2P_EMPTY until a peer's value lands in it. A block stores its share of the row's
// partial sums straight into every peer's buffer (NVLink stores are posted), then reads the peers' whole rows from its
// own memory, each word again until it is no longer empty, and adds them in rank order, ((x0 + x1) + x2) ...: every
// member gets the same bits (values that would read as empty are sent, and added, as the canonical NaN). How many
// blocks a member runs for a call does not matter to its peers (member 0 alone fuses the last sum into the output
// norm), only that every member makes the same calls with the same rows in the same order (their graphs do).
//
// Three buffers in turn, and a call empties the one its previous call read (its extent kept in the member's state):
// while a member is in call c, a peer is at most in call c + 1 (to leave call c it needs this member's values of c),
// writing buffer c + 1; buffer c - 1 is written next in call c + 2, which needs this member's values of c + 1, sent
// after call c's kernel has ended. Whether a call goes this way or through NCCL depends on its shape alone (p2p_fits),
// so all members take the same path. Measured (70B q4_0 row split on 2 H200, 2026-11-29, tg128, two rounds in one
// call): 135.8 / 135.2 t/s against 134.7 / 134.1 with a flag word per row (release / acquire) and one block a row;
// with 16 blocks a row pushing a slice each, which a flag per row had kept out, 139.9 / 139.9 (one GPU: 87.8); with
// add+norm beginning its call before its pdl_wait where another kernel came between (norm.cu), 143.1 / 142.6 against
// 140.8 / 140.7 (one GPU: 90.9 / 90.7).
#pragma once

#include <cstdint>

namespace tessera::cuda {

constexpr int P2P_MAX_RANKS = 8;
constexpr int P2P_MAX_ROWS = 64; // tokens of one call (decode and small batches); more go through NCCL
constexpr int P2P_BUFFERS = 3;
constexpr uint32_t P2P_EMPTY = 0xffffffffu; // a NaN that no arithmetic produces (theirs is 0x7fffffff)
constexpr uint32_t P2P_NAN = 0x7fffffffu;   // what a value of P2P_EMPTY's bits is sent and added as

// A member's state words (its own memory, read and written by its kernels only).
struct p2p_state {
    unsigned next;   // the buffer the next call uses (0, 1, 2)
    unsigned done;   // blocks of the current call that have finished
    unsigned floats; // floats a sender wrote in the previous call (rows x ne0)
};

struct p2p_args {
    float* recv[P2P_MAX_RANKS]; // every member's receive buffers: [P2P_BUFFERS][n_ranks senders][cap floats]
    p2p_state* state;           // this member's
    int64_t cap;                // floats per sender slot
    int rank = 0, n_ranks = 0;
};

// Shape-only (identical on every member): rows of ne0 floats fit the peer path.
inline bool p2p_fits(const p2p_args& a, int64_t ne0, int64_t rows) {
    return a.n_ranks > 1 && rows >= 1 && rows <= P2P_MAX_ROWS && ne0 >= 1 && rows * ne0 <= a.cap;
}

#ifdef __CUDACC__

// One call of the all-reduce as a block sees it (begin once the previous call's kernel has ended: after pdl_wait, or
// before it where another kernel came between the two calls).
struct p2p_call {
    unsigned buf, prev_floats;
};

// Syncs the block.
__device__ __forceinline__ p2p_call p2p_begin(const p2p_args& a, p2p_call* shared) {
    if (threadIdx.x == 0) *shared = p2p_call{a.state->next, a.state->floats};
    __syncthreads();
    return *shared;
}

// Where member `to` receives sender `from`'s floats in buffer b.
// (recv[to] picked by selects: indexing the parameter array with a runtime value copies it to the stack)
__device__ __forceinline__ float* p2p_slot(const p2p_args& a, int to, int from, unsigned b) {
    float* base = a.recv[0];
#pragma unroll
    for (int m = 1; m < P2P_MAX_RANKS; m++)
        if (to == m) base = a.recv[m];
    return base + (int64_t(b) * a.n_ranks + from) * a.cap;
}

__device__ __forceinline__ float p2p_canonical(float v) {
    return __float_as_uint(v) == P2P_EMPTY ? __uint_as_float(P2P_NAN) : v;
}
__device__ __forceinline__ float4 p2p_canonical(float4 v) {
    return make_float4(p2p_canonical(v.x), p2p_canonical(v.y), p2p_canonical(v.z), p2p_canonical(v.w));
}

// This block's share (block `blk` of `blocks`) of emptying the buffer the previous call read.
__device__ __forceinline__ void p2p_clear_previous(const p2p_args& a, p2p_call c, int64_t blk, int64_t blocks) {
    const unsigned prev = (c.buf + P2P_BUFFERS - 1) % P2P_BUFFERS;
    const int64_t stride = blocks * blockDim.x;
    for (int q = 0; q < a.n_ranks; q++)
        if (q != a.rank) {
            auto* p = reinterpret_cast<uint32_t*>(p2p_slot(a, a.rank, q, prev));
            for (int64_t i = blk * blockDim.x + threadIdx.x; i < int64_t(c.prev_floats); i += stride) p[i] = P2P_EMPTY;
        }
}

// A peer's word once it has landed (a peer that never comes, because it failed, ends the kernel with an error after
// 30 s rather than hanging). The clock read (asm volatile) is also what keeps the loop: __ldcv alone has no side
// effect, and under C++'s forward progress rule a loop of it may be compiled into one load (nvcc did, in a harness).
__device__ __forceinline__ void p2p_check_time(uint64_t& t0) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t0 == 0)
        t0 = t;
    else if (t - t0 > 30000000000ull)
        __trap();
}
__device__ __forceinline__ float p2p_wait_value(const float* p) {
    uint64_t t0 = 0;
    for (;;) {
        const float v = __ldcv(p);
        if (__float_as_uint(v) != P2P_EMPTY) return v;
        p2p_check_time(t0);
    }
}
__device__ __forceinline__ float4 p2p_wait_value4(const float4* p) {
    float4 v = __ldcv(p);
    uint64_t t0 = 0;
    while (__float_as_uint(v.x) == P2P_EMPTY || __float_as_uint(v.y) == P2P_EMPTY ||
           __float_as_uint(v.z) == P2P_EMPTY || __float_as_uint(v.w) == P2P_EMPTY) {
        p2p_check_time(t0);
        v = __ldcv(p);
    }
    return v;
}

// Element i (float i4 of float4s) of the call's rows summed over the members in rank order, own = this member's value.
__device__ __forceinline__ float p2p_sum_at(const p2p_args& a, p2p_call c, int64_t i, float own) {
    float s = 0.0f;
    for (int q = 0; q < a.n_ranks; q++) {
        const float v = q == a.rank ? p2p_canonical(own) : p2p_wait_value(p2p_slot(a, a.rank, q, c.buf) + i);
        s = q == 0 ? v : s + v;
    }
    return s;
}
__device__ __forceinline__ float4 p2p_sum_at4(const p2p_args& a, p2p_call c, int64_t i4, float4 own) {
    float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int q = 0; q < a.n_ranks; q++) {
        const float4 v = q == a.rank
                             ? p2p_canonical(own)
                             : p2p_wait_value4(reinterpret_cast<const float4*>(p2p_slot(a, a.rank, q, c.buf)) + i4);
        if (q == 0)
            s = v;
        else
            s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    return s;
}

// After the block's last use of the call: the last block of the call's `blocks` moves the member's state on.
__device__ __forceinline__ void p2p_end(const p2p_args& a, p2p_call c, unsigned blocks, unsigned floats) {
    __syncthreads();
    if (threadIdx.x == 0 && atomicAdd(&a.state->done, 1u) == blocks - 1) {
        a.state->done = 0;
        a.state->floats = floats;
        a.state->next = (c.buf + 1) % P2P_BUFFERS;
    }
}

#endif

// The peer path's arguments of the member `handle` (nccl_comm's) for rows of ne0 floats, or nullptr when those go
// through NCCL (no peer access, too many rows, too large). nccl.cu.
const p2p_args* group_p2p(void* handle, int64_t ne0, int64_t rows);

} // namespace tessera::cuda
