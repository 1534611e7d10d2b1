// ops.cuh: the CUDA ops, one function per op, each reading its node (`rms_norm(ctx, dst)`), launching on ctx.stream
// and returning without waiting. Same names and files as the CPU's (backends/cpu/ops/): elementwise, norm, rope,
// softmax, get_rows, attention; mul_mat is the fused dequant GEMV in mmv.cu.
#pragma once

#include "backends/cuda/common.cuh"
#include "backends/cuda/p2p.cuh"
#include "ggml-like/rope_angles.h"

#include <cuda_fp16.h>

#include <unordered_map>
#include <vector>

namespace tessera::cuda {

void get_rows(cuda_context& ctx, tensor& dst);
void mul_mat(cuda_context& ctx, tensor& dst);
void add(cuda_context& ctx, tensor& dst);
void mul(cuda_context& ctx, tensor& dst);
void scale(cuda_context& ctx, tensor& dst);
void rms_norm(cuda_context& ctx, tensor& dst);
void rms_norm_part(cuda_context& ctx, tensor& dst);
void rope(cuda_context& ctx, tensor& dst);
void soft_max(cuda_context& ctx, tensor& dst);
void silu(cuda_context& ctx, tensor& dst);
void swiglu(cuda_context& ctx, tensor& dst);
void geglu(cuda_context& ctx, tensor& dst);     // gelu through ggml's f16 table (ggml-like/gelu.h)
void relu2_glu(cuda_context& ctx, tensor& dst);
void tanh(cuda_context& ctx, tensor& dst);
void score(cuda_context& ctx, tensor& dst);
bool score_supported(const tensor& node);
void cpy(cuda_context& ctx, tensor& dst);
void set_rows(cuda_context& ctx, tensor& dst);
void attention(cuda_context& ctx, tensor& dst);
// expert routing (moe.cu, mmv.cu: mul_mat_id) and gpt-oss's ops (elementwise.cu)
void top_k(cuda_context& ctx, tensor& dst);
bool top_k_supported(const tensor& dst);
void mul_mat_id(cuda_context& ctx, tensor& dst);
bool mul_mat_id_supported(const tensor& dst);
size_t mul_mat_id_work_size(const tensor& dst);
// mul_mat_id nodes d[0 .. n) (n = 1, 2: gate and up) of split experts of one format and shape with the same
// activations and ids, as one route and (where the grid allows) one launch: matrix i's results (d[i]'s shape and
// strides) to y[i] (y or y[i] null: d[i]'s own memory), its experts' biases bias[i] added (add_id; null: none), each
// pair's weight from pw (1, n_used, n_tok; null: none) multiplied, rounded as those separate ops.
// mul_mat_id_fusable: node d is a mul_mat_id of split experts.
bool mul_mat_id_fusable(const cuda_context& ctx, const tensor& d);
void mul_mat_id_fused(cuda_context& ctx, tensor* const* d, float* const* y, const tensor* const* bias, int n,
                      const tensor* pw);
void add_id(cuda_context& ctx, tensor& dst);
void sum_rows(cuda_context& ctx, tensor& dst);
void div(cuda_context& ctx, tensor& dst);
void clamp(cuda_context& ctx, tensor& dst);
void swiglu_oai(cuda_context& ctx, tensor& dst);
// attention of a decode step (<= 8 tokens) that also writes its output as q8_1 into q / ds (split_acts' layout, a row
// of n_head * head_dim values per token) for the mul_mat after it; false (nothing launched) where the decode kernel
// does not take the node (exact mode, longer batches, unaligned caches, a strided output).
bool attention_q8(cuda_context& ctx, tensor& dst, int8_t* q, __half2* ds);
// Scratch bytes prefill attention needs: the mask's summary per (64 queries, 64 keys) tile (attention.cu).
size_t attention_work_size(const tensor& dst);

// What each op accepts (types, strides, sizes), for cuda_backend::supports().
bool mul_mat_supported(const tensor& dst);
bool get_rows_supported(const tensor& dst);
bool attention_supported(const tensor& dst);
bool set_rows_supported(const tensor& dst);
// Weight types mul_mat and get_rows accept: f32, f16, bf16 and the formats with a cuda_format (quant/formats.cuh).
bool weight_type_supported(type t);
// Scratch bytes mul_mat needs for its activations (quantized, and as f16 for the wgmma GEMM; float weights: cuBLAS's)
size_t mul_mat_work_size(const tensor& dst);
// Whether the upload repacks weight w into the split layout (quant/format.cuh): a format with one, a 2-D contiguous
// weight of whole blocks; TESSERA_CUDA_SPLIT=0 turns the layout off (the file's blocks, where a format has a kernel).
bool split_eligible(const tensor& w);
// x (f32 rows of k % 32 == 0 elements) quantized to q8_1 for the split kernels, in ctx.scratch: q [cols][k] int8 and
// ds [cols][k / 32] (d, s = d sum q) as half2, the CPU's integers (mmv.cu). Consecutive calls with the same x (q, k, v;
// gate, up) quantize once.
// q8k: the scale d is taken per 256 values (each 32-value block's d is its 256-value block's), for weights the CPU
// pairs with q8_K activations (acts_q8k): the CPU's integers again (q8x4_store's gmax).
struct split_acts {
    const int8_t* q = nullptr;
    const __half2* ds = nullptr;
    bool q8k = false;
};
// Whether weights of type w take their activations with one scale per 256 values, as the CPU's q8_K (quant/q8_k.h:
// the K formats, tq2_0); the rows then hold whole 256-value blocks (k % 256 == 0).
bool acts_q8k(type w);
// For a mul_mat of weights of type w. xh (not null): also the values d q as f16 rows there (the wgmma GEMM's
// activations) where the rows allow it (contiguous, 16-byte aligned); ctx.act_form then says act_split_q8_f16.
split_acts split_activations(cuda_context& ctx, const tensor& x, type w, __half* xh = nullptr);
// Bytes of those two arrays for k x cols activations, the second aligned to 256 (what follows them starts there).
size_t split_acts_bytes(int64_t k, int64_t cols);
// Where split_activations puts them (nothing is computed).
split_acts split_activation_ptrs(const cuda_context& ctx, const tensor& x);
// Whether mul_mat node `node` quantizes its activations through split_activations (a split weight on the GEMV or the
// int8 GEMM; a mul_mat_id node of split experts always does), so that a kernel before it can leave them there
// (fused.cu).
bool mul_mat_quantizes_split(const cuda_context& ctx, const tensor& node);
// Where mul_mat node `node` would convert those q8_1 values to f16 for the wgmma GEMM (their values d q, d rounded to
// f16 first, as q8_f16_kernel in gemm.cu), or null when it takes another path: a kernel before it that quantizes may
// write them there itself and set ctx.act_form to act_split_q8_f16 (gemm.cu).
__half* gemm_f16_target(const cuda_context& ctx, const tensor& node);
// Exact mode (TESSERA_CUDA_EXACT=1, exact_mm.cu): mul_mat and mul_mat_id (dst's op) in the CPU's float order, bit for
// bit, for the formats with mmq_unpack, tq2_0 and i2_s (with the CPU's q8_K / per-token int8 activations); any number
// of columns.
bool gemm_exact_available(type t);
void gemm_exact(cuda_context& ctx, const split_weight& w, const tensor& weight, tensor& dst);
// ... and mul_mat of float weights (2-D, file layout): f16 / bf16 in the CPU's orders (float16.h; bf16's as the host
// CPU's), f32 in its row dot's
bool float_exact_available(const tensor& node);
void float_exact(cuda_context& ctx, tensor& dst);
// ... and mul_mat_id of float experts (f32, f16, bf16) in the CPU's row dots
void float_id_exact(cuda_context& ctx, tensor& dst);
// Whether the tensor-core GEMM multiplies weights of type t with q8_1 activations (the int8 kernel) rather than f16.
bool gemm_uses_q8(type t);

// Consecutive mul_mat nodes nodes[i..] (2 or 3) reading the same activations with split weights of one format and k,
// on the decode GEMV (q, k, v; gate, up), launched as one kernel; returns how many (0: not such a run).
size_t mul_mat_group(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i);
// The same for float weights (f32 / f16 / bf16 in the file's layout, one type and k, <= 8 columns): 2-3 mul_mats as
// one launch of the float GEMV; gate and up followed by swiglu / geglu / relu2_glu of the two: the GLU in its epilogue
// (3 nodes). Not in exact mode. Returns the nodes covered, or 0 (nothing launched). uses: readers per tensor.
size_t mul_mat_f_group(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
                       const std::unordered_map<const tensor*, int>& uses);
// The mul_mats from nodes[i] on, up to 3, of one activation whose weights are loaded in the split layout with one
// format and k (q, k, v; gate, up): what mul_mat_group and gemm_split_group launch together. n = 0: none.
struct mat_group {
    const split_weight* ws[3];
    tensor* dsts[3];
    int n = 0;
    const tensor* x = nullptr;
};
mat_group find_mat_group(const cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i);
struct rope_kv_params;
// The same for exactly three (q, k, v; true when launched), the epilogue rotating Q and K (heads of hd values,
// "normal" mode: rows 2i, 2i + 1 of a head are a pair) and writing K and V to their caches as p says (rope.cu).
bool mul_mat_group_rope(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i, const rope_kv_params& p,
                        int64_t hd);

// q8_1 of 32 values held one per lane of a warp (lane order = element order), as the CPU's quantizer (quant/q8_1.h,
// ggml's AVX2 one): d = amax / 127, q = round half to even (v * 127 / amax), s = d sum q. Every lane gets its q and
// the block's (d, s); every lane of the warp must call it.
struct q8_lane {
    int q;
    float d, s;
};
__device__ __forceinline__ q8_lane quantize_q8_lane(float v) {
    const float amax = warp_max(fabsf(v));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const int q = __float2int_rn(v * id);
    return {q, d, float(warp_sum(q)) * d};
}
// ... stored in split_acts' layout: q[lane] and, from lane 0, ds = (d, s) as half2
__device__ __forceinline__ void q8_store_warp(float v, int lane, int8_t* q, __half2* ds) {
    const q8_lane ql = quantize_q8_lane(v);
    q[lane] = int8_t(ql.q);
    if (lane == 0) *ds = __halves2half2(__float2half_rn(ql.d), __float2half_rn(ql.s));
}
// The same four values a thread: v = values 4 i .. 4 i + 3 of split_acts' rows, eight consecutive threads (from a
// lane that is a multiple of 8) a block of 32. Same integers and scales as quantize_q8_lane (a max and an integer sum
// come out the same in any order). Every lane of the warp must call it; only those with `store` write: q[i], the
// block's (d, s) from its first thread, and with xh the values d q as f16 (d rounded to f16 first, as q8_f16_kernel:
// the wgmma GEMM's activations, gemm_f16_target).
// gmax >= 0 (q8k): the scale is the 256-value block's, gmax its largest |value| (block_q8k_amax), as the CPU's q8_K
// takes it: id = 127 / gmax, d = 1 / id (q8_K's iscale = -127 / max, where max is the value of largest magnitude, and
// d = 1 / iscale: both signs flip with max's, so every q d and every integer dot's d_w d_a sum q_w q_a is the same).
__device__ __forceinline__ void q8x4_store(const float (&v)[4], int64_t i, bool store, char4* q, __half2* ds,
                                           uint2* xh, float gmax = -1.0f) {
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float d = amax / 127.0f;
    float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    if (gmax >= 0.0f) {
        id = gmax != 0.0f ? 127.0f / gmax : 0.0f;
        d = gmax != 0.0f ? 1.0f / id : 0.0f;
    }
    int qi[4], sum = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        qi[j] = __float2int_rn(v[j] * id);
        sum += qi[j];
    }
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (!store) return;
    q[i] = make_char4(int8_t(qi[0]), int8_t(qi[1]), int8_t(qi[2]), int8_t(qi[3]));
    const __half dh = __float2half_rn(d);
    if (i % 8 == 0) ds[i / 8] = __halves2half2(dh, __float2half_rn(float(sum) * d));
    if (xh) {
        const float df = __half2float(dh);
        uint2 o;
        *reinterpret_cast<__half2*>(&o.x) = __floats2half2_rn(float(qi[0]) * df, float(qi[1]) * df);
        *reinterpret_cast<__half2*>(&o.y) = __floats2half2_rn(float(qi[2]) * df, float(qi[3]) * df);
        xh[i] = o;
    }
}
// q8k: the largest |value| of each 256-value block of values held four a thread (float4 i = a block's first + 0..63),
// for q8x4_store's gmax. Blocks of a multiple of 64 threads, each thread's float4 index i = (a multiple of 64) +
// threadIdx.x: a warp's values lie in one block. gmax_s: blockDim.x / 64 floats of shared memory. Every thread of
// the block must call it (two barriers); the zeros of threads past the rows count as values.
__device__ __forceinline__ float block_q8k_amax(const float (&v)[4], float* gmax_s) {
    float a = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int o = 1; o < WARP_SIZE; o <<= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
    if (threadIdx.x < blockDim.x / 64) gmax_s[threadIdx.x] = 0.0f;
    __syncthreads();
    // non-negative floats order as their bits
    if (threadIdx.x % WARP_SIZE == 0) atomicMax(reinterpret_cast<int*>(gmax_s + threadIdx.x / 64), __float_as_int(a));
    __syncthreads();
    return gmax_s[threadIdx.x / 64];
}

