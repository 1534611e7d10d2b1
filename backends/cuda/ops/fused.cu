// fused.cu: short chains of a decode step run as one kernel instead of three or four, each of which would read and
// write the activations again and cost a launch (~2-3 us in a CUDA graph; a 7B decode step has ~22 kernels a layer):
//   add -> rms_norm -> mul(norm weight) [-> the next mul_mat's q8_1 activations]   (residual + norm of the next block)
//   all_reduce [-> add] -> rms_norm -> mul [-> q8_1]: the same after a decode step's sum over a device group (p2p.cuh)
//   rms_norm -> mul [-> q8_1]                                                          (the first layer's norm)
//   swiglu / geglu / relu2_glu [-> q8_1]                                               (the down projection's input)
//   2-3 mul_mats of one activation on the decode GEMV as one launch (mmv.cu, mul_mat_group: q, k, v; gate, up), and
//   in prefill on the wgmma GEMM (gemm.cu, gemm_split_group: their row tiles in one grid); for float weights the
//   same on the float GEMV, gate and up with the GLU after them in its epilogue (mmv.cu, mul_mat_f_group)
//   attention -> [its rows as a view ->] q8_1 for the mul_mat after it                (the output projection's input)
//   rope(Q), rope(K), set_rows(K cache, rotated K), set_rows(V cache, V), in any order, views between them skipped
//   (rope.cu, rope_kv), when no result the kernel writes lies where one of its inputs is (see fuse_rope_kv); also
//   with the Q / K norms before the ropes (qwen3, gemma3: fuse_qk_norm_rope_kv), and a scale of the rotated Q after
//   them (gemma3's query_pre_attn_scalar: q_scale_after)
//   the q, k, v mul_mats on the decode GEMV followed by that rope / cache-write group, reading only their results:
//   the GEMV's epilogue does the group's work (normal and NEOX rope; fuse_qkv_rope, mmv.cu)
//   the slots of mul(experts' outputs, chosen weights) added in order (a mixture-of-experts block's end); the
//   experts' gate and up mul_mat_id as one route and launch, their biases (add_id) and the routing weights' mul in
//   the kernel's epilogue (fuse_moe_experts, mmv.cu's mul_mat_id_fused); a decode token's routing (soft_max,
//   top_k, the chosen weights, their sum, clamp, div: qwen3moe's; the biased logits' top_k, the chosen ones, their
//   soft_max: gpt-oss's) as one block; the slots' sum, the residual's add and the next block's norm [-> q8_1] as
//   one kernel (fuse_add_norm with add_norm_slots; H200, session 54, tg128 two rounds: qwen3-30b-a3b q4_0 527 vs
//   500-502 t/s, gpt-oss-small 3217-3251 vs 3025-3053, qwen3moe-small 3562-3648 vs 3329-3337; pp512 +1.6%)
// Every intermediate a later node reads is still written (the add's sum, the mul's product); only nodes nothing else
// reads are skipped (the bare rms_norm). The arithmetic is the unfused kernels' (same operations, same order), so the
// results are bit-identical to running the nodes one by one (test_backend_ops checks it), except that a GEMV launch
// of several matrices (q, k, v; gate, up) may split k otherwise than one matrix alone (mmv.cu: mmv_split_parts), and
// that the norm kernel summing a mixture's slots groups the squares otherwise (norm.cu add_norm_slots_kernel).
// The q8_1 activations go where split_activations (mmv.cu) puts them, which the mul_mat right after then finds
// already done.
// Not fused while a per-node callback watches (compare --layers) or TESSERA_CUDA_FUSE=0 (TESSERA_CUDA_ROPE_KV=0: the
// rope / cache-write group alone, with or without the GEMV; TESSERA_CUDA_QKV_ROPE=0: not with the GEMV).
#include "backends/cuda/ops/ops.cuh"

#include <initializer_list>

namespace tessera::cuda {

namespace {

constexpr int FUSE_THREADS = 256;

// One block of norm_threads(ne0) per row of ne0 contiguous floats. sum = a + b (when a residual is given), y = (x * s) * w with
// s = 1 / sqrt(mean(x^2) + eps) as rms_norm_kernel computes it, then y to q8_1 when q is given (ne0 % 32 == 0).
template <bool ADD>
static __global__ void __launch_bounds__(1024)
    add_norm_mul_kernel(const float* a, const float* b, float* sum, const float* w, float* y, int64_t ne0, float eps,
                        int8_t* q, __half2* ds) {
    __shared__ float red[32];
    pdl_wait();
    pdl_trigger();
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
        if (q) q8_store_warp(v, lane, q + r * ne0 + i - lane, ds + (r * ne0 + i) / 32);
    }
}

// y = act(g) u over n contiguous elements (rows of ne0 % 32 == 0 when quantizing); then q8_1
template <glu_act A>
static __global__ void __launch_bounds__(FUSE_THREADS)
    glu_q8_kernel(const float* g, const float* u, float* y, int64_t n, int8_t* q, __half2* ds, const uint16_t* gelu) {
    pdl_wait();
    pdl_trigger();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i - threadIdx.x % WARP_SIZE >= n) return; // whole warps only (n % 32 == 0)
    const float v = glu_apply<A>(g[i], u[i], gelu);
    y[i] = v;
    q8_store_warp(v, threadIdx.x % WARP_SIZE, q + i - threadIdx.x % WARP_SIZE, ds + i / 32);
}

