// rope.cpp: rotary position embedding on (head_dim, n_head, n_tok) rows.
// theta_i = pos * freq_scale * base^(-2i/n_rot) / ff[i]; normal mode rotates (x[2i], x[2i+1]), neox (x[i],
// x[i+n_rot/2]). The per-pair angle is built by repeated multiplication in f32, as ggml does, so results agree with it
// bit for bit. YaRN (ext_factor != 0) blends the interpolated angle with the extrapolated one (theta / ff) by a ramp
// over the pair index and scales cos and sin by attn_factor * (1 + 0.1 ln(1 / freq_scale)); otherwise they are scaled
// by attn_factor (LongRoPE's magnitude factor; 1 for plain rope, an exact no-op).
#include "ops.h"

#include "ggml-like/ops.h"
#include "ggml-like/rope_angles.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tessera::cpu {

namespace {

// One head's rotation. Built twice, plain and with FMA instructions, the choice made once at load time (GCC's
// target_clones): std::fma is the same exact operation either way, but without the instruction it is a libm call
// per element (3% of a SmolLM2 prompt).
__attribute__((target_clones("fma", "default"))) void rotate(const float* x, size_t xs, float* y, const float* cache,
                                                             int n_rot, bool neox) {
    const int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        const float c = cache[2 * i], s = cache[2 * i + 1];
        const int j0 = neox ? i : 2 * i;
        const int j1 = neox ? i + half : 2 * i + 1;
        const float x0 = x[size_t(j0) * xs], x1 = x[size_t(j1) * xs];
        // x0 c - x1 s and x0 s + x1 c with the first product fused, as ggml's compiled code computes them
        y[j0] = std::fma(x0, c, -(x1 * s));
        y[j1] = std::fma(x0, s, x1 * c);
    }
}

} // namespace

void rope(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const tensor& pos = *dst.src[1];
    const tensor* ff = dst.src[2];
    const int n_rot = dst.op_params.i[0];
    const auto mode = rope_mode(dst.op_params.i[1]);
    const rope_angles ang = rope_angles_of(dst.op_params);
    const int64_t hd = a.ne[0], n_head = a.ne[1], n_tok = a.ne[2];

    std::vector<float> cache(static_cast<size_t>(n_rot)); // (cos, sin) per pair
    int64_t t0, t1;
    split(n_tok, p.ith, p.nth, t0, t1);
    for (int64_t t = t0; t < t1; t++) {
        rope_cos_sin_row(static_cast<const int32_t*>(pos.data)[t], n_rot, ang,
                         ff ? static_cast<const float*>(ff->data) : nullptr, cache.data());
        for (int64_t h = 0; h < n_head; h++) {
            const float* x = at<float>(a, 0, h, t);
            float* y = at<float>(dst, 0, h, t);
            const size_t xs = a.nb[0] / 4;
            rotate(x, xs, y, cache.data(), n_rot, mode == rope_mode::neox);
            for (int64_t i = n_rot; i < hd; i++) y[i] = x[i * xs];
        }
    }
}

} // namespace tessera::cpu
