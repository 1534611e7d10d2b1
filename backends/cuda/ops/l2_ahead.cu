// l2_ahead.cu: decode's weights asked of L2 ahead of their GEMV (ops.cuh: l2_ahead).
#include "backends/cuda/ops/ops.cuh"

#include <algorithm>
#include <cstdlib>

namespace tessera::cuda {

namespace {

constexpr size_t PIECE = size_t(1) << 14; // bytes a bulk prefetch asks for
constexpr int THREADS = 32, MAX_BLOCKS = 256;

struct l2_ranges {
    const uint8_t* p[6];
    unsigned long long n[6]; // bytes, multiples of 16
    int count;
};

// The ranges' pieces, spread over the grid's threads (one SM's copy engine alone asked for ~350 GB/s). Hopper: one
// bulk prefetch a piece; before: a hint for each 128-byte line.
static __global__ void l2_prefetch_kernel(l2_ranges r) {
    const unsigned long long t0 = blockIdx.x * blockDim.x + threadIdx.x, nt = gridDim.x * blockDim.x;
    for (int i = 0; i < r.count; i++) {
        const unsigned long long pieces = (r.n[i] + PIECE - 1) / PIECE;
        for (unsigned long long q = t0; q < pieces; q += nt) {
            const uint8_t* a = r.p[i] + q * PIECE;
            const unsigned size = unsigned(min(r.n[i] - q * PIECE, (unsigned long long)PIECE));
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(size) : "memory");
#else
            for (unsigned o = 0; o < size; o += 128) prefetch_l2(a + o);
#endif
        }
    }
}

bool weight_matmul(const tensor* n) {
    return n->o == op::mul_mat || n->o == op::mul_mat_id;
}

} // namespace

size_t l2_ahead_budget() {
    static const size_t v = [] {
        const char* e = std::getenv("TESSERA_CUDA_L2_AHEAD");
        return size_t(e && *e ? std::max(std::atoi(e), 0) : 16) << 20;
    }();
    return v;
}

void l2_ahead::before(const std::vector<tensor*>& nodes, size_t i) {
    if (budget_ == 0) return;
    const tensor* n = nodes[i];
    if (n->o == op::view || n->o == op::none || weight_matmul(n)) return;
    size_t j = i + 1;
    while (j < nodes.size() && !weight_matmul(nodes[j])) j++;
    if (j == nodes.size() || nodes[j]->o != op::mul_mat || nodes[j] == last_) return;
    last_ = nodes[j];
    const tensor* x = nodes[j]->src[1];
    if (x->ne[1] * x->ne[2] * x->ne[3] > 8) return; // decode's GEMVs only (a GEMM is not bound by its weights' reads)
    l2_ranges r{};
    size_t left = budget_;
    auto add = [&](const uint8_t* p, size_t bytes) {
        bytes = bytes / 16 * 16;
        if (p && bytes && r.count < 6) r.p[r.count] = p, r.n[r.count++] = bytes;
    };
    // the launch's matrices (q, k, v; gate, up: the mul_mats of one activation in a row), in the GEMV's block order
    for (size_t k = j; k < nodes.size() && left > 0 && r.count < 6; k++) {
        const tensor* m = nodes[k];
        if (m->o == op::view || m->o == op::none) continue;
        if (m->o != op::mul_mat || m->src[1] != x) break;
        const tensor* w = m->src[0];
        if (const auto it = ctx_.split->find(w); it != ctx_.split->end()) {
            const split_weight& s = it->second;
            const size_t total = s.q_bytes + s.s_bytes;
            if (total == 0) break;
            const double f = std::min(1.0, double(left) / double(total));
            add(s.qs, size_t(f * double(s.q_bytes)));
            add(s.sc, size_t(f * double(s.s_bytes)));
            left -= std::min(left, total);
        } else if (ctx_.weights->count(w)) {
            const size_t bytes = std::min(left, w->n_bytes());
            add(ctx_.ptr(w), bytes);
            left -= bytes;
        } else {
            break; // an activation (attention's products): nothing to ask for
        }
    }
    if (r.count == 0) return;
    // the side stream starts it once the kernels launched so far have ended (HBM is then free for it)
    TS_CUDA_CHECK(cudaEventRecord(fork_, ctx_.stream));
    TS_CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
    size_t pieces = 0;
    for (int k = 0; k < r.count; k++) pieces += (r.n[k] + PIECE - 1) / PIECE;
    const unsigned blocks = unsigned(std::min<size_t>((pieces + THREADS - 1) / THREADS, MAX_BLOCKS));
    l2_prefetch_kernel<<<blocks, THREADS, 0, side_>>>(r);
    TS_CUDA_CHECK(cudaGetLastError());
    forked_ = true;
}

void l2_ahead::finish() {
    if (!forked_) return;
    TS_CUDA_CHECK(cudaEventRecord(join_, side_));
    TS_CUDA_CHECK(cudaStreamWaitEvent(ctx_.stream, join_, 0));
    forked_ = false;
}

} // namespace tessera::cuda