// The same four values a thread (float4; eight threads a 32-value q8_1 block): y only when given (null: nothing reads
// the f32 result), and the q8_1 values d q as f16 into xh when given (the wgmma GEMM's activations: gemm_f16_target).
// n4 = n / 4, n % 32 == 0, every pointer 16-byte aligned. q8k: a scale per 256 values (n % 256 == 0; split_acts).
template <glu_act A>
static __global__ void __launch_bounds__(FUSE_THREADS) glu_q8x4_kernel(const float4* g, const float4* u, float4* y,
                                                                      int64_t n4, char4* q, __half2* ds, uint2* xh,
                                                                      const uint16_t* gelu, bool q8k) {
    static_assert(FUSE_THREADS % 64 == 0, "whole 256-value blocks a thread block");
    __shared__ float gmax[FUSE_THREADS / 64];
    pdl_wait();
    pdl_trigger();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const bool ok = i < n4; // whole groups of 8 (n4 % 8 == 0): every lane of a group takes part in its shuffles
    const float4 gv = ok ? g[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 uv = ok ? u[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float gx[4] = {gv.x, gv.y, gv.z, gv.w}, ux[4] = {uv.x, uv.y, uv.z, uv.w};
    float v[4];
#pragma unroll
    for (int j = 0; j < 4; j++) v[j] = glu_apply<A>(gx[j], ux[j], gelu);
    if (y && ok) y[i] = make_float4(v[0], v[1], v[2], v[3]);
    q8x4_store(v, i, ok, q, ds, xh, q8k ? block_q8k_amax(v, gmax) : -1.0f);
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

// Where the q8_1 activations of `out` go when the node after it is a mul_mat (mul_mat_id) reading `out` that quantizes
// it through split_activations; {nullptr, nullptr} otherwise.
split_acts q8_target(cuda_context& ctx, const tensor* out, const tensor* next) {
    if (!next || (next->o != op::mul_mat && next->o != op::mul_mat_id) || next->src[1] != out || out->ne[0] % 32 != 0)
        return {};
    if (!mul_mat_quantizes_split(ctx, *next)) return {};
    split_acts qa = split_activation_ptrs(ctx, *out);
    qa.q8k = acts_q8k(next->src[0]->t);
    return qa;
}

// Whether out's readers are all mul_mats from nodes[from] on, one after the other, that take out's activations as
// the wgmma GEMM's f16 rows (gemm_f16_target): then out itself need not be written.
bool only_gemm_readers(const cuda_context& ctx, const std::vector<tensor*>& nodes, size_t from, const tensor* out,
                       const std::unordered_map<const tensor*, int>& uses) {
    const auto it = uses.find(out);
    if (it == uses.end() || (out->flags & flag_output)) return false;
    int n = 0;
    for (size_t j = from; j < nodes.size() && n < it->second; j++, n++)
        if (nodes[j]->o != op::mul_mat || nodes[j]->src[1] != out || !gemm_f16_target(ctx, *nodes[j])) return false;
    return n == it->second;
}

// The same when the reader is a mixture's expert mul_mat_id a few nodes on (from nodes[from]), reading `out` itself or
// a contiguous reshape of it at offset 0 (into *src: the tensor it names, for ctx.act_src), and every node between
// leaves the scratch alone: the router's float GEMV, the routing ops, views. {nullptr, nullptr} otherwise.
split_acts q8_target_ahead(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t from, const tensor* out,
                           const tensor** src) {
    if (out->ne[0] % 32 != 0) return {};
    const tensor* as_out = nullptr; // a reshape of out seen so far
    for (size_t j = from; j < nodes.size() && j < from + 24; j++) {
        const tensor* t = nodes[j];
        switch (t->o) {
        case op::view:
            if (t->view_src == out && t->view_offs == 0 && t->is_contiguous() && t->n_elements() == out->n_elements())
                as_out = t;
            continue;
        case op::none:
        case op::soft_max:
        case op::top_k:
        case op::get_rows:
        case op::sum_rows:
        case op::clamp:
        case op::div:
        case op::add:
        case op::scale:
            continue;
        case op::mul_mat: { // the router: float weights on the GEMV, or f32 on cuBLAS (f16 / bf16 there convert x
                            // into the scratch)
            const type wt = t->src[0]->t;
            if ((wt != type::f32 && wt != type::f16 && wt != type::bf16) ||
                (wt != type::f32 && gemm_float_wanted(ctx, *t)))
                return {};
            continue;
        }
        case op::mul_mat_id: {
            if ((t->src[1] != out && t->src[1] != as_out) || !mul_mat_quantizes_split(ctx, *t)) return {};
            *src = t->src[1];
            split_acts qa = split_activation_ptrs(ctx, *out);
            qa.q8k = acts_q8k(t->src[0]->t);
            return qa;
        }
        default:
            return {};
        }
    }
    return {};
}

// Bytes [lo, hi) of device memory tensor t spans (f32 / f16 / i32 / i64 elements, any strides).
struct span {
    uintptr_t lo, hi;
};
span span_of(const cuda_context& ctx, const tensor* t) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(ctx.ptr(t));
    uintptr_t n = type_size(t->t);
    for (int d = 0; d < TS_MAX_DIMS; d++) {
        if (t->ne[d] == 0) return {lo, lo};
        n += uintptr_t(t->ne[d] - 1) * t->nb[d];
    }
    return {lo, lo + n};
}
bool overlap(span a, span b) {
    return a.lo < b.hi && b.lo < a.hi;
}

// The four nodes of rope_kv starting at nodes[i] (views between them skipped): two ropes, the set_rows of one of
// them (K) and a set_rows of something none of the four computes (V), with the same row indices. None of the four
// reads another's result except the K write, so one kernel at nodes[i] keeps every dependency of the graph; but it
// also runs nodes before their turn, and the memory plan may have placed a result where an input of a later node of
// the four was (that input's last reader having run by then in graph order): checked here, and then not fused. The
// llama graph puts rope(Q) first (llm/arch/llama.cpp), so its result is placed while K and V live, and the rotated K,
// read by its cache write alone, is not written at all.
struct rope_kv_nodes {
    const tensor *rq, *rk, *sk, *sv;
    bool write_k; // the rotated K is read by more than its cache write
};
// The 4 nodes from nodes[i] on that compute (views and leaves between them skipped; nodes[i] itself one of them):
// the index past the last, or 0 where the graph ends first.
size_t next_four(const std::vector<tensor*>& nodes, size_t i, const tensor* (&got)[4]) {
    size_t j = i;
    for (int c = 0; c < 4; j++) {
        if (j >= nodes.size()) return 0;
        const tensor* t = nodes[j];
        if (t->o == op::view || t->o == op::none) {
            if (c == 0) return 0;
            continue;
        }
        got[c++] = t;
    }
    return j;
}

size_t match_rope_kv(const cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
                     const std::unordered_map<const tensor*, int>& uses, rope_kv_nodes& m) {
    const tensor* got[4];
    const size_t j = next_four(nodes, i, got);
    if (j == 0) return 0;
    for (const tensor* t : got)
        if (t->o != op::rope && t->o != op::set_rows) return 0;
    const tensor *ropes[2] = {}, *sets[2] = {};
    int nr = 0, ns = 0;
    for (const tensor* t : got) {
        if (t->o == op::rope) {
            if (nr == 2) return 0;
            ropes[nr++] = t;
        } else {
            if (ns == 2) return 0;
            sets[ns++] = t;
        }
    }
    if (nr != 2 || ns != 2) return 0;
    auto base = [](const tensor* t) { return t->view_src && t->view_offs == 0 ? t->view_src : t; };
    auto is_one_of = [&](const tensor* t) {
        for (const tensor* g : got)
            if (base(t) == g || t == g) return true;
        return false;
    };
    // which set_rows writes which rope (K); the other (V) must read none of the four
    const tensor *sk = nullptr, *sv = nullptr, *rk = nullptr, *rq = nullptr;
    for (int s = 0; s < 2 && !sk; s++)
        for (int r = 0; r < 2; r++)
            if (base(sets[s]->src[0]) == ropes[r]) {
                sk = sets[s];
                sv = sets[1 - s];
                rk = ropes[r];
                rq = ropes[1 - r];
                break;
            }
    if (!sk || is_one_of(sv->src[0]) || is_one_of(rq->src[0]) || is_one_of(rk->src[0])) return 0;
    if (sk->src[0] != rk && !(sk->src[0]->view_src == rk && sk->src[0]->is_contiguous())) return 0;
    if (sk->src[1] == sv->src[1]) return 0; // the two writes go to different caches
    auto used = [&](const tensor* t) {
        const auto it = uses.find(t);
        return it == uses.end() ? 0 : it->second;
    };
    // the rotated K is needed only when something besides its cache write reads it
    const bool write_k = (rk->flags & flag_output) || used(rk) != 1 ||
                         (sk->src[0] != rk && ((sk->src[0]->flags & flag_output) || used(sk->src[0]) != 1));
    const tensor* inputs[] = {rq->src[0], rk->src[0], sv->src[0], rq->src[1], rq->src[2], sk->src[2]};
    const tensor* outputs[] = {rq, sk, sv, write_k ? rk : nullptr};
    for (const tensor* o : outputs)
        for (const tensor* in : inputs)
            if (o && in && overlap(span_of(ctx, o), span_of(ctx, in))) return 0;
    m = {rq, rk, sk, sv, write_k};
    return j - i;
}

// A scale of the rotated Q right after rope_kv's nodes (from nodes[j] on, views skipped), which alone reads it, and
// whose result overlaps none of `inputs`: rope_kv's kernel then writes the scaled Q there and not the rotated one
// (gemma3's query_pre_attn_scalar); null otherwise. Its node count (views included) in n_more.
const tensor* q_scale_after(const cuda_context& ctx, const std::vector<tensor*>& nodes, size_t j,
                            const std::unordered_map<const tensor*, int>& uses, const rope_kv_nodes& m,
                            std::initializer_list<const tensor*> inputs, size_t& n_more) {
    size_t e = j;
    while (e < nodes.size() && (nodes[e]->o == op::view || nodes[e]->o == op::none)) e++;
    if (e >= nodes.size()) return nullptr;
    const tensor* s = nodes[e];
    const auto it = uses.find(m.rq);
    if (s->o != op::scale || s->src[0] != m.rq || it == uses.end() || it->second != 1 || (m.rq->flags & flag_output) ||
        !same_shape(s, m.rq))
        return nullptr;
    for (const tensor* in : inputs)
        if (in && overlap(span_of(ctx, s), span_of(ctx, in))) return nullptr;
    for (const tensor* o : {m.sk, m.sv, m.write_k ? m.rk : nullptr})
        if (o && overlap(span_of(ctx, s), span_of(ctx, o))) return nullptr;
    n_more = e + 1 - j;
    return s;
}

size_t fuse_rope_kv(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
                    const std::unordered_map<const tensor*, int>& uses) {
    rope_kv_nodes m;
    const size_t n = match_rope_kv(ctx, nodes, i, uses, m);
    if (n == 0) return 0;
    size_t n_more = 0;
    const tensor* qs = q_scale_after(ctx, nodes, i + n, uses, m,
                                     {m.rq->src[0], m.rk->src[0], m.sv->src[0], m.rq->src[1], m.rq->src[2], m.sk->src[2]},
                                     n_more);
    return rope_kv(ctx, *m.rq, *m.rk, *m.sk, *m.sv, m.write_k, nullptr, qs) ? n + n_more : 0;
}

// rms_norm(q) -> mul(its weight) -> rms_norm(k) -> mul(its weight) (qwen3's and gemma3's Q / K norms on the head
// views; views between) and rope_kv's four nodes after them, where the ropes read the two products and nothing else
// reads the norms or the products: one rope_kv kernel normalizing each head itself (rope.cu head_norm, the unfused
// vector norm kernel's arithmetic). The norms' inputs are read instead of the products, so the overlap check is made
// against them.
size_t fuse_qk_norm_rope_kv(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
                            const std::unordered_map<const tensor*, int>& uses) {
    auto used = [&](const tensor* t) {
        const auto it = uses.find(t);
        return it == uses.end() ? 0 : it->second;
    };
    const tensor* seq[4];
    size_t j = next_four(nodes, i, seq);
    if (j == 0) return 0;
    const tensor *nq = seq[0], *mq = seq[1], *nk = seq[2], *mk = seq[3];
    if (nq->o != op::rms_norm || mq->o != op::mul || nk->o != op::rms_norm || mk->o != op::mul || mq->src[0] != nq ||
        mk->src[0] != nk || used(nq) != 1 || used(nk) != 1 || used(mq) != 1 || used(mk) != 1 ||
        ((nq->flags | nk->flags | mq->flags | mk->flags) & flag_output) ||
        nq->op_params.f[0] != nk->op_params.f[0])
        return 0;
    for (const tensor* m : {mq, mk}) {
        const tensor* w = m->src[1];
        if (!w || w->t != type::f32 || w->ne[0] != m->ne[0] || w->ne[1] != 1 || w->ne[2] != 1 || w->ne[3] != 1 ||
            w->nb[0] != 4 || !same_shape(m, m->src[0]))
            return 0;
    }
    while (j < nodes.size() && (nodes[j]->o == op::view || nodes[j]->o == op::none)) j++;
    rope_kv_nodes m;
    const size_t n = match_rope_kv(ctx, nodes, j, uses, m);
    if (n == 0 || m.rq->src[0] != mq || m.rk->src[0] != mk) return 0;
    const tensor* inputs[] = {nq->src[0], nk->src[0], m.sv->src[0], m.rq->src[1], m.rq->src[2], m.sk->src[2]};
    const tensor* outputs[] = {m.rq, m.sk, m.sv, m.write_k ? m.rk : nullptr};
    for (const tensor* o : outputs)
        for (const tensor* in : inputs)
            if (o && in && overlap(span_of(ctx, o), span_of(ctx, in))) return 0;
    const qk_norms norms{nq->src[0], nk->src[0], ctx.as<float>(mq->src[1]), ctx.as<float>(mk->src[1]),
                         nq->op_params.f[0]};
    size_t n_more = 0;
    const tensor* qs = q_scale_after(ctx, nodes, j + n, uses, m,
                                     {nq->src[0], nk->src[0], m.sv->src[0], m.rq->src[1], m.rq->src[2], m.sk->src[2],
                                      mq->src[1], mk->src[1]},
                                     n_more);
    return rope_kv(ctx, *m.rq, *m.rk, *m.sk, *m.sv, m.write_k, &norms, qs) ? j - i + n + n_more : 0;
}

// The q, k, v mul_mats at nodes[i..i + 2] (decode: one GEMV launch, mul_mat_group), their bias adds if any, and
// rope_kv's four nodes after them, where the ropes and V's cache write read those three results and nothing else
// does: one kernel, the GEMV adding the biases, rotating Q and K and writing K and V to their caches in its epilogue (mmv.cu; a warp's row pair is a rotation pair:
// adjacent rows in "normal" mode, rows i and i + n_rot / 2 of a head in NEOX mode). TESSERA_CUDA_QKV_ROPE=0: off (the GEMV, then rope_kv's kernel).
size_t fuse_qkv_rope(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
                     const std::unordered_map<const tensor*, int>& uses) {
    static const bool on = env_switch_on("TESSERA_CUDA_QKV_ROPE");
    if (!on || ctx.exact || i + 3 >= nodes.size()) return 0;
    const tensor* mm[3] = {nodes[i], nodes[i + 1], nodes[i + 2]};
    for (const tensor* t : mm)
        if (t->o != op::mul_mat || (t->flags & flag_output)) return 0;
    auto used = [&](const tensor* t) {
        const auto it = uses.find(t);
        return it == uses.end() ? 0 : it->second;
    };
    size_t j = i + 3;
    // q/k/v biases (qwen2): add(product, bias row) nodes next, each the only reader of its product; the epilogue adds
    // them (res: what the ropes and V's cache write then read)
    const tensor* res[3] = {mm[0], mm[1], mm[2]};
    const float* bias[3] = {nullptr, nullptr, nullptr};
    for (; j < nodes.size() && nodes[j]->o == op::add; j++) {
        const tensor* a = nodes[j];
        int w = 0;
        while (w < 3 && a->src[0] != mm[w]) w++;
        if (w == 3 || bias[w] || used(mm[w]) != 1 || (a->flags & flag_output) || !dense(a) || !same_shape(a, mm[w]))
            return 0;
        const tensor* b = a->src[1];
        if (b->t != type::f32 || b->ne[0] != a->ne[0] || b->ne[1] != 1 || b->ne[2] != 1 || b->ne[3] != 1 ||
            b->nb[0] != 4)
            return 0;
        bias[w] = ctx.as<float>(b);
        res[w] = a;
    }
    // the views reshaping q and k come first
    while (j < nodes.size() && (nodes[j]->o == op::view || nodes[j]->o == op::none)) j++;
    rope_kv_nodes m;
    const size_t n = match_rope_kv(ctx, nodes, j, uses, m);
    if (n == 0) return 0;
    // the rope (the cache write for V) reads mul_mat result r, directly or through a contiguous view at offset 0 that
    // nothing else reads; and nothing else reads r
    auto reads_only = [&](const tensor* src, const tensor* r) {
        if (used(r) != 1) return false;
        if (src == r) return true;
        return src->view_src == r && src->view_offs == 0 && src->is_contiguous() && used(src) == 1 &&
               !(src->flags & flag_output);
    };
    if (!reads_only(m.rq->src[0], res[0]) || !reads_only(m.rk->src[0], res[1]) || !reads_only(m.sv->src[0], res[2]))
        return 0;
    rope_kv_params p;
    if (!rope_kv_params_of(ctx, *m.rq, *m.rk, *m.sk, *m.sv, m.write_k, p)) return 0;
    for (int w = 0; w < 3; w++) p.bias[w] = bias[w];
    if (m.rq->ne[0] != m.rk->ne[0] || m.rq->ne[0] % 2 != 0) return 0; // one head size; rotation pairs in a head
    // the rows of q (k) are the rope input's (dimension, head) in order, the columns its tokens; v's rows V's row
    const int64_t n_tok = m.rq->ne[2];
    for (const tensor* t : mm)
        if (t->ne[1] != n_tok || t->ne[2] != 1 || t->ne[3] != 1 || !t->is_contiguous()) return 0;
    if (mm[0]->ne[0] != m.rq->ne[0] * m.rq->ne[1] || mm[1]->ne[0] != m.rk->ne[0] * m.rk->ne[1] ||
        mm[2]->ne[0] != m.sv->src[0]->ne[0])
        return 0;
    return mul_mat_group_rope(ctx, nodes, i, p, m.rq->ne[0]) ? j - i + n : 0;
}

// fuse_add_norm's mixture end: the add's operand `sum` (the slots' sum of m, weighted by w where given) summed
// inside the norm kernel instead of by its own kernel
struct add_norm_slots {
    const tensor* sum; // the slot sum the add reads
    const tensor* m;   // (E, K, n): the experts' outputs (weighted where w is null)
    const tensor* w;   // (1, K, n) or null
};
size_t fuse_add_norm(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
                     const std::unordered_map<const tensor*, int>& uses, const add_norm_slots* slots);

// The experts' outputs summed over a token's slots: y[:, t] = ((e0 w0 + e1 w1) + e2 w2) + ..., e (E, K, n), w (1, K,
// n) the chosen weights, or w null when e is already that product (then ((e0 + e1) + e2) + ...); one product and one
// sum rounded at a time (no fused multiply-add), so the bits are those of the mul and the K - 1 adds it replaces. y may
// be e itself when n == 1 (thread j reads all of column j's slots before writing y[j], the first of them).
static __global__ void moe_slot_sum_kernel(const float* e, const float* w, float* y, int64_t E, int64_t K, int64_t n) {
    pdl_wait();
    pdl_trigger();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= E * n) return;
    const int64_t j = i % E, t = i / E;
    const float* et = e + t * E * K + j;
    const float* wt = w ? w + t * K : nullptr;
    float v = wt ? __fmul_rn(et[0], wt[0]) : et[0];
    for (int64_t s = 1; s < K; s++) v = __fadd_rn(v, wt ? __fmul_rn(et[s * E], wt[s]) : et[s * E]);
    y[i] = v;
}

// The slots' sum of product m into `sum` (moe_sum_chain's) as one moe_slot_sum_kernel, where sum does not lie over m
// (or is m itself, for one token); `nodes` (the chain's node count) on success, else 0 (nothing launched).
size_t moe_sum_of(cuda_context& ctx, const tensor* m, tensor* sum, size_t nodes) {
    const int64_t E = m->ne[0], K = m->ne[1], n = m->ne[2];
    const bool in_place = ctx.ptr(sum) == ctx.ptr(m);
    if (overlap(span_of(ctx, sum), span_of(ctx, m)) && !(in_place && n == 1)) return 0;
    if (E * n > 0)
        launch(ctx, moe_slot_sum_kernel, unsigned(ceil_div(E * n, FUSE_THREADS)), FUSE_THREADS, 0, ctx.as<float>(m),
               static_cast<const float*>(nullptr), ctx.as<float>(sum), E, K, n);
    return nodes;
}

// After the weighted product m (E, K, n) at nodes[j]: its slot views and the K - 1 adds summing them in order
// (builder::moe_ffn's end), nothing else reading the views or the partial sums. Returns the last add (f32, (E, n),
// contiguous) and in *end the index past it, or null.
tensor* moe_sum_chain(const std::vector<tensor*>& nodes, size_t j, const tensor* m,
                      const std::unordered_map<const tensor*, int>& uses, size_t* end) {
    const int64_t E = m->ne[0], K = m->ne[1], n = m->ne[2];
    auto used = [&](const tensor* t) {
        const auto it = uses.find(t);
        return it == uses.end() ? 0 : it->second;
    };
    if (K < 2 || used(m) != K || (m->flags & flag_output)) return nullptr;
    // slot s of the product: (E, n) at offset s nb1, rows nb2 apart
    auto slot = [&](const tensor* v, int64_t s) {
        return v && v->o == op::view && v->view_src == m && v->view_offs == size_t(s) * m->nb[1] && v->ne[0] == E &&
               v->ne[1] == n && v->ne[2] == 1 && v->ne[3] == 1 && v->nb[1] == m->nb[2] && used(v) == 1 &&
               !(v->flags & flag_output);
    };
    auto at = [&](size_t k) { return k < nodes.size() ? nodes[k] : nullptr; };
    if (!slot(at(j), 0) || !slot(at(j + 1), 1)) return nullptr;
    tensor* sum = at(j + 2);
    if (!sum || sum->o != op::add || sum->src[0] != at(j) || sum->src[1] != at(j + 1)) return nullptr;
    j += 3;
    for (int64_t s = 2; s < K; s++) {
        tensor* next = at(j + 1);
        if (!slot(at(j), s) || !next || next->o != op::add || next->src[0] != sum || next->src[1] != at(j))
            return nullptr;
        if (used(sum) != 1 || (sum->flags & flag_output)) return nullptr;
        sum = next;
        j += 2;
    }
    if (sum->t != type::f32 || !sum->is_contiguous() || sum->ne[0] != E || sum->ne[1] != n) return nullptr;
    *end = j;
    return sum;
}

// mul(e, w) -> slot views -> K - 1 adds in order, where nothing else reads the views or the partial sums: one
// moe_slot_sum_kernel writing the last add's result; where that result lies over an input (the memory plan may put it
// where e was, e's last reader being the mul), the mul as its own kernel and then moe_slot_sum_kernel (the product's
// last reader is the last add: in place only for one token, else the adds run as they are). Returns the nodes
// covered (1: the mul alone).
size_t fuse_moe_sum(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
                    const std::unordered_map<const tensor*, int>& uses) {
    tensor* m = nodes[i];
    if (m->o != op::mul || (m->flags & flag_output)) return 0;
    const tensor* e = m->src[0];
    const tensor* w = m->src[1];
    const int64_t E = m->ne[0], K = m->ne[1], n = m->ne[2];
    if (K < 2 || m->ne[3] != 1 || !dense(m) || !same_shape(e, m) || w->ne[0] != 1 || w->ne[1] != K || w->ne[2] != n)
        return 0;
    size_t j = 0;
    tensor* sum = moe_sum_chain(nodes, i + 1, m, uses, &j);
    if (!sum) return 0;
    const bool direct = dense(e) && w->t == type::f32 && w->is_contiguous(); // the product read from e and w
    if (direct) { // with the residual's add and the next norm
        const add_norm_slots sl{sum, e, w};
        if (const size_t n = fuse_add_norm(ctx, nodes, j, uses, &sl)) return j - i + n;
    }
    // the product too, where the result does not lie over e (but for e itself with one token) or w
    if (direct && !overlap(span_of(ctx, sum), span_of(ctx, w)) &&
        (!overlap(span_of(ctx, sum), span_of(ctx, e)) || (n == 1 && ctx.ptr(sum) == ctx.ptr(e)))) {
        if (E * n > 0)
            launch(ctx, moe_slot_sum_kernel, unsigned(ceil_div(E * n, FUSE_THREADS)), FUSE_THREADS, 0,
                   ctx.as<float>(e), ctx.as<float>(w), ctx.as<float>(sum), E, K, n);
        return j - i;
    }
    mul(ctx, *m);
    return 1 + moe_sum_of(ctx, m, sum, j - i - 1);
}

// A decode token's expert routing with softmax gating and renormalized weights (qwen3moe; builder::moe_ffn): probs =
// soft_max(logits), chosen = top_k(probs, K), g = probs[chosen], sum = sum_rows(g), c = clamp(sum, lo, hi), w = g / c,
// every result written, in one block of 256 threads: soft_max_kernel's arithmetic and thread layout (softmax.cu),
// top_k_kernel's order (moe.cu: value descending, then index ascending), sum_rows_kernel's double sum, so the bits
// are the unfused kernels'. The order comes from ranks (each thread counts the values before its own), not a sort: a
// bitonic sort's 28 barriers for 128 experts made this kernel ~11 us (ncu, H100). A NaN ranks as -inf. The logits
// are read into shared memory before anything is written (a result may lie where they were).
constexpr int ROUTE_THREADS = 256, ROUTE_MAX = 2048;
struct route_ptrs {
    const float* logits;
    float *probs, *g, *sum, *c, *w;
    int32_t* chosen;
    float scale, lo, hi;
    int X, K;
    bool sorted;
};
// The K largest of v_s[0 .. X) (value descending, then index ascending; a NaN ranks as -inf) into top_v / top_i by
// rank: each thread counts the values before each of its own. Every thread of the block calls it; syncs after.
__device__ __forceinline__ void route_top(const float* v_s, int X, int K, float* top_v, int* top_i) {
    auto key = [](float v) { return v != v ? -INFINITY : v; };
    for (int i = threadIdx.x; i < X; i += blockDim.x) {
        const float v = key(v_s[i]);
        int rank = 0;
#pragma unroll 8
        for (int k = 0; k < X; k++) {
            const float u = key(v_s[k]);
            rank += int(u > v || (u == v && k < i));
        }
        if (rank < K) {
            top_v[rank] = v_s[i];
            top_i[rank] = i;
        }
    }
    __syncthreads();
}

static __global__ void __launch_bounds__(ROUTE_THREADS) moe_route_fused_kernel(route_ptrs r) {
    __shared__ float v_s[ROUTE_MAX];
    __shared__ float top_v[WARP_SIZE];
    __shared__ int top_i[WARP_SIZE];
    __shared__ float red[32];
    pdl_wait();
    pdl_trigger();
    const int X = r.X;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < X; i += blockDim.x) {
        const float v = r.logits[i] * r.scale + 0.0f;
        v_s[i] = v;
        mx = fmaxf(mx, v);
    }
    mx = block_max(mx, red); // (its barriers: every logit has been read)
    float sum = 0.0f;
    for (int i = threadIdx.x; i < X; i += blockDim.x) {
        const float e = mx == -INFINITY ? 0.0f : expf(v_s[i] - mx);
        v_s[i] = e;
        sum += e;
    }
    sum = block_sum(sum, red);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int i = threadIdx.x; i < X; i += blockDim.x) {
        v_s[i] *= inv;
        r.probs[i] = v_s[i];
    }
    __syncthreads();
    route_top(v_s, X, r.K, top_v, top_i);
    if (threadIdx.x >= WARP_SIZE) return;
    const int lane = threadIdx.x;
    const int src = !r.sorted && r.K > 1 && lane < 2 ? 1 - lane : lane; // ggml_top_k's order swaps the first two
    float g = 0.0f;
    if (lane < r.K) {
        r.chosen[lane] = top_i[src];
        g = top_v[src];
        r.g[lane] = g;
    }
    double d = lane < r.K ? double(g) : 0.0;
