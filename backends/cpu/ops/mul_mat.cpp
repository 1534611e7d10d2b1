// mul_mat.cpp: dst (n, m) = W (k, n)^T x (k, m): activations are converted once to the weight's dot type (q8_0, q8_1,
// f16, ...) into the shared scratch, then every thread computes 16x16 output tiles with the type's vec_dot, so a
// tile's 16 weight rows and 16 activation rows stay in L1 while they are reused. A weight type with a per-tensor
// scale (i2_s, in the tail after its rows) has row dots at unit scale: the output is multiplied by that scale.
#include "ops.h"

#include <atomic>

#include "backends/cpu/quant/float16.h"
#include "backends/cpu/quant/repack.h"
#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "quant/format.h"

namespace tessera::cpu {

namespace {
constexpr int64_t TILE_N = 16; // weight rows per tile
constexpr int64_t TILE_M = 16; // activation rows per tile

// The row kernels for w: its type's, or, for the matrices llama.cpp would repack (rows a multiple of 8; a token table
// only as the tied output, which llama.cpp loads as a second, repacked copy), the ones summing in its repacked
// kernels' order (kept in `storage`); else, for a batch of m >= 2 activation rows, the type's tinyBLAS order where it
// has one (iq4_nl), for m >= 8 its batch kernel (llama.cpp's tiled K-format kernels). Null if the type has none.
const cpu_type_ops* row_ops_for(const tensor& w, bool reference, cpu_type_ops& storage, int64_t m) {
    const cpu_type_ops* base = find_cpu_ops(w.t, reference);
    if (!base) return base;
    const bool rows8 = base->vec_dot_rows8 && (w.flags & flag_param) && !w.lookup_only() && w.ne[1] % 8 == 0;
    if (!rows8) {
        const vec_dot_fn batch = base->vec_dot_sgemm && m >= 2   ? base->vec_dot_sgemm
                                 : base->vec_dot_batch8 && m >= 8 ? base->vec_dot_batch8
                                                                  : nullptr;
        if (!batch) return base;
        storage = *base;
        storage.vec_dot = batch;
        storage.gemm4 = storage.gemv4 = nullptr;
        storage.row_panel = batch == base->vec_dot_batch8 ? base->row_panel_batch8 : nullptr;
        return &storage;
    }
    storage = *base;
    storage.vec_dot = base->vec_dot_rows8;
    storage.gemm4 = base->gemm4_rows8;
    storage.gemv4 = base->gemv4_rows8;
    storage.row_panel = nullptr;
    return &storage;
}

// Weight rows [n0, n1) x activation rows [m0, m1) of one (i2, i3) slice with the row kernels (act: the converted
// activations of every row, act_row bytes each), times w_scale: a weight row against the tile's activation rows where
// the type decodes slowly (row_panel), 4 x 4 blocks where the tile allows (gemm4), 4 weight rows a pass over one
// activation row (gemv4), else vec_dot; each gives vec_dot's bits, or the order the kernels of row_ops_for stand for
void row_tile(const cpu_type_ops& ops, const tensor& w, tensor& dst, const uint8_t* act, size_t act_row, float w_scale,
              int64_t n0, int64_t n1, int64_t m0, int64_t m1, int64_t i2, int64_t i3) {
    const tensor& x = *dst.src[1];
    const int64_t k = w.ne[0], m = x.ne[1], ne2 = x.ne[2];
    const int64_t r2 = ne2 / w.ne[2], r3 = x.ne[3] / w.ne[3]; // broadcast of w over dims 2, 3
    const int64_t ys = int64_t(dst.nb[1] / sizeof(float));
    const uint8_t* a0 = act + size_t((i3 * ne2 + i2) * m) * act_row;
    auto w_row = [&](int64_t i) { return at<uint8_t>(w, 0, i, i2 / r2, i3 / r3); };
    const bool packed = w.nb[0] == type_size(w.t);
    if (ops.row_panel && packed && m1 - m0 >= 2) {
        for (int64_t in = n0; in < n1; in++) {
            float* y = at<float>(dst, 0, m0, i2, i3) + in;
            ops.row_panel(w_row(in), a0 + size_t(m0) * act_row, act_row, m1 - m0, k, y, size_t(ys));
            if (w_scale != 1.0f)
                for (int64_t j = 0; j < m1 - m0; j++) y[j * ys] *= w_scale;
        }
        return;
    }
    int64_t im = m0;
    if (ops.gemm4 && packed)
        for (; im + 4 <= m1; im += 4) {
            float* y = at<float>(dst, 0, im, i2, i3);
            int64_t in = n0;
            for (; in + 4 <= n1; in += 4)
                ops.gemm4(w_row(in), w.nb[1], a0 + size_t(im) * act_row, act_row, k, y + in, size_t(ys));
            for (; in < n1; in++)
                for (int64_t j = 0; j < 4; j++)
                    y[j * ys + in] = ops.vec_dot(w_row(in), a0 + size_t(im + j) * act_row, k);
            if (w_scale != 1.0f)
                for (int64_t j = 0; j < 4; j++)
                    for (int64_t i = n0; i < n1; i++) y[j * ys + i] *= w_scale;
        }
    for (; im < m1; im++) {
        const uint8_t* a = a0 + size_t(im) * act_row;
        float* y = at<float>(dst, 0, im, i2, i3);
        int64_t in = n0;
        if (ops.gemv4 && packed)
            for (; in + 4 <= n1; in += 4) {
                ops.gemv4(w_row(in), w.nb[1], a, act_row, k, y + in, 1);
                if (w_scale != 1.0f)
                    for (int64_t i = in; i < in + 4; i++) y[i] *= w_scale;
            }
        for (; in < n1; in++) y[in] = w_scale * ops.vec_dot(w_row(in), a, k);
    }
}

// Weights repacked in groups of 16 rows (repack.h): the same two steps, tiles of one group x 16 activation rows; the
// rows past the last group (a 2-D weight's n % 16) by the row kernels, whose order the repacked kind keeps (same
// bits). Several matrices of one kind and k reading the same activations (q, k, v; gate, up: mul_mat_group) share
// step 1 and one tile counter.
struct x16_job {
    tensor* dst;
    const repacked_weight* rw;
    cpu_type_ops ops; // row_ops_for's (the rows past the groups)
};

struct x16_acts {
    std::atomic<int64_t>* counter;
    uint8_t* act;
    size_t act_row;
    int32_t* sums; // the rows' int32 corrections (kinds with kern.sums), ss a row
    size_t ss;
};

// 1) x rows -> the dot type (and their sums), all threads, the tile counter reset; ends with the barrier
x16_acts x16_prepare(const compute_params& p, const tensor& x, const x16_job& j, const x16_kernels& kern) {
    const int64_t k = j.rw->k;
    const int64_t m = x.ne[1], ne2 = x.ne[2], ne3 = x.ne[3];
    x16_acts a;
    a.act_row = row_size(j.ops.dot_type, k);
    const int64_t n_x_rows = m * ne2 * ne3;
    a.counter = reinterpret_cast<std::atomic<int64_t>*>(p.wdata);
    a.act = p.wdata + 64;
    a.ss = kern.sums ? size_t(x16_act_sums_count(j.rw->kind, k)) : 0;
    a.sums = kern.sums ? reinterpret_cast<int32_t*>(a.act + (a.act_row * size_t(n_x_rows) + 63) / 64 * 64) : nullptr;
    int64_t a0, a1;
    split(n_x_rows, p.ith, p.nth, a0, a1);
    for (int64_t r = a0; r < a1; r++) {
        const int64_t i1 = r % m, i2 = (r / m) % ne2, i3 = r / (m * ne2);
        uint8_t* row = a.act + size_t(r) * a.act_row;
        j.ops.act_from_float(at<float>(x, 0, i1, i2, i3), row, k);
        if (a.sums) kern.sums(row, a.sums + size_t(r) * a.ss, k);
    }
    if (p.ith == 0) a.counter->store(0, std::memory_order_relaxed);
    p.barrier();
    return a;
}

// A tile is a run of `run` consecutive groups x 16 activation rows, activation tiles fastest (a group is read from
// memory once and reused from cache for every activation tile). With one activation tile (decode) the groups go out
// in runs of about 1/4 of a thread's share: each thread then streams whole stretches of the matrix in order, which
// the hardware prefetcher follows (one group at a time, interleaved between threads, made two threads slower than
// one). A last run (c == group_runs) takes the rows past the groups, if any.
struct x16_grid {
    int64_t groups = 0, tail0 = 0, tiles_m = 0, run = 0, group_runs = 0, runs = 0, n_tiles = 0;
};
x16_grid x16_grid_of(const repacked_weight& rw, const tensor& x, int nth) {
    x16_grid g;
    g.groups = rw.n / 16;
    g.tail0 = g.groups * 16;
    g.tiles_m = (x.ne[1] + TILE_M - 1) / TILE_M;
    g.run = g.tiles_m == 1 ? std::max<int64_t>(1, g.groups / (4 * nth)) : 1;
    g.group_runs = (g.groups + g.run - 1) / g.run;
    g.runs = g.group_runs + (g.tail0 < rw.n ? 1 : 0);
    g.n_tiles = g.runs * g.tiles_m * x.ne[2] * x.ne[3];
    return g;
}

// 2) tile t of one matrix
void x16_tile(const compute_params& p, const x16_job& j, const x16_grid& gr, const x16_kernels& kern, const x16_acts& a,
              int64_t t) {
    tensor& dst = *j.dst;
    const tensor& w = *dst.src[0];
    const repacked_weight& rw = *j.rw;
    const int64_t k = rw.k, n = rw.n, m = dst.src[1]->ne[1], ne2 = dst.src[1]->ne[2];
    const size_t ys = dst.nb[1] / sizeof(float);
    const int64_t tm = t % gr.tiles_m, c = (t / gr.tiles_m) % gr.runs, i23 = t / (gr.tiles_m * gr.runs);
    const int64_t i2 = i23 % ne2, i3 = i23 / ne2;
    const int64_t m0 = tm * TILE_M, m1 = std::min(m, m0 + TILE_M);
    const int64_t r0 = (i3 * ne2 + i2) * m + m0; // first activation row of the tile
    if (c == gr.group_runs) { // the rows past the groups, as mul_mat's row path computes them
        row_tile(j.ops, w, dst, a.act, a.act_row, rw.scale, gr.tail0, n, m0, m1, i2, i3);
        if (p.out_scale != 1.0f)
            for (int64_t r = m0; r < m1; r++)
                for (int64_t i = gr.tail0; i < n; i++) at<float>(dst, 0, r, i2, i3)[i] *= p.out_scale;
        return;
    }
    const int64_t nbat = x16_batch_rows(kern, m, m0, m1 - m0); // the first nbat rows in the batch order
    for (int64_t g = c * gr.run; g < std::min(gr.groups, (c + 1) * gr.run); g++) {
        float* y = at<float>(dst, 16 * g, m0, i2, i3);
        const auto rows = [&](x16_gemm_fn gemm, int64_t j0, int64_t j1) {
            const int64_t r = r0 + j0;
            gemm(rw.group(g), k / 32, a.act + size_t(r) * a.act_row, a.act_row,
                 a.sums ? a.sums + size_t(r) * a.ss : nullptr, a.ss, j1 - j0, y + j0 * int64_t(ys), ys);
        };
        if (nbat > 0) rows(kern.gemm_batch, 0, nbat);
        if (nbat < m1 - m0) rows(kern.gemm, nbat, m1 - m0);
        if (rw.scale != 1.0f) // i2_s: rows at unit scale, times the tensor's scale as in the row path
            for (int64_t r = 0; r < m1 - m0; r++)
                for (int64_t i = 0; i < 16; i++) y[r * int64_t(ys) + i] *= rw.scale;
        if (p.out_scale != 1.0f) // a fused `mul` by a scalar: the same single rounding as the mul op
            for (int64_t r = 0; r < m1 - m0; r++)
                for (int64_t i = 0; i < 16; i++) y[r * int64_t(ys) + i] *= p.out_scale;
    }
}

x16_job make_x16_job(tensor& dst, const repacked_weight& rw) {
    cpu_type_ops storage;
    const cpu_type_ops* ops = row_ops_for(*dst.src[0], false, storage, dst.src[1]->ne[1]);
    TS_ASSERT(ops != nullptr);
    return {&dst, &rw, *ops};
}

// The matrices of jobs[0..n) (n <= 3; one kind, type and k, one x) as one step 1 and one tile loop over all their
// tiles, each computed as it would be alone (the same bits)
void mul_mat_x16(const compute_params& p, const x16_job* jobs, int n) {
    TS_ASSERT(n >= 1 && n <= 3);
    const tensor& x = *jobs[0].dst->src[1];
    const x16_kernels kern = find_x16_kernels(jobs[0].rw->kind);
    const x16_acts a = x16_prepare(p, x, jobs[0], kern);
    x16_grid grids[3];
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        grids[i] = x16_grid_of(*jobs[i].rw, x, p.nth);
        total += grids[i].n_tiles;
    }
    for (int64_t t = a.counter->fetch_add(1, std::memory_order_relaxed); t < total;
         t = a.counter->fetch_add(1, std::memory_order_relaxed)) {
        int i = 0;
        int64_t local = t;
        while (local >= grids[i].n_tiles) local -= grids[i++].n_tiles;
        x16_tile(p, jobs[i], grids[i], kern, a, local);
    }
}

// f16 / bf16 weights in llama.cpp's float orders (float16.h). 1) activation rows rounded to the weight's type into the
// scratch (halves, as ggml's vec_dot_type); 2) prompts (where llama.cpp takes tinyBLAS): jobs of 16 weight rows x a
// block of ~84 activation rows, weight blocks fastest (the activation block stays in L2 while the weights stream
// past it); otherwise row dots, the rows handed out in runs (~4 a thread), each run read by the kernel's gemv as 4
// prefetched streams.
void mul_mat_float16(const compute_params& p, tensor& dst, const float16_kernels& kern) {
    const tensor& w = *dst.src[0];
    const tensor& x = *dst.src[1];
    const int64_t k = w.ne[0], n = w.ne[1];
    const int64_t m = x.ne[1], ne2 = x.ne[2], ne3 = x.ne[3];
    const int64_t r2 = ne2 / w.ne[2], r3 = ne3 / w.ne[3];
    auto* counter = reinterpret_cast<std::atomic<int64_t>*>(p.wdata);
    uint16_t* act = reinterpret_cast<uint16_t*>(p.wdata + 64);
    const int64_t n_x_rows = m * ne2 * ne3;
    int64_t a0, a1;
    split(n_x_rows, p.ith, p.nth, a0, a1);
    for (int64_t r = a0; r < a1; r++)
        kern.from_float(at<float>(x, 0, r % m, (r / m) % ne2, r / (m * ne2)), act + size_t(r) * size_t(k), k);
    if (p.ith == 0) counter->store(0, std::memory_order_relaxed);
    p.barrier();

    const size_t ws = w.nb[1] / sizeof(uint16_t), ys = dst.nb[1] / sizeof(float);
    auto w_row = [&](int64_t i, int64_t i2, int64_t i3) { return at<uint16_t>(w, 0, i, i2 / r2, i3 / r3); };
    auto scale = [&](float* y, int64_t rows, int64_t cols) {
        if (p.out_scale != 1.0f) // a fused `mul` by a scalar: the same single rounding as the mul op
            for (int64_t j = 0; j < cols; j++)
                for (int64_t i = 0; i < rows; i++) y[j * int64_t(ys) + i] *= p.out_scale;
    };
    if (m >= 2 && k % kern.gemm_k == 0 && n % 4 == 0) { // where llama.cpp takes tinyBLAS
        // blocks of ~84 activation rows (a multiple of the tile's 3), of even size: a weight block is read from
        // memory once per activation block, and converted (bf16) once per job
        constexpr int64_t ROWS_B = 16, COLS_B = 84;
        const int64_t blocks_m = (m + COLS_B - 1) / COLS_B;
        const int64_t cols_b = ((m + blocks_m - 1) / blocks_m + 2) / 3 * 3;
        const int64_t blocks_n = (n + ROWS_B - 1) / ROWS_B;
        const int64_t n_jobs = blocks_n * blocks_m * ne2 * ne3;
        for (int64_t t = counter->fetch_add(1, std::memory_order_relaxed); t < n_jobs;
             t = counter->fetch_add(1, std::memory_order_relaxed)) {
            const int64_t bn = t % blocks_n, bm = (t / blocks_n) % blocks_m, i23 = t / (blocks_n * blocks_m);
            const int64_t i2 = i23 % ne2, i3 = i23 / ne2;
            const int64_t n0 = bn * ROWS_B, rows = std::min(n, n0 + ROWS_B) - n0;
            const int64_t m0 = bm * cols_b, cols = std::min(m, m0 + cols_b) - m0;
            float* y = at<float>(dst, n0, m0, i2, i3);
            kern.gemm(w_row(n0, i2, i3), ws, rows, act + size_t(i23 * m + m0) * size_t(k), size_t(k), cols, k, y, ys);
            scale(y, rows, cols);
        }
        return;
    }
    const int64_t run = std::max<int64_t>(16, (n + 4 * p.nth - 1) / (4 * p.nth)); // ~4 runs a thread
    const int64_t runs = (n + run - 1) / run, n_jobs = runs * ne2 * ne3;
    for (int64_t t = counter->fetch_add(1, std::memory_order_relaxed); t < n_jobs;
         t = counter->fetch_add(1, std::memory_order_relaxed)) {
        const int64_t i23 = t / runs, i2 = i23 % ne2, i3 = i23 / ne2;
        const int64_t n0 = (t % runs) * run, n1 = std::min(n, n0 + run);
        for (int64_t j = 0; j < m; j++) {
            float* y = at<float>(dst, n0, j, i2, i3);
            kern.gemv(w_row(n0, i2, i3), ws, n1 - n0, act + size_t(i23 * m + j) * size_t(k), k, y, 1);
            scale(y, n1 - n0, 1);
        }
    }
}

} // namespace