// Every thread of the block sorts p2 (a power of two) values v with their indices idx in shared memory, bitonically:
// larger values first, equal values by index (top_k in moe.cu, the fused routing in fused.cu). Ends with a barrier.
__device__ __forceinline__ void bitonic_sort_desc(float* v, int* idx, int p2) {
    auto before = [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && idx[a] < idx[b]); };
    for (int size = 2; size <= p2; size <<= 1)
        for (int stride = size / 2; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < p2; i += blockDim.x) {
                const int j = i ^ stride;
                if (j <= i) continue;
                // runs of `size` alternate between final order and its reverse until the last merge
                if ((i & size) == 0 ? before(j, i) : before(i, j)) {
                    const float tv = v[i];
                    v[i] = v[j];
                    v[j] = tv;
                    const int ti = idx[i];
                    idx[i] = idx[j];
                    idx[j] = ti;
                }
            }
            __syncthreads();
        }
}

// Threads of the one block that normalizes a row of ne0 (norm.cu, fused.cu: the same, so both sum alike): a decode
// step has one row, and 1024 threads take a 4096-wide row in 4 steps rather than 16.
constexpr int norm_threads(int64_t ne0) {
    return ne0 >= 2048 ? 1024 : 256;
}

// norm.cu: for `rows` contiguous rows of ne0 floats: sum = a + b (when b is given), x = b ? sum : a, y = (x * s) * w
// (w == nullptr: x * s) with s = 1 / sqrt(mean(x^2) + eps), then y to q8_1 into q / ds (split_acts' layout) when q is
// given, and their values d q as f16 rows into xh when given (the wgmma GEMM's activations); y == nullptr: y itself
// is not written (nothing else reads it). w_early: w is a weight or graph input, read before the kernel waits for the
// one ahead. group (not null): a is this member's partial sums, summed over the device group first (the all_reduce
// before; group_p2p's arguments for these rows). slots (not null, with b): b is a mixture's experts' outputs (ne0,
// K, rows), summed over a row's K slots here, ((b0 w0 + b1 w1) + b2 w2) + ... (w null: ((b0 + b1) + b2) + ...),
// each product and sum rounded on its own: moe_slot_sum_kernel's bits (fused.cu), the sum not written (K <= 8, ne0 <=
// 4096; false where `sum` lies over b or the slot weights). q8k: q and ds with a scale per 256 values (split_acts).
// One launch; false (nothing launched) unless ne0 % 32 == 0 (q8k: 256), ne0 <= 16384 and every pointer is 16-byte
// aligned.
struct norm_slots {
    const float* w = nullptr; // (K, rows): a weight a slot, or null
    int64_t k = 0;
};
bool add_rms_norm_mul_rows(const cuda_context& ctx, const float* a, const float* b, float* sum, const float* w,
                           bool w_early, float* y, int64_t ne0, int64_t rows, float eps, int8_t* q, __half2* ds,
                           const p2p_args* group, __half* xh = nullptr, const norm_slots* slots = nullptr,
                           bool q8k = false);

