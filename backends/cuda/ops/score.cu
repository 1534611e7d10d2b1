// score.cu: the score op (ggml-like/score.h) on the device, so perplexity and the KL-divergence mode copy back a few
// words per token instead of the logits: one block per row, passes over the row for the max (and argmax, min), the
// sum of exps in double, then the base-file codes (encode) or the KL divergence against the base record (compare).
// The same arithmetic as the CPU's score_row, summed in another order (|ΔNLL| ~1e-7 relative); encode's codes are
// those of the CPU for the same logits unless the f32 log of the sum differs in its last bit.
#include "backends/cuda/ops/ops.cuh"

#include "ggml-like/score.h"

namespace tessera::cuda {

namespace {

constexpr int SCORE_THREADS = 512, SCORE_WARPS = SCORE_THREADS / 32;

struct arg_best {
    float v;
    int32_t i;
};
// the larger value; the lower index on ties (the CPU's first maximum)
__device__ __forceinline__ arg_best better(arg_best a, arg_best b) {
    return b.v > a.v || (b.v == a.v && b.i < a.i) ? b : a;
}
__device__ __forceinline__ arg_best warp_best(arg_best x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x = better(x, {__shfl_xor_sync(0xffffffffu, x.v, o), __shfl_xor_sync(0xffffffffu, x.i, o)});
    return x;
}
__device__ arg_best block_best(arg_best x, arg_best* red) {
    x = warp_best(x);
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
    __syncthreads();
    x = red[0];
    for (int w = 1; w < SCORE_WARPS; w++) x = better(x, red[w]);
    return x;
}
__device__ float block_min(float x, float* red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fminf(x, __shfl_xor_sync(0xffffffffu, x, o));
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
    __syncthreads();
    x = red[0];
    for (int w = 1; w < SCORE_WARPS; w++) x = fminf(x, red[w]);
    return x;
}
__device__ double block_sum_d(double x, double* red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
    __syncthreads();
    x = 0;
    for (int w = 0; w < SCORE_WARPS; w++) x += red[w];
    return x;
}

__device__ __forceinline__ void put_double(int32_t* out, double v) {
    const long long bits = __double_as_longlong(v);
    out[0] = int32_t(uint32_t(uint64_t(bits)));
    out[1] = int32_t(uint32_t(uint64_t(bits) >> 32));
}

static __global__ void __launch_bounds__(SCORE_THREADS)
    score_kernel(const float* logits, int64_t l_nb1, const int32_t* targets, const uint16_t* base, int64_t base_nb1,
                 int32_t* out, int64_t out_nb1, int64_t n_vocab, int mode) {
    __shared__ arg_best red_a[SCORE_WARPS];
    __shared__ float red_f[SCORE_WARPS];
    __shared__ double red_d[SCORE_WARPS];
    const int64_t r = blockIdx.x;
    const float* l = logits + r * l_nb1;
    int32_t* o = out + r * out_nb1;
    const int32_t target = targets[r];
    const bool target_ok = target >= 0 && target < n_vocab; // else the NLL is NaN (the CPU op asserts)

    arg_best best{-INFINITY, INT32_MAX};
    float mn = INFINITY;
    for (int64_t i = threadIdx.x; i < n_vocab; i += SCORE_THREADS) {
        const float v = l[i];
        best = better(best, {v, int32_t(i)});
        mn = fminf(mn, v);
    }
    best = block_best(best, red_a);
    const float mx = best.v;
    double sum = 0.0;
    for (int64_t i = threadIdx.x; i < n_vocab; i += SCORE_THREADS) sum += double(expf(l[i] - mx));
    sum = block_sum_d(sum, red_d);
    const float lt = target_ok ? l[target] : NAN;

    if (mode == int(score_mode::encode)) {
        mn = fmaxf(block_min(mn, red_f), mx - 16);
        const float log_sum = float(log(sum));
        const float min_log_prob = mn - mx - log_sum;
        const float scale = (mx - mn) / 65535.f;
        auto* rec = reinterpret_cast<uint16_t*>(o + score_header_words);
        if (threadIdx.x == 0) {
            reinterpret_cast<float*>(rec)[0] = scale;
            reinterpret_cast<float*>(rec)[1] = min_log_prob;
            if (n_vocab % 2) rec[4 + n_vocab] = 0;
            put_double(o, double(mx + log_sum - lt));
            put_double(o + 2, 0.0);
            o[4] = 0;
            o[5] = 0;
        }
        const float inv = scale != 0.0f ? 1 / scale : 0.0f;
        for (int64_t i = threadIdx.x; i < n_vocab; i += SCORE_THREADS) {
            const float v = l[i];
            rec[4 + i] = scale != 0.0f && v > mn ? uint16_t(__float2int_rn(__fmul_rn(inv, v - mn))) : 0;
        }
        return;
    }
    const double nll = -(double(lt - mx) - log(sum));
    if (mode == int(score_mode::nll)) {
        if (threadIdx.x == 0) {
            put_double(o, nll);
            put_double(o + 2, 0.0);
            o[4] = 0;
            o[5] = 0;
        }
        return;
    }
    // compare
    const float log_sum = float(log(sum));
    const float log_z = mx + log_sum;
    const uint16_t* b = base + r * base_nb1;
    const float scale = reinterpret_cast<const float*>(b)[0], min_log_prob = reinterpret_cast<const float*>(b)[1];
    arg_best best_base{-INFINITY, INT32_MAX};
    double kld = 0.0;
    for (int64_t i = threadIdx.x; i < n_vocab; i += SCORE_THREADS) {
        const float lp = scale * float(b[4 + i]) + min_log_prob;
        best_base = better(best_base, {lp, int32_t(i)});
        if (lp > -16.f) kld += double(expf(lp) * (lp - l[i] + log_z));
    }
    best_base = block_best(best_base, red_a);
    kld = block_sum_d(kld, red_d);
    if (threadIdx.x == 0) {
        put_double(o, nll);
        put_double(o + 2, kld);
        o[4] = __float_as_int(mx + log_sum - lt);
        o[5] = best.i == best_base.i;
    }
}

} // namespace

bool score_supported(const tensor& node) {
    const tensor* l = node.src[0];
    const tensor* t = node.src[1];
    const tensor* b = node.src[2];
    return l->t == type::f32 && l->nb[0] == 4 && l->nb[1] % 4 == 0 && t->t == type::i32 && t->is_contiguous() &&
           (!b || (b->t == type::i32 && b->is_contiguous())) && node.is_contiguous() && l->ne[0] < INT32_MAX;
}

void score(cuda_context& ctx, tensor& dst) {
    const tensor* l = dst.src[0];
    const tensor* b = dst.src[2];
    const int64_t n_rows = l->ne[1];
    if (n_rows == 0) return;
    score_kernel<<<unsigned(n_rows), SCORE_THREADS, 0, ctx.stream>>>(
        ctx.as<float>(l), int64_t(l->nb[1] / 4), ctx.as<int32_t>(dst.src[1]),
        b ? reinterpret_cast<const uint16_t*>(ctx.ptr(b)) : nullptr, b ? int64_t(b->nb[1] / 2) : 0,
        ctx.as<int32_t>(&dst), int64_t(dst.nb[1] / 4), l->ne[0], dst.op_params.i[0]);
    TS_CUDA_CHECK(cudaGetLastError());
}

} // namespace tessera::cuda
