// moe.cpp: expert routing ops (ops.h in ggml-like): top_k, mul_mat_id, which touches each chosen expert's matrix
// once per batch for every (token, slot) that chose it, and add_id (a per-expert bias on each chosen slot).
#include "backends/cpu/ops/ops.h"

#include "backends/cpu/quant/repack.h"
#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "ggml-like/top_k_row.h"
#include "quant/format.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

namespace tessera::cpu {

void top_k(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const int64_t n = a.ne[0], k = dst.ne[0];
    const bool sorted = dst.op_params.i[0] != 0;
    std::vector<int32_t> idx;
    int64_t r0, r1;
    split(a.ne[1], p.ith, p.nth, r0, r1);
    for (int64_t r = r0; r < r1; r++)
        top_k_row(reinterpret_cast<const float*>(static_cast<const uint8_t*>(a.data) + r * a.nb[1]), n, k, sorted,
                  reinterpret_cast<int32_t*>(static_cast<uint8_t*>(dst.data) + r * dst.nb[1]), idx);
}

namespace {

// Who chose which expert (every thread builds the same lists): the (slot, token) pairs, as t * n_used + i, grouped by
// expert in token order; pairs[first[e] .. first[e + 1]) chose expert e.
struct routing {
    std::vector<int64_t> first, pairs, chosen; // chosen: the experts with at least one pair, in index order
    routing(const tensor& ids, int64_t n_expert) {
        const int64_t n_used = ids.ne[0], n_tok = ids.ne[1];
        first.assign(size_t(n_expert + 1), 0);
        pairs.resize(size_t(n_used * n_tok));
        auto id_at = [&](int64_t i, int64_t t) {
            const int32_t e = *at<int32_t>(ids, i, t);
            TS_ASSERT(e >= 0 && e < n_expert);
            return int64_t(e);
        };
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t i = 0; i < n_used; i++) first[size_t(id_at(i, t) + 1)]++;
        for (int64_t e = 0; e < n_expert; e++) first[size_t(e + 1)] += first[size_t(e)];
        std::vector<int64_t> fill(first.begin(), first.end() - 1);
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t i = 0; i < n_used; i++) pairs[size_t(fill[size_t(id_at(i, t))]++)] = t * n_used + i;
        for (int64_t e = 0; e < n_expert; e++)
            if (first[size_t(e + 1)] > first[size_t(e)]) chosen.push_back(e);
    }
};

constexpr int64_t ROWS = 16; // weight rows per job block (one repacked group)

// llama.cpp's mul_mat_id sums an expert chosen by 8 pairs or more in ggml's tiled order, as mul_mat a batch of 8 rows
// (the K formats it does not repack: the kinds whose batch order is x16_batch::m8; q4_K, which it repacks, keeps its
// gemv at any batch), and the other experts in vec_dot's
constexpr int64_t tiled_pairs = 8;