#pragma unroll
    for (int o = WARP_SIZE / 2; o > 0; o /= 2) d += __shfl_xor_sync(0xffffffffu, d, o);
    const float sm = float(d);
    const float m = r.hi < sm ? r.hi : sm;
    const float c = m < r.lo ? r.lo : m;
    if (lane == 0) {
        *r.sum = sm;
        *r.c = c;
    }
    if (lane < r.K) r.w[lane] = g / c;
}

// The part both routing chains share, one node at a time: views of the head (the probabilities or biased logits) or
// of the gathered rows (the last of those: gv), top_k(head), get_rows(a view of head, that top_k). Returns 1 when t
// is one of them, 0 when it is something else (the chain's own tail), -1 when it breaks the chain.
struct route_prefix {
    tensor *tk = nullptr, *gr = nullptr, *gv = nullptr;
};
int route_prefix_step(const tensor* head, tensor* t, route_prefix& p) {
    auto root = [](const tensor* x) { return x->view_src ? x->view_src : x; };
    switch (t->o) {
    case op::view:
        if (root(t) != head && root(t) != p.gr) return -1;
        if (root(t) == p.gr) p.gv = t;
        return 1;
    case op::top_k:
        if (p.tk || t->src[0] != head) return -1;
        p.tk = t;
        return 1;
    case op::get_rows:
        if (p.gr || !p.tk || root(t->src[0]) != head || t->src[1] != p.tk) return -1;
        p.gr = t;
        return 1;
    default:
        return 0;
    }
}

