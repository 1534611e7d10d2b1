// attention.cu: O = softmax(scale * Q K^T + mask) V over the f16 KV cache, with an online softmax:
//   m_new = max(m, rowmax(S)); l = l e^(m - m_new) + rowsum(e^(S - m_new)); O = O e^(m - m_new) + e^(S - m_new) V; O /=
//   l
// q (hd, n_head, n_tok) f32; k, v (hd, n_head_kv, n_kv) f16 views of the cache; mask (n_kv, >= n_tok) additive;
// query head h reads KV head h / (n_head / n_head_kv). Two kernels:
//   decode  (n_tok <= 8): head sizes 64 / 128 / 256: split over the keys (flash-decoding), a block per (KV head, split,
//           token) serving the KV head's query heads, or a part of them at short contexts (64 / 128 on tensor
//           cores: attention_decode_stage_kernel; else attention_decode_split_kernel); other head sizes: a chunk
//           of 128 keys per step, one key per thread;
//   prefill (n_tok > 8):  head sizes 64 / 128 / 256: flash attention on tensor cores (attention_fa_kernel; TESSERA_CUDA_FA=0:
//           off); others: one block per (head, 32 queries), tiles of 32 keys staged in shared memory, f32.
// Scores and sums are f32 (the CPU rounds Q and its V accumulator to f16 below 64 queries, as ggml: the two differ by
// that rounding; the tensor-core prefill also rounds Q and P to f16).
// Masked keys (-inf) are never multiplied in: every kernel skips them (the decode kernels stop after the last key the
// mask lets through, the prefill kernel skips whole masked tiles), so cache rows no batch has written yet, which a
// padded KV length (backend::kv_pad) covers, cannot turn the output NaN, and cost next to nothing.
#include "backends/cuda/ops/exact.cuh"
#include "backends/cuda/ops/mma.cuh"
#include "backends/cuda/ops/ops.cuh"

#include <cuda_fp16.h>

#include <atomic>

namespace tessera::cuda {

namespace {

struct attn_args {
    const float* q;
    int64_t q_nb1, q_nb2; // floats between heads, tokens
    const __half* k;
    const __half* v;
    int64_t kv_nb1, kv_nb2; // halves between KV heads, positions (k and v share them: checked in supports)
    const float* mask;      // or null
    int64_t mask_nb1;       // floats between mask rows
    float* o;
    int64_t o_nb1, o_nb2;
    int hd, n_head, n_tok, group; // group = n_head / n_head_kv
    int64_t n_kv;
    float scale;
    // split decode kernel only: the output also as q8_1 for the mul_mat after it (split_acts' layout: token t's row of
    // n_head * hd values; o contiguous), or null
    int8_t* q8;
    __half2* q8_ds;
    // tensor-core prefill only: what the mask holds in each (64 queries, 64 keys) tile (fa_tiles_kernel), or null
    // (no mask): x, y = which keys of the tile a query of the block sees (bits 0-31, 32-63), z = fa_dead / fa_plain /
    // fa_mixed
    const int4* tiles;
    int64_t n_kt; // key tiles per query tile in `tiles`
    // split decode kernel only: the mask is a graph input (no kernel writes it: read before pdl_wait); where the
    // splits' partials go (decode_split_plan's count of them) and their counters (ctx.counters)
    bool mask_early;
    float* part;
    int* counters;
    const float* sinks; // (n_head) f32 or null: gpt-oss's sink logits
};

// A head's sink logit (gpt-oss) joins the softmax's denominator with no value of its own, after the last key, as ggml
// (and the CPU, attention_sink) adds it: l (the sum of e^(s - m) over the keys, m their max, -inf when none was seen)
// updated, and the factor on the output's numerator returned (e^(m - sink) where the sink exceeds m, else 1).
__device__ __forceinline__ float sink_fold(const float* sinks, int h, float m, float& l) {
    if (!sinks) return 1.0f;
    const float s = sinks[h];
    if (s > m) {
        const float ms = expf(m - s);
        l = fmaf(l, ms, 1.0f);
        return ms;
    }
    l += expf(s - m);
    return 1.0f;
}

// Exact mode's sink step: the CPU's attention_sink (backends/cpu/ops/softmax.cpp), glibc's expf, acc rescaled in f32
template <int HD>
__device__ __forceinline__ void sink_exact(const float* sinks, int h, float M, float& S, float (&acc)[HD]) {
    if (!sinks) return;
    const float s = sinks[h];
    float ms = 1.0f, vs = 1.0f;
    if (s > M) {
        ms = expf_glibc(__fsub_rn(M, s));
#pragma unroll
        for (int d = 0; d < HD; d++) acc[d] = __fmul_rn(acc[d], ms);
    } else {
        vs = expf_glibc(__fsub_rn(s, M));
    }
    S = fmaf(S, ms, vs);
}

// One past the last key the mask row lets through (0 when none does): the keys after it, such as the padded rows past
// the filled cache (backend::kv_pad), need not be visited at all. Scans backwards a warp-wide chunk at a time (a pad
// of 256 rows: at most 8 coalesced loads); every lane of the warp gets the result.
__device__ __forceinline__ int64_t live_keys(const float* mr, int64_t n_kv) {
    if (!mr) return n_kv;
    const int lane = threadIdx.x % WARP_SIZE;
    for (int64_t c = (n_kv - 1) / WARP_SIZE * WARP_SIZE; c >= 0; c -= WARP_SIZE) {
        const int64_t j = c + lane;
        const unsigned live = __ballot_sync(0xffffffffu, j < n_kv && mr[j] != -INFINITY);
        if (live) return c + WARP_SIZE - __clz(live);
    }
    return 0;
}

constexpr int DECODE_THREADS = 128; // keys per step
constexpr int HD_MAX = 256;         // largest head size (checked in supports)

// One block per (head, token). Thread t scores key c0 + t of each chunk, then the block adds the chunk's e^s v into
// thread-owned output dimensions d = t and t + 128.
static __global__ void __launch_bounds__(DECODE_THREADS) attention_decode_kernel(attn_args a) {
    __shared__ float q_s[HD_MAX];
    __shared__ float p_s[DECODE_THREADS];
    __shared__ float red[32];
    pdl_wait();
    pdl_trigger();
    const int h = blockIdx.x, t = blockIdx.y, hk = h / a.group, tid = threadIdx.x;
    const float* qr = a.q + h * a.q_nb1 + t * a.q_nb2;
    for (int d = tid; d < a.hd; d += blockDim.x) q_s[d] = qr[d];
    __syncthreads();
    const float* mr = a.mask ? a.mask + t * a.mask_nb1 : nullptr;
    const __half* kh = a.k + hk * a.kv_nb1;
    const __half* vh = a.v + hk * a.kv_nb1;
    const int d0 = tid, d1 = tid + DECODE_THREADS;
    const int64_t n_kv = live_keys(mr, a.n_kv); // the same in every warp
    float acc0 = 0.0f, acc1 = 0.0f, M = -INFINITY, S = 0.0f;
    for (int64_t c0 = 0; c0 < n_kv; c0 += DECODE_THREADS) {
        const int64_t j = c0 + tid;
        float s = -INFINITY;
        const float mv = j < n_kv ? (mr ? mr[j] : 0.0f) : -INFINITY;
        if (mv != -INFINITY) {
            const __half2* kr = reinterpret_cast<const __half2*>(kh + j * a.kv_nb2);
            float dot = 0.0f;
            for (int i = 0; i < a.hd / 2; i++) {
                const float2 kv = __half22float2(kr[i]);
                dot = fmaf(q_s[2 * i], kv.x, dot);
                dot = fmaf(q_s[2 * i + 1], kv.y, dot);
            }
            s = dot * a.scale + mv;
        }
        const float m_new = fmaxf(M, block_max(s, red));
        if (m_new == -INFINITY) continue;    // every key so far is masked (uniform over the block)
        const float alpha = expf(M - m_new); // 0 when M = -inf
        const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
        p_s[tid] = p;
        S = S * alpha + block_sum(p, red); // block_sum's barriers also publish p_s
        acc0 *= alpha;
        acc1 *= alpha;
        const int n_c = int(n_kv - c0 < DECODE_THREADS ? n_kv - c0 : DECODE_THREADS);
        for (int jj = 0; jj < n_c; jj++) {
            const float pj = p_s[jj];
            if (pj == 0.0f) continue;
            const __half* vr = vh + (c0 + jj) * a.kv_nb2;
            if (d0 < a.hd) acc0 = fmaf(pj, __half2float(vr[d0]), acc0);
            if (d1 < a.hd) acc1 = fmaf(pj, __half2float(vr[d1]), acc1);
        }
        M = m_new;
        __syncthreads(); // p_s is rewritten by the next chunk
    }
    const float f = sink_fold(a.sinks, h, M, S);
    const float inv = S == 0.0f ? 0.0f : f / S;
    float* orow = a.o + h * a.o_nb1 + t * a.o_nb2;
    if (d0 < a.hd) orow[d0] = acc0 * inv;
    if (d1 < a.hd) orow[d1] = acc1 * inv;
}

constexpr int BQ = 32, BK = 32;      // queries per block, keys per tile
constexpr int PREFILL_THREADS = 128; // 4 warps
static_assert(BK == WARP_SIZE, "the softmax step gives one key of a tile to each lane");
static_assert(PREFILL_THREADS == 4 * BQ, "thread t owns query t % 32 and a quarter of the keys / dimensions");

size_t prefill_smem_bytes(int hd) {
    // Q (BQ, hd + 1), K (BK, hd + 1), V (BK, hd), P (BQ, BK + 1), m, l, alpha (BQ each); +1 pads rows off one bank
    return sizeof(float) * size_t(BQ * (hd + 1) + BK * (hd + 1) + BK * hd + BQ * (BK + 1) + 3 * BQ);
}

// One block per (32 queries, head). Per key tile: S = Q K^T (thread: query t % 32, keys 8 (t / 32) .. +8), online
// softmax (warp w: rows 8w .. 8w+7, lane = key), O += P V (thread: query t % 32, dimensions t / 32 + 4i).
template <int D_MAX> static __global__ void __launch_bounds__(PREFILL_THREADS) attention_prefill_kernel(attn_args a) {
    extern __shared__ float smem[];
    const int hd = a.hd;
    float* q_s = smem;                // (BQ, hd + 1)
    float* k_s = q_s + BQ * (hd + 1); // (BK, hd + 1)
    float* v_s = k_s + BK * (hd + 1); // (BK, hd)
    float* p_s = v_s + BK * hd;       // (BQ, BK + 1)
    float* m_s = p_s + BQ * (BK + 1); // (BQ)
    float* l_s = m_s + BQ;
    float* alpha_s = l_s + BQ;

    const int h = blockIdx.y, hk = h / a.group, tid = threadIdx.x;
    const int t0 = blockIdx.x * BQ;
    const int lane = tid % WARP_SIZE, warp = tid / WARP_SIZE;
    const int qi = tid % BQ, part = tid / BQ; // this thread's query row and quarter

    for (int e = tid; e < BQ * hd; e += blockDim.x) {
        const int qq = e / hd, d = e % hd;
        q_s[qq * (hd + 1) + d] = t0 + qq < a.n_tok ? a.q[h * a.q_nb1 + (t0 + qq) * a.q_nb2 + d] : 0.0f;
    }
    if (tid < BQ) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }
    constexpr int N_D = D_MAX / 4; // output dimensions per thread
    float o[N_D];
#pragma unroll
    for (int i = 0; i < N_D; i++) o[i] = 0.0f;
    const bool q_ok = t0 + qi < a.n_tok;
    const float* mr = a.mask && q_ok ? a.mask + (t0 + qi) * a.mask_nb1 : nullptr;

