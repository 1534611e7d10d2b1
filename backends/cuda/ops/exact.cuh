// exact.cuh: device copies of the CPU's scalar functions whose results the CUDA backend's exact mode
// (TESSERA_CUDA_EXACT=1) must reproduce bit for bit:
//   expf_ggml   ggml's vector expf (backends/cpu/quant/vec_dot.cpp), used by the CPU's silu / swiglu and by the tiled
//               attention's softmax; pure float arithmetic, so the same FMA sequence gives the same bits.
//   expf_glibc  glibc's expf (since 2.27; sysdeps/ieee754/flt-32/e_expf.c, the table-driven algorithm from ARM's
//               optimized-routines), which the CPU calls through std::exp in the attention's rescale step and the
//               swiglu tail: a 32-entry table of 2^(i/32) and a degree-3 polynomial evaluated in double. Its result is
//               within 0.502 ulp, so a correctly rounded exp (or CUDA's expf) differs from it in a fraction of
//               inputs; the same double steps give the same float (glibc's FMA build fuses some of them: that moves the
//               double result by an ulp at most, which the final rounding to float absorbs but in ~1e-9 of inputs).
// Why exactness matters: see NOTES.md ("CPU vs CUDA agreement"): with 8-bit activations a one-ulp difference anywhere
// becomes independent rounding noise within two layers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tessera::cuda {

__device__ __forceinline__ float expf_ggml(float x) {
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = __fsub_rn(z, r);
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const float u = __fmul_rn(b, b);
    const float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                         fmaf(0x1.ffffecp-1f, b, 1.0f));
    if (fabsf(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    return ldexpf(j, int(n));
}

__device__ __forceinline__ float expf_glibc(float x) {
    constexpr int N = 32;
    constexpr uint64_t T[N] = {
        0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
        0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
        0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
        0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
        0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
        0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
        0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
        0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull};
    const uint32_t ix = __float_as_uint(x);
    const uint32_t abstop = (ix >> 20) & 0x7ff;
    if (abstop >= 0x42b) { // |x| >= 88 or x is nan
        if (ix == 0xff800000u) return 0.0f;
        if (abstop >= 0x7f8) return x + x;
        if (x > 0x1.62e42ep6f) return INFINITY;
        if (x < -0x1.9fe368p6f) return 0.0f;
    }
    const double InvLn2N = 0x1.71547652b82fep+0 * N, SHIFT = 0x1.8p+52;
    const double C0 = 0x1.c6af84b912394p-5 / N / N / N, C1 = 0x1.ebfce50fac4f3p-3 / N / N,
                 C2 = 0x1.62e42ff0c52d6p-1 / N;
    const double xd = double(x);
    const double z = __dmul_rn(InvLn2N, xd);
    double kd = __dadd_rn(z, SHIFT);
    const uint64_t ki = uint64_t(__double_as_longlong(kd));
    kd = __dsub_rn(kd, SHIFT);
    const double r = __dsub_rn(z, kd);
    uint64_t t = T[ki % N];
    t += ki << (52 - 5);
    const double s = __longlong_as_double(static_cast<long long>(t));
    const double zz = fma(C0, r, C1);
    const double r2 = __dmul_rn(r, r);
    double y = fma(C2, r, 1.0);
    y = fma(zz, r2, y);
    y = __dmul_rn(y, s);
    return __double2float_rn(y);
}

} // namespace tessera::cuda
