// p2p_harness.cu: the row split's decode exchange between two GPUs outside the model, to tell its parts apart:
//   ping-pong  one word each way between the GPUs' memories, one thread each, N round trips in one kernel: the NVLink
//              round trip's floor;
//   add+norm   the fused all-reduce + residual add + rms_norm (+ q8_1) kernel of a decode row (norm.cu
//              add_norm_vec_kernel with p2p.cuh, a 70B row of 8192 floats) at 1 and 16 blocks, N calls captured in a
//              CUDA graph on each GPU with nothing between them: the exchange plus a kernel boundary a call;
//   alone      the same kernel without a group (16 blocks) on one GPU: the kernel boundary and the norm alone.
// Microseconds a call, medians of 5 graph launches; both GPUs' results compared bit for bit (the members must agree).
// Usage: ph [calls]. Build (no project build needed), on a machine with 2 sm_90a GPUs that reach each other:
//   nvcc -std=c++20 -O3 -DNDEBUG -I. --generate-code=arch=compute_90a,code=sm_90a tests/bench/p2p_harness.cu \
//     -o /tmp/ph -Xlinker --unresolved-symbols=ignore-all
#include "backends/cuda/ops/norm.cu"
#include "tests/bench/harness_check.h"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
    float *a = nullptr, *b = nullptr, *sum = nullptr, *w = nullptr, *y = nullptr;
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

// us a call of `calls` add+norm calls on every GPU at `slices` blocks a row (group: through p2p.cuh)
static double add_norm_us(std::vector<gpu>& g, int calls, int slices, bool group) {
    const int threads = norm_vec_threads(NE0);
    std::vector<cudaGraphExec_t> exec(g.size());
    const size_t used = group ? g.size() : 1;
    for (size_t m = 0; m < used; m++) {
        CKH(cudaSetDevice(g[m].dev));
        cudaGraph_t graph;
        CKH(cudaStreamBeginCapture(g[m].s, cudaStreamCaptureModeThreadLocal));
        const p2p_args none{};
        for (int c = 0; c < calls; c++) {
            if (group)
                add_norm_vec_kernel<true, true><<<dim3(1, unsigned(slices)), threads, 0, g[m].s>>>(
                    g[m].a, g[m].b, g[m].sum, g[m].w, g[m].y, NE0, 1e-5f, g[m].q, g[m].ds, nullptr, true, g[m].args);
            else
                add_norm_vec_kernel<true, false><<<dim3(1, unsigned(slices)), threads, 0, g[m].s>>>(
                    g[m].a, g[m].b, g[m].sum, g[m].w, g[m].y, NE0, 1e-5f, g[m].q, g[m].ds, nullptr, true, none);
        }
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
        for (float** p : {&x.a, &x.b, &x.sum, &x.w, &x.y}) CKH(cudaMalloc(p, NE0 * 4));
        CKH(cudaMalloc(&x.q, NE0));
        CKH(cudaMalloc(&x.ds, NE0 / 32 * sizeof(__half2)));
        CKH(cudaMalloc(&x.word, 4));
        CKH(cudaMemset(x.word, 0, 4));
        fill(x.a, NE0, 11u + uint32_t(m)); // each member's partial sums
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

    // ping-pong: both kernels resident at once (one block each), timed on member 0
    {
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
    const bool same = std::memcmp(y0.data(), y1.data(), NE0 * 4) == 0;
    std::printf("members' sums %s\n", same ? "bit for bit alike" : "DIFFER");
    std::printf("add+norm alone (one GPU), 16 blocks: %.2f us a call\n", add_norm_us(g, calls, 16, false));
    return same ? 0 : 1;
}