    for (int64_t c0 = 0; c0 < a.n_kv; c0 += BK) {
        // this thread's 8 mask values; a tile that every query of the block masks out (the causal upper triangle, the
        // padded rows past the filled cache) is skipped: the same result, since its keys would get weight 0. The
        // barrier also says the previous tile's K, V, P are no longer read.
        float mv[8];
        bool live = false;
#pragma unroll
        for (int kk = 0; kk < 8; kk++) {
            const int64_t j = c0 + part * 8 + kk;
            mv[kk] = j < a.n_kv && q_ok ? (mr ? mr[j] : 0.0f) : -INFINITY;
            live |= mv[kk] != -INFINITY;
        }
        if (!__syncthreads_or(live)) continue;
        for (int e = tid; e < BK * hd; e += blockDim.x) {
            const int kk = e / hd, d = e % hd;
            const int64_t j = c0 + kk;
            float kv = 0.0f, vv = 0.0f;
            if (j < a.n_kv) {
                kv = __half2float(a.k[hk * a.kv_nb1 + j * a.kv_nb2 + d]);
                vv = __half2float(a.v[hk * a.kv_nb1 + j * a.kv_nb2 + d]);
            }
            k_s[kk * (hd + 1) + d] = kv;
            v_s[kk * hd + d] = vv;
        }
        __syncthreads();
        // S = scale Q K^T + mask for 8 keys of this thread's query
        float s[8];
#pragma unroll
        for (int kk = 0; kk < 8; kk++) s[kk] = 0.0f;
        for (int d = 0; d < hd; d++) {
            const float qv = q_s[qi * (hd + 1) + d];
#pragma unroll
            for (int kk = 0; kk < 8; kk++) s[kk] = fmaf(qv, k_s[(part * 8 + kk) * (hd + 1) + d], s[kk]);
        }
#pragma unroll
        for (int kk = 0; kk < 8; kk++)
            p_s[qi * (BK + 1) + part * 8 + kk] = mv[kk] == -INFINITY ? -INFINITY : s[kk] * a.scale + mv[kk];
        __syncthreads();
        // online softmax, one row per warp step
        for (int r = warp * (BQ / 4); r < (warp + 1) * (BQ / 4); r++) {
            const float v = p_s[r * (BK + 1) + lane];
            const float m_old = m_s[r];
            const float m_new = fmaxf(m_old, warp_max(v));
            const float p = m_new == -INFINITY || v == -INFINITY ? 0.0f : expf(v - m_new);
            const float alpha = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
            const float sum = warp_sum(p);
            p_s[r * (BK + 1) + lane] = p;
            __syncwarp(); // every lane has read m_s[r] before lane 0 replaces it (racecheck's WAR hazard)
            if (lane == 0) {
                l_s[r] = l_s[r] * alpha + sum;
                m_s[r] = m_new;
                alpha_s[r] = alpha;
            }
        }
        __syncthreads();
        // O = O alpha + P V
        const float alpha = alpha_s[qi];
#pragma unroll
        for (int i = 0; i < N_D; i++) o[i] *= alpha;
        for (int kk = 0; kk < BK; kk++) {
            const float p = p_s[qi * (BK + 1) + kk];
            if (p == 0.0f) continue; // a masked key: its V row may be a never-written cache row (0 * NaN = NaN)
#pragma unroll
            for (int i = 0; i < N_D; i++) {
                const int d = part + 4 * i;
                if (d < hd) o[i] = fmaf(p, v_s[kk * hd + d], o[i]);
            }
        }
    }
    if (!q_ok) return;
    float l = l_s[qi];
    const float f = sink_fold(a.sinks, h, m_s[qi], l);
    const float inv = l == 0.0f ? 0.0f : f / l;
    float* orow = a.o + h * a.o_nb1 + (t0 + qi) * a.o_nb2;
#pragma unroll
    for (int i = 0; i < N_D; i++) {
        const int d = part + 4 * i;
        if (d < hd) orow[d] = o[i] * inv;
    }
}

template <int D_MAX> void prefill_launch(const attn_args& a, cudaStream_t stream) {
    const size_t smem = prefill_smem_bytes(a.hd);
    if (smem > 48 * 1024)
        TS_CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_kernel<D_MAX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           int(smem)));
    const dim3 grid(unsigned(ceil_div(a.n_tok, BQ)), unsigned(a.n_head));
    attention_prefill_kernel<D_MAX><<<grid, PREFILL_THREADS, smem, stream>>>(a);
    TS_CUDA_CHECK(cudaGetLastError());
}

// Decode, head sizes 64 / 128 / 256 (D = hd / 32 values a lane), split over the keys (flash-decoding). Grid (KV
// heads x head blocks, splits, tokens): a block takes up to GM query heads that share one KV head (GQA: each K and V
// row is read once for all of them) and `kc` consecutive keys; its warps (decode_split_plan) take 32 keys at a time.
//   scores: lane i is key j0 + i: it reads the key's whole K row (16-byte loads, all issued before the first is used)
//           and dots it with the GM queries (f32, shared memory); masked keys' scores are dropped (-inf), never
//           multiplied, so a never-written row's NaN goes nowhere;
//   softmax: the warp's running max per head, one reduction per 32 keys; each lane keeps its own running sum;
//   P V:     lanes split the dimensions again (D each, one load per V row, issued with the K loads), each key's p
//            broadcast by a shuffle; a masked key's row is loaded but only ever passed over by a select.
// The warps merge through shared memory. With several splits each block writes its (max, sum, accumulator) per head
// to the scratch, and the block of a (head block, token) that finishes last (a counter in ctx.counters, set back to 0
// by that block) merges the splits and writes the output (and the q8_1 of the output projection's input). A round's
// loads do not wait on each other, nor on the mask, so it costs about one memory latency; up to 256 keys (a decode
// step's padded cache, kv_pad) are one split, so a short context pays no merge. The plan depends on the cache length
// in whole 256s (decode_split_plan): a key sits in the same warp, lane and split however far the cache is padded
// within them, so the output does not change with kv_pad.
// Before (session 8): one block of 4 warps per query head, a key at a time per warp (loads, reduction and exp in one
// chain per key), 32 blocks busy however long the context: H100, 8B q4_0 tg128 at a 4096-token depth 42 t/s (now
// 260), 1B 61 (now 933).
constexpr int DS_MAX_SPLITS = 64;
constexpr int DS_ONE_SPLIT = 256; // keys up to which a block takes them all (a decode step's padded cache, kv_pad)

// Warps of a block for GM heads of HD dimensions where one block takes all the keys: their accumulators meet in
// shared memory.
__host__ __device__ constexpr int ds_warps(int gm, int hd) {
    return gm * hd > 1024 ? 4 : 8;
}
// The most warps a block may have (split plans): 16 (512 threads, so 128 registers at most) for the variants that
// took no more than 128 at 8 warps (at 8 warps: 4 query heads of 128 had 128, capped for two blocks an SM; 1 or 2
// heads 101 / 126; 1 or 2 of 64 98 / 102; 1 of 256 68), so that none of them spills more; ds_warps for the others
// (4 or 8 heads of 64: 136 / 138; 8 of 128: 176; 2 or more of 256).
__host__ __device__ constexpr int ds_max_warps(int gm, int hd) {
    return (hd == 128 && gm <= 4) || (hd == 64 && gm <= 2) || (hd == 256 && gm == 1) ? 16 : ds_warps(gm, hd);
}

// Blocks an SM must hold at once (0: the compiler's choice): 4 query heads of 128 (Llama-3 8B's and Qwen3's groups)
// took 132 registers, one block of 8 warps an SM; capped to 128 (two such blocks, or one of 16 warps).
constexpr int ds_min_blocks(int gm, int d) {
    return gm == 4 && d == 4 ? 1 : 0;
}

struct split_plan {
    int64_t kc;  // keys per split, a multiple of 32
    int n_split; // ceil(n_kv / kc)
    int warps;   // a block's; warp w takes rounds of 32 keys w, w + warps, ... of its split
};
// Up to DS_ONE_SPLIT keys: one split, ds_warps warps. Past it, splits of 256 keys (kc doubled past 64 of them), a
// round of 32 keys a warp; but where those blocks (`blocks` = head blocks x tokens of them a split) come to more than
// one wave on n_sm SMs, and one wave fits with a round a warp in ds_max_warps, the keys are dealt out for that wave
// instead. At 4352 keys (an 8B's cache at a 4096-token depth), 8 head blocks, 132 SMs: 16 splits of 288 keys, 9
// warps (128 blocks) rather than 17 of 256 keys, 8 warps (136 blocks: two on each of 4 SMs, which ran the kernel
// about twice as long). Measured (attn_harness.cu, H200, 2026-11-28, 4 query heads a block, us a call at depth 4096 /
// 8192): 17.6 / 24.3 vs 20.2 / 26.6; in the model (same call) 8B q4_0 tg128 at depth 4096 446 / 446 t/s vs 429 /
// 428. Dealing out for one wave where it leaves several rounds a warp or blocks of a few warps was slower (8B at depth
// 1024: 468 vs 480; the 1B's 64-dimension heads, 8 warps at most, at depth 4096: 1401-1437 vs 1503-1516).
// The plan is made from the key count in whole 256s (but for kc's doubling, past 16384 keys): a cache padded within
// them (kv_pad) is split the same way, so its output is the same bits (the keys past the filled rows are masked, and
// skipped).
split_plan decode_split_plan(int64_t n_kv, int gm, int hd, int64_t blocks, int n_sm) {
    if (n_kv <= DS_ONE_SPLIT) return {DS_ONE_SPLIT, 1, ds_warps(gm, hd)};
    int64_t kc = DS_ONE_SPLIT;
    while (ceil_div(n_kv, kc) > DS_MAX_SPLITS) kc *= 2;
    const split_plan even{kc, int(ceil_div(n_kv, kc)), ds_warps(gm, hd)};
    const int64_t splits_256 = ceil_div(n_kv, int64_t(DS_ONE_SPLIT));
    if (blocks * splits_256 <= n_sm) return even;
    const int64_t rounds = splits_256 * (DS_ONE_SPLIT / 32);
    const int64_t want = std::clamp<int64_t>(n_sm / std::max<int64_t>(blocks, 1), 1, DS_MAX_SPLITS);
    const int64_t per_split = ceil_div(rounds, want); // rounds a split (so at most `want` splits)
    if (per_split > ds_max_warps(gm, hd)) return even;
    return {per_split * 32, int(ceil_div(n_kv, per_split * 32)), int(per_split)};
}
// Splits for the tensor-core decode kernel (attention_decode_stage_kernel): up to DS_ONE_SPLIT keys one split of 8
// warps (fewer where shared memory holds fewer slots); past it splits of 256 keys, 8 warps a round each, where their
// blocks fit one wave; else the keys dealt out for one wave, r rounds of 32 a split: a round a warp where r fits in
// wmax warps, else the fewest warps that take the same number of rounds each (17 rounds, 12 warps at most: 9 x 2, not
// 12 x 2 over fewer, longer splits). Made from the key count in whole 256s, as decode_split_plan, so padding within
// them gives the same bits (an extra split past the keys sees none and merges as nothing). Measured (attn_harness.cu,
// H200, 2026-11-28, 8 head blocks, us a call, the register-loading kernel before it): head size 64 at depth 4096, 16
// splits of 9 warps 10.34, 9 of 8 warps x 2 rounds 11.45, 17 of 256 keys (136 blocks: past one wave) 13.04; head size
// 128 at depth 8192, 15 splits of 9 warps x 2 20.48 vs 11 of 12 x 2 21.21.
split_plan decode_stage_plan(int64_t n_kv, int wmax, int64_t blocks, int n_sm) {
    if (n_kv <= DS_ONE_SPLIT) return {DS_ONE_SPLIT, 1, std::min(8, wmax)};
    const int64_t splits_256 = ceil_div(n_kv, int64_t(DS_ONE_SPLIT));
    const int64_t want = std::clamp<int64_t>(n_sm / std::max<int64_t>(blocks, 1), 1, DS_MAX_SPLITS);
    if (splits_256 <= want && wmax >= 8) return {DS_ONE_SPLIT, int(splits_256), 8};
    const int64_t r = ceil_div(splits_256 * (DS_ONE_SPLIT / 32), std::min(want, splits_256)); // rounds a split
    const int64_t per_warp = ceil_div(r, int64_t(wmax)), w = ceil_div(r, per_warp), kc = 32 * w * per_warp;
    return {kc, int(ceil_div(n_kv, kc)), int(w)};
}
// The most splits any plan makes for n_kv keys (the partials' room)
int64_t decode_max_splits(int64_t n_kv) {
    return n_kv <= DS_ONE_SPLIT ? 1 : std::min<int64_t>(DS_MAX_SPLITS, ceil_div(n_kv, int64_t(32)));
}