// fused.cu: when nodes[i] starts a chain launch_nodes can run as one kernel (add -> rms_norm -> mul [-> q8_1],
// rms_norm -> mul, swiglu -> q8_1, attention -> q8_1, rope(Q) + rope(K) + the K/V cache writes), launches it and returns how many nodes it covered; else 0. `uses` counts the
// nodes reading each tensor.
size_t fuse(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i,
            const std::unordered_map<const tensor*, int>& uses);

// rope.cu: rope of Q (rq) and of K (rk), set_rows of the rotated K (sk) and of V (sv) into f16 caches as one launch,
// rk's own result written only when write_k; false (nothing launched) when the nodes do not have the shapes and types
// it handles. The caller checks that no result it writes overlaps an input (fused.cu). norms (qwen3, gemma3): rq and
// rk rotate rms_norm(q) * qw and rms_norm(k) * kw of the heads of q and k (eps: the norms'), computed in the kernel as
// the unfused rms_norm -> mul does it. q_scaled (gemma3's query_pre_attn_scalar): a scale node reading rq alone; the
// rotated Q times its factor goes to it instead of to rq (the product rounded as the scale kernel rounds it).
struct qk_norms {
    const tensor *q, *k; // the norms' inputs (heads as rows)
    const float *qw, *kw;
    float eps;
};
bool rope_kv(cuda_context& ctx, const tensor& rq, const tensor& rk, const tensor& sk, const tensor& sv, bool write_k,
             const qk_norms* norms = nullptr, const tensor* q_scaled = nullptr);
