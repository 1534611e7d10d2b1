// softmax.cpp: y = softmax(x * scale + mask) per row, in ggml's float order (ggml_compute_forward_soft_max_f32 with
// its AVX-512 ggml_vec_soft_max_f32): the exponentials of whole groups of 16 by ggml's vector expf, each group's 16
// summed as _mm512_reduce_add_ps folds them, the rest by libm's expf one at a time, every partial sum added in
// double; then one multiplication by the f32 reciprocal. MoE routers pick experts from these probabilities and weigh
// the experts' outputs by them, so they must be llama.cpp's bits. Also the attention sink's step (ops.h).
#include "ops.h"

#include "backends/cpu/quant/vec_dot.h"

#include <cmath>
#include <limits>

namespace tessera::cpu {

namespace {

// y[i] = e^(y[i] - mx) in place; returns their sum in ggml's order
double exp_sum_ggml_order(float* y, int64_t n, float mx) {
    double sum = 0.0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        float v[16];
        for (int l = 0; l < 16; l++) y[i + l] = v[l] = expf_ggml(y[i + l] - mx);
        // _mm512_reduce_add_ps: halves, then quarters, then (0 + 2) + (1 + 3)
        float h8[8], h4[4];
        for (int l = 0; l < 8; l++) h8[l] = v[l + 8] + v[l];
        for (int l = 0; l < 4; l++) h4[l] = h8[l + 4] + h8[l];
        sum += double((h4[0] + h4[2]) + (h4[1] + h4[3]));
    }
    for (; i < n; i++) {
        y[i] = std::exp(y[i] - mx);
        sum += double(y[i]);
    }
    return sum;
}

} // namespace

void soft_max(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const tensor* mask = dst.src[1];
    const float scale = dst.op_params.f[0];
    const int64_t ne0 = a.ne[0];
    for_rows(p, dst, [&](int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        const float* m = mask ? at<float>(*mask, 0, i1) : nullptr;
        float* y = at<float>(dst, 0, i1, i2, i3);
        const size_t xs = a.nb[0] / 4;
        // scaled, then masked: two roundings, as ggml's two passes
        for (int64_t i = 0; i < ne0; i++) y[i] = x[i * xs] * scale;
        if (m)
            for (int64_t i = 0; i < ne0; i++) y[i] += m[i];
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < ne0; i++) mx = std::max(mx, y[i]);
        if (mx == -std::numeric_limits<float>::infinity()) { // every entry masked: zeros (ggml would give NaNs)
            for (int64_t i = 0; i < ne0; i++) y[i] = 0.0f;
            return;
        }
        const double sum = exp_sum_ggml_order(y, ne0, mx);
        const float inv = float(1.0 / sum);
        for (int64_t i = 0; i < ne0; i++) y[i] *= inv;
    });
}

void attention_sink(float sink, float M, float& S, float* acc, int64_t hd) {
    float ms = 1.0f, vs = 1.0f;
    if (sink > M) {
        ms = std::exp(M - sink);
        for (int64_t d = 0; d < hd; d++) acc[d] *= ms;
    } else {
        vs = std::exp(sink - M);
    }
    S = std::fma(S, ms, vs);
}

} // namespace tessera::cpu