// D halves as stored (one 4-, 8- or 16-byte load) and as floats
template <int D> struct halves_raw;
template <> struct halves_raw<2> { using type = uint32_t; };
template <> struct halves_raw<4> { using type = uint2; };
template <> struct halves_raw<8> { using type = uint4; };
template <int D> __device__ __forceinline__ void unpack_halves(const typename halves_raw<D>::type& r, float (&x)[D]) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&r);
#pragma unroll
    for (int i = 0; i < D / 2; i++) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
        x[2 * i] = f.x, x[2 * i + 1] = f.y;
    }
}

// Value d of query head h, token t: to o, and as q8_1 when asked (every lane of the warp calls it: lane = d % 32).
__device__ __forceinline__ void decode_store(const attn_args& a, int t, int h, int d, float val, int lane, int hd) {
    a.o[h * a.o_nb1 + t * a.o_nb2 + d] = val;
    if (a.q8) {
        const int64_t e = (int64_t(t) * a.n_head + h) * hd + d;
        q8_store_warp(val, lane, a.q8 + e - lane, a.q8_ds + e / 32);
    }
}

// The end of a split decode block, once its W warps' (max, sum, accumulator) per head are in m_s / l_s / acc_s (and
// a barrier passed): merged over the warps, then written as the output (one split) or as the split's partials, of
// which the last block of the (head block, token) to finish (a counter in ctx.counters, set back to 0 by that block)
// merges all and writes the output (and the q8_1 of the output projection's input). Block (x, split s, token t) as
// the kernels' grids; G heads from h0.
template <int HD, int GM, int WMAX>
__device__ __forceinline__ void decode_merge(const attn_args& a, float (&m_s)[WMAX][GM], float (&l_s)[WMAX][GM],
                                             float (&acc_s)[WMAX][GM][HD], int& last_s, int W, int G, int h0,
                                             int n_split) {
    const int s = blockIdx.y, t = blockIdx.z;
    const int lane = threadIdx.x % WARP_SIZE;
    // the block's result per (head, dimension): G HD values, whole warps (HD % 32 == 0)
    float* part_acc = a.part; // [t][h][split][HD], then (max, sum) as float2 [t][h][split]
    float2* part_ml = reinterpret_cast<float2*>(a.part + size_t(a.n_tok) * a.n_head * n_split * HD);
    for (int i = threadIdx.x; i < G * HD; i += blockDim.x) {
        const int g = i / HD, d = i % HD;
        float mx = -INFINITY, o = 0.0f, l = 0.0f;
        for (int w = 0; w < W; w++) mx = fmaxf(mx, m_s[w][g]);
        if (mx != -INFINITY)
            for (int w = 0; w < W; w++) {
                const float f = m_s[w][g] == -INFINITY ? 0.0f : __expf(m_s[w][g] - mx);
                l += l_s[w][g] * f;
                o += acc_s[w][g][d] * f;
            }
        if (n_split == 1) {
            const float f = sink_fold(a.sinks, h0 + g, mx, l);
            decode_store(a, t, h0 + g, d, l == 0.0f ? 0.0f : o * f / l, lane, HD);
        } else {
            const size_t pi = (size_t(t) * a.n_head + h0 + g) * n_split + s;
            part_acc[pi * HD + d] = o;
            if (d == 0) part_ml[pi] = make_float2(mx, l);
        }
    }
    if (n_split == 1) return;
    __threadfence(); // the partials are visible before the count says so
    __syncthreads();
    if (threadIdx.x == 0) {
        int* cnt = a.counters + size_t(t) * gridDim.x + blockIdx.x;
        last_s = atomicAdd(cnt, 1) == n_split - 1;
        if (last_s) *cnt = 0; // every block of this (head block, token) has counted: ready for the next call
    }
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    // The last block: a thread takes dimensions d and d + HD / 2 of a head (the same lane, so whole warps call
    // decode_store; a warp's 32 pairs share the head) and loads every split's (max, sum) and both partial values at
    // once, 16 splits at a time folded into a running max: the merge costs one L2 round trip up to 16 splits, not one
    // for the (max, sum) and another for the values. Splits whose keys are all masked (max -inf) are left out.
    constexpr int KB = 16;
    for (int i = threadIdx.x; i < G * HD / 2; i += blockDim.x) {
        const int g = i / (HD / 2), d = i % (HD / 2);
        const size_t p0 = (size_t(t) * a.n_head + h0 + g) * n_split;
        const float2* pm = part_ml + p0;
        const float* pa = part_acc + p0 * HD + d;
        float mx = -INFINITY, l = 0.0f, o0 = 0.0f, o1 = 0.0f;
        for (int k0 = 0; k0 < n_split; k0 += KB, pm += KB, pa += KB * HD) {
            float2 ml[KB];
            float x0[KB], x1[KB];
#pragma unroll
            for (int k = 0; k < KB; k++) {
                const bool in = k0 + k < n_split;
                ml[k] = in ? __ldcg(pm + k) : make_float2(-INFINITY, 0.0f);
                x0[k] = in ? __ldcg(pa + k * HD) : 0.0f;
                x1[k] = in ? __ldcg(pa + k * HD + HD / 2) : 0.0f;
            }
            float cm = mx;
#pragma unroll
            for (int k = 0; k < KB; k++) cm = fmaxf(cm, ml[k].x);
            if (cm == -INFINITY) continue;
            const float fo = mx == -INFINITY ? 0.0f : __expf(mx - cm);
            l *= fo, o0 *= fo, o1 *= fo;
#pragma unroll
            for (int k = 0; k < KB; k++)
                if (ml[k].x != -INFINITY) {
                    const float f = __expf(ml[k].x - cm);
                    l += ml[k].y * f;
                    o0 += x0[k] * f;
                    o1 += x1[k] * f;
                }
            mx = cm;
        }
        const float f = sink_fold(a.sinks, h0 + g, mx, l), inv = l == 0.0f ? 0.0f : f / l;
        decode_store(a, t, h0 + g, d, o0 * inv, lane, HD);
        decode_store(a, t, h0 + g, d + HD / 2, o1 * inv, lane, HD);
    }
}

template <int D, int GM>
static __global__ void __launch_bounds__(ds_max_warps(GM, D * WARP_SIZE) * WARP_SIZE, ds_min_blocks(GM, D))
    attention_decode_split_kernel(attn_args a, int64_t kc, int n_split) {
    constexpr int HD = D * WARP_SIZE, WMAX = ds_max_warps(GM, HD);
    const int W = int(blockDim.x) / WARP_SIZE;    // <= WMAX
    constexpr int KB = HD / 8 < 16 ? HD / 8 : 16; // K row pieces (16 bytes) loaded at once: 64 registers at most
    constexpr int VB = D == 8 ? 8 : 32;           // V rows loaded at once
    using vraw = typename halves_raw<D>::type;
    __shared__ __align__(16) float q_s[GM][HD];
    __shared__ float m_s[WMAX][GM], l_s[WMAX][GM];
    __shared__ float acc_s[WMAX][GM][HD];
    __shared__ int last_s;
    const int hblocks = (a.group + GM - 1) / GM;
    const int hk = blockIdx.x / hblocks, g0 = blockIdx.x % hblocks * GM;
    const int G = min(GM, a.group - g0), h0 = hk * a.group + g0;
    const int s = blockIdx.y, t = blockIdx.z;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE;
    const int64_t k0 = int64_t(s) * kc, k1 = min(a.n_kv, k0 + kc);
    const float* mr = a.mask ? a.mask + t * a.mask_nb1 : nullptr;
    const __half* kh = a.k + hk * a.kv_nb1;
    const __half* vh = a.v + hk * a.kv_nb1 + lane * D;
    // Before the wait: the first round's mask values (a graph input nothing computes: mask_early), and L2 asked for
    // the first round's K and V rows (the kernel before writes at most the new tokens' rows, and its writes land in
    // L2: a row asked for early is never stale). Measured (H100, 2026-11-27, one call, same greedy text): 8B q4_0
    // tg128 465.1-470.8 -> 481.4-482.4 t/s (the same run with the attention kernel left out: 508-513).
    const int64_t jf = k0 + warp * WARP_SIZE + lane;
    float mv_first = -INFINITY;
    if (mr && a.mask_early && jf < k1) mv_first = mr[jf];
    if (jf < k1) {
        const char* kp = reinterpret_cast<const char*>(kh + jf * a.kv_nb2);
        const char* vp = reinterpret_cast<const char*>(a.v + hk * a.kv_nb1 + jf * a.kv_nb2);
#pragma unroll
        for (int o = 0; o < HD * 2; o += 128) prefetch_l2(kp + o), prefetch_l2(vp + o);
    }
    pdl_wait();
    pdl_trigger();
    for (int i = threadIdx.x; i < GM * HD; i += blockDim.x) {
        const int g = i / HD, d = i % HD;
        q_s[g][d] = g < G ? a.q[(h0 + g) * a.q_nb1 + t * a.q_nb2 + d] : 0.0f;
    }
    __syncthreads();

    float M[GM], L[GM], acc[GM][D];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        M[g] = -INFINITY, L[g] = 0.0f;
#pragma unroll
        for (int d = 0; d < D; d++) acc[g][d] = 0.0f;
    }
    for (int64_t j0 = k0 + warp * WARP_SIZE; j0 < k1; j0 += W * WARP_SIZE) {
        const int64_t j = j0 + lane;
        const bool in = j < k1;
        float mv = -INFINITY;
        if (in) mv = !mr ? 0.0f : a.mask_early && j0 == k0 + warp * WARP_SIZE ? mv_first : mr[j];
        // key j's K row (any row in range for the lanes past the end: their scores are dropped) and the first V rows
        const uint4* kr = reinterpret_cast<const uint4*>(kh + (in ? j : j0) * a.kv_nb2);
        uint4 kq[KB];
#pragma unroll
        for (int c = 0; c < KB; c++) kq[c] = kr[c];
        vraw vq[VB];
#pragma unroll
        for (int i = 0; i < VB; i++)
            vq[i] = *reinterpret_cast<const vraw*>(vh + (j0 + i < k1 ? j0 + i : j0) * a.kv_nb2);
        float sc[GM];
#pragma unroll
        for (int g = 0; g < GM; g++) sc[g] = 0.0f;
#pragma unroll
        for (int c0 = 0; c0 < HD / 8; c0 += KB) {
            if (c0 > 0) // head size 256: the second half of the row
#pragma unroll
                for (int c = 0; c < KB; c++) kq[c] = kr[c0 + c];
#pragma unroll
            for (int c = 0; c < KB; c++) {
                float kf[8];
                unpack_halves<8>(kq[c], kf);
#pragma unroll
                for (int g = 0; g < GM; g++) {
                    const float4 qa = *reinterpret_cast<const float4*>(&q_s[g][8 * (c0 + c)]);
                    const float4 qb = *reinterpret_cast<const float4*>(&q_s[g][8 * (c0 + c) + 4]);
                    float x = sc[g];
                    x = fmaf(qa.x, kf[0], x), x = fmaf(qa.y, kf[1], x), x = fmaf(qa.z, kf[2], x);
                    x = fmaf(qa.w, kf[3], x), x = fmaf(qb.x, kf[4], x), x = fmaf(qb.y, kf[5], x);
                    x = fmaf(qb.z, kf[6], x), x = fmaf(qb.w, kf[7], x);
                    sc[g] = x;
                }
            }
        }
        const unsigned live = __ballot_sync(0xffffffffu, mv != -INFINITY);
        if (!live) continue; // the same for every lane
        float p[GM];
#pragma unroll
        for (int g = 0; g < GM; g++) {
            const float sg = mv != -INFINITY ? sc[g] * a.scale + mv : -INFINITY;
            const float m_new = fmaxf(M[g], warp_max(sg)); // finite: some key of the round is live
            const float corr = M[g] == -INFINITY ? 0.0f : __expf(M[g] - m_new);
            p[g] = sg == -INFINITY ? 0.0f : __expf(sg - m_new);
            L[g] = L[g] * corr + p[g];
#pragma unroll
            for (int d = 0; d < D; d++) acc[g][d] *= corr;
            M[g] = m_new;
        }
        // P V, VB keys at a time (all 32 for head sizes 64 / 128)
#pragma unroll
        for (int i0 = 0; i0 < WARP_SIZE; i0 += VB) {
            if (i0 > 0)
#pragma unroll
                for (int i = 0; i < VB; i++)
                    vq[i] = *reinterpret_cast<const vraw*>(vh + (j0 + i0 + i < k1 ? j0 + i0 + i : j0) * a.kv_nb2);
#pragma unroll
            for (int i = 0; i < VB; i++) {
                const bool li = live >> (i0 + i) & 1u;
                float v[D];
                unpack_halves<D>(vq[i], v);
#pragma unroll
                for (int g = 0; g < GM; g++) {
                    const float pg = __shfl_sync(0xffffffffu, p[g], i0 + i);
#pragma unroll
                    for (int d = 0; d < D; d++) acc[g][d] = li ? fmaf(pg, v[d], acc[g][d]) : acc[g][d];
                }
            }
        }
    }
