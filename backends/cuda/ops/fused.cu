// fused.cu: short chains of a decode step run as one kernel instead of three or four, each of which would read and
// write the activations again and cost a launch (~2-3 us in a CUDA graph; a 7B decode step has ~22 kernels a layer):
//   add -> rms_norm -> mul(norm weight) [-> the next mul_mat's q8_1 activations]   (residual + norm of the next block)
//   rms_norm -> mul [-> q8_1]                                                          (the first layer's norm)
//   swiglu [-> q8_1]                                                                   (the down projection's input)
//   2-3 mul_mats of one activation on the decode GEMV as one launch (mmv.cu, mul_mat_group: q, k, v; gate, up)
// Every intermediate a later node reads is still written (the add's sum, the mul's product); only nodes nothing else
// reads are skipped (the bare rms_norm). The arithmetic is the unfused kernels' (same operations, same order), so the
// results are bit-identical to running the nodes one by one (test_backend_ops checks it). The q8_1 activations go
// where split_activations (mmv.cu) puts them, which the mul_mat right after then finds already done.
// Not fused while a per-node callback watches (compare --layers) or TESSERA_CUDA_FUSE=0.
#include "backends/cuda/ops/ops.cuh"

namespace tessera::cuda {

namespace {

constexpr int FUSE_THREADS = 256;

// q8_1 of the 32 values of a warp (one per lane), as quantize_q8_lane in mmv.cu: d = amax / 127, q = round half to
// even (v * 127 / amax), s = d sum q
__device__ __forceinline__ void q8_store(float v, int lane, int8_t* q, __half2* ds) {
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const int qi = __float2int_rn(v * id);
    const float s = float(warp_sum(qi)) * d;
    q[lane] = int8_t(qi);
    if (lane == 0) *ds = __halves2half2(__float2half_rn(d), __float2half_rn(s));
}

// One block of norm_threads(ne0) per row of ne0 contiguous floats. sum = a + b (when a residual is given), y = (x * s) * w with
// s = 1 / sqrt(mean(x^2) + eps) as rms_norm_kernel computes it, then y to q8_1 when q is given (ne0 % 32 == 0).
template <bool ADD>
static __global__ void __launch_bounds__(1024)
    add_norm_mul_kernel(const float* a, const float* b, float* sum, const float* w, float* y, int64_t ne0, float eps,
                        int8_t* q, __half2* ds) {
    __shared__ float red[32];
    const int64_t r = blockIdx.x;
    const float* x = ADD ? sum + r * ne0 : a + r * ne0;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
        float v;
        if constexpr (ADD) {
            v = a[r * ne0 + i] + b[r * ne0 + i];
            sum[r * ne0 + i] = v;
        } else {
            v = x[i];
        }
        ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss, red); // syncs: the sums written above are visible to the block
    const float s = 1.0f / sqrtf(ss / float(ne0) + eps);
    const int lane = threadIdx.x % WARP_SIZE;
    for (int64_t i0 = 0; i0 < ne0; i0 += blockDim.x) {
        const int64_t i = i0 + threadIdx.x;
        if (i0 + (threadIdx.x - lane) >= ne0) break; // whole warps past the row (ne0 % 32 == 0 when quantizing)
        float v = 0.0f;
        if (i < ne0) {
            const float n = x[i] * s;
            v = n * w[i];
            y[r * ne0 + i] = v;
        }
        if (q) q8_store(v, lane, q + r * ne0 + i - lane, ds + (r * ne0 + i) / 32);
    }
}

// y = silu(g) u over n contiguous elements (rows of ne0 % 32 == 0 when quantizing), as the swiglu kernel; then q8_1
static __global__ void __launch_bounds__(FUSE_THREADS)
    swiglu_q8_kernel(const float* g, const float* u, float* y, int64_t n, int8_t* q, __half2* ds) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i - threadIdx.x % WARP_SIZE >= n) return; // whole warps only (n % 32 == 0)
    const float x = g[i];
    const float v = x / (1.0f + expf(-x)) * u[i];
    y[i] = v;
    q8_store(v, threadIdx.x % WARP_SIZE, q + i - threadIdx.x % WARP_SIZE, ds + i / 32);
}

bool fuse_enabled() {
    static const bool enabled = env_switch_on("TESSERA_CUDA_FUSE");
    return enabled;
}

// a contiguous f32 tensor
bool dense(const tensor* t) {
    return t && t->t == type::f32 && t->is_contiguous() && !t->view_src;
}
bool same_shape(const tensor* a, const tensor* b) {
    for (int d = 0; d < TS_MAX_DIMS; d++)
        if (a->ne[d] != b->ne[d]) return false;
    return true;
}