size_t mul_mat_work_size(const tensor& node) {
    const cpu_type_ops* ops = find_cpu_ops(node.src[0]->t);
    const tensor& x = *node.src[1];
    const size_t rows = size_t(x.ne[1] * x.ne[2] * x.ne[3]);
    const size_t act = row_size(ops->dot_type, x.ne[0]) * rows;
    // tile counter, activations, then (weights repacked in 16-row groups) the activation rows' int32 corrections
    const type t = node.src[0]->t;
    if (t == type::f16 || t == type::bf16) // float16.h: activations as halves
        return 64 + (size_t(x.ne[0]) * 2 * rows + 63) / 64 * 64;
    x16_kind kind;
    const size_t sums = x16_kind_for(*node.src[0], kind) ? size_t(x16_act_sums_count(kind, x.ne[0])) * 4 * rows : 0;
    return 64 + (act + 63) / 64 * 64 + sums;
}

bool mul_mat_groupable(const repack_store& repacked, const tensor& a, const tensor& b) {
    if (a.o != op::mul_mat || b.o != op::mul_mat || a.src[1] != b.src[1]) return false;
    const tensor& x = *a.src[1];
    if (x.t != type::f32 || x.nb[0] != 4) return false;
    const repacked_weight* ra = repacked.find(*a.src[0]);
    const repacked_weight* rb = repacked.find(*b.src[0]);
    return ra && rb && ra->kind == rb->kind && ra->k == rb->k && a.src[0]->t == b.src[0]->t;
}