#pragma unroll
    for (int g = 0; g < GM; g++) {
        L[g] = warp_sum(L[g]);
        if (lane == 0) m_s[warp][g] = M[g], l_s[warp][g] = L[g];
#pragma unroll
        for (int d = 0; d < D; d++) acc_s[warp][g][lane * D + d] = acc[g][d];
    }
    __syncthreads();
    decode_merge<HD, GM, WMAX>(a, m_s, l_s, acc_s, last_s, W, G, h0, n_split);
}

// Decode attention on tensor cores, head sizes 64 and 128: the split kernel's blocks (GM query heads of one KV head,
// `kc` keys a split, token blockIdx.z), splits and merge (decode_merge), but a warp's round of 32 keys is two
// products on mma.sync m16n8k16 (f16 in, f32 accumulate) out of shared memory: S (16 x 32) = Q (16 x HD) K^T with the
// GM query heads as rows 0 .. GM - 1 (the rest zero; n-tile nt = keys 8 nt .. + 7, k-step ks = dims 16 ks .. + 15),
// then O^T (HD x 8) += V^T (HD x 32) P^T (32 x 8) with the heads as columns (m-tile mt = dims 16 mt .. + 15); O = P V
// with the heads as rows would waste half of every PV MMA.
//   A round's K and V rows (16 KiB at head size 128) go to the warp's own slot of shared memory by cp.async, K and V
//   as two groups: no register budget caps the bytes in flight, the Q and mask loads overlap them, the scores wait
//   for K only, and the next round's K is asked for as soon as the scores are out, its V after the P V products.
//   Fragments come out by ldmatrix (V transposed); rows are 16-byte chunks swizzled by the row's low three bits
//   (chunk ^ (row & 7)), so the eight rows an ldmatrix phase reads fall in distinct banks.
//   S's accumulators (row g = head g, keys 2c, 2c + 1 of n-tiles 2 ks and 2 ks + 1) rounded to f16 are exactly the B
//   fragments of P^T for k-step ks; the output columns 2c, 2c + 1 are heads, so the rescale takes those heads' factors
//   from their rows' lanes. Masked keys' scores are dropped (-inf) and their V values zeroed in the A fragments, which
//   hold the same keys as the thread's scores (a never-written row's NaN times a zero weight would reach the output);
//   keys past the split are zero rows, never read. After the rounds the slots hold the warps' accumulators.
// Q and P are rounded to f16 (the CPU rounds Q to f16 for decode, as ggml; P: relative error <= 2^-11 a weight, as
// the tensor-core prefill). Measured (H200, 2026-11-28, 32 query / 8 KV heads): attn_harness.cu, us a call, against
// the kernel it replaced (K and V loaded into registers: 192 registers at head size 128, so past 8 warps V had to
// wait for the scores), head size 128 at depths 100 / 1024 / 4096 / 8192: 7.03 / 10.23 / 15.11 / 19.99 vs 6.96 /
// 10.10 / 14.48 / 20.47; 64: 5.19 / 8.21 / 10.90 / 13.34 vs 5.32 / 8.21 / 10.18 / 13.86 (f32 kernel: 9.51 / 12.30 /
// 16.35 / 25.12 and 6.32 / 9.12 / 13.16 / 16.61). Model, q4_0 tg128 t/s, same call: 8B at depth 0 558.1 vs 558.0,
// 1024 502.2 vs 505.7, 4096 476.0 / 472.5 vs 470.6 / 478.5, 8192 438.7 vs 440.5; 1B 2050.8 vs 2016.4, 1783.9 vs
// 1780.7, 1632.5 / 1670.1 vs 1662.3 / 1668.1, 1483.4 vs 1491.6: even at depth, ahead at short contexts, and
// 139 registers rather than 192 (168 and spills for the 12-warp variant), one kernel for every plan.
constexpr int STAGE_MAX_WARPS = 16;
template <int HD> __host__ __device__ constexpr int stage_round_bytes() {
    return 2 * WARP_SIZE * HD * 2; // K and V rows of 32 keys, f16
}
// Dynamic shared memory of the tensor-core decode kernel at W warps: the rounds' slots, or the accumulators
// decode_merge takes
template <int HD, int GM> constexpr size_t stage_smem(int w) {
    return std::max(size_t(w) * stage_round_bytes<HD>(), size_t(w) * GM * HD * sizeof(float));
}
// The most warps a block takes: 12 at head size 128 (three a sub-partition: up to 168 registers; four would cap them
// at 128, and it spills there), 16 at 64
__host__ __device__ constexpr int stage_warps_cap(int hd) {
    return hd == 128 ? 12 : STAGE_MAX_WARPS;
}
template <int HD, int GM>
static __global__ void __launch_bounds__(stage_warps_cap(HD) * WARP_SIZE, 1)
    attention_decode_stage_kernel(attn_args a, int64_t kc, int n_split) {
    static_assert((HD == 64 || HD == 128) && GM <= 8, "head sizes 64 / 128, up to 8 query heads a block");
    constexpr int NK = HD / 16, CH = HD / 8, RB = stage_round_bytes<HD>();
    extern __shared__ __align__(128) uint8_t stage_s[];
    __shared__ float m_s[STAGE_MAX_WARPS][GM], l_s[STAGE_MAX_WARPS][GM];
    __shared__ int last_s;
    const int W = int(blockDim.x) / WARP_SIZE; // <= STAGE_MAX_WARPS
    const int hblocks = (a.group + GM - 1) / GM;
    const int hk = blockIdx.x / hblocks, g0 = blockIdx.x % hblocks * GM;
    const int G = min(GM, a.group - g0), h0 = hk * a.group + g0;
    const int s = blockIdx.y, t = blockIdx.z;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, gq = lane / 4, c = lane % 4;
    const int64_t k0 = int64_t(s) * kc, k1 = min(a.n_kv, k0 + kc);
    const float* mr = a.mask ? a.mask + t * a.mask_nb1 : nullptr;
    const __half* kh = a.k + hk * a.kv_nb1;
    const __half* vh = a.v + hk * a.kv_nb1;
    uint8_t* const ks_ = stage_s + warp * RB; // K rows [32][HD], then V rows
    uint8_t* const vs_ = ks_ + RB / 2;
    // The ldmatrix addresses, as a few registers plus immediates: a lane's rows all have row % 8 = r7 = lane % 8, so
    // the swizzled chunk of K (4u + q, q = lane / 8 % 4) is 2 (u ^ (r7 / 4)) + (q ^ r7 % 4) pairs of chunks in, and
    // V's (2 mt + q2, q2 = lane / 8 % 2) 2 (mt ^ (r7 / 2)) + (q2 ^ r7 % 2): bases for u's parity and mt % 4.
    const int r7 = lane & 7;
    const uint32_t kbase = smem_addr(ks_) + r7 * (HD * 2) + (((lane >> 3) ^ (r7 & 3)) * 16);
    const uint32_t kb_par[2] = {kbase + 64 * (r7 >> 2), kbase + 64 * ((r7 >> 2) ^ 1)};
    const uint32_t vbase = smem_addr(vs_) + (8 * (lane >> 4) + r7) * (HD * 2) + ((((lane >> 3) & 1) ^ (r7 & 1)) * 16);
    uint32_t vb_m[4];
#pragma unroll
    for (int m = 0; m < 4; m++) vb_m[m] = vbase + 32 * (m ^ (r7 >> 1));
    // byte offset of chunk ch (8 halves) of row r in a slot's K or V rows
    const auto at = [](int r, int ch) { return r * (HD * 2) + ((ch ^ (r & 7)) * 16); };
    // K or V rows of the round of keys j0 .. j0 + 31 into the warp's slot: one commit group
    const auto load_rows = [&](int64_t j0, const __half* src, uint8_t* dst) {
#pragma unroll
        for (int it = 0; it < CH; it++) {
            const int i = lane + WARP_SIZE * it, r = i / CH, ch = i % CH;
            const int64_t j = j0 + r;
            const bool in = j < k1;
            cp_async16(dst + at(r, ch), src + (in ? j : k0) * a.kv_nb2 + 8 * ch, in);
        }
        cp_async_commit();
    };
    const auto mask_of = [&](int64_t j0, float (&mv)[4][2]) {
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int64_t j = j0 + 8 * nt + 2 * c + e;
                mv[nt][e] = j < k1 ? (mr ? mr[j] : 0.0f) : -INFINITY;
            }
    };
    // before the wait: L2 asked for the K and V rows of the warp's first two rounds (lane i: key j0 + i)
    const int64_t jf0 = k0 + warp * WARP_SIZE;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t j = jf0 + int64_t(r) * W * WARP_SIZE + lane;
        if (j < k1) {
            const char* kp = reinterpret_cast<const char*>(kh + j * a.kv_nb2);
            const char* vp = reinterpret_cast<const char*>(vh + j * a.kv_nb2);
#pragma unroll
            for (int o = 0; o < HD * 2; o += 128) prefetch_l2(kp + o), prefetch_l2(vp + o);
        }
    }
    if (mr && a.mask_early && lane == 0 && jf0 < k1) prefetch_l2(mr + jf0);
    pdl_wait();
    pdl_trigger();
    if (jf0 < k1) load_rows(jf0, kh, ks_), load_rows(jf0, vh, vs_);
    // Q's A fragments: row gq (head g0 + gq; zero past G), dims 16 ks + 2c, + 1 and + 8, + 9
    uint32_t qa[NK][2];
    {
        const float* qr = a.q + (h0 + (gq < G ? gq : 0)) * a.q_nb1 + t * a.q_nb2;
#pragma unroll
        for (int ks = 0; ks < NK; ks++) {
            float2 x0 = *reinterpret_cast<const float2*>(qr + 16 * ks + 2 * c);
            float2 x1 = *reinterpret_cast<const float2*>(qr + 16 * ks + 8 + 2 * c);
            if (gq >= G) x0 = x1 = make_float2(0.0f, 0.0f);
            qa[ks][0] = pack_half2(x0.x, x0.y), qa[ks][1] = pack_half2(x1.x, x1.y);
        }
    }
    float M = -INFINITY, L = 0.0f; // row gq's running max; this thread's part of its sum
    // O^T: m-tile mt's rows g and g + 8 are dims 16 mt + g and + 8, its columns 2c and 2c + 1 heads
    float o[NK][4];