// Weights repacked in 16-row groups (repack.h), experts one after another: the chosen experts' groups only, each
// against the activation rows of every pair that chose the expert, gathered into one contiguous run so the group's
// kernel takes them 4 at a time (a group is read from memory once a batch). Same bits as the row kernels.
void mul_mat_id_x16(const compute_params& p, tensor& dst, const repacked_weight& rw) {
    const tensor& w = *dst.src[0];
    const tensor& b = *dst.src[1];
    const tensor& ids = *dst.src[2];
    const cpu_type_ops* ops = find_cpu_ops(w.t);
    const x16_kernels kern = find_x16_kernels(rw.kind);
    const int64_t k = w.ne[0], n = w.ne[1], n_expert = w.ne[2];
    const int64_t n_b = b.ne[1], n_used = ids.ne[0], n_tok = ids.ne[1], n_pairs = n_used * n_tok;
    const size_t act_row = row_size(ops->dot_type, k);
    const size_t ss = kern.sums ? size_t(x16_act_sums_count(rw.kind, k)) : 0;
    // scratch: counter | activation rows (n_b * n_tok) | their sums | the same gathered in pair order, and sums
    auto* counter = reinterpret_cast<std::atomic<int64_t>*>(p.wdata);
    uint8_t* act = p.wdata + 64;
    auto* sums = reinterpret_cast<int32_t*>(act + (act_row * size_t(n_b * n_tok) + 63) / 64 * 64);
    uint8_t* packed = reinterpret_cast<uint8_t*>(sums) + (ss * 4 * size_t(n_b * n_tok) + 63) / 64 * 64;
    auto* packed_sums = reinterpret_cast<int32_t*>(packed + (act_row * size_t(n_pairs) + 63) / 64 * 64);

    const routing rt(ids, n_expert); // ids come from an earlier node
    auto src_row = [&](int64_t q) {  // the activation row of pair q
        const int64_t t = rt.pairs[size_t(q)] / n_used, i = rt.pairs[size_t(q)] % n_used;
        return t * n_b + i % n_b;
    };
    // one pair an expert (decode): the kernel reads the pair's row where it is, no gathering (one barrier less)
    bool gather = false;
    for (int64_t e : rt.chosen) gather |= rt.first[size_t(e + 1)] - rt.first[size_t(e)] > 1;

    int64_t a0, a1;
    split(n_b * n_tok, p.ith, p.nth, a0, a1);
    for (int64_t r = a0; r < a1; r++) {
        uint8_t* a = act + size_t(r) * act_row;
        ops->act_from_float(at<float>(b, 0, r % n_b, r / n_b), a, k);
        if (ss) kern.sums(a, sums + size_t(r) * ss, k);
    }
    if (p.ith == 0) counter->store(0, std::memory_order_relaxed);
    p.barrier();
    if (gather) {
        split(n_pairs, p.ith, p.nth, a0, a1);
        for (int64_t q = a0; q < a1; q++) {
            std::memcpy(packed + size_t(q) * act_row, act + size_t(src_row(q)) * act_row, act_row);
            if (ss) std::memcpy(packed_sums + size_t(q) * ss, sums + size_t(src_row(q)) * ss, ss * 4);
        }
        p.barrier();
    }

    // jobs: (chosen expert, run of groups). Decode (a pair or two an expert): each expert in nth runs, so a thread
    // streams long stretches of an expert's matrix (qwen3moe-small decode, 2 threads: gate / up 91 -> 78 us, down 96
    // -> 85 us against runs of a quarter of a thread's share per expert)
    const int64_t groups = n / ROWS;
    const int64_t n_chosen = int64_t(rt.chosen.size());
    const int64_t run = n_pairs <= 2 * n_used ? (groups + p.nth - 1) / p.nth : 1;
    const int64_t runs = (groups + run - 1) / run;
    const int64_t n_jobs = n_chosen * runs;
    constexpr int64_t NA = 16; // activation rows per kernel call
    float y[NA * ROWS];
    for (int64_t job = counter->fetch_add(1, std::memory_order_relaxed); job < n_jobs;
         job = counter->fetch_add(1, std::memory_order_relaxed)) {
        const int64_t e = rt.chosen[size_t(job / runs)], g0 = (job % runs) * run, g1 = std::min(groups, g0 + run);
        const int64_t q0 = rt.first[size_t(e)], q1 = rt.first[size_t(e + 1)];
        const x16_gemm_fn gemm = kern.batch == x16_batch::m8 && q1 - q0 >= tiled_pairs ? kern.gemm_batch : kern.gemm;
        for (int64_t g = g0; g < g1; g++)
            for (int64_t qa = q0; qa < q1; qa += NA) {
                const int64_t na = std::min(NA, q1 - qa);
                const uint8_t* a = gather ? packed + size_t(qa) * act_row : act + size_t(src_row(qa)) * act_row;
                const int32_t* as = !ss      ? nullptr
                                    : gather ? packed_sums + size_t(qa) * ss
                                             : sums + size_t(src_row(qa)) * ss;
                gemm(rw.group(e * groups + g), k / 32, a, act_row, as, ss, na, y, ROWS);
                for (int64_t j = 0; j < na; j++) {
                    const int64_t t = rt.pairs[size_t(qa + j)] / n_used, i = rt.pairs[size_t(qa + j)] % n_used;
                    float* out = at<float>(dst, g * ROWS, i, t);
                    for (int64_t r = 0; r < ROWS; r++)
                        out[r] = rw.scale == 1.0f ? y[j * ROWS + r] : y[j * ROWS + r] * rw.scale;
                }
            }
    }
}

} // namespace

size_t mul_mat_id_work_size(const tensor& node) {
    const tensor& w = *node.src[0];
    const tensor& b = *node.src[1];
    const cpu_type_ops* ops = find_cpu_ops(w.t, false);
    if (!ops) return 0;
    const size_t act_row = row_size(ops->dot_type, b.ne[0]);
    const size_t rows = size_t(b.ne[1] * b.ne[2]), pairs = size_t(node.ne[1] * node.ne[2]);
    // the repacked path's sums: at most one int32 per 4 elements
    const size_t sums = size_t(b.ne[0] / 4) * 4;
    auto pad = [](size_t x) { return (x + 63) / 64 * 64; };
    return 64 + pad(act_row * rows) + pad(sums * rows) + pad(act_row * pairs) + pad(sums * pairs);
}