// soft_max (no mask) of one token's router logits at nodes[i], then top_k, the batched get_rows of the chosen
// probabilities, sum_rows, clamp and div (views between them), each reading what builder::moe_ffn gives it: one
// moe_route_fused_kernel. Decode only (one token); returns the nodes covered.
size_t fuse_moe_route(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i) {
    tensor* sm = nodes[i];
    if (sm->o != op::soft_max || sm->src[1] || !dense(sm) || !dense(sm->src[0]) || sm->ne[1] != 1 || sm->ne[2] != 1 ||
        sm->ne[3] != 1 || sm->ne[0] > ROUTE_MAX)
        return 0;
    route_prefix p;
    tensor *sr = nullptr, *cl = nullptr, *dv = nullptr;
    size_t j = i + 1;
    for (; j < nodes.size() && j < i + 16 && !dv; j++) {
        tensor* t = nodes[j];
        if (const int r = route_prefix_step(sm, t, p)) {
            if (r < 0) return 0;
            continue;
        }
        tensor* const w2 = p.gv;
        switch (t->o) {
        case op::sum_rows:
            if (sr || !w2 || t->src[0] != w2) return 0;
            sr = t;
            break;
        case op::clamp:
            if (cl || !sr || t->src[0] != sr) return 0;
            cl = t;
            break;
        case op::div:
            if (!cl || t->src[0] != w2 || t->src[1] != cl) return 0;
            dv = t;
            break;
        default:
            return 0;
        }
    }
    if (!dv) return 0;
    tensor *tk = p.tk, *gr = p.gr, *w2 = p.gv;
    const int64_t X = sm->ne[0], K = tk->ne[0];
    if (K > WARP_SIZE || tk->ne[1] != 1 || !tk->is_contiguous() || gr->ne[0] != 1 || gr->ne[1] != K ||
        !gr->is_contiguous() || w2->ne[0] != K || !w2->is_contiguous() || !dense(sr) || !dense(cl) ||
        !dense(dv) || dv->ne[0] != K || dv->ne[1] != 1)
        return 0;
    route_ptrs r{};
    r.logits = ctx.as<float>(sm->src[0]);
    r.probs = ctx.as<float>(sm);
    r.chosen = ctx.as<int32_t>(tk);
    r.g = ctx.as<float>(gr);
    r.sum = ctx.as<float>(sr);
    r.c = ctx.as<float>(cl);
    r.w = ctx.as<float>(dv);
    r.scale = sm->op_params.f[0];
    r.lo = cl->op_params.f[0];
    r.hi = cl->op_params.f[1];
    r.X = int(X);
    r.K = int(K);
    r.sorted = tk->op_params.i[0] != 0;
    launch(ctx, moe_route_fused_kernel, 1, ROUTE_THREADS, 0, r);
    return j - i;
}