#pragma unroll
    for (int mt = 0; mt < NK; mt++) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.0f;
    // The groups in flight at a round's start: its K, then its V. The next round's K is asked for once the scores
    // are out (behind this round's V), its V once the P V products are.
    for (int64_t j0 = jf0; j0 < k1; j0 += W * WARP_SIZE) {
        const int64_t jn = j0 + W * WARP_SIZE;
        float mv[4][2];
        mask_of(j0, mv);
        cp_async_wait_one(); // K
        __syncwarp();
        bool any = false;
#pragma unroll
        for (int nt = 0; nt < 4; nt++) any |= mv[nt][0] != -INFINITY || mv[nt][1] != -INFINITY;
        if (__any_sync(0xffffffffu, any)) { // the same for every lane
            float sc[4][4];
#pragma unroll
            for (int nt = 0; nt < 4; nt++) {
                sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
                for (int u = 0; u < NK / 2; u++) {
                    uint32_t kb[4]; // b0, b1 of k-steps 2u and 2u + 1
                    ldmatrix_x4(kb, kb_par[u & 1] + 128 * (u >> 1) + 8 * nt * (HD * 2));
                    const uint32_t a0[4] = {qa[2 * u][0], 0u, qa[2 * u][1], 0u};
                    const uint32_t a1[4] = {qa[2 * u + 1][0], 0u, qa[2 * u + 1][1], 0u};
                    mma_16816(sc[nt], a0, kb[0], kb[1]);
                    mma_16816(sc[nt], a1, kb[2], kb[3]);
                }
            }
            float p[4][2], rmax = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    p[nt][e] = mv[nt][e] != -INFINITY ? sc[nt][e] * a.scale + mv[nt][e] : -INFINITY;
                    rmax = fmaxf(rmax, p[nt][e]);
                }
            rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, 1));
            rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, 2));
            __syncwarp(); // every lane is done with K
            if (jn < k1) load_rows(jn, kh, ks_);
            const float m_new = fmaxf(M, rmax); // finite: some key of the round is live (one mask for every head)
            const float corr = M == -INFINITY ? 0.0f : __expf(M - m_new);
            float psum = 0.0f;
#pragma unroll
            for (int nt = 0; nt < 4; nt++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    p[nt][e] = p[nt][e] == -INFINITY || gq >= G ? 0.0f : __expf(p[nt][e] - m_new);
                    psum += p[nt][e];
                }
            L = L * corr + psum;
            M = m_new;
            // heads 2c and 2c + 1's factors, from their rows' lanes
            const float corr0 = __shfl_sync(0xffffffffu, corr, 8 * c);
            const float corr1 = __shfl_sync(0xffffffffu, corr, 8 * c + 4);
            if (jn < k1) cp_async_wait_one(); // V (the next K may stay in flight)
            else cp_async_wait_all();
            __syncwarp();
#pragma unroll
            for (int mt = 0; mt < NK; mt++) o[mt][0] *= corr0, o[mt][1] *= corr1, o[mt][2] *= corr0, o[mt][3] *= corr1;
#pragma unroll
            for (int ks = 0; ks < 2; ks++) {
                // B = P^T: column g is head g's f16 weights of keys 16 ks + {2c, 2c + 1} and {8 + 2c, 9 + 2c}
                const uint32_t pb0 = pack_half2(p[2 * ks][0], p[2 * ks][1]);
                const uint32_t pb1 = pack_half2(p[2 * ks + 1][0], p[2 * ks + 1][1]);
                // the A fragments hold keys 16 ks + 2c + e (a0, a1) and + 8 (a2, a3): a masked key's halves zeroed
                const uint32_t lo = (mv[2 * ks][0] != -INFINITY ? 0x0000ffffu : 0u) |
                                    (mv[2 * ks][1] != -INFINITY ? 0xffff0000u : 0u);
                const uint32_t hi = (mv[2 * ks + 1][0] != -INFINITY ? 0x0000ffffu : 0u) |
                                    (mv[2 * ks + 1][1] != -INFINITY ? 0xffff0000u : 0u);
#pragma unroll
                for (int mt = 0; mt < NK; mt++) {
                    uint32_t va[4]; // V^T of dims 16 mt .. + 15, keys 16 ks .. + 15
                    ldmatrix_x4_trans(va, vb_m[mt & 3] + 128 * (mt >> 2) + 16 * ks * (HD * 2));
                    va[0] &= lo, va[1] &= lo, va[2] &= hi, va[3] &= hi;
                    mma_16816(o[mt], va, pb0, pb1);
                }
            }
        } else { // no live key: nothing read
            cp_async_wait_all();
            __syncwarp();
            if (jn < k1) load_rows(jn, kh, ks_);
        }
        __syncwarp(); // every lane is done with V
        if (jn < k1) load_rows(jn, vh, vs_);
    }
    L += __shfl_xor_sync(0xffffffffu, L, 1);
    L += __shfl_xor_sync(0xffffffffu, L, 2);
    if (gq < G && c == 0) m_s[warp][gq] = M, l_s[warp][gq] = L;
    __syncthreads(); // every warp is done with its slot: the accumulators take their place
    auto& acc_s = *reinterpret_cast<float(*)[STAGE_MAX_WARPS][GM][HD]>(stage_s);
#pragma unroll
    for (int mt = 0; mt < NK; mt++) {
        const int d = 16 * mt + gq;
        if (2 * c < G) acc_s[warp][2 * c][d] = o[mt][0], acc_s[warp][2 * c][d + 8] = o[mt][2];
        if (2 * c + 1 < G) acc_s[warp][2 * c + 1][d] = o[mt][1], acc_s[warp][2 * c + 1][d + 8] = o[mt][3];
    }
    __syncthreads();
    decode_merge<HD, GM, STAGE_MAX_WARPS>(a, m_s, l_s, acc_s, last_s, W, G, h0, n_split);
}

// Exact mode, >= 64 queries: the CPU's tiled attention (backends/cpu/ops/attention.cpp, attention_tiled) step for step.
// One block of 64 threads per (head, 64 consecutive queries), the CPU's job; thread r is query t0 + r. Per tile of 64
// keys (skipped when every (query, key) of the job is masked): K and V rows to f32 in shared memory, s_j = (q . k_j,
// an FMA chain over d from 0) * scale + mask, the running max, the rescale by glibc's expf(M - m_new) when it grows,
// p_j = expf_ggml(s_j - m) summed 16 at a time as _mm512_reduce_add_ps folds them and added in double, then
// o_d = fma(v_jd, p_j, o_d) over the keys in order; o / S at the end. Slow (one query per thread) and only for the
// exact mode; fewer than 64 queries: attention_exact_small_kernel. Masked keys are skipped
// rather than multiplied by 0, which changes nothing for finite values and keeps NaN rows of a padded cache out.
template <int HD> static __global__ void __launch_bounds__(64) attention_exact_kernel(attn_args a) {
    extern __shared__ float kv_s[]; // K tile [64][HD], then V tile [64][HD]
    float* ks = kv_s;
    float* vs = kv_s + 64 * HD;
    const int h = blockIdx.x, t0 = blockIdx.y * 64, r = threadIdx.x, t = t0 + r, hk = h / a.group;
    const int rows = a.n_tok - t0 < 64 ? a.n_tok - t0 : 64;
    const bool active = r < rows;
    float q[HD], acc[HD], sc[64];
    const float* qr = a.q + h * a.q_nb1 + int64_t(active ? t : t0) * a.q_nb2;
#pragma unroll
    for (int d = 0; d < HD; d++) {
        q[d] = qr[d];
        acc[d] = 0.0f;
    }
    float M = -INFINITY, S = 0.0f;
    const float* mr = a.mask ? a.mask + int64_t(active ? t : t0) * a.mask_nb1 : nullptr;
    for (int64_t ic = 0; ic < a.n_kv; ic += 64) {
        const int kv_tile = a.n_kv - ic < 64 ? int(a.n_kv - ic) : 64;
        if (mr) {
            bool all_masked = true;
            for (int j = 0; j < kv_tile && all_masked && active; j++) all_masked = mr[ic + j] == -INFINITY;
            if (__syncthreads_and(all_masked || !active)) continue;
        }
        __syncthreads(); // the previous tile is no longer read
        for (int i = r; i < kv_tile * HD; i += 64) {
            const int j = i / HD, d = i % HD;
            const int64_t off = (ic + j) * a.kv_nb2 + hk * a.kv_nb1 + d;
            ks[i] = __half2float(a.k[off]);
            vs[i] = __half2float(a.v[off]);
        }
        __syncthreads();
        if (!active) continue;
        float tile_max = -INFINITY;
        for (int j = 0; j < 64; j++) {
            float v = -INFINITY;
            // a masked key's score is -inf whatever its dot (the CPU's dot * scale - inf); not computing it keeps
            // rows never written (a padded KV length) out, even when they hold NaN
            if (j < kv_tile && !(mr && mr[ic + j] == -INFINITY)) {
                float dot = 0.0f;
#pragma unroll
                for (int d = 0; d < HD; d++) dot = fmaf(q[d], ks[j * HD + d], dot);
                v = __fadd_rn(__fmul_rn(dot, a.scale), mr ? mr[ic + j] : 0.0f);
            }
            sc[j] = v;
            tile_max = fmaxf(tile_max, v);
        }
        if (tile_max == -INFINITY) continue;
        const float m_new = fmaxf(M, tile_max);
        if (m_new > M) {
            const float ms = expf_glibc(__fsub_rn(M, m_new));
#pragma unroll
            for (int d = 0; d < HD; d++) acc[d] = __fmul_rn(acc[d], ms);
            S = __fmul_rn(S, ms);
        }
        M = m_new;
        double sum = 0.0;
        for (int g = 0; g < 64; g += 16) {
            float e[16];
#pragma unroll
            for (int l = 0; l < 16; l++) {
                e[l] = expf_ggml(__fsub_rn(sc[g + l], m_new));
                sc[g + l] = e[l];
            }
            float h8[8], h4[4];
#pragma unroll
            for (int i = 0; i < 8; i++) h8[i] = __fadd_rn(e[8 + i], e[i]);
#pragma unroll
            for (int i = 0; i < 4; i++) h4[i] = __fadd_rn(h8[4 + i], h8[i]);
            sum = __dadd_rn(sum, double(__fadd_rn(__fadd_rn(h4[0], h4[2]), __fadd_rn(h4[1], h4[3]))));
        }
        S = __double2float_rn(__dadd_rn(double(S), sum));
#pragma unroll
        for (int d = 0; d < HD; d++) {
            float o = acc[d];
            for (int j = 0; j < kv_tile; j++) // p = 0 adds nothing to a finite o (fma(v, 0, o) = o): skipped, so a
                if (sc[j] != 0.0f) o = fmaf(vs[j * HD + d], sc[j], o); // masked row's NaN stays out
            acc[d] = o;
        }
    }
    if (!active) return;
    sink_exact<HD>(a.sinks, h, M, S, acc);
    const float inv = S == 0.0f ? 0.0f : __fdiv_rn(1.0f, S);
    float* orow = a.o + h * a.o_nb1 + int64_t(t) * a.o_nb2;
#pragma unroll
    for (int d = 0; d < HD; d++) orow[d] = __fmul_rn(acc[d], inv);
}

