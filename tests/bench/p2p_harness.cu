// p2p_harness.cu: the row split's decode exchange between two GPUs outside the model, to tell its parts apart:
//   ping-pong  one word each way between the GPUs' memories, one thread each, N round trips in one kernel: the NVLink
//              round trip's floor;
//   add+norm   the fused all-reduce + residual add + rms_norm (+ q8_1) kernel of a decode row (norm.cu
//              add_norm_vec_kernel with p2p.cuh, a 70B row of 8192 floats) at 1 and 16 blocks, N calls captured in a
//              CUDA graph on each GPU with nothing between them: the exchange plus a kernel boundary a call;
//   alone      the same kernel without a group (16 blocks) on one GPU: the kernel boundary and the norm alone;
//   exchange   the all-reduce alone in the add+norm's grid, then with add+norm's other parts added one at a time
//              (parts_kernel), and pushing only;
//   chain      the model's setting: a GEMV stand-in and add+norm, both programmatic dependent launches, with and
//              without the all-reduce, its call begun before or after pdl_wait: what one all-reduce costs a step.
// Microseconds a call, medians of 5 graph launches; both GPUs' results compared bit for bit (the members must agree).
// Usage: ph [calls [names]] (names: comma-separated of pingpong, addnorm, chain, alone and the exchange variants;
// default all). Build (no project build needed), on a machine with 2 sm_90a GPUs that reach each other:
//   nvcc -std=c++20 -O3 -DNDEBUG -I. --generate-code=arch=compute_90a,code=sm_90a tests/bench/p2p_harness.cu \
//     -o /tmp/ph -Xlinker --unresolved-symbols=ignore-all
// (~10 s; a binary built on the dev VM did not load on the device machine: "unexpected PLT reloc type").
// Measured (2 H200, 2026-11-29): ping-pong 1.21 us; add+norm with the all-reduce 7.1 us at 16 blocks (9.4 at one),
// alone 3.0; exchange with waits 4.6, + tail 6.0, + early loads 6.3, push only 2.2. Chain (GEMV stand-in 5 us):
// add+norm 8.2 us a pair; with the all-reduce 11.35 begun before pdl_wait, 12.3 after: 3.15 vs 4.1 us an
// all-reduce (the model's ~4.3 before). The residual loaded into registers before the peer wait: 3.25 (spills at
// the 64-register cap), 3.6 without the early begin; its lines prefetched into L1 instead: 3.3.
#include "backends/cuda/ops/norm.cu"
#include "tests/bench/harness_check.h"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
using namespace tessera;
using namespace tessera::cuda;

constexpr int64_t NE0 = 8192, CAP = int64_t(1) << 18;