// gpt-oss's routing of a decode token (builder::moe_ffn, gating softmax_weight): p = logits + bias, chosen = top_k(p,
// K), g = p[chosen], w = soft_max(g) over the K, every result written, in one block: the add's arithmetic, top_k's
// order (route_top), soft_max_kernel's (K <= 32 values: its sum is warp 0's tree, the other warps adding zeros).
struct route_oai_ptrs {
    const float *logits, *bias;
    float *p, *g, *w;
    int32_t* chosen;
    float scale;
    int X, K;
    bool sorted;
};
static __global__ void __launch_bounds__(ROUTE_THREADS) moe_route_oai_kernel(route_oai_ptrs r) {
    __shared__ float v_s[ROUTE_MAX];
    __shared__ float top_v[WARP_SIZE];
    __shared__ int top_i[WARP_SIZE];
    pdl_wait();
    pdl_trigger();
    const int X = r.X;
    for (int i = threadIdx.x; i < X; i += blockDim.x) {
        const float v = r.logits[i] + r.bias[i];
        v_s[i] = v;
    }
    __syncthreads(); // every logit read before p (which may lie over them) is written
    for (int i = threadIdx.x; i < X; i += blockDim.x) r.p[i] = v_s[i];
    route_top(v_s, X, r.K, top_v, top_i);
    if (threadIdx.x >= WARP_SIZE) return;
    const int lane = threadIdx.x;
    const int src = !r.sorted && r.K > 1 && lane < 2 ? 1 - lane : lane; // ggml_top_k's order swaps the first two
    const bool in = lane < r.K;
    const float g = in ? top_v[src] : 0.0f;
    if (in) {
        r.chosen[lane] = top_i[src];
        r.g[lane] = g;
    }
    const float v = in ? g * r.scale + 0.0f : -INFINITY;
    const float mx = warp_max(v);
    const float e = in && mx != -INFINITY ? expf(v - mx) : 0.0f;
    const float sum = warp_sum(e);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    if (in) r.w[lane] = e * inv;
}