// Exact mode, fewer than 64 queries: the CPU's path there (attention.cpp, after attention_tiled), which is ggml's
// one_chunk flash attention: Q rounded to f16; per key in order (masked ones skipped) s = fma(dot, scale, mask) (GCC
// contracts the CPU's dot * scale + mask) with the dot in ggml's AVX-512 order (4 x 16 lanes of FMAs over 64-element
// steps, folded, the tail added in double); when s is a new max, acc *= glibc expf(M - s) rounded to f16 per element,
// else vs = glibc expf(s - M); acc = f16(fma(v, vs, acc)); S = fma(S, ms, vs); the sink step; o = acc / S. One thread
// per (query, head): sequential, as the CPU's job is.
template <int HD> static __global__ void __launch_bounds__(32) attention_exact_small_kernel(attn_args a) {
    const int job = blockIdx.x * 32 + threadIdx.x;
    if (job >= a.n_tok * a.n_head) return;
    const int t = job / a.n_head, h = job % a.n_head, hk = h / a.group;
    const float* qv = a.q + h * a.q_nb1 + int64_t(t) * a.q_nb2;
    const float* mr = a.mask ? a.mask + int64_t(t) * a.mask_nb1 : nullptr;
    float q[HD], acc[HD];
#pragma unroll
    for (int d = 0; d < HD; d++) {
        q[d] = __half2float(__float2half_rn(qv[d]));
        acc[d] = 0.0f;
    }
    float M = -INFINITY, S = 0.0f;
    constexpr int STEP = 64, NP = HD - HD % STEP;
    for (int64_t j = 0; j < a.n_kv; j++) {
        const float mv = mr ? mr[j] : 0.0f;
        if (mv == -INFINITY) continue;
        const __half* kr = a.k + j * a.kv_nb2 + hk * a.kv_nb1;
        float sum[4][16];
#pragma unroll
        for (int r = 0; r < 4; r++)
#pragma unroll
            for (int l = 0; l < 16; l++) sum[r][l] = 0.0f;
#pragma unroll
        for (int i = 0; i < NP; i += STEP)
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int l = 0; l < 16; l++)
                    sum[r][l] = fmaf(q[i + r * 16 + l], __half2float(kr[i + r * 16 + l]), sum[r][l]);
        float v16[16], h8[8], h4[4];
#pragma unroll
        for (int l = 0; l < 16; l++) v16[l] = __fadd_rn(__fadd_rn(sum[0][l], sum[2][l]), __fadd_rn(sum[1][l], sum[3][l]));
#pragma unroll
        for (int l = 0; l < 8; l++) h8[l] = __fadd_rn(v16[l + 8], v16[l]);
#pragma unroll
        for (int l = 0; l < 4; l++) h4[l] = __fadd_rn(h8[l + 4], h8[l]);
        double total = double(__fadd_rn(__fadd_rn(h4[0], h4[2]), __fadd_rn(h4[1], h4[3])));
#pragma unroll
        for (int i = NP; i < HD; i++) total = __dadd_rn(total, double(__fmul_rn(q[i], __half2float(kr[i]))));
        // dot * scale + mask in one rounding: GCC contracts the CPU's statement (attend_f16) into an fma
        const float sc = fmaf(__double2float_rn(total), a.scale, mv);
        float ms = 1.0f, vs = 1.0f;
        if (sc > M) {
            ms = expf_glibc(__fsub_rn(M, sc));
            M = sc;
#pragma unroll
            for (int d = 0; d < HD; d++) acc[d] = __half2float(__float2half_rn(__fmul_rn(acc[d], ms)));
        } else {
            vs = expf_glibc(__fsub_rn(sc, M));
        }
        const __half* vr = a.v + j * a.kv_nb2 + hk * a.kv_nb1;
#pragma unroll
        for (int d = 0; d < HD; d++) acc[d] = __half2float(__float2half_rn(fmaf(__half2float(vr[d]), vs, acc[d])));
        S = fmaf(S, ms, vs);
    }
    sink_exact<HD>(a.sinks, h, M, S, acc);
    const float inv = S == 0.0f ? 0.0f : __fdiv_rn(1.0f, S);
    float* orow = a.o + h * a.o_nb1 + int64_t(t) * a.o_nb2;
#pragma unroll
    for (int d = 0; d < HD; d++) orow[d] = __fmul_rn(acc[d], inv);
}

template <int HD> void attention_exact_launch(const attn_args& a, cudaStream_t stream) {
    const size_t smem = size_t(2 * 64 * HD) * sizeof(float);
    allow_dynamic_smem(reinterpret_cast<const void*>(attention_exact_kernel<HD>), int(smem));
    const dim3 grid(unsigned(a.n_head), unsigned(ceil_div(a.n_tok, 64)));
    attention_exact_kernel<HD><<<grid, 64, smem, stream>>>(a);
    TS_CUDA_CHECK(cudaGetLastError());
}

// ---- prefill on tensor cores (head sizes 64, 128) ----
// One block of 4 warps per (64 queries, head); warp w owns queries 16w .. 16w+15 for the whole key range. The mask is
// read once per call, before the heads (fa_tiles_kernel: every head reads the same mask), into one summary per
// (query tile, key tile): which keys any query of the tile sees, and whether the tile is dead (nobody sees anything:
// skipped, neither loaded nor multiplied), plain (every value 0 and every key inside the cache: no mask read, no
// bounds check) or mixed (the diagonal of a causal mask: the mask added value by value). K / V rows of keys nobody sees
// are zero-filled, never read (a padded, never-written cache row may hold NaN, and 0 * NaN is NaN). K and V (f16,
// cp.async, two stages: the next tile loads while this one is multiplied) into shared memory; S = Q K^T by mma.sync
// m16n8k16 (Q rounded to f16 once, kept in registers as A fragments), scale and mask in f32, online softmax on the
// accumulator fragments (a row is spread over the 4 threads of a quad), P rounded to f16 and reused in registers as
// the A operand of O += P V (V's B fragments by ldmatrix.trans); O, m and l stay in registers. The query tiles run
// last first (under a causal mask the last one walks the most key tiles).
constexpr int FA_BQ = 64, FA_BK = 64, FA_THREADS = 128;
enum : int { fa_dead = 0, fa_plain = 1, fa_mixed = 2 };

// Head size 256: Q's A fragments (64 registers a thread) next to the 128 of the output would spill, so Q stays in
// shared memory and each tile reads its fragments from there (one ldmatrix per 16 dimensions, a quarter of K's reads).
template <int HD> __host__ __device__ constexpr bool fa_q_in_smem() { return HD > 128; }
template <int HD> constexpr size_t fa_smem_bytes() { // two stages of K and V [, Q]
    return (2 * 2 + (fa_q_in_smem<HD>() ? 1 : 0)) * size_t(FA_BK) * (HD + 8) * sizeof(__half);
}

// The tile summary of the mask (see above): one block per (key tile, query tile); thread t reads key t % 64 of rows
// 16 (t / 64) .. +16. Rows past n_tok do not count (their queries are zero and never written).
static __global__ void __launch_bounds__(256) fa_tiles_kernel(const float* mask, int64_t mask_nb1, int n_tok,
                                                              int64_t n_kv, int64_t n_kt, int4* tiles) {
    __shared__ unsigned seen_w[4][2];
    const int tid = threadIdx.x, kk = tid % FA_BK, grp = tid / FA_BK;
    const int64_t kt = blockIdx.x, qt = blockIdx.y;
    const int64_t j = kt * FA_BK + kk;
    bool seen = false, plain = j < n_kv;
    if (j < n_kv) {
        const int r0 = int(qt) * FA_BQ + grp * (FA_BQ / 4);
        float v[FA_BQ / 4];
#pragma unroll
        for (int u = 0; u < FA_BQ / 4; u++) v[u] = r0 + u < n_tok ? mask[int64_t(r0 + u) * mask_nb1 + j] : 0.0f;
#pragma unroll
        for (int u = 0; u < FA_BQ / 4; u++) {
            seen |= r0 + u < n_tok && v[u] != -INFINITY;
            plain &= v[u] == 0.0f;
        }
    }
    const unsigned bits = __ballot_sync(0xffffffffu, seen);
    if (tid % WARP_SIZE == 0) seen_w[grp][(tid / WARP_SIZE) % 2] = bits;
    const bool all_plain = __syncthreads_and(plain);
    if (tid == 0) {
        const unsigned lo = seen_w[0][0] | seen_w[1][0] | seen_w[2][0] | seen_w[3][0];
        const unsigned hi = seen_w[0][1] | seen_w[1][1] | seen_w[2][1] | seen_w[3][1];
        tiles[qt * n_kt + kt] = make_int4(int(lo), int(hi), (lo | hi) == 0 ? fa_dead : all_plain ? fa_plain : fa_mixed, 0);
    }
}