// Where those results go and how the angles are made, for a kernel that writes them itself (rope_kv's kernel, the q/k/v
// GEMV's epilogue in mmv.cu): rotated Q into yq (element (j, head, token) at j + head nb1 + token nb2, in floats; yk
// the same for K, null unless write_k), K and V as f16 into cache rows idx[token] (rows outside [0, rows) skipped, as
// set_rows skips them). The angles: `ang` (ggml-like/rope_angles.h) and ff, the pairs' factors, when given.
struct rope_kv_params {
    float *yq, *yk;
    shape4 syq, syk;
    const int32_t* pos;
    const float* ff;
    const void* idx;
    bool idx64;
    __half *kc, *vc;
    int64_t kc_nb1, vc_nb1, kc_rows, vc_rows; // row strides in halves, rows
    int n_rot;
    rope_angles ang;
    bool neox;
    // the q/k/v GEMV's epilogue only: a bias row added to each product before the rotation (qwen2), or null
    const float* bias[3] = {nullptr, nullptr, nullptr};
    float q_scale = 1.0f; // rope_kv's kernel only: the rotated Q times this (a scale node after it folded in)
};
// gelu(g) u as the CPU computes it (ggml-like/gelu.h): 0 for g <= -10, g u for g >= 10, else the f16 table's value
// at g rounded to f16, times u. table: cuda_context::gelu_table.
__device__ __forceinline__ float geglu_f(float g, float u, const uint16_t* table) {
    if (g <= -10.0f) return 0.0f;
    if (g >= 10.0f) return __fmul_rn(g, u);
    return __fmul_rn(__half2float(__ushort_as_half(table[__half_as_ushort(__float2half_rn(g))])), u);
}
// relu(g)^2 u, in ggml's order (relu, square, product)
__device__ __forceinline__ float relu2_glu_f(float g, float u) {
    const float r = g > 0.0f ? g : 0.0f;
    return __fmul_rn(__fmul_rn(r, r), u);
}
// The gate's activation times up: silu (swiglu), gelu through ggml's f16 table (geglu), squared ReLU (relu2_glu), each
// as elementwise.cu computes it, so fused results (fused.cu, the float GEMV's epilogue in mmv.cu) are the unfused
// kernels' bits.
enum class glu_act { none, silu, gelu, relu2 };
template <glu_act A> __device__ __forceinline__ float glu_apply(float x, float u, const uint16_t* gelu) {
    static_assert(A != glu_act::none);
    if constexpr (A == glu_act::silu)
        return x / (1.0f + expf(-x)) * u;
    else if constexpr (A == glu_act::gelu)
        return geglu_f(x, u, gelu);
    else
        return relu2_glu_f(x, u);
}
// (cos, sin) of rotation pair i of a token at position pos, times the pair's magnitude, as the CPU computes them (the
// angle pos theta_scale^i by i repeated f32 products, then ggml-like/rope_angles.h) (rope.cu, the q/k/v GEMV's
// epilogue).
__device__ __forceinline__ float2 rope_cos_sin(int32_t pos, int64_t i, const rope_angles& a, const float* ff) {
    float theta = float(pos);
    for (int64_t j = 0; j < i; j++) theta *= a.theta_scale;
    float th, ms, s, c;
    rope_pair_angle(theta, int(i), ff ? ff[i] : 1.0f, a, &th, &ms);
    sincosf(th, &s, &c);
    return make_float2(c * ms, s * ms);
}
// (x0, x1) rotated by (c, s) = cs, with the CPU's fused first product
__device__ __forceinline__ float2 rope_rotate(float x0, float x1, float2 cs) {
    return make_float2(fmaf(x0, cs.x, -__fmul_rn(x1, cs.y)), fmaf(x0, cs.y, __fmul_rn(x1, cs.x)));
}
// rope_kv's checks (shapes, types, strides) and its parameters; false when it would not take the nodes.
bool rope_kv_params_of(const cuda_context& ctx, const tensor& rq, const tensor& rk, const tensor& sk, const tensor& sv,
                       bool write_k, rope_kv_params& p);