// add(router logits, bias) of one token at nodes[i], then (views between) top_k of it, the batched get_rows of the
// chosen values and soft_max over them: one moe_route_oai_kernel. Returns the nodes covered.
size_t fuse_moe_route_oai(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i) {
    tensor* ad = nodes[i];
    if (ad->o != op::add || !dense(ad) || ad->ne[1] != 1 || ad->ne[2] != 1 || ad->ne[3] != 1 || ad->ne[0] > ROUTE_MAX ||
        !dense(ad->src[0]) || !same_shape(ad->src[0], ad))
        return 0;
    const tensor* b = ad->src[1];
    if (b->t != type::f32 || !b->is_contiguous() || b->ne[0] != ad->ne[0] || b->n_elements() != b->ne[0]) return 0;
    route_prefix p;
    tensor* sm = nullptr;
    size_t j = i + 1;
    for (; j < nodes.size() && j < i + 12 && !sm; j++) {
        tensor* t = nodes[j];
        if (const int r = route_prefix_step(ad, t, p)) {
            if (r < 0) return 0;
            continue;
        }
        if (t->o != op::soft_max || !p.gv || t->src[0] != p.gv || t->src[1]) return 0;
        sm = t;
    }
    if (!sm) return 0;
    tensor *tk = p.tk, *gr = p.gr, *gv = p.gv;
    const int64_t X = ad->ne[0], K = tk->ne[0];
    if (K > WARP_SIZE || tk->ne[1] != 1 || !tk->is_contiguous() || gr->ne[0] != 1 || gr->ne[1] != K ||
        !gr->is_contiguous() || gv->ne[0] != K || gv->ne[1] != 1 || !gv->is_contiguous() || !dense(sm) ||
        sm->ne[0] != K || sm->ne[1] != 1)
        return 0;
    route_oai_ptrs r{};
    r.logits = ctx.as<float>(ad->src[0]);
    r.bias = ctx.as<float>(b);
    r.p = ctx.as<float>(ad);
    r.g = ctx.as<float>(gr);
    r.w = ctx.as<float>(sm);
    r.chosen = ctx.as<int32_t>(tk);
    r.scale = sm->op_params.f[0];
    r.X = int(X);
    r.K = int(K);
    r.sorted = tk->op_params.i[0] != 0;
    launch(ctx, moe_route_oai_kernel, 1, ROUTE_THREADS, 0, r);
    return j - i;
}

// The experts' matrices of a mixture (builder::moe_ffn), from a mul_mat_id at nodes[i]: up [+ add_id], gate [+
// add_id] of the same activations and ids as one route and one launch, their biases in the kernel's epilogue; or
// one matrix [+ add_id] [+ mul by the routing weights (the down projection)], then the slots' sum (moe_sum_chain).
// Results go where the last node of each matrix's chain would put them (the mul_mat_id's own memory is not written);
// not where they lie over the ids or the weights (read while results are written) or over each other. Returns the
// nodes covered, or 0 (nothing launched: the nodes run one by one).
size_t fuse_moe_experts(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
                        const std::unordered_map<const tensor*, int>& uses) {
    tensor* d0 = nodes[i];
    if (d0->o != op::mul_mat_id || !mul_mat_id_fusable(ctx, *d0) || !dense(d0)) return 0;
    auto at = [&](size_t j) { return j < nodes.size() ? nodes[j] : nullptr; };
    auto used = [&](const tensor* t) {
        const auto it = uses.find(t);
        return it == uses.end() ? 0 : it->second;
    };
    const tensor* ids = d0->src[2];
    const span ids_span = span_of(ctx, ids);
    // nodes[j] when it is add_id of m (m read by nothing else) by the same ids, with a bias row per expert
    auto biased = [&](size_t j, const tensor* m) -> tensor* {
        tensor* t = at(j);
        if (!t || t->o != op::add_id || t->src[0] != m || t->src[2] != ids || used(m) != 1 ||
            (m->flags & flag_output) || !dense(t) || !same_shape(t, m))
            return nullptr;
        const tensor* b = t->src[1];
        return b->t == type::f32 && b->nb[0] == 4 && b->ne[0] == m->ne[0] && b->ne[1] >= d0->src[0]->ne[2] &&
                       b->ne[2] == 1 && b->ne[3] == 1
                   ? t
                   : nullptr;
    };
    size_t j = i + 1;
    tensor* b0 = biased(j, d0);
    if (b0) j++;
    tensor* out0 = b0 ? b0 : d0;
    tensor* d1 = at(j);
    if (d1 && d1->o == op::mul_mat_id && mul_mat_id_fusable(ctx, *d1) && dense(d1) && same_shape(d1, d0) &&
        d1->src[1] == d0->src[1] && d1->src[2] == ids && d1->src[0]->t == d0->src[0]->t &&
        same_shape(d1->src[0], d0->src[0])) {
        tensor* b1 = biased(j + 1, d1);
        tensor* out1 = b1 ? b1 : d1;
        const span s0 = span_of(ctx, out0), s1 = span_of(ctx, out1);
        if (!overlap(s0, ids_span) && !overlap(s1, ids_span) && !overlap(s0, s1) && (!b0 == !b1)) {
            tensor* d[2] = {d0, d1};
            float* y[2] = {ctx.as<float>(out0), ctx.as<float>(out1)};
            const tensor* bias[2] = {b0 ? b0->src[1] : nullptr, b1 ? b1->src[1] : nullptr};
            mul_mat_id_fused(ctx, d, y, bias, 2, nullptr);
            return (b1 ? j + 2 : j + 1) - i;
        }
    }
    // one matrix: the routing weights' mul after it (w (1, n_used, n_tok), a weight a slot)
    tensor* ml = at(j);
    const tensor* pw = ml ? ml->src[1] : nullptr;
    if (ml && ml->o == op::mul && ml->src[0] == out0 && used(out0) == 1 && !(out0->flags & flag_output) && dense(ml) &&
        same_shape(ml, out0) && pw->t == type::f32 && pw->ne[0] == 1 && pw->ne[1] == ids->ne[0] &&
        pw->ne[2] == ids->ne[1] && pw->ne[3] == 1 && pw->nb[1] == 4) {
        const span sm = span_of(ctx, ml);
        if (!overlap(sm, ids_span) && !overlap(sm, span_of(ctx, pw))) {
            float* y[1] = {ctx.as<float>(ml)};
            const tensor* bias[1] = {b0 ? b0->src[1] : nullptr};
            mul_mat_id_fused(ctx, &d0, y, bias, 1, pw);
            size_t end = 0;
            tensor* sum = moe_sum_chain(nodes, j + 1, ml, uses, &end);
            if (!sum) return j + 1 - i;
            // the residual's add and the next norm after the slots' sum: one kernel summing the slots itself
            const add_norm_slots sl{sum, ml, nullptr};
            if (const size_t n = fuse_add_norm(ctx, nodes, end, uses, &sl)) return end - i + n;
            return j + 1 - i + moe_sum_of(ctx, ml, sum, end - j - 1);
        }
    }
    if (!b0 || overlap(span_of(ctx, b0), ids_span)) return 0;
    float* y[1] = {ctx.as<float>(b0)};
    const tensor* bias[1] = {b0->src[1]};
    mul_mat_id_fused(ctx, &d0, y, bias, 1, nullptr);
    return j - i;
}

