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
constexpr int ROPE_WIDE_HEADS = 16, ROPE_WIDE_TOKENS = 64; // rope_kv's blocks for 64 tokens or more

// One block per (token, group of hpb heads): ROPE_HEADS in decode (one token: 32 heads in one block left the GPU
// nearly idle), ROPE_WIDE_HEADS for a prompt's many tokens (each block computes its token's angles once: 4 heads a
// block had cost the 8B's prefill 18 us a layer). Threads first fill (cos, sin) of every pair in shared memory,
// then take (head, pair) items (a normal-mode pair of contiguous rows as one float2). With `cache` (rope_kv_kernel)
// each result is also written as f16 to cache[h * head_dim + j], the K-cache row of token t; y == nullptr: the
// result only goes there.
// xn (not null): the block's heads h0.. as rows of hd floats in shared memory, read instead of x (rope_kv_kernel's
// Q / K norms: head_norm below).
// ys: the results written to y are multiplied by it (a scale node folded in; 1: the plain rope, x 1 exact).
template <bool NEOX>
__device__ __forceinline__ void rope_block(const float* x, shape4 sx, const int32_t* pos, const float* ff, float* y,
                                           shape4 sy, int n_rot, const rope_angles& ang, const float* table, int64_t t,
                                           int64_t h0, int hpb, float* cs, __half* cache, const float* xn = nullptr,
                                           float ys = 1.0f) {
    const int half = n_rot / 2;
    for (int i = threadIdx.x; i < half && table; i += blockDim.x) { // exact mode: the host's (cos, sin)
        cs[2 * i] = table[t * n_rot + 2 * i];
        cs[2 * i + 1] = table[t * n_rot + 2 * i + 1];
    }
    for (int i = threadIdx.x; i < half && !table; i += blockDim.x) {
        const float2 r = rope_cos_sin(pos[t], i, ang, ff);
        cs[2 * i] = r.x;
        cs[2 * i + 1] = r.y;
    }
    __syncthreads();
    const int64_t hd = sx.ne[0];
    const int per_head = int(hd) - half; // n_rot / 2 pairs, then hd - n_rot pass-through values
    const int n_items = int(sx.ne[1] - h0 < hpb ? sx.ne[1] - h0 : hpb) * per_head;
    for (int it = threadIdx.x; it < n_items; it += blockDim.x) { // 32-bit: 64-bit divisions cost more than the rope
        const int hh = it / per_head, i = it - hh * per_head;
        const int64_t h = h0 + hh;
        const float* xr = xn ? xn + (h - h0) * hd : x + h * sx.nb[1] + t * sx.nb[2];
        const int64_t xs = xn ? 1 : sx.nb[0];
        float* yr = y ? y + h * sy.nb[1] + t * sy.nb[2] : nullptr;
        __half* cr = cache ? cache + h * hd : nullptr;
        if (i < half && !NEOX && xs == 1 && (!yr || sy.nb[0] == 1) &&
            ((reinterpret_cast<uintptr_t>(xr) | reinterpret_cast<uintptr_t>(yr)) & 7) == 0 &&
            (reinterpret_cast<uintptr_t>(cr) & 3) == 0) { // a normal pair as one float2 (half2): whole lines a warp
            const float2 v = *reinterpret_cast<const float2*>(xr + 2 * i);
            const float2 r = rope_rotate(v.x, v.y, make_float2(cs[2 * i], cs[2 * i + 1]));
            if (yr) *reinterpret_cast<float2*>(yr + 2 * i) = make_float2(__fmul_rn(r.x, ys), __fmul_rn(r.y, ys));
            if (cr) *reinterpret_cast<__half2*>(cr + 2 * i) = __floats2half2_rn(r.x, r.y);
        } else if (i < half) {
            const int64_t j0 = NEOX ? i : 2 * i, j1 = NEOX ? i + half : 2 * i + 1;
            const float2 r = rope_rotate(xr[j0 * xs], xr[j1 * xs], make_float2(cs[2 * i], cs[2 * i + 1]));
            const float y0 = r.x, y1 = r.y;
            if (yr) {
                yr[j0 * sy.nb[0]] = __fmul_rn(y0, ys);
                yr[j1 * sy.nb[0]] = __fmul_rn(y1, ys);
            }
            if (cr) {
                cr[j0] = __float2half_rn(y0); // set_rows' conversion (round to nearest even)
                cr[j1] = __float2half_rn(y1);
            }
        } else {
            const int64_t j = i + half; // n_rot .. hd - 1
            const float v = xr[j * xs];
            if (yr) yr[j * sy.nb[0]] = __fmul_rn(v, ys);
            if (cr) cr[j] = __float2half_rn(v);
        }
    }
}

