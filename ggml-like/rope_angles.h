// rope_angles.h: the angle and magnitude of one rotation pair of rope, shared by the CPU's rope, CUDA's rope kernels
// and the q/k/v GEMV's rope epilogue, so that every path turns the same parameters into the same floats.
//   theta_i = pos theta_scale^i (i repeated f32 products, as ggml), extrap = theta_i / ff[i], interp = freq_scale
//   extrap; plain rope and LongRoPE rotate by interp with magnitude attn_factor; YaRN (ext_factor != 0) blends the
//   two by a ramp over the pair index between the correction dimensions and multiplies the magnitude by
//   1 + 0.1 ln(1 / freq_scale). The products GCC contracts into FMAs in ggml's compiled rope_yarn are FMAs here.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define TS_HOST_DEVICE __host__ __device__
#else
#define TS_HOST_DEVICE
#endif

namespace tessera {

struct rope_angles {
    float theta_scale = 1.0f; // freq_base^(-2 / n_rot)
    float freq_scale = 1.0f;
    float ext_factor = 0.0f;
    float attn_factor = 1.0f;
    float corr_lo = 0.0f, corr_hi = 0.0f;
};

// From a rope node's op_params (ggml-like/ops.h: i[0] n_rot, f[2] base, f[3] scale, f[4] ext, f[5] attn, f[6..7]).
template <class P> inline rope_angles rope_angles_of(const P& op) {
    rope_angles a;
    a.theta_scale = std::pow(op.f[2], -2.0f / float(op.i[0]));
    a.freq_scale = op.f[3];
    a.ext_factor = op.f[4];
    a.attn_factor = op.f[5];
    a.corr_lo = op.f[6];
    a.corr_hi = op.f[7];
    return a;
}

// Pair i's rotation angle *th and magnitude *mscale, from theta = pos theta_scale^i and the pair's factor ff (1 when
// the model has none). cos(*th) * *mscale and sin(*th) * *mscale are the values rope multiplies by.
TS_HOST_DEVICE inline void rope_pair_angle(float theta, int i, float ff, const rope_angles& a, float* th,
                                           float* mscale) {
    const float extrap = theta / ff;
    float t = a.freq_scale * extrap;
    float ms = a.attn_factor;
    if (a.ext_factor != 0.0f) {
        const float y = (float(i) - a.corr_lo) / fmaxf(0.001f, a.corr_hi - a.corr_lo);
        const float ramp_mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * a.ext_factor;
        t = fmaf(t, 1.0f - ramp_mix, extrap * ramp_mix);
        ms *= fmaf(0.1f, logf(1.0f / a.freq_scale), 1.0f);
    }
    *th = t;
    *mscale = ms;
}

// The host's (cos, sin) of every pair of one position into cs[2i], cs[2i + 1] (glibc's cosf and sinf, as ggml's CPU
// backend): the CPU's rope, and CUDA's exact mode, which uploads these.
inline void rope_cos_sin_row(int32_t pos, int n_rot, const rope_angles& a, const float* ff, float* cs) {
    float theta = float(pos);
    for (int i = 0; i < n_rot / 2; i++) {
        float th, ms;
        rope_pair_angle(theta, i, ff ? ff[i] : 1.0f, a, &th, &ms);
        cs[2 * i] = std::cos(th) * ms;
        cs[2 * i + 1] = std::sin(th) * ms;
        theta *= a.theta_scale;
    }
}

} // namespace tessera
