// softmax.cpp: y = softmax(x * scale + mask) per row; exponentials summed in double (as ggml).
#include "ops.h"

#include <cmath>
#include <limits>

namespace tessera::cpu {

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
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < ne0; i++) {
            y[i] = x[i * xs] * scale + (m ? m[i] : 0.0f);
            mx = std::max(mx, y[i]);
        }
        double sum = 0.0;
        for (int64_t i = 0; i < ne0; i++) {
            const float e = mx == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(y[i] - mx);
            y[i] = e;
            sum += e;
        }
        const float inv = sum > 0 ? float(1.0 / sum) : 0.0f;
        for (int64_t i = 0; i < ne0; i++) y[i] *= inv;
    });
}

} // namespace tessera::cpu
