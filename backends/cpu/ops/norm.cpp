// norm.cpp: the row reductions: rms_norm, y = x / sqrt(mean(x^2) + eps) per row (sum of squares in double, as ggml),
// rms_norm_part (the sum of squares given), and sum_rows (in double, as ggml_vec_sum_f32).
#include "ops.h"

#include <cmath>

namespace tessera::cpu {

namespace {

// 1 / sqrt(mean(x^2) + eps) of a row of n floats at stride xs: f32 squares summed in f64, as ggml
float rms_scale(const float* x, size_t xs, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += double(x[i * xs] * x[i * xs]);
    const float mean = float(sum / double(n));
    return 1.0f / std::sqrt(mean + eps);
}

} // namespace

void rms_norm(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const float eps = dst.op_params.f[0];
    const int64_t ne0 = a.ne[0];
    for_rows(p, dst, [&](int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        float* y = at<float>(dst, 0, i1, i2, i3);
        const size_t xs = a.nb[0] / 4;
        const float s = rms_scale(x, xs, ne0, eps);
        for (int64_t i = 0; i < ne0; i++) y[i] = x[i * xs] * s;
    });
}

void rms_norm_part(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const tensor& ss = *dst.src[1];
    const float eps = dst.op_params.f[0], width = float(dst.op_params.i[1]);
    const int64_t ne0 = a.ne[0];
    for_rows(p, dst, [&](int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        float* y = at<float>(dst, 0, i1, i2, i3);
        const size_t xs = a.nb[0] / 4;
        const float s = 1.0f / std::sqrt(*at<float>(ss, 0, i1, i2, i3) / width + eps);
        for (int64_t i = 0; i < ne0; i++) y[i] = x[i * xs] * s;
    });
}

void add_rms_norm_mul(const compute_params& p, const tensor* sum, const tensor& norm, tensor& dst) {
    const tensor& w = *dst.src[1];
    const float eps = norm.op_params.f[0];
    const int64_t ne0 = norm.ne[0];
    const float* wr = static_cast<const float*>(w.data);
    for_rows(p, dst, [&](int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(sum ? *sum : *norm.src[0], 0, i1, i2, i3);
        if (sum) { // the add's row first: its result is read later too
            const float* a = at<float>(*sum->src[0], 0, i1, i2, i3);
            const float* b = at<float>(*sum->src[1], 0, i1, i2, i3);
            float* r = at<float>(*sum, 0, i1, i2, i3);
            for (int64_t i = 0; i < ne0; i++) r[i] = a[i] + b[i];
        }
        float* y = at<float>(dst, 0, i1, i2, i3);
        const float s = rms_scale(x, 1, ne0, eps);
        for (int64_t i = 0; i < ne0; i++) {
            const float n = x[i] * s; // rms_norm's result, then mul's product
            y[i] = n * wr[i];
        }
    });
}

void sum_rows(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    for_rows(p, dst, [&](int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        const size_t xs = a.nb[0] / 4;
        double sum = 0.0;
        for (int64_t i = 0; i < a.ne[0]; i++) sum += double(x[i * xs]);
        *at<float>(dst, 0, i1, i2, i3) = float(sum);
    });
}

} // namespace tessera::cpu
