// attention.cpp: O = softmax(scale * Q K^T + mask) V over an f16 (or f32) KV cache, one (token, head) pair per task.
// q (hd, n_head, n_tok) f32; k, v (hd, n_head_kv, n_kv); mask (n_kv, n_tok) additive; query head h reads KV head
// h / (n_head / n_head_kv). One pass with an online softmax: M = running max, S = sum exp(s - M), O = sum exp(s - M) v
// / S.
#include "ops.h"

#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "ggml-like/fp16.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

namespace tessera::cpu {

namespace {

inline void load_row_f32(const tensor& t, const uint8_t* src, float* dst, int64_t n, to_float_fn f16_to_f32) {
    if (t.t == type::f32)
        for (int64_t i = 0; i < n; i++) dst[i] = reinterpret_cast<const float*>(src)[i];
    else
        f16_to_f32(src, dst, n);
}

constexpr int64_t TILE = 64; // keys per tile and queries per job in the prefill path, as ggml's tiled attention
constexpr int ROWS = 12;     // query rows scored together against a tile (the kernels take 3 (AVX2) or 6 at a time)

// Prefill (>= 64 queries): ggml's tiled flash attention, reproduced step for step for every (query head, token): per
// tile of 64 keys, S = scale * Q K^T + mask (an FMA chain over the head dimension), a running max M,
// P = expf_ggml(S - M) summed 16 at a time in double, O += P V (an FMA chain over the keys), O *= expf(M_old - M_new)
// when the max grows; O / sum at the end. What differs from ggml is only the grouping, which no result depends on:
// a job is (KV head, 64 consecutive tokens) with all the query heads that read that KV head, so each K and V tile is
// converted to f32 once per job, and the kernels take several query rows per pass over a tile (each K or V vector
// loaded feeds several FMAs). Jobs are handed out by a counter, the last tokens' (they see the most keys) first.
void attention_tiled(const compute_params& p, tensor& dst, const float_kernels& fk, to_float_fn f16_to_f32) {
    const tensor& q = *dst.src[0];
    const tensor& k = *dst.src[1];
    const tensor& v = *dst.src[2];
    const tensor* mask = dst.src[3];
    const float scale = dst.op_params.f[0];
    const int64_t hd = q.ne[0], n_head = q.ne[1], n_tok = q.ne[2], n_head_kv = k.ne[1], n_kv = k.ne[2];
    const int64_t group = n_head / n_head_kv, n_blocks = (n_tok + TILE - 1) / TILE;
    constexpr float neg_inf = -std::numeric_limits<float>::infinity();

    // shared: the job counter (a cache line); per thread (attention_work_size): kt (hd x 64), vt (64 x hd), a K row
    // (hd), acc (group * 64 x hd), scores (ROWS x 64), M and S (group * 64 each)
    auto* counter = reinterpret_cast<std::atomic<int64_t>*>(p.wdata);
    const size_t per_thread = size_t(2 * TILE * hd + hd + group * TILE * hd + ROWS * TILE + 2 * group * TILE);
    float* kt = reinterpret_cast<float*>(p.wdata + 64) + size_t(p.ith) * per_thread;
    float* vt = kt + TILE * hd;
    float* krow = vt + TILE * hd;
    float* acc = krow + hd;
    float* sc = acc + group * TILE * hd;
    float* M = sc + ROWS * TILE;
    float* S = M + group * TILE;
    if (p.ith == 0) counter->store(0, std::memory_order_relaxed);
    p.barrier();

    const int64_t n_jobs = n_head_kv * n_blocks;
    for (int64_t job = counter->fetch_add(1, std::memory_order_relaxed); job < n_jobs;
         job = counter->fetch_add(1, std::memory_order_relaxed)) {
        const int64_t hk = job % n_head_kv, t0 = (n_blocks - 1 - job / n_head_kv) * TILE;
        const int64_t n_rows_tok = std::min(TILE, n_tok - t0), n_rows = group * n_rows_tok;
        // row r: query head hk * group + r / n_rows_tok, token t0 + r % n_rows_tok
        auto q_row = [&](int64_t r) { return at<float>(q, 0, hk * group + r / n_rows_tok, t0 + r % n_rows_tok); };
        std::fill(acc, acc + n_rows * hd, 0.0f);
        std::fill(M, M + n_rows, neg_inf);
        std::fill(S, S + n_rows, 0.0f);
        for (int64_t ic = 0; ic < n_kv; ic += TILE) {
            const int64_t kv_tile = std::min(TILE, n_kv - ic);
            if (mask) { // a tile every row masks out entirely is skipped (a row counted whole: the loop vectorizes)
                bool all_masked = true;
                for (int64_t r = 0; r < n_rows_tok && all_masked; r++) {
                    const float* m = at<float>(*mask, ic, t0 + r);
                    int64_t n_masked = 0;
                    for (int64_t j = 0; j < kv_tile; j++) n_masked += m[j] == neg_inf;
                    all_masked = n_masked == kv_tile;
                }
                if (all_masked) continue;
            }
            for (int64_t j = 0; j < kv_tile; j++) {
                load_row_f32(k, at<uint8_t>(k, 0, hk, ic + j), krow, hd, f16_to_f32);
                for (int64_t d = 0; d < hd; d++) kt[d * TILE + j] = krow[d];
                load_row_f32(v, at<uint8_t>(v, 0, hk, ic + j), vt + j * hd, hd, f16_to_f32);
            }
            for (int64_t d = 0; d < hd; d++)
                for (int64_t j = kv_tile; j < TILE; j++) kt[d * TILE + j] = 0.0f;
            for (int64_t r0 = 0; r0 < n_rows; r0 += ROWS) {
                const int nr = int(std::min<int64_t>(ROWS, n_rows - r0));
                const float* qs[ROWS];
                for (int i = 0; i < nr; i++) qs[i] = q_row(r0 + i);
                fk.kq_tile(qs, nr, kt, hd, sc);
                // per row: scale, mask, the running max and sum; rows the tile masks out entirely take no P V
                float* accs[ROWS];
                const float* ps[ROWS];
                int n_live = 0;
                for (int i = 0; i < nr; i++) {
                    const int64_t r = r0 + i;
                    float* s = sc + i * TILE;
                    const float* m = mask ? at<float>(*mask, ic, t0 + r % n_rows_tok) : nullptr;
                    const float tile_max = fk.score_tile(s, m, scale, kv_tile);
                    if (tile_max == neg_inf) continue;
                    const float m_new = std::fmax(M[r], tile_max);
                    if (m_new > M[r]) {
                        const float ms = std::exp(M[r] - m_new);
                        for (int64_t d = 0; d < hd; d++) acc[r * hd + d] *= ms;
                        S[r] *= ms;
                    }
                    M[r] = m_new;
                    S[r] = float(double(S[r]) + fk.softmax_tile(s, m_new));
                    accs[n_live] = acc + r * hd;
                    ps[n_live++] = s;
                }
                fk.pv_tile(accs, ps, n_live, vt, kv_tile, hd);
            }
        }
        if (const tensor* sinks = dst.src[4])
            for (int64_t r = 0; r < n_rows; r++)
                attention_sink(*at<float>(*sinks, hk * group + r / n_rows_tok), M[r], S[r], acc + r * hd, hd);
        for (int64_t r = 0; r < n_rows; r++) {
            float* o = at<float>(dst, 0, hk * group + r / n_rows_tok, t0 + r % n_rows_tok);
            const float inv = S[r] == 0.0f ? 0.0f : 1.0f / S[r];
            for (int64_t d = 0; d < hd; d++) o[d] = acc[r * hd + d] * inv;
        }
    }
}

// floats of the decode path's scratch per thread: 3 rows of hd per head of the group, then its M and S
size_t decode_scratch(int64_t hd, int64_t group) {
    return size_t(3 * hd * group + 2 * group);
}

} // namespace

size_t attention_work_size(const tensor& node, int n_threads) {
    const int64_t hd = node.src[0]->ne[0], group = node.src[0]->ne[1] / node.src[1]->ne[1];
    // decode: decode_scratch per thread; prefill: a counter's cache line, then attention_tiled's per-thread scratch
    const size_t decode = decode_scratch(hd, group),
                 prefill = size_t(2 * TILE * hd + hd + group * TILE * hd + ROWS * TILE + 2 * group * TILE);
    return 64 + size_t(n_threads) * std::max(decode, prefill) * sizeof(float);
}

void attention(const compute_params& p, tensor& dst) {
    const tensor& q = *dst.src[0];
    const tensor& k = *dst.src[1];
    const tensor& v = *dst.src[2];
    const tensor* mask = dst.src[3];
    const float scale = dst.op_params.f[0];
    const int64_t hd = q.ne[0], n_head = q.ne[1], n_tok = q.ne[2];
    const int64_t n_head_kv = k.ne[1], n_kv = k.ne[2];
    const int64_t group = n_head / n_head_kv;
    TS_ASSERT(k.t == v.t && (k.t == type::f16 || k.t == type::f32) && k.nb[0] == type_size(k.t));
    TS_ASSERT(q.nb[0] == 4);
    const to_float_fn f16_to_f32 = find_cpu_ops(type::f16, p.reference)->to_float;
    const float_kernels& fk = find_float_kernels(p.reference);
    // ggml's CPU flash attention keeps the V accumulator in f16 for the K/V-f16 cache when fewer than 64 queries are
    // evaluated at once (decode, short prompts), and rounds Q to f16 for the K dot. We follow it so that greedy
    // output agrees with llama.cpp token for token; batches of >= 64 queries take ggml's tiled path (above).
    if (n_tok >= TILE) return attention_tiled(p, dst, fk, f16_to_f32);
    const bool f16_path = k.t == type::f16;

    // Jobs: (token, run of gs query heads sharing one K/V head). Each K and V row is read once for the run's heads,
    // whose dependency chains (the f16 accumulator's round trip) then overlap; every head's own arithmetic is
    // unchanged (the same steps in the same order). gs: the largest divisor of the group that still leaves a job for
    // every thread. qwen3moe-small decode at depth 2048, 2 threads: 1846 -> 1332 us a layer.
    int64_t gs = group;
    while (gs > 1 && (group % gs != 0 || n_tok * (n_head / gs) < p.nth)) gs--;
    const int64_t n_runs = n_head / gs;
    // scratch per thread (attention_work_size): per head of a run, the accumulator (hd), the q row (hd), q as f16 (hd
    // halves, in hd floats' room), then M and S (gs each)
    float* scratch = reinterpret_cast<float*>(p.wdata) + size_t(p.ith) * size_t(decode_scratch(hd, group));
    auto acc_of = [&](int64_t g) { return scratch + g * 3 * hd; };
    auto qr_of = [&](int64_t g) { return scratch + g * 3 * hd + hd; };
    auto q16_of = [&](int64_t g) { return reinterpret_cast<uint16_t*>(scratch + g * 3 * hd + 2 * hd); };
    float* M = scratch + gs * 3 * hd;
    float* S = M + gs;
    const from_float_fn f16_row = find_cpu_ops(type::f16, p.reference)->act_from_float;
    constexpr float neg_inf = -std::numeric_limits<float>::infinity();
    // an f16 cache: the kernel that keeps a head's accumulator in registers (attend_f16), up to 64 lanes at a time.
    // At depth 2048 (qwen3moe-small, 2 threads) 1332 -> 607 us a layer.
    const bool in_registers = f16_path && fk.attend_f16 && k.nb[2] == v.nb[2] && k.nb[2] % 2 == 0;

    int64_t j0, j1;
    split(n_tok * n_runs, p.ith, p.nth, j0, j1);
    for (int64_t job = j0; job < j1; job++) {
        const int64_t t = job / n_runs, h0 = (job % n_runs) * gs, hk = h0 / group;
        const float* m = mask ? at<float>(*mask, 0, t) : nullptr;
        for (int64_t g = 0; g < gs; g++) {
            const float* qv = at<float>(q, 0, h0 + g, t);
            float* qr = qr_of(g);
            if (f16_path) {
                f16_row(qv, q16_of(g), hd); // Q is rounded to f16 for the K dot, as in ggml
                f16_to_f32(q16_of(g), qr, hd);
            } else {
                for (int64_t i = 0; i < hd; i++) qr[i] = qv[i];
            }
            std::fill(acc_of(g), acc_of(g) + hd, 0.0f);
            M[g] = neg_inf; // online softmax: M = running max, S = running sum of exp(s - M), acc = sum exp(s - M) v
            S[g] = 0.0f;
        }
        if (in_registers) {
            // blocks of attend_rows K/V rows (32: 16 KB at 4 K/V heads of 64, in L1 for the run's heads), each head's
            // accumulator in registers across a block; every head still takes the rows in order
            const auto* k0 = reinterpret_cast<const uint16_t*>(at<uint8_t>(k, 0, hk, 0));
            const auto* v0 = reinterpret_cast<const uint16_t*>(at<uint8_t>(v, 0, hk, 0));
            const int64_t stride = int64_t(k.nb[2] / 2);
            for (int64_t b0 = 0; b0 < n_kv; b0 += attend_rows) {
                const int64_t nb = std::min(attend_rows, n_kv - b0);
                for (int64_t g = 0; g < gs; g++)
                    fk.attend_f16(qr_of(g), k0 + b0 * stride, v0 + b0 * stride, stride, m ? m + b0 : nullptr, nb,
                                  scale, hd, M[g], S[g], acc_of(g));
            }
        } else {
            for (int64_t j = 0; j < n_kv; j++) {
                const float mv = m ? m[j] : 0.0f;
                if (mv == neg_inf) continue;
                const uint8_t* kr = at<uint8_t>(k, 0, hk, j);
                const uint8_t* vr = at<uint8_t>(v, 0, hk, j);
                for (int64_t g = 0; g < gs; g++) {
                    float* acc = acc_of(g);
                    const float s = (f16_path ? fk.dot_f16(qr_of(g), reinterpret_cast<const uint16_t*>(kr), hd)
                                              : fk.dot(qr_of(g), reinterpret_cast<const float*>(kr), hd)) *
                                        scale +
                                    mv;
                    float ms = 1.0f, vs = 1.0f;
                    if (s > M[g]) {
                        ms = std::exp(M[g] - s);
                        M[g] = s;
                        fk.scale(acc, ms, hd, f16_path);
                    } else {
                        vs = std::exp(s - M[g]);
                    }
                    if (f16_path)
                        fk.mad_f16(acc, reinterpret_cast<const uint16_t*>(vr), vs, hd, true);
                    else
                        fk.mad(acc, reinterpret_cast<const float*>(vr), vs, hd, false);
                    S[g] = std::fma(S[g], ms, vs);
                }
            }
        }
        for (int64_t g = 0; g < gs; g++) {
            float* acc = acc_of(g);
            if (const tensor* sinks = dst.src[4]) attention_sink(*at<float>(*sinks, h0 + g), M[g], S[g], acc, hd);
            float* o = at<float>(dst, 0, h0 + g, t);
            const float inv = S[g] == 0.0f ? 0.0f : 1.0f / S[g];
            for (int64_t i = 0; i < hd; i++) o[i] = acc[i] * inv;
        }
    }
}

} // namespace tessera::cpu