// The tensor-core GEMM for split-layout weights (gemm.cu): used for more than 8 activation columns. On a GPU with
// wgmma (ctx.wgmma) it runs gemm_wgmma, else the mma.sync kernels.
bool gemm_split_wanted(int64_t cols);
size_t gemm_split_work_size(int64_t k, int64_t cols);
void gemm_split(cuda_context& ctx, const split_weight& w, tensor& dst);
// 2-3 mul_mats from nodes[i] of the same activations (q, k, v; gate, up) with more than 8 columns, split weights of
// one q8 format on the wgmma GEMM: one grouped launch (gemm_wgmma_group); the nodes covered, or 0
size_t gemm_split_group(cuda_context& ctx, const std::vector<tensor*>& nodes, size_t i);

// mul_mat_id's prefill on the tensor cores (gemm.cu), for the formats with mmq_unpack (gemm_id_available): the
// (slot, token) pairs grouped by expert in tiles of up to gemm_id_tile pairs (moe_route_kernel, mmv.cu), each tile a
// 128-row x 64-column block of the expert's matrix against its pairs' activation rows (x: n_b rows a token), results
// to y at slot y_nb1 + token y_nb2 (floats). On Hopper (ctx.wgmma, not exact) gemm_wgmma_id on the q8_1 values as
// f16 (as the dense GEMM), else the int8 mma.sync kernel. split_weight w: rows n of one expert, experts one after the
// other. The epilogue may add the expert's bias (add_id's) and multiply by the pair's routing weight (the mul after
// the experts), each rounded as those ops: y = ((acc scale) + bias[expert bias_nb1 + row]) pw[slot + token pw_nb1].
struct id_map {
    const int4* tiles = nullptr; // (expert, first pair, count, -)
    const int* n_tiles = nullptr;
    const int* pairs = nullptr; // t n_used + i, grouped by expert
    int64_t n_used = 1, n_b = 1, y_nb1 = 0, y_nb2 = 0;
    const float* bias = nullptr; // per matrix (gemm_id's bias[])
    int64_t bias_nb1 = 0;
    const float* pw = nullptr; // the pairs' weights, or null
    int64_t pw_nb1 = 0;
};
// The experts' epilogue: add_id's bias bias[bi], then the routing weight pw[wi], each with its own op's rounding (bias
// and pw may be null: then that step is left out)
__device__ __forceinline__ float id_epilogue(float v, const float* bias, int64_t bi, const float* pw, int64_t wi) {
    if (bias) v = __fadd_rn(v, bias[bi]);
    if (pw) v = __fmul_rn(v, pw[wi]);
    return v;
}
// output (row r, local column c) of a tile of pairs starting at pair `first` -> its pair's output row
__device__ __forceinline__ void store_id(const id_map& map, float* y, int64_t expert, int first, int64_t r, int64_t c,
                                         float v) {
    const int64_t p = map.pairs[first + c], slot = p % map.n_used, tok = p / map.n_used;
    y[slot * map.y_nb1 + tok * map.y_nb2 + r] =
        id_epilogue(v, map.bias, expert * map.bias_nb1 + r, map.pw, slot + tok * map.pw_nb1);
}
constexpr int gemm_id_tile = 64;
bool gemm_id_available(type t);
// Bytes of the scratch the activations take (q8_1, and their f16 values on Hopper) before the route
size_t gemm_id_acts_bytes(int64_t k, int64_t cols);
// n (1, 2) matrices of one format and shape against the same pairs: matrix i's outputs to y[i], its biases bias[i]
void gemm_id(cuda_context& ctx, const split_weight* const* w, float* const* y, const float* const* bias, int n,
             const tensor& x, const id_map& map, int64_t max_tiles);