static __device__ __forceinline__ void st_sys(unsigned* p, unsigned v) {
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ unsigned ld_sys(const unsigned* p) {
    unsigned v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// A poll the compiler keeps (a loop of __ldcv alone has no side effect: under the forward progress rule it may be,
// and was, compiled into one load and no loop)
static __device__ __forceinline__ float4 ld_poll(const float4* p) {
    float4 v;
    asm volatile("ld.relaxed.sys.global.v4.f32 {%0,%1,%2,%3}, [%4];"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

// member 0 serves, member 1 answers: n round trips of one word each way
static __global__ void ping_pong_kernel(unsigned* mine, unsigned* peer, int n, int serve) {
    for (int i = 1; i <= n; i++) {
        if (serve) st_sys(peer, unsigned(i));
        while (ld_sys(mine) != unsigned(i)) {
        }
        if (!serve) st_sys(peer, unsigned(i));
    }
}

struct gpu {
    int dev = 0;
    cudaStream_t s = nullptr;
    void* p2p = nullptr; // receive buffers + state (nccl.cu's layout)
    float *a = nullptr, *b = nullptr, *sum = nullptr, *w = nullptr, *y = nullptr, *src = nullptr;
    int8_t* q = nullptr;
    __half2* ds = nullptr;
    unsigned* word = nullptr;
    p2p_args args{};
};

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

static void fill(float* d, int64_t n, uint32_t seed) {
    std::vector<float> h(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        h[size_t(i)] = float(int(seed >> 9) % 2001 - 1000) / 1000.0f;
    }
    CKH(cudaMemcpy(d, h.data(), size_t(n) * 4, cudaMemcpyHostToDevice));
}

// The exchange in add+norm's grid (16 blocks of 512 threads for a row of 8192, a thread 4 float4s), with the fused
// kernel's other parts added one at a time (PARTS, bits): NOWAIT pushes the block's slice and waits for nothing (the
// stores and the kernel boundary); CLOCK waits through p2p.cuh's p2p_sum_at4 (the clock read in every poll), else a
// loop that only polls; EARLY asks L2 for a's and b's lines and loads w first (as w_early); TAIL adds b, writes the
// slice of the sum, sums the squares over the block and writes y and its q8_1 (add_norm_vec_kernel's work after the
// all-reduce); SLEEP: the polling loop sleeps 64 ns between polls (less L2 traffic where the peer's stores land). All
// of them but SLEEP: add_norm_vec_kernel<true, true> but for its register budget (launch bounds 512, not 1024).
enum : unsigned { NOWAIT = 1, CLOCK = 2, EARLY = 4, TAIL = 8, SLEEP = 16 };
constexpr int XV = 4, XT = int(NE0 / 4 / XV), XS = 16;
template <unsigned PARTS>
static __global__ void __launch_bounds__(XT) parts_kernel(const float* a, const float* b, float* sum, const float* w,
                                                          float* y, int8_t* q, __half2* ds, p2p_args pa) {
    __shared__ p2p_call call;
    __shared__ float red[32];
    const int n4 = int(NE0 / 4), per = n4 / XS, lo = int(blockIdx.y) * per, hi = lo + per;
    const auto* a4 = reinterpret_cast<const float4*>(a);
    const auto* b4 = reinterpret_cast<const float4*>(b);
    float4 v[XV], wv[XV];
    if constexpr ((PARTS & EARLY) != 0) {
#pragma unroll
        for (int j = 0; j < XV; j++) wv[j] = reinterpret_cast<const float4*>(w)[int(threadIdx.x) + j * XT];
        const int lines = int(NE0 * 4 / 128);
        for (int l = int(blockIdx.y) + XS * int(threadIdx.x); l < lines; l += XS * XT)
            prefetch_l2(reinterpret_cast<const char*>(a) + l * 128),
                prefetch_l2(reinterpret_cast<const char*>(b) + l * 128);
    } else {
#pragma unroll
        for (int j = 0; j < XV; j++) wv[j] = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    }
    int64_t i4[XV];
#pragma unroll
    for (int j = 0; j < XV; j++) {
        i4[j] = int(threadIdx.x) + j * XT;
        v[j] = a4[i4[j]];
    }
    const p2p_call c = p2p_begin(pa, &call);
    auto* to = reinterpret_cast<float4*>(p2p_slot(pa, 1 - pa.rank, pa.rank, c.buf));
#pragma unroll
    for (int j = 0; j < XV; j++)
        if (i4[j] >= lo && i4[j] < hi) to[i4[j]] = p2p_canonical(v[j]);
    p2p_clear_previous(pa, c, blockIdx.y, XS);
    if constexpr ((PARTS & NOWAIT) != 0) {
    } else if constexpr ((PARTS & CLOCK) != 0) {
#pragma unroll
        for (int j = 0; j < XV; j++) v[j] = p2p_sum_at4(pa, c, i4[j], v[j]);
    } else {
        const auto* p = reinterpret_cast<const float4*>(p2p_slot(pa, pa.rank, 1 - pa.rank, c.buf));
#pragma unroll
        for (int j = 0; j < XV; j++) {
            float4 x = ld_poll(p + i4[j]);
            while (__float_as_uint(x.x) == P2P_EMPTY || __float_as_uint(x.y) == P2P_EMPTY ||
                   __float_as_uint(x.z) == P2P_EMPTY || __float_as_uint(x.w) == P2P_EMPTY) {
                if constexpr ((PARTS & SLEEP) != 0) __nanosleep(64);
                x = ld_poll(p + i4[j]);
            }
            const float4 o = p2p_canonical(v[j]);
            v[j] = pa.rank == 0 ? make_float4(o.x + x.x, o.y + x.y, o.z + x.z, o.w + x.w)
                                : make_float4(x.x + o.x, x.y + o.y, x.z + o.z, x.w + o.w);
        }
    }
    if constexpr ((PARTS & TAIL) != 0) {
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < XV; j++) {
            const float4 bv = b4[i4[j]];
            v[j].x += bv.x, v[j].y += bv.y, v[j].z += bv.z, v[j].w += bv.w;
            if (i4[j] >= lo && i4[j] < hi) reinterpret_cast<float4*>(sum)[i4[j]] = v[j];
            ss = fmaf(v[j].x, v[j].x, fmaf(v[j].y, v[j].y, fmaf(v[j].z, v[j].z, fmaf(v[j].w, v[j].w, ss))));
        }
        const float s = 1.0f / sqrtf(block_sum(ss, red) / float(NE0) + 1e-5f);
        const int warp_i0 = int(threadIdx.x) / WARP_SIZE * WARP_SIZE;
#pragma unroll
        for (int j = 0; j < XV; j++) {
            if (warp_i0 + j * XT >= hi || warp_i0 + j * XT + WARP_SIZE <= lo) continue;
            const bool mine = i4[j] >= lo && i4[j] < hi;
            const float ov[4] = {(v[j].x * s) * wv[j].x, (v[j].y * s) * wv[j].y, (v[j].z * s) * wv[j].z,
                                 (v[j].w * s) * wv[j].w};
            if (mine) reinterpret_cast<float4*>(y)[i4[j]] = make_float4(ov[0], ov[1], ov[2], ov[3]);
            q8x4_store(ov, i4[j], mine, reinterpret_cast<char4*>(q), ds, nullptr);
        }
    } else {
#pragma unroll
        for (int j = 0; j < XV; j++)
            if (i4[j] >= lo && i4[j] < hi) reinterpret_cast<float4*>(y)[i4[j]] = v[j];
    }
    p2p_end(pa, c, XS, unsigned(NE0));
}

// us a call of `calls` launches (launch(m): one on member m's stream g[m].s) on the first `used` GPUs, each a CUDA
// graph of the calls; the slowest member's time, median of 5 graph launches
template <class L> static double graph_us(std::vector<gpu>& g, int calls, size_t used, L launch) {
    std::vector<cudaGraphExec_t> exec(g.size());
    for (size_t m = 0; m < used; m++) {
        CKH(cudaSetDevice(g[m].dev));
        cudaGraph_t graph;
        CKH(cudaStreamBeginCapture(g[m].s, cudaStreamCaptureModeThreadLocal));
        for (int c = 0; c < calls; c++) launch(m);
        CKH(cudaStreamEndCapture(g[m].s, &graph));
        CKH(cudaGraphInstantiate(&exec[m], graph, 0));
        CKH(cudaGraphDestroy(graph));
    }
    std::vector<double> us;
    for (int rep = 0; rep < 6; rep++) {
        std::vector<cudaEvent_t> e0(used), e1(used);
        for (size_t m = 0; m < used; m++) {
            CKH(cudaSetDevice(g[m].dev));
            CKH(cudaEventCreate(&e0[m]));
            CKH(cudaEventCreate(&e1[m]));
            CKH(cudaEventRecord(e0[m], g[m].s));
            CKH(cudaGraphLaunch(exec[m], g[m].s));
            CKH(cudaEventRecord(e1[m], g[m].s));
        }
        double worst = 0;
        for (size_t m = 0; m < used; m++) {
            CKH(cudaSetDevice(g[m].dev));
            CKH(cudaEventSynchronize(e1[m]));
            float ms = 0;
            CKH(cudaEventElapsedTime(&ms, e0[m], e1[m]));
            worst = std::max(worst, double(ms) * 1e3 / calls);
            CKH(cudaEventDestroy(e0[m]));
            CKH(cudaEventDestroy(e1[m]));
        }
        if (rep > 0) us.push_back(worst); // the first launch uploads the graph
    }
    for (size_t m = 0; m < used; m++) {
        CKH(cudaSetDevice(g[m].dev));
        CKH(cudaGraphExecDestroy(exec[m]));
    }
    return median(us);
}

// us a call of add+norm at `slices` blocks a row (group: through p2p.cuh, on both GPUs; else on GPU 0 alone)
static double add_norm_us(std::vector<gpu>& g, int calls, int slices, bool group) {
    const int threads = norm_vec_threads(NE0);
    return graph_us(g, calls, group ? g.size() : 1, [&](size_t m) {
        const p2p_args none{};
        if (group)
            add_norm_vec_kernel<true, true><<<dim3(1, unsigned(slices)), threads, 0, g[m].s>>>(
                g[m].a, g[m].b, g[m].sum, g[m].w, g[m].y, NE0, 1e-5f, g[m].q, g[m].ds, nullptr, true, true, g[m].args);
        else
            add_norm_vec_kernel<true, false><<<dim3(1, unsigned(slices)), threads, 0, g[m].s>>>(
                g[m].a, g[m].b, g[m].sum, g[m].w, g[m].y, NE0, 1e-5f, g[m].q, g[m].ds, nullptr, true, false, none);
    });
}

// The model's setting: a kernel standing for the GEMV before the all-reduce (every SM busy for SPIN_NS, then it
// writes the member's partial sums a), and add+norm after it, both launched as programmatic dependent launches
// (common.cuh launch with ctx.pdl), so add+norm's work before its pdl_wait overlaps the GEMV as in a decode step.
// The stand-in uses no shared memory; carveout (cudaFuncAttributePreferredSharedMemoryCarveout: -1 the driver's
// choice, 100 all of it) asks whether add+norm's own shared memory then fits beside it on an SM without the SM's
// carveout changing first (the model's GEMVs stage their weights in shared memory).
constexpr unsigned SPIN_NS = 5000;
static __global__ void gemv_like_kernel(const float* src, float* a) {
    pdl_wait();
    pdl_trigger();
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    for (t = t0; t - t0 < SPIN_NS;) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    for (int i = int(blockIdx.x * blockDim.x + threadIdx.x); i < NE0; i += int(gridDim.x * blockDim.x)) a[i] = src[i];
}
// mode 0: the GEMV stand-in alone; 1: + add+norm without a group (GPU 0); 2: + add+norm with the all-reduce, its
// call begun before pdl_wait; 3: begun after it
static double chain_us(std::vector<gpu>& g, int calls, int mode, int carveout) {
    const int threads = norm_vec_threads(NE0);
    for (const gpu& x : g) {
        CKH(cudaSetDevice(x.dev));
        CKH(cudaFuncSetAttribute(gemv_like_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, carveout));
    }
    return graph_us(g, calls, mode >= 2 ? g.size() : 1, [&](size_t m) {
        cuda_context ctx; // common.cuh's launch, as programmatic dependent launches
        ctx.stream = g[m].s;
        ctx.pdl = true;
        const p2p_args none{};
        launch(ctx, gemv_like_kernel, dim3(132), dim3(256), 0, g[m].src, g[m].a);
        if (mode == 1)
            launch(ctx, add_norm_vec_kernel<true, false>, dim3(1, 16), dim3(unsigned(threads)), 0, g[m].a, g[m].b,
                   g[m].sum, g[m].w, g[m].y, NE0, 1e-5f, g[m].q, g[m].ds, nullptr, true, false, none);
        else if (mode >= 2)
            launch(ctx, add_norm_vec_kernel<true, true>, dim3(1, 16), dim3(unsigned(threads)), 0, g[m].a, g[m].b,
                   g[m].sum, g[m].w, g[m].y, NE0, 1e-5f, g[m].q, g[m].ds, nullptr, true, mode == 2, g[m].args);
    });
}

template <unsigned PARTS> static double parts_us(std::vector<gpu>& g, int calls) {
    return graph_us(g, calls, g.size(), [&](size_t m) {
        parts_kernel<PARTS>
            <<<dim3(1, XS), XT, 0, g[m].s>>>(g[m].a, g[m].b, g[m].sum, g[m].w, g[m].y, g[m].q, g[m].ds, g[m].args);
    });
}

int main(int argc, char** argv) {
    const int calls = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2000;
    int n_dev = 0;
    CKH(cudaGetDeviceCount(&n_dev));
    if (n_dev < 2) {
        std::printf("p2p_harness: needs 2 GPUs, found %d\n", n_dev);
        return 1;
    }
    int ok01 = 0, ok10 = 0;
    CKH(cudaDeviceCanAccessPeer(&ok01, 0, 1));
    CKH(cudaDeviceCanAccessPeer(&ok10, 1, 0));
    if (!ok01 || !ok10) {
        std::printf("p2p_harness: GPUs 0 and 1 cannot reach each other's memory\n");
        return 1;
    }
    std::vector<gpu> g(2);
    const size_t buf_bytes = size_t(P2P_BUFFERS) * 2 * size_t(CAP) * sizeof(float);
    for (int m = 0; m < 2; m++) {
        gpu& x = g[size_t(m)];
        x.dev = m;
        CKH(cudaSetDevice(m));
        CKH(cudaDeviceEnablePeerAccess(1 - m, 0));
        CKH(cudaStreamCreateWithFlags(&x.s, cudaStreamNonBlocking));
        CKH(cudaMalloc(&x.p2p, buf_bytes + sizeof(p2p_state)));
        CKH(cudaMemset(x.p2p, 0xff, buf_bytes));
        CKH(cudaMemset(static_cast<uint8_t*>(x.p2p) + buf_bytes, 0, sizeof(p2p_state)));
        for (float** p : {&x.a, &x.b, &x.sum, &x.w, &x.y, &x.src}) CKH(cudaMalloc(p, NE0 * 4));
        CKH(cudaMalloc(&x.q, NE0));
        CKH(cudaMalloc(&x.ds, NE0 / 32 * sizeof(__half2)));
        CKH(cudaMalloc(&x.word, 4));
        CKH(cudaMemset(x.word, 0, 4));
        fill(x.a, NE0, 11u + uint32_t(m)); // each member's partial sums
        fill(x.src, NE0, 11u + uint32_t(m));
        fill(x.b, NE0, 21u);               // the residual and the norm's weight: every member's
        fill(x.w, NE0, 31u);
    }
    for (int m = 0; m < 2; m++) {
        p2p_args& a = g[size_t(m)].args;
        a.rank = m;
        a.n_ranks = 2;
        a.cap = CAP;
        for (int j = 0; j < 2; j++) a.recv[j] = static_cast<float*>(g[size_t(j)].p2p);
        a.state = reinterpret_cast<p2p_state*>(static_cast<uint8_t*>(g[size_t(m)].p2p) + buf_bytes);
    }

    // which measurements to run (argv[2], comma-separated names; all when not given)
    const std::string want = argc > 2 ? std::string(",") + argv[2] + "," : std::string();
    const auto on = [&](const char* name) {
        return want.empty() || want.find(std::string(",") + name + ",") != std::string::npos;
    };

    // ping-pong: both kernels resident at once (one block each), timed on member 0
    if (on("pingpong")) {
        const int n = 10000;
        cudaEvent_t e0, e1;
        CKH(cudaSetDevice(0));
        CKH(cudaEventCreate(&e0));
        CKH(cudaEventCreate(&e1));
        CKH(cudaSetDevice(1));
        ping_pong_kernel<<<1, 1, 0, g[1].s>>>(g[1].word, g[0].word, n, 0);
        CKH(cudaGetLastError());
        CKH(cudaSetDevice(0));
        CKH(cudaEventRecord(e0, g[0].s));
        ping_pong_kernel<<<1, 1, 0, g[0].s>>>(g[0].word, g[1].word, n, 1);
        CKH(cudaGetLastError());
        CKH(cudaEventRecord(e1, g[0].s));
        CKH(cudaEventSynchronize(e1));
        float ms = 0;
        CKH(cudaEventElapsedTime(&ms, e0, e1));
        std::printf("ping-pong: %.2f us a round trip (%d)\n", double(ms) * 1e3 / n, n);
        CKH(cudaSetDevice(1));
        CKH(cudaStreamSynchronize(g[1].s));
    }

    bool same = true;
    if (on("addnorm")) {
        for (int slices : {1, 16})
            std::printf("add+norm with the all-reduce, %2d blocks: %.2f us a call (%d calls)\n", slices,
                        add_norm_us(g, calls, slices, true), calls);
        // the last call's results on both members (the group's): bit for bit alike
        std::vector<float> y0(NE0), y1(NE0);
        for (int m = 0; m < 2; m++) {
            CKH(cudaSetDevice(m));
            CKH(cudaDeviceSynchronize());
        }
        CKH(cudaSetDevice(0));
        CKH(cudaMemcpy(y0.data(), g[0].sum, NE0 * 4, cudaMemcpyDeviceToHost));
        CKH(cudaSetDevice(1));
        CKH(cudaMemcpy(y1.data(), g[1].sum, NE0 * 4, cudaMemcpyDeviceToHost));
        same = std::memcmp(y0.data(), y1.data(), NE0 * 4) == 0;
        std::printf("members' sums %s\n", same ? "bit for bit alike" : "DIFFER");
    }
    if (on("chain"))
        for (int carveout : {-1, 100}) {
            const double g0 = chain_us(g, calls, 0, carveout), g1 = chain_us(g, calls, 1, carveout),
                         g2 = chain_us(g, calls, 2, carveout), g3 = chain_us(g, calls, 3, carveout);
            std::printf("chain (PDL, GEMV stand-in of %u ns, its carveout %d): stand-in alone %.2f, + add+norm %.2f, "
                        "+ add+norm with the all-reduce %.2f us a call (begun after pdl_wait: %.2f): the all-reduce "
                        "costs %.2f (%.2f)\n",
                        SPIN_NS, carveout, g0, g1, g2, g3, g2 - g1, g3 - g1);
        }
    if (on("alone"))
        std::printf("add+norm alone (one GPU), 16 blocks: %.2f us a call\n", add_norm_us(g, calls, 16, false));
    const auto parts = [&]<unsigned P>(const char* key, const char* name) {
        if (on(key)) {
            std::printf("exchange%s: %.2f us a call\n", name, parts_us<P>(g, calls));
            std::fflush(stdout);
        }
    };
    parts.operator()<0>("polls", " (polls only)");
    parts.operator()<CLOCK>("clock", " + clock");
    parts.operator()<EARLY>("early", " + early loads");
    parts.operator()<TAIL>("tail", " + tail");
    parts.operator()<CLOCK | TAIL>("clocktail", " + clock + tail");
    parts.operator()<CLOCK | EARLY | TAIL>("parts", " + clock + early loads + tail (add+norm's parts)");
    parts.operator()<SLEEP>("sleep", " + sleep");
    parts.operator()<SLEEP | EARLY | TAIL>("sleeptail", " + sleep + early loads + tail");
    // last: without waits the members' buffers no longer read empty where the protocol expects it
    parts.operator()<NOWAIT>("push", ", push only");
    return same ? 0 : 1;
}