template <bool NEOX>
static __global__ void __launch_bounds__(ROPE_THREADS)
    rope_kernel(const float* x, shape4 sx, const int32_t* pos, const float* ff, float* y, shape4 sy, int n_rot,
                rope_angles ang, const float* table) {
    extern __shared__ float cs[]; // (cos, sin) per pair: 2 * (n_rot / 2) floats
    pdl_wait();
    pdl_trigger();
    rope_block<NEOX>(x, sx, pos, ff, y, sy, n_rot, ang, table, blockIdx.x, int64_t(blockIdx.y) * ROPE_HEADS, ROPE_HEADS,
                     cs, nullptr);
}

// rope of Q and K and this batch's KV-cache writes (set_rows of the rotated K and of V into f16 caches) as one launch
// (fused.cu finds the four nodes): blocks y < gq rotate Q's heads, the next gk blocks K's (into K-cache row idx[t],
// and into K's own tensor when yk is given), the rest copy V's row t into V-cache row idx[t], ROPE_THREADS x 4 values
// each. Rows whose index is outside the cache are skipped, as set_rows skips them.
//
// With Q / K norms (qwen3, gemma3: qn, kn not null): each head's row is first normalized as fused.cu's rms_norm ->
// mul runs it on the head view (norm.cu add_norm_vec_kernel with one warp a row: lane l holds float4s l, l + 32, ...,
// squares fma'd in that order, a warp sum, (x s) w), one warp a head, into shared memory, and rotated from there.
struct rope_kv_args {
    const float *q, *k, *v;
    shape4 sq, sk;
    rope_kv_params p;     // where the results go, the angles (ops.cuh)
    int64_t v_nb1, v_ne0; // V rows: stride in floats, length
    int gq, gk;
    int hpb;              // heads a block (ROPE_HEADS with norms: one warp a head)
    const float *qn, *kn; // the Q / K norm weights (hd floats), or null
    float eps;
};
constexpr int HEAD_NORM_MAX = 512; // head sizes of the normalized path: one warp a head, 4 float4s a lane at most

// Rows h0 .. h0 + n - 1 of x (heads of hd contiguous floats, hd % 32 == 0, 16-byte aligned) normalized and times w
// into xn (n rows of hd); warp w takes head h0 + w. Ends with a barrier.
__device__ __forceinline__ void head_norm(const float* x, shape4 sx, int64_t t, int64_t h0, int64_t n, const float* w,
                                          float eps, float* xn) {
    const int warp = int(threadIdx.x) / WARP_SIZE, lane = int(threadIdx.x) % WARP_SIZE;
    const int64_t hd = sx.ne[0], n4 = hd / 4;
    if (warp < n) {
        const auto* x4 = reinterpret_cast<const float4*>(x + (h0 + warp) * sx.nb[1] + t * sx.nb[2]);
        float4 v[HEAD_NORM_MAX / 128];
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < HEAD_NORM_MAX / 128; j++) {
            const int64_t i = lane + j * WARP_SIZE;
            v[j] = i < n4 ? x4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            ss = fmaf(v[j].x, v[j].x, ss);
            ss = fmaf(v[j].y, v[j].y, ss);
            ss = fmaf(v[j].z, v[j].z, ss);
            ss = fmaf(v[j].w, v[j].w, ss);
        }
        ss = warp_sum(ss);
        const float s = 1.0f / sqrtf(ss / float(hd) + eps);
        const auto* w4 = reinterpret_cast<const float4*>(w);
        auto* o4 = reinterpret_cast<float4*>(xn + warp * hd);
#pragma unroll
        for (int j = 0; j < HEAD_NORM_MAX / 128; j++) {
            const int64_t i = lane + j * WARP_SIZE;
            if (i >= n4) break;
            const float4 wv = w4[i];
            o4[i] = make_float4((v[j].x * s) * wv.x, (v[j].y * s) * wv.y, (v[j].z * s) * wv.z, (v[j].w * s) * wv.w);
        }
    }
    __syncthreads();
}

