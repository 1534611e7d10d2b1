// attention.cpp: O = softmax(scale * Q K^T + mask) V over an f16 (or f32) KV cache, one (token, head) pair per task.
// q (hd, n_head, n_tok) f32; k, v (hd, n_head_kv, n_kv); mask (n_kv, n_tok) additive; query head h reads KV head
// h / (n_head / n_head_kv). One pass with an online softmax: M = running max, S = sum exp(s - M), O = sum exp(s - M) v / S.
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

// q . k summed in the order of ggml's AVX-512 f16 dot (4 registers x 16 lanes of fused multiply-adds, registers
// folded 0+2, 1+3, then 0+1, then the 16 lanes folded in halves; leftovers added in double). Attention rounds to f16
// and so amplifies last-bit differences; summing in the same order keeps our logits equal to llama.cpp's.
inline float dot_ggml_order(const float* x, const float* y, int64_t n) {
    constexpr int64_t lanes = 16, regs = 4, step = lanes * regs;
    float sum[regs][lanes] = {};
    const int64_t np = n - n % step;
    for (int64_t i = 0; i < np; i += step)
        for (int64_t j = 0; j < regs; j++)
            for (int64_t l = 0; l < lanes; l++)
                sum[j][l] = std::fma(x[i + j * lanes + l], y[i + j * lanes + l], sum[j][l]);
    float v[lanes];
    for (int64_t l = 0; l < lanes; l++) v[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
    float h8[8], h4[4];
    for (int l = 0; l < 8; l++) h8[l] = v[l + 8] + v[l];
    for (int l = 0; l < 4; l++) h4[l] = h8[l + 4] + h8[l];
    double total = double((h4[0] + h4[2]) + (h4[1] + h4[3]));
    for (int64_t i = np; i < n; i++) total += double(x[i] * y[i]);
    return float(total);
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
    TS_ASSERT(q.nb[0] == 4);
    const to_float_fn f16_to_f32 = find_cpu_ops(type::f16, p.reference)->to_float;
    // ggml's CPU flash attention keeps the V accumulator in f16 for the K/V-f16 cache when fewer than 64 queries are
    // evaluated at once (decode, short prompts), and rounds Q to f16 for the K dot. We follow it so that greedy
    // output agrees with llama.cpp token for token; batches of >= 64 queries accumulate in f32, as ggml's tiled path.
    const bool f16_path = k.t == type::f16 && n_tok < 64;

    // scratch per thread: k/v row (hd) + accumulator (hd) + q row (hd)
    float* scratch = reinterpret_cast<float*>(p.wdata) + size_t(p.ith) * size_t(3 * hd);
    float* row = scratch;
    float* acc = row + hd;
    float* qr = acc + hd;

    int64_t j0, j1;
    split(n_tok * n_head, p.ith, p.nth, j0, j1);
    for (int64_t job = j0; job < j1; job++) {
        const int64_t t = job / n_head, h = job % n_head, hk = h / group;
        const float* qv = at<float>(q, 0, h, t);
        const float* m = mask ? at<float>(*mask, 0, t) : nullptr;
        for (int64_t i = 0; i < hd; i++) qr[i] = f16_path ? fp16_to_fp32(fp32_to_fp16(qv[i])) : qv[i];
        for (int64_t i = 0; i < hd; i++) acc[i] = 0.0f;
        // online softmax: M = running max, S = running sum of exp(s - M), acc = sum exp(s - M) v
        float M = -std::numeric_limits<float>::infinity(), S = 0.0f;
        for (int64_t j = 0; j < n_kv; j++) {
            const float mv = m ? m[j] : 0.0f;
            if (mv == -std::numeric_limits<float>::infinity()) continue;
            load_row_f32(k, at<uint8_t>(k, 0, hk, j), row, hd, f16_to_f32);
            const float s = dot_ggml_order(qr, row, hd) * scale + mv;
            float ms = 1.0f, vs = 1.0f;
            if (s > M) {
                ms = std::exp(M - s);
                M = s;
                for (int64_t d = 0; d < hd; d++) acc[d] = f16_path ? fp16_to_fp32(fp32_to_fp16(acc[d] * ms)) : acc[d] * ms;
            } else {
                vs = std::exp(s - M);
            }
            load_row_f32(v, at<uint8_t>(v, 0, hk, j), row, hd, f16_to_f32);
            for (int64_t d = 0; d < hd; d++) {
                const float a = std::fma(row[d], vs, acc[d]);
                acc[d] = f16_path ? fp16_to_fp32(fp32_to_fp16(a)) : a;
            }
            S = std::fma(S, ms, vs);
        }
        float* o = at<float>(dst, 0, h, t);
        const float inv = S == 0.0f ? 0.0f : 1.0f / S;
        for (int64_t i = 0; i < hd; i++) o[i] = acc[i] * inv;
    }
}

} // namespace tessera::cpu