// [add ->] rms_norm -> mul by a weight row [-> q8_1 / the GEMM's f16 rows for what follows], from nodes[i]; the
// nodes covered or 0. slots (not null): the add's operand slots->sum (a mixture's slot sum, read by nothing else) is
// not read but summed from slots->m's K slots inside the norm kernel (add_rms_norm_mul_rows' norm_slots, which
// refuses where the add's result would lie over the slots or their weights), so the slots' sum kernel is saved.
size_t fuse_add_norm(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
                     const std::unordered_map<const tensor*, int>& uses, const add_norm_slots* slots) {
    auto at = [&](size_t j) { return j < nodes.size() ? nodes[j] : nullptr; };
    auto used_once = [&](const tensor* t) {
        const auto it = uses.find(t);
        return it != uses.end() && it->second == 1 && !(t->flags & flag_output);
    };
    tensor* n0 = at(i);
    if (!n0) return 0; // (a mixture's slots summed by the graph's last node)
    const bool with_add = n0->o == op::add;
    tensor* norm = with_add ? at(i + 1) : n0;
    tensor* mul = with_add ? at(i + 2) : at(i + 1);
    if (norm && norm->o == op::rms_norm && mul && mul->o == op::mul && mul->src[0] == norm && used_once(norm) &&
        (!with_add || norm->src[0] == n0) && (!slots || with_add)) {
        const tensor* x = norm->src[0];
        const tensor* w = mul->src[1];
        const int64_t ne0 = x->ne[0], rows = x->ne[1] * x->ne[2] * x->ne[3];
        // x may be a contiguous view (qwen3's and gemma3's per-head Q / K norms read the q / k rows as heads)
        const bool x_ok = with_add ? dense(x) : x->t == type::f32 && x->is_contiguous();
        const bool ok = x_ok && dense(norm) && dense(mul) && same_shape(x, mul) && w && w->t == type::f32 &&
                        w->ne[0] == ne0 && w->ne[1] == 1 && w->ne[2] == 1 && w->ne[3] == 1 && w->nb[0] == 4 &&
                        (!with_add || (dense(n0->src[0]) && dense(n0->src[1]) && same_shape(n0->src[0], n0) &&
                                       same_shape(n0->src[1], n0)));
        // slots: the add's other operand a, b = the slot sum's experts' outputs (and weights)
        const tensor* a_in = with_add ? n0->src[0] : x;
        const tensor* b_in = with_add ? n0->src[1] : nullptr;
        norm_slots ns;
        if (slots) {
            if ((n0->src[0] == slots->sum) == (n0->src[1] == slots->sum) || !used_once(slots->sum)) return 0;
            a_in = n0->src[0] == slots->sum ? n0->src[1] : n0->src[0];
            b_in = slots->m;
            if (slots->m->ne[0] != ne0 || slots->m->ne[2] != rows || !dense(slots->m) ||
                (slots->w && !slots->w->is_contiguous()))
                return 0;
            ns.w = slots->w ? ctx.as<float>(slots->w) : nullptr;
            ns.k = slots->m->ne[1];
        }
        if (ok && rows > 0 && rows <= 65535) {
            // the q8_1 for the mul_mat right after, or for a mixture's experts past the router
            const tensor* act = mul;
            const size_t next = i + (with_add ? 3 : 2);
            split_acts qa = q8_target(ctx, mul, at(next));
            if (!qa.q && rows == 1) qa = q8_target_ahead(ctx, nodes, next, mul, &act);
            auto* q = const_cast<int8_t*>(qa.q);
            auto* ds = const_cast<__half2*>(qa.ds);
            const float eps = norm->op_params.f[0];
            const bool w_early = (w->flags & flag_param) || (w->o == op::none && !w->view_src);
            // prefill: the GEMM's f16 rows too, and the f32 result only where something else reads it
            __half* xh = q && at(next) ? gemm_f16_target(ctx, *at(next)) : nullptr;
            const bool y_read = !xh || !only_gemm_readers(ctx, nodes, next, mul, uses);
            // the vector kernel (norm.cu) where the row allows, else the strided one here (which writes y and q8_1)
            const bool vec = add_rms_norm_mul_rows(
                ctx, ctx.as<float>(a_in), b_in ? ctx.as<float>(b_in) : nullptr, with_add ? ctx.as<float>(n0) : nullptr,
                ctx.as<float>(w), w_early, y_read ? ctx.as<float>(mul) : nullptr, ne0, rows, eps, q, ds, nullptr, xh,
                slots ? &ns : nullptr, qa.q8k);
            if (!vec && slots) return 0;
            if (!vec && qa.q8k) q = nullptr, ds = nullptr; // the strided kernel's q8_1 is per 32: the mul_mat's own
            if (!vec && with_add)
                launch(ctx, add_norm_mul_kernel<true>, unsigned(rows), norm_threads(ne0), 0, ctx.as<float>(n0->src[0]),
                       ctx.as<float>(n0->src[1]), ctx.as<float>(n0), ctx.as<float>(w), ctx.as<float>(mul), ne0, eps, q,
                       ds);
            else if (!vec)
                launch(ctx, add_norm_mul_kernel<false>, unsigned(rows), norm_threads(ne0), 0, ctx.as<float>(x),
                       nullptr, nullptr, ctx.as<float>(w), ctx.as<float>(mul), ne0, eps, q, ds);
            if (q) {
                ctx.act_src = act;
                ctx.act_form = vec && xh ? cuda_context::act_split_q8_f16 : cuda_context::act_split_q8;
                ctx.act_q8k = qa.q8k;
            }
            return with_add ? 3 : 2;
        }
    }
    return 0;
}

} // namespace

