// norm.cpp: the row reductions: rms_norm, y = x / sqrt(mean(x^2) + eps) per row (sum of squares in double, as ggml),
// and sum_rows (in double, as ggml_vec_sum_f32).
#include "ops.h"

#include <cmath>

namespace tessera::cpu {

void rms_norm(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const float eps = dst.op_params.f[0];
    const int64_t ne0 = a.ne[0];
    for_rows(p, dst, [&](int64_t i1, int64_t i2, int64_t i3) {
        const float* x = at<float>(a, 0, i1, i2, i3);
        float* y = at<float>(dst, 0, i1, i2, i3);
        const size_t xs = a.nb[0] / 4;
        double sum = 0.0;
        for (int64_t i = 0; i < ne0; i++) sum += double(x[i * xs] * x[i * xs]); // f32 square, f64 sum (as ggml)
        const float mean = float(sum / double(ne0));
        const float s = 1.0f / std::sqrt(mean + eps);
        for (int64_t i = 0; i < ne0; i++) y[i] = x[i * xs] * s;
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