template <bool NEOX> static __global__ void __launch_bounds__(ROPE_THREADS) rope_kv_kernel(rope_kv_args a) {
    extern __shared__ float cs[]; // (cos, sin) of every pair, then with norms ROPE_HEADS normalized heads
    pdl_wait();
    pdl_trigger();
    const rope_kv_params& p = a.p;
    const int64_t t = blockIdx.x;
    const int64_t row = p.idx64 ? static_cast<const int64_t*>(p.idx)[t] : static_cast<const int32_t*>(p.idx)[t];
    const int g = int(blockIdx.y);
    float* xn = cs + p.n_rot;
    if (g < a.gq) {
        const int64_t h0 = int64_t(g) * a.hpb;
        if (a.qn) head_norm(a.q, a.sq, t, h0, min(int64_t(a.hpb), a.sq.ne[1] - h0), a.qn, a.eps, xn);
        rope_block<NEOX>(a.q, a.sq, p.pos, p.ff, p.yq, p.syq, p.n_rot, p.ang, nullptr, t, h0, a.hpb, cs, nullptr,
                         a.qn ? xn : nullptr, p.q_scale);
    } else if (g < a.gq + a.gk) {
        __half* cache = row >= 0 && row < p.kc_rows ? p.kc + row * p.kc_nb1 : nullptr;
        const int64_t h0 = int64_t(g - a.gq) * a.hpb;
        if (cache || p.yk) {
            if (a.kn) head_norm(a.k, a.sk, t, h0, min(int64_t(a.hpb), a.sk.ne[1] - h0), a.kn, a.eps, xn);
            rope_block<NEOX>(a.k, a.sk, p.pos, p.ff, p.yk, p.syk, p.n_rot, p.ang, nullptr, t, h0, a.hpb, cs, cache,
                             a.kn ? xn : nullptr);
        }
    } else if (row >= 0 && row < p.vc_rows) {
        const int64_t base = int64_t(g - a.gq - a.gk) * ROPE_THREADS * 4;
        for (int64_t i = base + threadIdx.x; i < a.v_ne0 && i < base + ROPE_THREADS * 4; i += ROPE_THREADS)
            p.vc[row * p.vc_nb1 + i] = __float2half_rn(a.v[t * a.v_nb1 + i]);
    }
}

void rope_launch(const cuda_context& ctx, const float* x, shape4 sx, const int32_t* pos, const float* ff, float* y,
                 shape4 sy, int n_rot, bool neox, const rope_angles& ang, const float* table) {
    const int64_t n_tok = sx.ne[2];
    if (n_tok == 0) return;
    const size_t smem = size_t(n_rot) * sizeof(float);
    const dim3 grid(unsigned(n_tok), unsigned(ceil_div(sx.ne[1], ROPE_HEADS)));
    if (grid.y == 0) return;
    TS_ASSERT(grid.y <= 65535);
    launch(ctx, neox ? rope_kernel<true> : rope_kernel<false>, grid, ROPE_THREADS, smem, x, sx, pos, ff, y, sy, n_rot,
           ang, table);
}

} // namespace

bool rope_kv_params_of(const cuda_context& ctx, const tensor& rq, const tensor& rk, const tensor& sk, const tensor& sv,
                       bool write_k, rope_kv_params& p) {
    const tensor* pos = rq.src[1];
    const tensor* v = sv.src[0];
    const tensor* idx = sk.src[2];
    const int n_rot = rq.op_params.i[0];
    if (rk.src[1] != pos || rk.src[2] != rq.src[2] || sv.src[2] != idx) return false;
    for (int i = 0; i < 8; i++)
        if (rq.op_params.i[i] != rk.op_params.i[i]) return false;
    if (sk.t != type::f16 || sv.t != type::f16 || v->t != type::f32 || v->nb[0] != 4 || v->nb[1] % 4 != 0 ||
        v->ne[2] != 1 || v->ne[3] != 1 || rq.src[0]->t != type::f32 || rk.src[0]->t != type::f32 ||
        pos->t != type::i32 || rq.ne[3] != 1 || rk.ne[3] != 1 || rk.ne[2] != rq.ne[2] || v->ne[1] != rq.ne[2] ||
        idx->ne[0] != rq.ne[2] || (idx->t != type::i32 && idx->t != type::i64) || n_rot <= 0 || n_rot % 2 != 0 ||
        n_rot > rq.ne[0] || n_rot > rk.ne[0])
        return false;
    // K goes to the cache as set_rows would put it: the rotated K's row t (head_dim x heads, contiguous) is cache row
    // idx[t]
    if (!rk.is_contiguous() || sk.src[0]->ne[0] != rk.ne[0] * rk.ne[1] || sk.ne[0] != sk.src[0]->ne[0] ||
        sv.ne[0] != v->ne[0] || sk.nb[0] != 2 || sv.nb[0] != 2 || sk.nb[1] % 2 != 0 || sv.nb[1] % 2 != 0)
        return false;
    if (rq.ne[2] > 65535) return false;
    p = {};
    p.yq = ctx.as<float>(&rq);
    p.yk = write_k ? ctx.as<float>(&rk) : nullptr;
    p.syq = shape_of(rq, 4);
    p.syk = shape_of(rk, 4);
    p.pos = ctx.as<int32_t>(pos);
    p.ff = rq.src[2] ? ctx.as<float>(rq.src[2]) : nullptr;
    p.idx = ctx.ptr(idx);
    p.idx64 = idx->t == type::i64;
    p.kc = ctx.as<__half>(&sk);
    p.vc = ctx.as<__half>(&sv);
    p.kc_nb1 = int64_t(sk.nb[1] / 2);
    p.vc_nb1 = int64_t(sv.nb[1] / 2);
    p.kc_rows = sk.ne[1];
    p.vc_rows = sv.ne[1];
    p.n_rot = n_rot;
    p.ang = rope_angles_of(rq.op_params);
    p.neox = rope_mode(rq.op_params.i[1]) == rope_mode::neox;
    return true;
}