template <int HD> static __global__ void __launch_bounds__(FA_THREADS) attention_fa_kernel(attn_args a) {
    constexpr int LD = HD + 8; // halves per shared row: 8 rows of an ldmatrix land in distinct banks
    extern __shared__ __align__(16) unsigned char fa_smem[];
    constexpr bool QS = fa_q_in_smem<HD>();
    __half* k_s = reinterpret_cast<__half*>(fa_smem); // [2 stages] (FA_BK, LD); Q before the first tile
    __half* v_s = k_s + 2 * FA_BK * LD;               // [2 stages] (FA_BK, LD)
    __half* q_s = QS ? v_s + 2 * FA_BK * LD : k_s;    // (FA_BQ, LD): Q (its own place where it stays there)

    const int h = blockIdx.y, hk = h / a.group, tid = threadIdx.x;
    const int warp = tid / WARP_SIZE, lane = tid % WARP_SIZE, g = lane / 4, t = lane % 4;
    const int qt = int(gridDim.x - 1 - blockIdx.x);
    const int t0 = qt * FA_BQ;

    // Q -> f16 in shared memory -> A fragments in registers
    for (int e = tid; e < FA_BQ * HD / 2; e += FA_THREADS) {
        const int r = e / (HD / 2), d = 2 * (e % (HD / 2));
        float2 x = make_float2(0.0f, 0.0f);
        if (t0 + r < a.n_tok) {
            const float* qp = a.q + h * a.q_nb1 + int64_t(t0 + r) * a.q_nb2 + d;
            x = make_float2(qp[0], qp[1]);
        }
        *reinterpret_cast<__half2*>(&q_s[r * LD + d]) = __floats2half2_rn(x.x, x.y);
    }
    __syncthreads();
    // this warp's Q rows as A fragments, 16 dimensions each: kept in registers, or read again per tile (QS)
    auto q_frag = [&](uint32_t(&f)[4], int kk) {
        ldmatrix_x4(f, &q_s[(warp * 16 + lane % 16) * LD + kk * 16 + (lane / 16) * 8]);
    };
    uint32_t qf[QS ? 1 : HD / 16][4];
    if constexpr (!QS) {
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) q_frag(qf[kk], kk);
    }

    const int r0 = t0 + warp * 16 + g, r1 = r0 + 8; // this thread's two query rows
    const float* mrow[2] = {a.mask && r0 < a.n_tok ? a.mask + int64_t(r0) * a.mask_nb1 : nullptr,
                            a.mask && r1 < a.n_tok ? a.mask + int64_t(r1) * a.mask_nb1 : nullptr};
    const bool row_ok[2] = {r0 < a.n_tok, r1 < a.n_tok};
    float o[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[i][e] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};
    const __half* kbase = a.k + hk * a.kv_nb1;
    const __half* vbase = a.v + hk * a.kv_nb1;

    // the summary of key tile ti (uniform over the block); without a mask every key inside the cache is seen
    const int64_t n_tiles = (a.n_kv + FA_BK - 1) / FA_BK;
    auto tile_info = [&](int64_t ti) {
        if (a.tiles) return a.tiles[int64_t(qt) * a.n_kt + ti];
        const int64_t nv = min(int64_t(FA_BK), a.n_kv - ti * FA_BK);
        const unsigned lo = nv >= 32 ? 0xffffffffu : (1u << nv) - 1u;
        const unsigned hi = nv >= 64 ? 0xffffffffu : nv > 32 ? (1u << (nv - 32)) - 1u : 0u;
        return make_int4(int(lo), int(hi), nv == FA_BK ? fa_plain : fa_mixed, 0);
    };
    // K and V rows of the tile into stage st (cp.async; rows nobody sees zero-filled)
    auto issue = [&](int64_t c0, int st, int4 info) {
        for (int e = tid; e < FA_BK * HD / 8; e += FA_THREADS) {
            const int kk = e / (HD / 8), piece = e % (HD / 8);
            const int64_t j = c0 + kk;
            const bool v = ((unsigned(kk < 32 ? info.x : info.y) >> (kk % 32)) & 1u) != 0;
            const int64_t off = v ? j * a.kv_nb2 + piece * 8 : 0;
            cp_async16(&k_s[(st * FA_BK + kk) * LD + piece * 8], kbase + off, v);
            cp_async16(&v_s[(st * FA_BK + kk) * LD + piece * 8], vbase + off, v);
        }
    };
    // Two stages: tile i + 1 is loading while tile i is multiplied. A dead tile is neither loaded nor multiplied (one
    // empty commit group keeps the count).
    int4 cur = n_tiles > 0 ? tile_info(0) : make_int4(0, 0, fa_dead, 0);
    __syncthreads(); // every warp has its Q fragments (stage 0 overwrites them)
    if (cur.z != fa_dead) issue(0, 0, cur);
    cp_async_commit();
    for (int64_t ti = 0; ti < n_tiles; ti++) {
        const int st = int(ti & 1);
        const int64_t c0 = ti * FA_BK;
        int4 next = make_int4(0, 0, fa_dead, 0);
        if (ti + 1 < n_tiles) {
            next = tile_info(ti + 1);
            if (next.z != fa_dead) {
                __syncthreads(); // everyone is done with tile i - 1, whose stage tile i + 1 takes
                issue(c0 + FA_BK, st ^ 1, next);
            }
        }
        cp_async_commit();
        const int cls = cur.z;
        cur = next;
        if (cls == fa_dead) continue;
        cp_async_wait_one(); // tile i has landed (for this thread) ...
        __syncthreads();     // ... for everyone
        const __half* kt_s = k_s + st * FA_BK * LD;
        const __half* vt_s = v_s + st * FA_BK * LD;

        // S = Q K^T for this warp's 16 queries x 64 keys: 8 n8 tiles
        float s[FA_BK / 8][4];
#pragma unroll
        for (int i = 0; i < FA_BK / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[i][e] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
            uint32_t qa[4];
            if constexpr (QS) {
                q_frag(qa, kk);
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) qa[e] = qf[kk][e];
            }
#pragma unroll
            for (int j = 0; j < FA_BK / 16; j++) {
                uint32_t b[4];
                ldmatrix_x4(b, &kt_s[(j * 16 + lane % 8 + 8 * (lane / 16)) * LD + kk * 16 + 8 * ((lane / 8) % 2)]);
                mma_16816(s[2 * j], qa, b[0], b[1]);
                mma_16816(s[2 * j + 1], qa, b[2], b[3]);
            }
        }
        // scale, mask, row maxima (fragment: rows g / g + 8 by e / 2, keys 8 i + 2 t + e % 2)
        float mx[2] = {-INFINITY, -INFINITY};
        if (cls == fa_plain) {
#pragma unroll
            for (int i = 0; i < FA_BK / 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[i][e] *= a.scale;
                    mx[e / 2] = fmaxf(mx[e / 2], s[i][e]);
                }
        } else {
#pragma unroll
            for (int i = 0; i < FA_BK / 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int hh = e / 2;
                    const int64_t j = c0 + i * 8 + 2 * t + e % 2;
                    const float mv = j < a.n_kv && row_ok[hh] ? (mrow[hh] ? mrow[hh][j] : 0.0f) : -INFINITY;
                    s[i][e] = mv == -INFINITY ? -INFINITY : fmaf(s[i][e], a.scale, mv);
                    mx[hh] = fmaxf(mx[hh], s[i][e]);
                }
        }
        float alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
            mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
            const float m_new = fmaxf(m_r[hh], mx[hh]);
            alpha[hh] = m_new == -INFINITY ? 1.0f : __expf(m_r[hh] - m_new); // 0 while m_r = -inf
            m_r[hh] = m_new;
        }
#pragma unroll
        for (int i = 0; i < FA_BK / 8; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int hh = e / 2;
                const float p = s[i][e] == -INFINITY ? 0.0f : __expf(s[i][e] - m_r[hh]);
                s[i][e] = p;
                sum[hh] += p;
            }
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            sum[hh] += __shfl_xor_sync(0xffffffffu, sum[hh], 1);
            sum[hh] += __shfl_xor_sync(0xffffffffu, sum[hh], 2);
            l_r[hh] = l_r[hh] * alpha[hh] + sum[hh];
        }
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
            o[i][0] *= alpha[0];
            o[i][1] *= alpha[0];
            o[i][2] *= alpha[1];
            o[i][3] *= alpha[1];
        }
        // O += P V: the S fragments of keys 16 kk .. 16 kk + 15 are the A fragment of one m16n8k16
#pragma unroll
        for (int kk = 0; kk < FA_BK / 16; kk++) {
            const uint32_t pa[4] = {pack_half2(s[2 * kk][0], s[2 * kk][1]), pack_half2(s[2 * kk][2], s[2 * kk][3]),
                                    pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dt = 0; dt < HD / 16; dt++) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, &vt_s[(kk * 16 + lane % 8 + 8 * ((lane / 8) % 2)) * LD + dt * 16 + 8 * (lane / 16)]);
                mma_16816(o[2 * dt], pa, b[0], b[1]);
                mma_16816(o[2 * dt + 1], pa, b[2], b[3]);
            }
        }
    }
    // O / l (0 for a row that saw no key)
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const int r = hh ? r1 : r0;
        if (!row_ok[hh]) continue;
        float l = l_r[hh];
        const float f = sink_fold(a.sinks, h, m_r[hh], l);
        const float inv = l == 0.0f ? 0.0f : f / l;
        float* orow = a.o + h * a.o_nb1 + int64_t(r) * a.o_nb2;
#pragma unroll
        for (int i = 0; i < HD / 8; i++) {
            const int d = i * 8 + 2 * t;
            orow[d] = o[i][2 * hh] * inv;
            orow[d + 1] = o[i][2 * hh + 1] * inv;
        }
    }
}

template <int HD> void fa_launch(const attn_args& a, cudaStream_t stream) {
    // 64: 36 KiB, 128: 70 KiB, 256: 165 KiB
    allow_dynamic_smem(reinterpret_cast<const void*>(attention_fa_kernel<HD>), int(fa_smem_bytes<HD>()));
    const dim3 grid(unsigned(ceil_div(a.n_tok, FA_BQ)), unsigned(a.n_head));
    attention_fa_kernel<HD><<<grid, FA_THREADS, fa_smem_bytes<HD>(), stream>>>(a);
    TS_CUDA_CHECK(cudaGetLastError());
}

// The current device's most shared memory a block may opt in to (Hopper 227 KiB, A100 163, Ada 99).
int device_smem_optin() {
    static std::atomic<int> optin[64] = {}; // per device, 0: not asked yet
    int dev = 0;
    TS_CUDA_CHECK(cudaGetDevice(&dev));
    if (dev < 0 || dev >= 64) return 48 * 1024;
    if (optin[dev].load() == 0) {
        int v = 0;
        TS_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        optin[dev].store(v);
    }
    return optin[dev].load();
}

// Whether the current device gives a block head size 256's shared memory (Hopper: 227 KiB; Ampere's A100 163 KiB
// does not).
bool fa_256_fits() {
    return size_t(device_smem_optin()) >= fa_smem_bytes<256>();
}

bool fa_enabled() {
    static const bool enabled = env_switch_on("TESSERA_CUDA_FA");
    return enabled;
}

// Whether prefill takes the tensor-core kernel (cp.async: 16-byte aligned rows).
bool fa_wanted(const attn_args& a) {
    return a.n_tok > 8 && (a.hd == 64 || a.hd == 128 || (a.hd == 256 && fa_256_fits())) && fa_enabled() &&
           a.kv_nb1 % 8 == 0 && a.kv_nb2 % 8 == 0 && aligned16(a.k) && aligned16(a.v);
}

// Whether the split decode kernel takes these arguments (16-byte loads of K rows, D halves of V rows).
bool decode_split_ok(const attn_args& a) {
    return a.n_tok <= 8 && (a.hd == 64 || a.hd == 128 || a.hd == 256) && a.group >= 1 && a.n_head % a.group == 0 &&
           a.kv_nb1 % 8 == 0 && a.kv_nb2 % 8 == 0 && aligned16(a.k) && aligned16(a.v);
}

// The split decode kernel's partials in the scratch: after the q8_1 output at its start (the output projection's
// activations, split_acts' layout), (hd + 2) floats per (token, head, split); none with one split.
size_t decode_part_offset(int64_t hd, int64_t n_head, int64_t n_tok) {
    return (split_acts_bytes(hd * n_head, n_tok) + 255) / 256 * 256;
}
size_t decode_part_bytes(int64_t hd, int64_t n_head, int64_t n_tok, int64_t n_kv) {
    const int64_t splits = decode_max_splits(n_kv);
    return splits == 1 ? 0 : size_t(n_tok * n_head * splits) * size_t(hd + 2) * sizeof(float);
}

// The tensor-core decode kernel's most warps on this device: slots that fit its shared memory (2 KiB kept for the
// static part)
template <int HD> int stage_max_warps() {
    return std::min<int>(stage_warps_cap(HD), (device_smem_optin() - 2048) / stage_round_bytes<HD>());
}