void mul_mat_id(const compute_params& p, tensor& dst) {
    const tensor& w = *dst.src[0];
    const tensor& b = *dst.src[1];
    const tensor& ids = *dst.src[2];
    // (a stack of one expert whose rows are not whole groups is repacked as a 2-D matrix, its last rows left out:
    // the row kernels below take it)
    const repacked_weight* rw = p.repacked ? p.repacked->find(w) : nullptr;
    if (rw && w.ne[1] % 16 == 0) {
        TS_ASSERT(b.t == type::f32 && b.nb[0] == 4 && rw->k == w.ne[0] && rw->n == w.ne[1] * w.ne[2]);
        mul_mat_id_x16(p, dst, *rw);
        return;
    }
    const cpu_type_ops* base_ops = find_cpu_ops(w.t, p.reference);
    TS_ASSERT(base_ops && b.t == type::f32 && b.nb[0] == 4);
    // as mul_mat: weights llama.cpp repacks (rows a multiple of 8) are summed in its repacked kernels' order
    cpu_type_ops rows8;
    const cpu_type_ops* ops = base_ops;
    if (base_ops->vec_dot_rows8 && (w.flags & flag_param) && w.ne[1] % 8 == 0) {
        rows8 = *base_ops;
        rows8.vec_dot = base_ops->vec_dot_rows8;
        ops = &rows8;
    }
    const int64_t k = w.ne[0], n = w.ne[1], n_expert = w.ne[2];
    const int64_t n_b = b.ne[1], n_used = ids.ne[0], n_tok = ids.ne[1];
    const size_t act_row = row_size(ops->dot_type, k);
    auto* counter = reinterpret_cast<std::atomic<int64_t>*>(p.wdata);
    uint8_t* act = p.wdata + 64;
    const tensor& w_root = w.view_src ? *w.view_src : w;
    const float w_scale = read_tensor_scale(w.t, w_root.data, w_root.n_elements());

    // 1) activation rows -> the dot type, all threads
    int64_t a0, a1;
    split(n_b * n_tok, p.ith, p.nth, a0, a1);
    for (int64_t r = a0; r < a1; r++)
        ops->act_from_float(at<float>(b, 0, r % n_b, r / n_b), act + size_t(r) * act_row, k);
    if (p.ith == 0) counter->store(0, std::memory_order_relaxed);
    p.barrier();

    // 2) jobs: (chosen expert, block of ROWS weight rows); each expert's rows read once a batch
    const routing rt(ids, n_expert);
    const int64_t blocks = (n + ROWS - 1) / ROWS;
    const int64_t n_jobs = int64_t(rt.chosen.size()) * blocks;
    for (int64_t job = counter->fetch_add(1, std::memory_order_relaxed); job < n_jobs;
         job = counter->fetch_add(1, std::memory_order_relaxed)) {
        const int64_t e = rt.chosen[size_t(job / blocks)], r0 = (job % blocks) * ROWS, r1 = std::min(n, r0 + ROWS);
        const uint8_t* we = static_cast<const uint8_t*>(w.data) + e * w.nb[2];
        const vec_dot_fn dot = ops == base_ops && base_ops->vec_dot_batch8 &&
                                       rt.first[size_t(e + 1)] - rt.first[size_t(e)] >= tiled_pairs
                                   ? base_ops->vec_dot_batch8
                                   : ops->vec_dot;
        for (int64_t q = rt.first[size_t(e)]; q < rt.first[size_t(e + 1)]; q++) {
            const int64_t t = rt.pairs[size_t(q)] / n_used, i = rt.pairs[size_t(q)] % n_used;
            const uint8_t* a = act + size_t(t * n_b + i % n_b) * act_row;
            float* y = at<float>(dst, 0, i, t);
            for (int64_t r = r0; r < r1; r++) {
                const float v = dot(we + r * w.nb[1], a, k);
                y[r] = w_scale == 1.0f ? v : v * w_scale;
            }
        }
    }
}

void add_id(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const tensor& b = *dst.src[1];
    const tensor& ids = *dst.src[2];
    TS_ASSERT(a.nb[0] == 4 && b.nb[0] == 4);
    for_rows(p, dst, [&](int64_t i, int64_t t, int64_t) {
        const int32_t e = *at<int32_t>(ids, i, t);
        TS_ASSERT(e >= 0 && e < b.ne[1]);
        const float* x = at<float>(a, 0, i, t);
        const float* z = at<float>(b, 0, e);
        float* y = at<float>(dst, 0, i, t);
        for (int64_t j = 0; j < dst.ne[0]; j++) y[j] = x[j] + z[j];
    });
}

} // namespace tessera::cpu