size_t fuse(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
            const std::unordered_map<const tensor*, int>& uses) {
    if (!fuse_enabled()) return 0;
    static const bool rope_kv_on = env_switch_on("TESSERA_CUDA_ROPE_KV");
    if (rope_kv_on)
        if (const size_t n = fuse_qkv_rope(ctx, nodes, i, uses)) return n; // q, k, v, ropes, cache writes
    if (const size_t n = mul_mat_group(ctx, nodes, i)) return n; // q, k, v / gate, up: one GEMV launch
    if (const size_t n = mul_mat_f_group(ctx, nodes, i, uses)) return n; // the same for float weights [+ GLU]
    if (const size_t n = gemm_split_group(ctx, nodes, i)) return n; // the same in prefill: one grouped GEMM launch
    if (const size_t n = fuse_moe_experts(ctx, nodes, i, uses)) return n; // the experts' matrices [+ biases, weights]
    auto at = [&](size_t j) { return j < nodes.size() ? nodes[j] : nullptr; };
    auto used_once = [&](const tensor* t) {
        const auto it = uses.find(t);
        return it != uses.end() && it->second == 1 && !(t->flags & flag_output);
    };
    tensor* n0 = at(i);
    if (const size_t n = fuse_moe_sum(ctx, nodes, i, uses)) return n; // the experts' outputs summed over slots
    if (const size_t n = fuse_moe_route(ctx, nodes, i)) return n;        // a decode token's expert routing
    if (const size_t n = fuse_moe_route_oai(ctx, nodes, i)) return n;    // the same, gpt-oss's
    if (rope_kv_on) {
        if (const size_t n = fuse_rope_kv(ctx, nodes, i, uses)) return n;
        if (const size_t n = fuse_qk_norm_rope_kv(ctx, nodes, i, uses)) return n; // Q / K norms, ropes, cache writes
    }
    // all_reduce [-> add (the residual)] -> rms_norm -> mul by a weight row [-> q8_1]: a decode step's sum over the
    // device group (tensor parallelism; p2p.cuh) inside the norm kernel; the sum itself, read by the add (gemma3's
    // post-norms: the norm) alone, is not written
    if (n0->o == op::all_reduce && ctx.group && used_once(n0)) {
        tensor* add = at(i + 1);
        const bool res = add && add->o == op::add;
        tensor* norm = res ? at(i + 2) : add;
        tensor* mul = at(i + (res ? 3 : 2));
        const tensor* x = res ? add : n0; // the norm's input
        if ((!res || (add->src[0] == n0) != (add->src[1] == n0)) && norm && norm->o == op::rms_norm &&
            norm->src[0] == x && used_once(norm) && mul && mul->o == op::mul && mul->src[0] == norm) {
            const tensor* other = !res ? nullptr : add->src[0] == n0 ? add->src[1] : add->src[0];
            const tensor* w = mul->src[1];
            const int64_t ne0 = x->ne[0], rows = x->ne[1] * x->ne[2] * x->ne[3];
            const p2p_args* pa = group_p2p(ctx.group, ne0, rows);
            const bool ok = pa && n0->src[0]->t == type::f32 && n0->src[0]->is_contiguous() && same_shape(n0, x) &&
                            (!res || (dense(add) && dense(other) && same_shape(other, add))) && dense(norm) &&
                            dense(mul) && same_shape(x, mul) && w && w->t == type::f32 && w->ne[0] == ne0 &&
                            w->ne[1] == 1 && w->ne[2] == 1 && w->ne[3] == 1 && w->nb[0] == 4;
            if (ok) {
                const split_acts qa = q8_target(ctx, mul, at(i + (res ? 4 : 3)));
                const bool w_early = (w->flags & flag_param) || (w->o == op::none && !w->view_src);
                if (add_rms_norm_mul_rows(ctx, ctx.as<float>(n0->src[0]), res ? ctx.as<float>(other) : nullptr,
                                          res ? ctx.as<float>(add) : nullptr, ctx.as<float>(w), w_early,
                                          ctx.as<float>(mul), ne0, rows, norm->op_params.f[0],
                                          const_cast<int8_t*>(qa.q), const_cast<__half2*>(qa.ds), pa, nullptr,
                                          nullptr, qa.q8k)) {
                    if (qa.q) {
                        ctx.act_src = mul;
                        ctx.act_form = cuda_context::act_split_q8;
                        ctx.act_q8k = qa.q8k;
                    }
                    return res ? 4 : 3;
                }
            }
        }
    }
    // [add ->] rms_norm -> mul by a weight row
    if (const size_t n = fuse_add_norm(ctx, nodes, i, uses, nullptr)) return n;
    // attention -> (its output as one row per token: a view) -> q8_1 for the mul_mat after it (the output projection)
    if (n0->o == op::attention && !(n0->flags & flag_output)) {
        tensor* view = at(i + 1);
        tensor* mm = at(i + 2);
        if (view && view->o == op::view && view->view_src == n0 && view->view_offs == 0 && view->is_contiguous() &&
            view->n_elements() == n0->n_elements() && view->ne[1] * view->ne[2] * view->ne[3] == n0->ne[2] &&
            dense(n0) && used_once(view) && !(view->flags & flag_output)) {
            // (a head's output is 32-value blocks: not a q8_K block of 256, which the mul_mat then takes itself)
            const split_acts qa = q8_target(ctx, view, mm);
            if (qa.q && !qa.q8k && attention_q8(ctx, *n0, const_cast<int8_t*>(qa.q), const_cast<__half2*>(qa.ds))) {
                ctx.act_src = view;
                ctx.act_form = cuda_context::act_split_q8;
                ctx.act_q8k = false;
                return 2;
            }
        }
    }
    // swiglu / geglu / relu2_glu -> q8_1 for the mul_mat after it
    const bool glu = n0->o == op::swiglu || n0->o == op::geglu || n0->o == op::relu2_glu;
    if (glu && dense(n0) && dense(n0->src[0]) && dense(n0->src[1]) && same_shape(n0->src[0], n0) &&
        same_shape(n0->src[1], n0) && (n0->o != op::geglu || ctx.gelu_table)) {
        const split_acts qa = q8_target(ctx, n0, at(i + 1));
        const int64_t n = n0->n_elements();
        if (qa.q && n > 0) {
            const float* g = ctx.as<float>(n0->src[0]);
            const float* u = ctx.as<float>(n0->src[1]);
            float* y = ctx.as<float>(n0);
            const auto pick = [&]<class K>(K silu, K gelu, K relu2) {
                return n0->o == op::swiglu ? silu : n0->o == op::geglu ? gelu : relu2;
            };
            // Prefill (the wgmma GEMM next): the f32 result only where something besides the mul_mat (which takes the
            // f16 values) reads it. A decode step keeps the one-value-a-thread kernel below: whether the four-value one
            // slows decode was not measured (the one call that ran it read 961 for the 1B's tg128, others 1005-1044).
            // q8k (a scale per 256 values): the four-value kernel in decode too (y written), or no fusion
            __half* xh = gemm_f16_target(ctx, *at(i + 1));
            const bool x4 = (xh || qa.q8k) && aligned16(g) && aligned16(u) && aligned16(y) && aligned16(qa.q) &&
                            aligned16(xh) && (!qa.q8k || n0->ne[0] % 256 == 0);
            if (x4) {
                const int64_t n4 = n / 4;
                launch(ctx, pick(glu_q8x4_kernel<glu_act::silu>, glu_q8x4_kernel<glu_act::gelu>,
                                 glu_q8x4_kernel<glu_act::relu2>),
                       unsigned(ceil_div(n4, FUSE_THREADS)), FUSE_THREADS, 0, reinterpret_cast<const float4*>(g),
                       reinterpret_cast<const float4*>(u),
                       xh && used_once(n0) ? nullptr : reinterpret_cast<float4*>(y), n4,
                       reinterpret_cast<char4*>(const_cast<int8_t*>(qa.q)), const_cast<__half2*>(qa.ds),
                       reinterpret_cast<uint2*>(xh), ctx.gelu_table, qa.q8k);
                ctx.act_src = n0;
                ctx.act_form = xh ? cuda_context::act_split_q8_f16 : cuda_context::act_split_q8;
                ctx.act_q8k = qa.q8k;
                return 1;
            }
            if (qa.q8k) return 0;
            launch(ctx, pick(glu_q8_kernel<glu_act::silu>, glu_q8_kernel<glu_act::gelu>, glu_q8_kernel<glu_act::relu2>),
                   unsigned(ceil_div(n, FUSE_THREADS)), FUSE_THREADS, 0, g, u, y, n, const_cast<int8_t*>(qa.q),
                   const_cast<__half2*>(qa.ds), ctx.gelu_table);
            ctx.act_src = n0;
            ctx.act_form = cuda_context::act_split_q8;
            ctx.act_q8k = false;
            return 1;
        }
    }
    return 0;
}

} // namespace tessera::cuda
