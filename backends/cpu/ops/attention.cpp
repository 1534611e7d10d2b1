// attention.cpp: O = softmax(scale * Q K^T + mask) V over an f16 (or f32) KV cache, one (token, head) pair per task.
// q (hd, n_head, n_tok) f32; k, v (hd, n_head_kv, n_kv); mask (n_kv, n_tok) additive; query head h reads KV head
// h / (n_head / n_head_kv). Scores are kept in a per-thread scratch row, then s = exp(s - max) / sum.
#include "ops.h"

#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "ggml-like/fp16.h"

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

} // namespace

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
    const to_float_fn f16_to_f32 = find_cpu_ops(type::f16, p.reference)->to_float;

    // scratch per thread: scores (n_kv) + k/v row (hd) + accumulator (hd)
    float* scratch = reinterpret_cast<float*>(p.wdata) + size_t(p.ith) * size_t(n_kv + 2 * hd);
    float* s = scratch;
    float* row = s + n_kv;
    float* acc = row + hd;

    int64_t j0, j1;
    split(n_tok * n_head, p.ith, p.nth, j0, j1);
    for (int64_t job = j0; job < j1; job++) {
        const int64_t t = job / n_head, h = job % n_head, hk = h / group;
        const float* qv = at<float>(q, 0, h, t);
        const float* m = mask ? at<float>(*mask, 0, t) : nullptr;
        TS_ASSERT(q.nb[0] == 4);
        // S = scale * q . k_j + mask_j ; M = max S
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < n_kv; j++) {
            if (m && m[j] == -std::numeric_limits<float>::infinity()) {
                s[j] = -std::numeric_limits<float>::infinity();
                continue;
            }
            load_row_f32(k, at<uint8_t>(k, 0, hk, j), row, hd, f16_to_f32);
            float dot = 0.0f;
            for (int64_t i = 0; i < hd; i++) dot += qv[i] * row[i];
            s[j] = dot * scale + (m ? m[j] : 0.0f);
            mx = std::max(mx, s[j]);
        }
        // P = exp(S - M); O = sum_j P_j v_j / sum_j P_j
        for (int64_t i = 0; i < hd; i++) acc[i] = 0.0f;
        double sum = 0.0;
        for (int64_t j = 0; j < n_kv; j++) {
            if (s[j] == -std::numeric_limits<float>::infinity()) continue;
            const float pj = std::exp(s[j] - mx);
            sum += pj;
            load_row_f32(v, at<uint8_t>(v, 0, hk, j), row, hd, f16_to_f32);
            for (int64_t i = 0; i < hd; i++) acc[i] += pj * row[i];
        }
        float* o = at<float>(dst, 0, h, t);
        const float inv = sum > 0 ? float(1.0 / sum) : 0.0f;
        for (int64_t i = 0; i < hd; i++) o[i] = acc[i] * inv;
    }
}

} // namespace tessera::cpu