void mul_mat_group(const compute_params& p, tensor* const* dsts, int n) {
    x16_job jobs[3];
    TS_ASSERT(n >= 1 && n <= 3 && p.repacked);
    for (int i = 0; i < n; i++) {
        const repacked_weight* rw = p.repacked->find(*dsts[i]->src[0]);
        TS_ASSERT(rw && dsts[i]->src[1] == dsts[0]->src[1]);
        jobs[i] = make_x16_job(*dsts[i], *rw);
    }
    mul_mat_x16(p, jobs, n);
}

void mul_mat(const compute_params& p, tensor& dst) {
    const tensor& w = *dst.src[0];
    const tensor& x = *dst.src[1];
    if (const repacked_weight* rw = p.repacked ? p.repacked->find(w) : nullptr) {
        TS_ASSERT(x.t == type::f32 && x.nb[0] == 4 && rw->k == w.ne[0] && rw->n == w.ne[1]);
        const x16_job job = make_x16_job(dst, *rw);
        mul_mat_x16(p, &job, 1);
        return;
    }
    const float16_kernels* f16k = p.reference || w.nb[0] != 2 ? nullptr : find_float16_kernels(w.t);
    if (const float16_kernels* kern = f16k) {
        TS_ASSERT(x.t == type::f32 && x.nb[0] == 4);
        mul_mat_float16(p, dst, *kern);
        return;
    }
    // weights llama.cpp would repack (rows a multiple of 8) are summed in its repacked kernels' order
    cpu_type_ops row_storage;
    const cpu_type_ops* ops = row_ops_for(w, p.reference, row_storage, x.ne[1]);
    TS_ASSERT(ops != nullptr && x.t == type::f32 && x.nb[0] == 4);
    const int64_t k = w.ne[0], n = w.ne[1];
    const int64_t m = x.ne[1], ne2 = x.ne[2], ne3 = x.ne[3];
    const size_t act_row = row_size(ops->dot_type, k);
    // scratch: a cache line for the shared tile counter, then the converted activations
    auto* counter = reinterpret_cast<std::atomic<int64_t>*>(p.wdata);
    uint8_t* act = p.wdata + 64;
    // per-tensor scale; a view of the weight reads its source's tail (views of a weight keep its type)
    const tensor& w_root = w.view_src ? *w.view_src : w;
    const float w_scale = read_tensor_scale(w.t, w_root.data, w_root.n_elements());

    // 1) x rows -> dot type, all threads
    const int64_t n_x_rows = m * ne2 * ne3;
    int64_t a0, a1;
    split(n_x_rows, p.ith, p.nth, a0, a1);
    for (int64_t r = a0; r < a1; r++) {
        const int64_t i1 = r % m, i2 = (r / m) % ne2, i3 = r / (m * ne2);
        ops->act_from_float(at<float>(x, 0, i1, i2, i3), act + size_t(r) * act_row, k);
    }
    // the tile counter: reset before the barrier, then threads take tiles as they finish (a thread on a busy core
    // does fewer tiles instead of holding everyone at the next barrier)
    if (p.ith == 0) counter->store(0, std::memory_order_relaxed);
    p.barrier();

    // 2) tiles of (TILE_N weight rows) x (TILE_M activation rows), spread over threads. One activation row (decode)
    // reads each weight once: tiles of ~1/4 of a thread's share of rows, so that a thread streams long runs of them
    // (the prefetchers' pace; 16-row tiles taken in turn left 30% of a 0.6B q6_K file's tg64 on the table, 2 threads)
    const int64_t run = (n / (4 * p.nth) + TILE_N - 1) / TILE_N * TILE_N;
    const int64_t tile_n = n_x_rows == 1 ? std::max(TILE_N, run) : TILE_N;
    // a type that decodes each weight row for the tile's activation rows (row_panel) takes 4x taller tiles: 4x fewer
    // decodes (the IQ3 grids: pp512 ~+8% on a 0.6B shape, AVX2 VM, 2 threads, 2 noisy rounds)
    const int64_t tile_m = ops->row_panel ? 4 * TILE_M : TILE_M;
    const int64_t tiles_n = (n + tile_n - 1) / tile_n, tiles_m = (m + tile_m - 1) / tile_m;
    const int64_t n_tiles = tiles_n * tiles_m * ne2 * ne3;
    for (int64_t t = counter->fetch_add(1, std::memory_order_relaxed); t < n_tiles;
         t = counter->fetch_add(1, std::memory_order_relaxed)) {
        const int64_t tn = t % tiles_n, tm = (t / tiles_n) % tiles_m;
        const int64_t i23 = t / (tiles_n * tiles_m);
        const int64_t i2 = i23 % ne2, i3 = i23 / ne2;
        const int64_t n0 = tn * tile_n, n1 = std::min(n, n0 + tile_n);
        const int64_t m0 = tm * tile_m, m1 = std::min(m, m0 + tile_m);
        row_tile(*ops, w, dst, act, act_row, w_scale, n0, n1, m0, m1, i2, i3);
        if (p.out_scale != 1.0f) // a fused `mul` by a scalar: the same single rounding as the mul op
            for (int64_t j = m0; j < m1; j++) {
                float* y = at<float>(dst, 0, j, i2, i3);
                for (int64_t i = n0; i < n1; i++) y[i] *= p.out_scale;
            }
    }
}

} // namespace tessera::cpu