template <int D> void decode_split_launch(const cuda_context& ctx, const attn_args& a) {
    // Query heads a block (gm): the KV head's whole group (up to 8), each K and V row loaded once for all of them;
    // halved while that leaves the grid under half the SMs (short contexts: one or a few key splits), the other
    // blocks loading the same rows again from L2. Measured (H200, 2026-11-26, 8B f16 tg128, a group of 4, <= 256 keys:
    // one split): 4 heads a block (8 blocks) attention 7.9-8.4 us in ncu, 186.6-187.0 t/s; 2 heads 5.9-6.1 us, 189.5;
    // 1 head (32 blocks) 5.9-6.3 us, 190.3.
    // TESSERA_CUDA_ATTN_SPREAD=0: the whole group always.
    static const bool spread = env_switch_on("TESSERA_CUDA_ATTN_SPREAD");
    int gm = a.group <= 1 ? 1 : a.group <= 2 ? 2 : a.group <= 4 ? 4 : 8;
    // the spread is decided on splits of 256 keys
    const int64_t splits_256 =
        a.n_kv <= DS_ONE_SPLIT ? 1 : std::min<int64_t>(DS_MAX_SPLITS, ceil_div(a.n_kv, int64_t(DS_ONE_SPLIT)));
    const auto head_blocks = [&](int g) { return int64_t(a.n_head / a.group) * ceil_div(a.group, g); };
    while (spread && gm > 1 && head_blocks(gm) * splits_256 * a.n_tok < ctx.n_sm / 2 &&
           (splits_256 == 1 || size_t(head_blocks(gm / 2) * a.n_tok) <= ctx.n_counters))
        gm /= 2;
    const int64_t blocks_x = head_blocks(gm);
    // Head sizes 64 and 128 on the tensor cores (K and V rows 16-byte aligned, enough shared memory for 4 warps),
    // except where the f32 kernel's plan deals the keys out for one wave with a round a warp (up to 16 warps) and the
    // tensor-core kernel's would take more than one round a warp: with its 12 warps at head size 128, the 8B at
    // depths of about 6144-8000 (13-16 rounds a split). Measured when the tensor-core kernel had 8 warps at most
    // (H200, 2026-11-28, 8B q4_0 tg128, two rounds): depth 4096 (2 rounds a warp) 438.0 / 438.6 t/s vs f32 442.9 /
    // 445.2; depth 6144 431.1 / 426.6 vs 422.1 / 426.1.
    // TESSERA_CUDA_ATTN_MMA=0: the f32 kernel for all. (The tensor-core kernel reads Q rows as float2.)
    static const bool mma = env_switch_on("TESSERA_CUDA_ATTN_MMA");
    constexpr bool mma_hd = D == 2 || D == 4;
    const bool q16 = aligned16(a.q) && a.q_nb1 % 4 == 0 && a.q_nb2 % 4 == 0;
    const bool kv16 = aligned16(a.k) && aligned16(a.v) && a.kv_nb1 % 8 == 0 && a.kv_nb2 % 8 == 0;
    const int64_t blocks = blocks_x * a.n_tok;
    const split_plan f32_plan = decode_split_plan(a.n_kv, gm, 32 * D, blocks, ctx.n_sm);
    const int tc_wmax = mma_hd ? stage_max_warps<32 * D>() : 0;
    const split_plan tc_plan = decode_stage_plan(a.n_kv, std::max(tc_wmax, 1), blocks, ctx.n_sm);
    const bool f32_one_round = f32_plan.kc == 32 * f32_plan.warps && f32_plan.n_split * blocks <= ctx.n_sm;
    const bool on_tc =
        mma_hd && mma && q16 && kv16 && tc_wmax >= 4 && !(f32_one_round && tc_plan.kc > 32 * tc_plan.warps);
    split_plan sp = on_tc ? tc_plan : f32_plan;
    // one split (a block walks all keys) where the partials or counters are missing; never in the model's graphs
    if (sp.n_split > 1 && (!a.part || !a.counters || size_t(blocks_x * a.n_tok) > ctx.n_counters))
        sp = {a.n_kv, 1, on_tc ? std::min(8, tc_wmax) : ds_warps(gm, 32 * D)};
    TS_ASSERT(blocks_x <= INT32_MAX);
    const dim3 grid(unsigned(blocks_x), unsigned(sp.n_split), unsigned(a.n_tok));
    if constexpr (mma_hd) {
        constexpr int HD = 32 * D;
        if (on_tc) {
            auto fn = gm == 1   ? attention_decode_stage_kernel<HD, 1>
                      : gm == 2 ? attention_decode_stage_kernel<HD, 2>
                      : gm == 4 ? attention_decode_stage_kernel<HD, 4>
                                : attention_decode_stage_kernel<HD, 8>;
            const size_t smem = gm == 1   ? stage_smem<HD, 1>(sp.warps)
                                : gm == 2 ? stage_smem<HD, 2>(sp.warps)
                                : gm == 4 ? stage_smem<HD, 4>(sp.warps)
                                          : stage_smem<HD, 8>(sp.warps);
            if (smem > 48 * 1024) allow_dynamic_smem(reinterpret_cast<const void*>(fn), int(smem));
            launch(ctx, fn, grid, sp.warps * WARP_SIZE, smem, a, sp.kc, sp.n_split);
            return;
        }
    }
    launch(ctx,
           gm == 1   ? attention_decode_split_kernel<D, 1>
           : gm == 2 ? attention_decode_split_kernel<D, 2>
           : gm == 4 ? attention_decode_split_kernel<D, 4>
                     : attention_decode_split_kernel<D, 8>,
           grid, sp.warps * WARP_SIZE, 0, a, sp.kc, sp.n_split);
}

void attention_launch(const cuda_context& ctx, const attn_args& a) {
    cudaStream_t stream = ctx.stream;
    if (a.n_tok == 0) return;
    TS_ASSERT(!a.q8 || decode_split_ok(a));
    if (decode_split_ok(a)) {
        if (a.hd == 64) decode_split_launch<2>(ctx, a);
        else if (a.hd == 128) decode_split_launch<4>(ctx, a);
        else decode_split_launch<8>(ctx, a);
    } else if (a.n_tok <= 8) {
        launch(ctx, attention_decode_kernel, dim3(unsigned(a.n_head), unsigned(a.n_tok)), DECODE_THREADS, 0, a);
    } else if (fa_wanted(a)) {
        TS_ASSERT(!a.mask || a.tiles);
        if (a.hd == 64) fa_launch<64>(a, stream); // cp.async: 16-byte aligned rows
        else if (a.hd == 128) fa_launch<128>(a, stream);
        else fa_launch<256>(a, stream);
    } else if (a.hd <= 64) {
        prefill_launch<64>(a, stream);
    } else if (a.hd <= 128) {
        prefill_launch<128>(a, stream);
    } else {
        prefill_launch<256>(a, stream);
    }
}

} // namespace

bool attention_supported(const tensor& dst) {
    const tensor& q = *dst.src[0];
    const tensor& k = *dst.src[1];
    const tensor& v = *dst.src[2];
    const tensor* mask = dst.src[3];
    const int64_t hd = q.ne[0];
    return q.t == type::f32 && q.nb[0] == 4 && k.t == type::f16 && v.t == type::f16 && k.nb[0] == 2 && v.nb[0] == 2 &&
           k.nb[1] == v.nb[1] && k.nb[2] == v.nb[2] && k.nb[1] % 4 == 0 && k.nb[2] % 4 == 0 && hd % 2 == 0 &&
           hd <= HD_MAX && q.ne[3] == 1 && k.ne[3] == 1 && (!mask || mask->nb[0] == 4) && dst.nb[0] == 4 &&
           (!dst.src[4] || (dst.src[4]->t == type::f32 && dst.src[4]->nb[0] == 4 && dst.src[4]->ne[0] >= q.ne[1]));
}

namespace {

// The kernels' arguments for attention node dst (no q8_1 output).
attn_args attention_args(cuda_context& ctx, tensor& dst) {
    const tensor* q = dst.src[0];
    const tensor* k = dst.src[1];
    const tensor* v = dst.src[2];
    const tensor* mask = dst.src[3];
    attn_args a{};
    a.q = ctx.as<float>(q);
    a.q_nb1 = int64_t(q->nb[1] / 4);
    a.q_nb2 = int64_t(q->nb[2] / 4);
    a.k = ctx.as<__half>(k);
    a.v = ctx.as<__half>(v);
    a.kv_nb1 = int64_t(k->nb[1] / 2);
    a.kv_nb2 = int64_t(k->nb[2] / 2);
    a.mask = mask ? ctx.as<float>(mask) : nullptr;
    a.mask_nb1 = mask ? int64_t(mask->nb[1] / 4) : 0;
    a.mask_early = mask && !mask->view_src && mask->o == op::none; // a graph input: uploaded before any kernel runs
    a.o = ctx.as<float>(&dst);
    a.o_nb1 = int64_t(dst.nb[1] / 4);
    a.o_nb2 = int64_t(dst.nb[2] / 4);
    a.hd = int(q->ne[0]);
    a.n_head = int(q->ne[1]);
    a.n_tok = int(q->ne[2]);
    a.group = int(q->ne[1] / k->ne[1]);
    a.n_kv = k->ne[2];
    a.scale = dst.op_params.f[0];
    a.sinks = dst.src[4] ? ctx.as<float>(dst.src[4]) : nullptr;
    return a;
}

// The split decode kernel's partials and counters (the partials only where it splits the keys).
void decode_scratch(cuda_context& ctx, attn_args& a) {
    const size_t bytes = decode_part_bytes(a.hd, a.n_head, a.n_tok, a.n_kv);
    a.counters = ctx.counters;
    if (bytes == 0) return;
    const size_t off = decode_part_offset(a.hd, a.n_head, a.n_tok);
    TS_ASSERT(ctx.scratch && ctx.scratch_size >= off + bytes);
    a.part = reinterpret_cast<float*>(static_cast<uint8_t*>(ctx.scratch) + off);
    if (!a.q8) ctx.act_src = nullptr; // activations a mul_mat left in the scratch may be overwritten
}

} // namespace

bool attention_q8(cuda_context& ctx, tensor& dst, int8_t* q, __half2* ds) {
    attn_args a = attention_args(ctx, dst);
    if (ctx.exact || !decode_split_ok(a) || !dst.is_contiguous() || a.o_nb1 != a.hd) return false;
    a.q8 = q;
    a.q8_ds = ds;
    decode_scratch(ctx, a); // after the q8_1 output
    attention_launch(ctx, a);
    return true;
}

size_t attention_work_size(const tensor& dst) {
    const tensor& q = *dst.src[0];
    const tensor& k = *dst.src[1];
    if (q.ne[2] <= 8) {
        const size_t part = decode_part_bytes(q.ne[0], q.ne[1], q.ne[2], k.ne[2]);
        return part == 0 ? 0 : decode_part_offset(q.ne[0], q.ne[1], q.ne[2]) + part;
    }
    if (!dst.src[3]) return 0;
    return size_t(ceil_div(q.ne[2], FA_BQ) * ceil_div(k.ne[2], FA_BK)) * sizeof(int4);
}

// Exact mode's attention for the head sizes of the supported families (64, 80, 96, 128, 256): the CPU's tiled path
// for >= 64 queries, its one_chunk path below. Returns false for other head sizes (the fast kernels run).
static bool attention_exact(cuda_context& ctx, const attn_args& a) {
    const auto go = [&]<int HD>() {
        if (a.n_tok >= 64) {
            attention_exact_launch<HD>(a, ctx.stream);
            return;
        }
        const unsigned blocks = unsigned(ceil_div(int64_t(a.n_tok) * a.n_head, 32));
        if (blocks == 0) return;
        attention_exact_small_kernel<HD><<<blocks, 32, 0, ctx.stream>>>(a);
        TS_CUDA_CHECK(cudaGetLastError());
    };
    switch (a.hd) {
    case 64: go.template operator()<64>(); return true;
    case 80: go.template operator()<80>(); return true;
    case 96: go.template operator()<96>(); return true;
    case 128: go.template operator()<128>(); return true;
    case 256: go.template operator()<256>(); return true;
    default: return false;
    }
}

void attention(cuda_context& ctx, tensor& dst) {
    attn_args a = attention_args(ctx, dst);
    if (ctx.exact && attention_exact(ctx, a)) return;
    if (!ctx.exact && a.mask && fa_wanted(a)) { // the mask's tile summary into the scratch
        const int64_t n_qt = ceil_div(a.n_tok, FA_BQ);
        a.n_kt = ceil_div(a.n_kv, FA_BK);
        TS_ASSERT(ctx.scratch_size >= size_t(n_qt * a.n_kt) * sizeof(int4) && n_qt <= 65535 && a.n_kt <= INT32_MAX);
        auto* tiles = static_cast<int4*>(ctx.scratch);
        ctx.act_src = nullptr; // the activations a mul_mat left there are gone
        if (n_qt > 0 && a.n_kt > 0) {
            fa_tiles_kernel<<<dim3(unsigned(a.n_kt), unsigned(n_qt)), 256, 0, ctx.stream>>>(
                a.mask, a.mask_nb1, a.n_tok, a.n_kv, a.n_kt, tiles);
            TS_CUDA_CHECK(cudaGetLastError());
        }
        a.tiles = tiles;
    }
    if (!ctx.exact && decode_split_ok(a)) decode_scratch(ctx, a);
    attention_launch(ctx, a);
}

} // namespace tessera::cuda