bool rope_kv(cuda_context& ctx, const tensor& rq, const tensor& rk, const tensor& sk, const tensor& sv, bool write_k,
             const qk_norms* norms, const tensor* q_scaled) {
    rope_kv_params p;
    if (!rope_kv_params_of(ctx, rq, rk, sk, sv, write_k, p)) return false;
    if (q_scaled) {
        if (q_scaled->o != op::scale || q_scaled->src[0] != &rq || q_scaled->t != type::f32) return false;
        for (int d = 0; d < 4; d++)
            if (q_scaled->ne[d] != rq.ne[d]) return false;
        p.yq = ctx.as<float>(q_scaled);
        p.syq = shape_of(*q_scaled, 4);
        p.q_scale = q_scaled->op_params.f[0];
    }
    const tensor* v = sv.src[0];
    const int64_t n_tok = rq.ne[2];
    if (n_tok == 0) return true;
    rope_kv_args a{};
    const tensor* q = norms ? norms->q : rq.src[0];
    const tensor* k = norms ? norms->k : rk.src[0];
    a.q = ctx.as<float>(q);
    a.k = ctx.as<float>(k);
    a.v = ctx.as<float>(v);
    a.sq = shape_of(*q, 4);
    a.sk = shape_of(*k, 4);
    if (norms) {
        const int64_t hd = a.sq.ne[0];
        // heads of whole float4s, 16-byte aligned rows, one warp a head (as the unfused vector norm kernel)
        const bool ok = hd == a.sk.ne[0] && hd % 32 == 0 && hd <= HEAD_NORM_MAX && a.sq.nb[0] == 1 &&
                        a.sk.nb[0] == 1 && a.sq.nb[1] % 4 == 0 && a.sq.nb[2] % 4 == 0 && a.sk.nb[1] % 4 == 0 &&
                        a.sk.nb[2] % 4 == 0 && aligned16(a.q) && aligned16(a.k) && aligned16(norms->qw) &&
                        aligned16(norms->kw) && ROPE_HEADS * WARP_SIZE <= ROPE_THREADS;
        if (!ok) return false;
        a.qn = norms->qw;
        a.kn = norms->kw;
        a.eps = norms->eps;
    }
    a.p = p;
    a.v_nb1 = int64_t(v->nb[1] / 4);
    a.v_ne0 = v->ne[0];
    a.hpb = norms || n_tok < ROPE_WIDE_TOKENS ? ROPE_HEADS : ROPE_WIDE_HEADS;
    a.gq = int(ceil_div(rq.ne[1], a.hpb));
    a.gk = int(ceil_div(rk.ne[1], a.hpb));
    const int gv = int(ceil_div(v->ne[0], int64_t(ROPE_THREADS) * 4));
    const dim3 grid(unsigned(n_tok), unsigned(a.gq + a.gk + gv));
    TS_ASSERT(grid.y <= 65535);
    const size_t smem = (size_t(p.n_rot) + (norms ? size_t(ROPE_HEADS) * size_t(a.sq.ne[0]) : 0)) * sizeof(float);
    launch(ctx, p.neox ? rope_kv_kernel<true> : rope_kv_kernel<false>, grid, ROPE_THREADS, smem, a);
    return true;
}

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
            const rope_angles ang = rope_angles_of(dst.op_params);
            std::vector<float> ffv;
            if (ff) {
                ffv.resize(size_t(n_rot / 2));
                TS_CUDA_CHECK(cudaMemcpy(ffv.data(), ctx.ptr(ff), ffv.size() * sizeof(float), cudaMemcpyDeviceToHost));
            }
            std::vector<float> cs(size_t(n_tok) * size_t(n_rot));
            for (int64_t t = 0; t < n_tok; t++)
                rope_cos_sin_row(p[t], n_rot, ang, ff ? ffv.data() : nullptr, cs.data() + t * n_rot);
            TS_CUDA_CHECK(cudaMemcpyAsync(ctx.exact_buf, cs.data(), bytes, cudaMemcpyHostToDevice, ctx.stream));
            table = static_cast<const float*>(ctx.exact_buf);
        }
    }
    rope_launch(ctx, ctx.as<float>(a), shape_of(*a, 4), ctx.as<int32_t>(pos), ff ? ctx.as<float>(ff) : nullptr,
                ctx.as<float>(&dst), shape_of(dst, 4), n_rot, mode == rope_mode::neox, rope_angles_of(dst.op_params),
                table);
}

} // namespace tessera::cuda
