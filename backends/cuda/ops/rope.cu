// rope.cu: rotary position embedding on (head_dim, n_head, n_tok) rows, as backends/cpu/ops/rope.cpp:
//   theta_i = pos * freq_scale * base^(-2i/n_rot) / ff[i]; normal mode rotates (x[2i], x[2i+1]), neox (x[i],
//   x[i+n_rot/2]); dimensions >= n_rot pass through.
// base^(-2i/n_rot) is built by i repeated f32 multiplications (as ggml and the CPU), and the rotation keeps the CPU's
// fused first product, so the two backends agree up to sin/cos rounding.
#include "backends/cuda/ops/ops.cuh"

#include "ggml-like/ops.h"

#include <cmath>
#include <vector>

namespace tessera::cuda {

namespace {

constexpr int ROPE_THREADS = 256;
constexpr int ROPE_HEADS = 4;

// One block per (token, group of ROPE_HEADS heads): a decode step has one token, and 32 heads in one block left the
// GPU nearly idle. Threads first fill (cos, sin) of every pair in shared memory, then take (head, pair) items.
template <bool NEOX>
static __global__ void __launch_bounds__(ROPE_THREADS)
    rope_kernel(const float* x, shape4 sx, const int32_t* pos, const float* ff, float* y, shape4 sy, int n_rot,
                float theta_scale, float freq_scale, const float* table) {
    extern __shared__ float cs[]; // (cos, sin) per pair: 2 * (n_rot / 2) floats
    const int64_t t = blockIdx.x;
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half && table; i += blockDim.x) { // exact mode: the host's (cos, sin)
        cs[2 * i] = table[t * n_rot + 2 * i];
        cs[2 * i + 1] = table[t * n_rot + 2 * i + 1];
    }
    for (int i = threadIdx.x; i < half && !table; i += blockDim.x) {
        float theta = float(pos[t]);
        for (int j = 0; j < i; j++) theta *= theta_scale;
        const float f = ff ? ff[i] : 1.0f;
        float s, c;
        sincosf(freq_scale * (theta / f), &s, &c);
        cs[2 * i] = c;
        cs[2 * i + 1] = s;
    }
    __syncthreads();
    const int64_t hd = sx.ne[0], h0 = int64_t(blockIdx.y) * ROPE_HEADS;
    const int64_t n_head = sx.ne[1] - h0 < ROPE_HEADS ? sx.ne[1] - h0 : ROPE_HEADS;
    const int64_t n_items = n_head * (hd - half); // per head: n_rot/2 pairs, then hd - n_rot pass-through values
    for (int64_t it = threadIdx.x; it < n_items; it += blockDim.x) {
        const int64_t h = h0 + it / (hd - half), i = it % (hd - half);
        const float* xr = x + h * sx.nb[1] + t * sx.nb[2];
        float* yr = y + h * sy.nb[1] + t * sy.nb[2];
        if (i < half) {
            const int64_t j0 = NEOX ? i : 2 * i, j1 = NEOX ? i + half : 2 * i + 1;
            const float c = cs[2 * i], s = cs[2 * i + 1];
            const float x0 = xr[j0 * sx.nb[0]], x1 = xr[j1 * sx.nb[0]];
            yr[j0 * sy.nb[0]] = fmaf(x0, c, -__fmul_rn(x1, s));
            yr[j1 * sy.nb[0]] = fmaf(x0, s, __fmul_rn(x1, c));
        } else {
            const int64_t j = i + half; // n_rot .. hd - 1
            yr[j * sy.nb[0]] = xr[j * sx.nb[0]];
        }
    }
}

void rope_launch(const float* x, shape4 sx, const int32_t* pos, const float* ff, float* y, shape4 sy, int n_rot,
                 bool neox, float freq_base, float freq_scale, cudaStream_t stream, const float* table) {
    const int64_t n_tok = sx.ne[2];
    if (n_tok == 0) return;
    const float theta_scale = std::pow(freq_base, -2.0f / float(n_rot)); // the CPU's value, computed the same way
    const size_t smem = size_t(n_rot) * sizeof(float);
    const dim3 grid(unsigned(n_tok), unsigned(ceil_div(sx.ne[1], ROPE_HEADS)));
    if (grid.y == 0) return;
    TS_ASSERT(grid.y <= 65535);
    if (neox)
        rope_kernel<true><<<grid, ROPE_THREADS, smem, stream>>>(x, sx, pos, ff, y, sy, n_rot, theta_scale, freq_scale, table);
    else
        rope_kernel<false><<<grid, ROPE_THREADS, smem, stream>>>(x, sx, pos, ff, y, sy, n_rot, theta_scale, freq_scale, table);
    TS_CUDA_CHECK(cudaGetLastError());
}

} // namespace

void rope(cuda_context& ctx, tensor& dst) {
    const tensor* a = dst.src[0];
    const tensor* pos = dst.src[1];
    const tensor* ff = dst.src[2];
    const auto mode = rope_mode(dst.op_params.i[1]);
    const int n_rot = dst.op_params.i[0];
    const float* table = nullptr;
    // Exact mode: (cos, sin) of every (token, pair) computed on the host by the CPU's own code (backends/cpu/ops/
    // rope.cpp: the angle by repeated f32 products, then libm's cosf / sinf, which CUDA's sincosf differs from in the
    // last bit for some angles), from the host copy of the positions, uploaded for the kernel.
    if (ctx.exact && ctx.host_inputs && ctx.exact_buf) {
        if (auto it = ctx.host_inputs->find(pos); it != ctx.host_inputs->end()) {
            const int64_t n_tok = a->ne[2];
            const size_t bytes = size_t(n_tok) * size_t(n_rot) * sizeof(float);
            TS_ASSERT(bytes <= ctx.exact_buf_size && it->second.size() >= size_t(n_tok) * sizeof(int32_t));
            const auto* p = reinterpret_cast<const int32_t*>(it->second.data());
            const float theta_scale = std::pow(dst.op_params.f[2], -2.0f / float(n_rot));
            const float freq_scale = dst.op_params.f[3];
            std::vector<float> ffv;
            if (ff) {
                ffv.resize(size_t(n_rot / 2));
                TS_CUDA_CHECK(cudaMemcpy(ffv.data(), ctx.ptr(ff), ffv.size() * sizeof(float), cudaMemcpyDeviceToHost));
            }
            std::vector<float> cs(size_t(n_tok) * size_t(n_rot));
            for (int64_t t = 0; t < n_tok; t++) {
                float theta = float(p[t]);
                for (int i = 0; i < n_rot / 2; i++) {
                    const float f = ff ? ffv[size_t(i)] : 1.0f;
                    const float th = freq_scale * (theta / f);
                    cs[size_t(t * n_rot + 2 * i)] = std::cos(th);
                    cs[size_t(t * n_rot + 2 * i + 1)] = std::sin(th);
                    theta *= theta_scale;
                }
            }
            TS_CUDA_CHECK(cudaMemcpyAsync(ctx.exact_buf, cs.data(), bytes, cudaMemcpyHostToDevice, ctx.stream));
            table = static_cast<const float*>(ctx.exact_buf);
        }
    }
    rope_launch(ctx.as<float>(a), shape_of(*a, 4), ctx.as<int32_t>(pos), ff ? ctx.as<float>(ff) : nullptr,
                ctx.as<float>(&dst), shape_of(dst, 4), n_rot, mode == rope_mode::neox, dst.op_params.f[2],
                dst.op_params.f[3], ctx.stream, table);
}

} // namespace tessera::cuda