// Where the q8_1 activations of `out` go when the node after it is a mul_mat reading `out` that quantizes it through
// split_activations; {nullptr, nullptr} otherwise.
split_acts q8_target(cuda_context& ctx, const tensor* out, const tensor* next) {
    if (!next || next->o != op::mul_mat || next->src[1] != out || out->ne[0] % 32 != 0) return {};
    if (!mul_mat_quantizes_split(ctx, *next)) return {};
    return split_activation_ptrs(ctx, *out);
}

} // namespace

size_t fuse(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
            const std::unordered_map<const tensor*, int>& uses) {
    if (!fuse_enabled()) return 0;
    if (const size_t n = mul_mat_group(ctx, nodes, i)) return n; // q, k, v / gate, up: one GEMV launch
    auto at = [&](size_t j) { return j < nodes.size() ? nodes[j] : nullptr; };
    auto used_once = [&](const tensor* t) {
        const auto it = uses.find(t);
        return it != uses.end() && it->second == 1 && !(t->flags & flag_output);
    };
    tensor* n0 = at(i);
    // [add ->] rms_norm -> mul by a weight row
    const bool with_add = n0->o == op::add;
    tensor* norm = with_add ? at(i + 1) : n0;
    tensor* mul = with_add ? at(i + 2) : at(i + 1);
    if (norm && norm->o == op::rms_norm && mul && mul->o == op::mul && mul->src[0] == norm && used_once(norm) &&
        (!with_add || norm->src[0] == n0)) {
        const tensor* x = norm->src[0];
        const tensor* w = mul->src[1];
        const int64_t ne0 = x->ne[0], rows = x->ne[1] * x->ne[2] * x->ne[3];
        const bool ok = dense(x) && dense(norm) && dense(mul) && same_shape(x, mul) && w && w->t == type::f32 &&
                        w->ne[0] == ne0 && w->ne[1] == 1 && w->ne[2] == 1 && w->ne[3] == 1 && w->nb[0] == 4 &&
                        (!with_add || (dense(n0->src[0]) && dense(n0->src[1]) && same_shape(n0->src[0], n0) &&
                                       same_shape(n0->src[1], n0)));
        if (ok && rows > 0 && rows <= 65535) {
            const split_acts qa = q8_target(ctx, mul, at(i + (with_add ? 3 : 2)));
            auto* q = const_cast<int8_t*>(qa.q);
            auto* ds = const_cast<__half2*>(qa.ds);
            if (with_add)
                add_norm_mul_kernel<true><<<unsigned(rows), norm_threads(ne0), 0, ctx.stream>>>(
                    ctx.as<float>(n0->src[0]), ctx.as<float>(n0->src[1]), ctx.as<float>(n0), ctx.as<float>(w),
                    ctx.as<float>(mul), ne0, norm->op_params.f[0], q, ds);
            else
                add_norm_mul_kernel<false><<<unsigned(rows), norm_threads(ne0), 0, ctx.stream>>>(
                    ctx.as<float>(x), nullptr, nullptr, ctx.as<float>(w), ctx.as<float>(mul), ne0,
                    norm->op_params.f[0], q, ds);
            TS_CUDA_CHECK(cudaGetLastError());
            if (q) {
                ctx.act_src = mul;
                ctx.act_form = cuda_context::act_split_q8;
            }
            return with_add ? 3 : 2;
        }
    }
    // swiglu -> q8_1 for the mul_mat after it
    if (n0->o == op::swiglu && dense(n0) && dense(n0->src[0]) && dense(n0->src[1]) && same_shape(n0->src[0], n0) &&
        same_shape(n0->src[1], n0)) {
        const split_acts qa = q8_target(ctx, n0, at(i + 1));
        const int64_t n = n0->n_elements();
        if (qa.q && n > 0) {
            swiglu_q8_kernel<<<unsigned(ceil_div(n, FUSE_THREADS)), FUSE_THREADS, 0, ctx.stream>>>(
                ctx.as<float>(n0->src[0]), ctx.as<float>(n0->src[1]), ctx.as<float>(n0), n, const_cast<int8_t*>(qa.q),
                const_cast<__half2*>(qa.ds));
            TS_CUDA_CHECK(cudaGetLastError());
            ctx.act_src = n0;
            ctx.act_form = cuda_context::act_split_q8;
            return 1;
        }
    }
    return 0;
}

} // namespace tessera::cuda