// Hopper's wgmma GEMM (gemm_wgmma.cu): whether the running binary has its sm_90a code for the current device, of
// compute capability cc_major.cc_minor (asks the device once; also raises the kernels' shared-memory limit), and the
// GEMM itself on f16 activations x [cols][k] (the weights dequantized inside it).
bool wgmma_built(int cc_major, int cc_minor);
void gemm_wgmma(cuda_context& ctx, const split_weight& w, const __half* x, tensor& dst);
// n (2-3) matrices of the same format, k and activations x (f16, as gemm_wgmma's) in one launch, their row tiles
// one after the other in the grid (q, k, v; gate, up: narrow matrices fill the SMs together).
void gemm_wgmma_group(cuda_context& ctx, const split_weight* const* w, tensor* const* dst, int n, const __half* x);
// gemm_id's Hopper kernel: grid (tiles of pairs, row tiles of the n matrices), x the q8_1 values as f16 rows
void gemm_wgmma_id(cuda_context& ctx, const split_weight* const* w, float* const* y, const float* const* bias, int n,
                   const __half* x, const id_map& map, int64_t max_tiles);

// Prefill mul_mat of f16 / bf16 weights in the file's layout (gemm.cu): cuBLAS (ctx.cublas) on the activations
// rounded to the weights' type, as the CPU rounds them, f32 sums. For more than 8 columns of a plain 2-D weight with
// k % 32 == 0 and an output whose columns are equally spaced; other shapes take the GEMV (mmv.cu). Measured (H100,
// 2026-11-26, 8B shape, pp512, llama.cpp's CUDA build beside): f16 25.4-25.8k vs 22.3k t/s, bf16 26.3-26.4k vs 25.3k;
// the wgmma kernel on f16 rows it replaced: 14.6k / 11.7k (bf16 converted to f16 a block of rows at a time).
// f32 weights (a mixture's router; f32 test files) likewise, x read in place (contiguous), f32 in and out.
// gemm_float_shape: whether a node is one; cublas_create / cublas_destroy: the handle of cuda_context::cublas, on a
// stream of the current device, with a workspace of its own.
bool gemm_float_shape(const tensor& node);
bool gemm_float_wanted(const cuda_context& ctx, const tensor& node);
size_t gemm_float_work_size(const tensor& node);
void gemm_float(cuda_context& ctx, tensor& dst);
void* cublas_create(cudaStream_t stream);
void cublas_destroy(void* handle);

} // namespace tessera::cuda
