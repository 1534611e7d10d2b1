// exact_mm.cu: exact mode's (TESSERA_CUDA_EXACT=1) matrix products, mul_mat and mul_mat_id in the CPU's float orders,
// bit for bit, with the CPU's activations. Slow (CUDA cores, a thread a weight row, no reuse of weights across more
// than 8 columns) and only for the exact mode.
//
// Block formats with mmq_unpack against the q8_1 activations (the CPU's integers; the weights' signed values
// mmq_unpack's), in one of the CPU's orders (backends/cpu/quant/repack.h keeps the row kernels' orders):
//   lanes:     8 float accumulators per output, lane g taking elements 4g..4g+3 of every 32-element chunk:
//              acc_g = fma(scale, float(4-element integer dot), acc_g) with scale = d_w d_a (nvfp4: UE4M3(d_sub) d_a,
//              per 16-element sub-block), then folded as hsum_float_8: ((a4 + a0) + (a6 + a2)) + ((a5 + a1) + (a7 +
//              a3)), plus q4_1's running fma(m_w, s_a, .)   (q4_0 token embedding, q4_1, q8_0, nvfp4: ggml_vec_dot's
//              order)
//   pairs:     lanes, with even chunks in one set of 8 accumulators and odd ones in another, the two added lane by
//              lane and folded, then an odd last chunk's (d_a d_w) float(sum) added    (mxfp4: ggml_vec_dot_mxfp4_q8_0;
//              iq4_nl: ggml_vec_dot_iq4_nl_q8_0, tinyBLAS's lanes for a batch of 2+ activation rows)
//   blockwise: acc = fma(float(chunk's integer dot), d_w d_a, acc)   (q4_0 / mxfp4 / iq4_nl matrices llama.cpp
//              repacks, 8k rows)
//   grouped:   per scale group, g = fma(float(chunk dot), d_a, g) from 0, then acc = fma(s, g, acc)        (awq4)
// tq2_0 against the CPU's q8_K activations (quant/q8_k.h): per 256-element block 8 int32 lanes, lane g = the codes
// of elements 4g..4g+3 of every chunk dotted with theirs, minus the activations' sum over chunk g (ggml's AVX2 lanes,
// tq2_0_avx2.cpp), acc_g = fma(float(lane), d_a d_w, acc_g), folded as above. i2_s against the CPU's per-token int8
// activations: the row's exact integer sum, converted once. f16 / bf16 in the CPU's orders (float16.h), bf16 in the
// one the host CPU takes (AVX512_BF16's vdpbf16ps or the f32 lanes).
// mul_mat_id: every (slot, token) pair is a column of one expert's matrix, the CPU's row kernels per pair (moe.cpp).
#include "backends/cuda/ops/ops.cuh"

#include "backends/cuda/quant/formats.cuh"
#include "ggml-like/cpu_features.h"
#include "ggml-like/fp16.h"

#include <cuda_fp16.h>

#include <cfloat>
#include <type_traits>

namespace tessera::cuda {

namespace {

constexpr int EX_THREADS = 128, EX_COLS = 8, EX_STEP = 8;

// Where an exact kernel's column j finds its activation row, its output and its weight rows: mul_mat's columns are
// dst's (dims 1..3); mul_mat_id's are its (slot, token) pairs, pair j = (slot j % n_used, token j / n_used) taking
// expert ids[t * ids_nb1 + i] and activation row t * n_b + i % n_b.
struct exact_cols {
    int64_t m = 1, ne2 = 1, ne3 = 1, y_nb1 = 0, y_nb2 = 0, y_nb3 = 0; // strides in floats
    const int32_t* ids = nullptr;
    int64_t ids_nb1 = 0, n_used = 1, n_b = 1, n_expert = 1, rows = 0; // rows: one expert's
};
struct exact_col {
    int64_t act, y, row0; // activation row, output offset, first weight row (< 0: an expert id out of range)
};
__device__ __forceinline__ exact_col exact_col_of(const exact_cols& c, int64_t j) {
    if (!c.ids) return {j, column_offset(j, c.m, c.ne2, c.ne3, c.y_nb1, c.y_nb2, c.y_nb3), 0};
    const int64_t t = j / c.n_used, i = j % c.n_used, e = c.ids[t * c.ids_nb1 + i];
    return {t * c.n_b + i % c.n_b, i * c.y_nb1 + t * c.y_nb2, e >= 0 && e < c.n_expert ? e * c.rows : -1};
}

// hsum_float_8 / _mm256 hsum8
__device__ __forceinline__ float fold8(const float (&x)[8]) {
    return __fadd_rn(__fadd_rn(__fadd_rn(x[4], x[0]), __fadd_rn(x[6], x[2])),
                     __fadd_rn(__fadd_rn(x[5], x[1]), __fadd_rn(x[7], x[3])));
}

struct ex_args {
    const uint8_t* qs;  // the split layout's chunks [rows][k / 32]
    const uint8_t* sc;  // its scale groups
    const int8_t* aq;   // q8_1 values [cols][k]
    const __half2* ads; // (d, s) [cols][k / 32]
    float* y;
    int64_t n, k; // rows (of one expert), elements a row
    float out_scale;
};

enum class exact_order { lanes, pairs, blockwise, grouped };

// A thread a weight row and NC columns (EX_COLS for mul_mat; 1 for mul_mat_id, whose pairs differ in expert), the
// columns' chunks staged in shared memory EX_STEP chunks at a time.
template <class D, exact_order O, int NC>
static __global__ void __launch_bounds__(EX_THREADS) gemm_exact_kernel(ex_args a, exact_cols cm, int64_t cols) {
    using chunk_t = typename D::chunk_t;
    constexpr int SUB = D::mmq_sub, CPS = D::chunks_per_scale;
    constexpr bool LANES = O == exact_order::lanes || O == exact_order::pairs;
    constexpr int NL = LANES ? 8 : 1;
    __shared__ int32_t Aw[EX_STEP][NC][8]; // activation words of EX_STEP chunks x NC columns
    __shared__ float2 Ads[EX_STEP][NC];    // their (d, s)
    const int tid = threadIdx.x;
    const int64_t row = int64_t(blockIdx.x) * EX_THREADS + tid, col0 = int64_t(blockIdx.y) * NC;
    const int64_t nc = a.k / 32, ng = nc / CPS;
    exact_col cj[NC];
#pragma unroll
    for (int j = 0; j < NC; j++) cj[j] = col0 + j < cols ? exact_col_of(cm, col0 + j) : exact_col{0, 0, -1};
    const bool row_ok = row < a.n && cj[0].row0 >= 0; // (NC = 1 where columns differ in weight rows)
    const int64_t wrow = row_ok ? cj[0].row0 + row : 0;
    const uint8_t* q_row = a.qs + wrow * nc * int64_t(sizeof(chunk_t));
    const uint8_t* s_row = a.sc + wrow * ng * D::scale_bytes;
    float acc[NC][NL], acc2[NC][NL], aux[NC]; // acc2: pairs' odd chunks; aux: q4_1's sum of m s_a, awq4's group
                                              // sum, mxfp4's odd last chunk
#pragma unroll
    for (int j = 0; j < NC; j++) {
        aux[j] = 0.0f;
#pragma unroll
        for (int l = 0; l < NL; l++) acc[j][l] = acc2[j][l] = 0.0f;
    }
    for (int64_t c0 = 0; c0 < nc; c0 += EX_STEP) {
        __syncthreads(); // the previous step's activations are read by everyone
        for (int i = tid; i < EX_STEP * NC * 8; i += EX_THREADS) {
            const int st = i / (NC * 8), j = (i / 8) % NC, w = i % 8;
            const int64_t c = c0 + st;
            Aw[st][j][w] =
                c < nc && cj[j].row0 >= 0 ? reinterpret_cast<const int32_t*>(a.aq + cj[j].act * a.k + c * 32)[w] : 0;
        }
        for (int i = tid; i < EX_STEP * NC; i += EX_THREADS) {
            const int st = i / NC, j = i % NC;
            const int64_t c = c0 + st;
            Ads[st][j] =
                c < nc && cj[j].row0 >= 0 ? __half22float2(a.ads[cj[j].act * nc + c]) : make_float2(0.0f, 0.0f);
        }
        __syncthreads();
        if (!row_ok) continue;
        for (int st = 0; st < EX_STEP && c0 + st < nc; st++) {
            const int64_t c = c0 + st;
            const chunk_t q = ldg_chunk<chunk_t>(q_row + c * int64_t(sizeof(chunk_t)));
            const scale_word_t<D> scw = load_scale_word<D::scale_bytes>(s_row + (c / CPS) * D::scale_bytes);
            uint32_t v[8];
            float d[2], m;
            D::mmq_unpack(q, scw, int(c % CPS), v, d, m);
#pragma unroll
            for (int j = 0; j < NC; j++) {
                const float2 ds = Ads[st][j];
                if constexpr (LANES) {
                    const float s0 = __fmul_rn(d[0], ds.x), s1 = SUB == 2 ? __fmul_rn(d[1], ds.x) : s0;
                    if (O == exact_order::pairs && c == nc - 1 && nc % 2 == 1) { // mxfp4::vec_dot, the scalar tail
                        int p = 0;
#pragma unroll
                        for (int g = 0; g < 8; g++) p = __dp4a(int(v[g]), Aw[st][j][g], p);
                        aux[j] = __fmul_rn(__fmul_rn(ds.x, d[0]), float(p));
                    } else if (O == exact_order::pairs && (c & 1)) {
#pragma unroll
                        for (int g = 0; g < 8; g++)
                            acc2[j][g] = fmaf(s0, float(__dp4a(int(v[g]), Aw[st][j][g], 0)), acc2[j][g]);
                    } else {
#pragma unroll
                        for (int g = 0; g < 8; g++) {
                            const int p = __dp4a(int(v[g]), Aw[st][j][g], 0);
                            acc[j][g] = fmaf(g < 4 ? s0 : s1, float(p), acc[j][g]);
                        }
                    }
                    if constexpr (D::mmq_offset) aux[j] = fmaf(m, ds.y, aux[j]);
                } else {
                    int p = 0;
#pragma unroll
                    for (int g = 0; g < 8; g++) p = __dp4a(int(v[g]), Aw[st][j][g], p);
                    if constexpr (O == exact_order::blockwise) {
                        acc[j][0] = fmaf(float(p), __fmul_rn(d[0], ds.x), acc[j][0]);
                    } else {
                        aux[j] = fmaf(float(p), ds.x, aux[j]);
                        if ((c + 1) % CPS == 0) {
                            acc[j][0] = fmaf(d[0], aux[j], acc[j][0]);
                            aux[j] = 0.0f;
                        }
                    }
                }
            }
        }
    }
    if (!row_ok) return;
#pragma unroll
    for (int j = 0; j < NC; j++) {
        if (cj[j].row0 < 0) continue;
        float r;
        if constexpr (O == exact_order::lanes) {
            r = fold8(acc[j]);
            if constexpr (D::mmq_offset) r = __fadd_rn(r, aux[j]);
        } else if constexpr (O == exact_order::pairs) {
            float x[8];
#pragma unroll
            for (int g = 0; g < 8; g++) x[g] = __fadd_rn(acc[j][g], acc2[j][g]);
            r = fold8(x);
            if (nc % 2 == 1) r = __fadd_rn(r, aux[j]);
        } else {
            r = acc[j][0];
        }
        a.y[cj[j].y + row] = a.out_scale == 1.0f ? r : __fmul_rn(r, a.out_scale);
    }
}

// tq2_0's activations, q8_K as the CPU quantizes them (quant/q8_k.h, tq2_0_avx2.cpp): per 256 elements, amax = max
// |x|, taken at its first index f; iscale = -127 / x_f, q = min(127, nearest_int(x iscale)) (half to even), d = 1 /
// iscale; all zero where amax is 0. Kept here: q [cols][k], and per block d and the q sum of each 32-element chunk.
struct q8k_meta {
    float d;
    int16_t sum[8]; // |sum| <= 32 x 127
};
// A warp a (block, column), 8 elements a lane
static __global__ void __launch_bounds__(32)
    q8k_quantize_kernel(const float* x, shape4 sx, int8_t* qs, q8k_meta* meta) {
    const int64_t b = blockIdx.x, col = blockIdx.y, k = sx.ne[0], nb = k / 256;
    const int lane = threadIdx.x;
    const float* xr = x + column_offset(col, sx.ne[1], sx.ne[2], sx.ne[3], sx.nb[1], sx.nb[2], sx.nb[3]);
    float v[8], amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        v[i] = xr[(256 * b + 8 * lane + i) * sx.nb[0]];
        amax = fmaxf(amax, fabsf(v[i]));
    }
    amax = warp_max(amax);
    int first = 256; // this lane's first index of |x| = amax, and its value
    float xf = 0.0f;
#pragma unroll
    for (int i = 7; i >= 0; i--)
        if (fabsf(v[i]) == amax) first = 8 * lane + i, xf = v[i];
    int f = first;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) f = min(f, __shfl_xor_sync(0xffffffffu, f, o));
    xf = __shfl_sync(0xffffffffu, xf, f / 8 < 32 ? f / 8 : 0);
    const float iscale = amax == 0.0f ? 0.0f : __fdiv_rn(-127.0f, xf);
    int32_t q[8], s = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        q[i] = amax == 0.0f ? 0 : min(127, __float2int_rn(__fmul_rn(v[i], iscale)));
        s += q[i];
    }
    char4* out = reinterpret_cast<char4*>(qs + col * k + 256 * b + 8 * lane);
    out[0] = make_char4(char(q[0]), char(q[1]), char(q[2]), char(q[3]));
    out[1] = make_char4(char(q[4]), char(q[5]), char(q[6]), char(q[7]));
    s += __shfl_xor_sync(0xffffffffu, s, 1); // a chunk is 4 lanes
    s += __shfl_xor_sync(0xffffffffu, s, 2);
    q8k_meta& md = meta[col * nb + b];
    if (lane % 4 == 0) md.sum[lane / 4] = int16_t(s);
    if (lane == 0) md.d = amax == 0.0f ? 0.0f : __fdiv_rn(1.0f, iscale);
}

template <int NC>
static __global__ void __launch_bounds__(EX_THREADS)
    tq2_exact_kernel(const uint8_t* wq, const uint8_t* wsc, const int8_t* qs, const q8k_meta* meta, float* y, int64_t n,
                     int64_t k, exact_cols cm, int64_t cols) {
    const int64_t row = int64_t(blockIdx.x) * EX_THREADS + threadIdx.x, col0 = int64_t(blockIdx.y) * NC;
    const int64_t nb = k / 256;
    exact_col cj[NC];
#pragma unroll
    for (int j = 0; j < NC; j++) cj[j] = col0 + j < cols ? exact_col_of(cm, col0 + j) : exact_col{0, 0, -1};
    if (row >= n || cj[0].row0 < 0) return;
    const int64_t wrow = cj[0].row0 + row;
    const uint2* q_row = reinterpret_cast<const uint2*>(wq) + wrow * (k / 32);
    const uint16_t* d_row = reinterpret_cast<const uint16_t*>(wsc) + wrow * nb;
    float acc[NC][8] = {};
    for (int64_t b = 0; b < nb; b++) {
        int p[NC][8] = {};
        for (int c = 0; c < 8; c++) {
            const uint2 q = __ldg(q_row + 8 * b + c);
            uint32_t code[8]; // elements 4g .. 4g + 3 (pack_2bit_chunk: byte e % 8, field e / 8)
#pragma unroll
            for (int g = 0; g < 8; g++) code[g] = ((g & 1 ? q.y : q.x) >> (2 * (g >> 1))) & 0x03030303u;
#pragma unroll
            for (int j = 0; j < NC; j++) {
                if (cj[j].row0 < 0) continue;
                const int4* av = reinterpret_cast<const int4*>(qs + cj[j].act * k + 256 * b + 32 * c);
                const int4 a0 = __ldg(av), a1 = __ldg(av + 1);
                const int aw[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
                for (int g = 0; g < 8; g++) p[j][g] = __dp4a(int(code[g]), aw[g], p[j][g]);
            }
        }
        const float dw = half_bits_to_f32(__ldg(d_row + b));
#pragma unroll
        for (int j = 0; j < NC; j++) {
            if (cj[j].row0 < 0) continue;
            const q8k_meta& md = meta[cj[j].act * nb + b];
            const float dd = __fmul_rn(md.d, dw);
#pragma unroll
            for (int g = 0; g < 8; g++) acc[j][g] = fmaf(float(p[j][g] - md.sum[g]), dd, acc[j][g]);
        }
    }
#pragma unroll
    for (int j = 0; j < NC; j++)
        if (cj[j].row0 >= 0) y[cj[j].y + row] = fold8(acc[j]);
}

// i2_s: the CPU's per-token int8 activations (quant/i8_s.h: one scale a row, s = float(127 / amax), d =
// float(amax / 127) in double, q = clamp(round(x s), -128, 127) half away from zero) and its order, which is no order:
// the exact integer sum over the row of code q minus the row's sum of q, converted once, times d, then times the
// tensor's scale (backends/cpu/quant/i2_s_avx2.cpp, mul_mat.cpp). A block a column: q into qs [cols][k], (d, sum of q)
// into dt [cols].
struct i8s_row {
    float d;
    int32_t total;
};
static __global__ void i8s_quantize_kernel(const float* x, shape4 sx, int8_t* qs, i8s_row* dt) {
    __shared__ float red[32];
    __shared__ int32_t red_i[32];
    const int64_t r = blockIdx.x, k = sx.ne[0];
    const float* xr = x + column_offset(r, sx.ne[1], sx.ne[2], sx.ne[3], sx.nb[1], sx.nb[2], sx.nb[3]);
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) amax = fmaxf(amax, fabsf(xr[i * sx.nb[0]]));
    amax = block_max(amax, red);
    const double am = fmax(1e-5, double(amax));
    const float scale = float(127.0 / am);
    int32_t total = 0;
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
        const float q = fminf(127.0f, fmaxf(-128.0f, roundf(__fmul_rn(xr[i * sx.nb[0]], scale))));
        qs[r * k + i] = int8_t(q);
        total += int32_t(q);
    }
    total = warp_sum(total);
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    if (lane == 0) red_i[warp] = total;
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t t = 0;
        for (int w = 0; w < int(blockDim.x / WARP_SIZE); w++) t += red_i[w];
        dt[r] = {float(am / 127.0), t};
    }
}
// A thread a weight row, NC columns: the chunks' integer dots (dot_2bit_chunk_x64 / 64: exact) summed in int32.
template <int NC>
static __global__ void __launch_bounds__(EX_THREADS)
    i2s_exact_kernel(const uint8_t* w, const int8_t* qs, const i8s_row* dt, float* y, int64_t n, int64_t k,
                     exact_cols cm, int64_t cols, float out_scale) {
    const int64_t row = int64_t(blockIdx.x) * EX_THREADS + threadIdx.x, col0 = int64_t(blockIdx.y) * NC;
    exact_col cj[NC];
#pragma unroll
    for (int j = 0; j < NC; j++) cj[j] = col0 + j < cols ? exact_col_of(cm, col0 + j) : exact_col{0, 0, -1};
    if (row >= n || cj[0].row0 < 0) return;
    const int64_t nc = k / 32;
    const uint2* q_row = reinterpret_cast<const uint2*>(w) + (cj[0].row0 + row) * nc;
    int32_t sum[NC] = {};
    for (int64_t c = 0; c < nc; c++) {
        const uint2 q = __ldg(q_row + c);
#pragma unroll
        for (int j = 0; j < NC; j++) {
            const int4* a = reinterpret_cast<const int4*>(qs + cj[j].act * k + c * 32);
            sum[j] += dot_2bit_chunk_x64(q, __ldg(a), __ldg(a + 1)) >> 6;
        }
    }
#pragma unroll
    for (int j = 0; j < NC; j++) {
        if (cj[j].row0 < 0) continue;
        const i8s_row ad = dt[cj[j].act];
        const float r = __fmul_rn(float(sum[j] - ad.total), ad.d);
        y[cj[j].y + row] = out_scale == 1.0f ? r : __fmul_rn(r, out_scale);
    }
}

// f16 / bf16 weights: the CPU's orders (backends/cpu/quant/float16.h; the scalar ones in float16.cpp), the
// activations rounded to the weight's type as the CPU stores them:
//   tiny16 (f16, and bf16 without AVX512_BF16; >= 2 activation rows, k % 16 == 0, rows % 4 == 0): tinyBLAS<16>, lane c
//     of 16 = fma chain over elements c, c + 16, ...;
//   vec_f16: ggml_vec_dot_f16, 4 x 16 lanes over 64-element steps, (s0 + s2) + (s1 + s3), the rest added in double;
//   vec_bf16: ggml_vec_dot_bf16, 2 x 16 lanes over 32-element steps, each reduced and added in double, the rest too;
//   tiny_dp / vec_dp (bf16 on a host with AVX512_BF16): the same with vdpbf16ps, lane l taking elements 2l + 1, then
//     2l, of each 32-element step, one rounding each, subnormal inputs and results flushed to zero; tiny_dp
//     (k % 32 == 0) one accumulator over 32-element steps, vec_dp two over 64-element steps.
// Reductions as _mm512_reduce_add_ps. A thread an output.
enum class float_order { tiny16, vec_f16, vec_bf16, tiny_dp, vec_dp };

__device__ __forceinline__ float reduce16_exact(const float (&v)[16]) {
    float h8[8], h4[4];
#pragma unroll
    for (int l = 0; l < 8; l++) h8[l] = __fadd_rn(v[l + 8], v[l]);
#pragma unroll
    for (int l = 0; l < 4; l++) h4[l] = __fadd_rn(h8[l + 4], h8[l]);
    return __fadd_rn(__fadd_rn(h4[0], h4[2]), __fadd_rn(h4[1], h4[3]));
}
template <bool BF16> __device__ __forceinline__ float load_half(const uint16_t* p, int64_t i) {
    if constexpr (BF16)
        return bf16_to_fp32(p[i]);
    else
        return __half2float(__ushort_as_half(p[i]));
}
__device__ __forceinline__ float ftz(float x) {
    return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x;
}
// vdpbf16ps, one lane, one pair: elements 1 then 0
__device__ __forceinline__ float dp_lane(float acc, const uint16_t* w, const uint16_t* a) {
    acc = ftz(fmaf(ftz(bf16_to_fp32(w[1])), ftz(bf16_to_fp32(a[1])), ftz(acc)));
    return ftz(fmaf(ftz(bf16_to_fp32(w[0])), ftz(bf16_to_fp32(a[0])), acc));
}

template <bool BF16> static __global__ void half_round_kernel(const float* x, shape4 sx, uint16_t* a) {
    const int64_t r = blockIdx.y, k = sx.ne[0];
    const float* xr = x + column_offset(r, sx.ne[1], sx.ne[2], sx.ne[3], sx.nb[1], sx.nb[2], sx.nb[3]);
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < k; i += int64_t(gridDim.x) * blockDim.x) {
        if constexpr (BF16)
            a[r * k + i] = fp32_to_bf16(xr[i * sx.nb[0]]);
        else
            a[r * k + i] = __half_as_ushort(__float2half_rn(xr[i * sx.nb[0]]));
    }
}

template <bool BF16, float_order O>
static __global__ void __launch_bounds__(EX_THREADS)
    float_exact_kernel(const uint16_t* w, int64_t w_nb1, const uint16_t* a, float* y, int64_t n, int64_t k,
                       exact_cols cm) {
    const int64_t row = int64_t(blockIdx.x) * EX_THREADS + threadIdx.x, col = blockIdx.y;
    if (row >= n) return;
    const uint16_t* wr = w + row * w_nb1;
    const uint16_t* ar = a + col * k;
    float r;
    if constexpr (O == float_order::tiny16) {
        float acc[16] = {};
        for (int64_t l = 0; l < k; l += 16)
#pragma unroll
            for (int c = 0; c < 16; c++) acc[c] = fmaf(load_half<BF16>(wr, l + c), load_half<BF16>(ar, l + c), acc[c]);
        r = reduce16_exact(acc);
    } else if constexpr (O == float_order::tiny_dp) {
        float acc[16] = {};
        for (int64_t l = 0; l < k; l += 32)
#pragma unroll
            for (int c = 0; c < 16; c++) acc[c] = dp_lane(acc[c], wr + l + 2 * c, ar + l + 2 * c);
        r = reduce16_exact(acc);
    } else if constexpr (O == float_order::vec_f16) {
        float s[4][16] = {};
        const int64_t np = k - k % 64;
        for (int64_t i = 0; i < np; i += 64)
#pragma unroll
            for (int q = 0; q < 4; q++)
#pragma unroll
                for (int c = 0; c < 16; c++)
                    s[q][c] = fmaf(load_half<false>(wr, i + 16 * q + c), load_half<false>(ar, i + 16 * q + c), s[q][c]);
        float v[16];
#pragma unroll
        for (int c = 0; c < 16; c++) v[c] = __fadd_rn(__fadd_rn(s[0][c], s[2][c]), __fadd_rn(s[1][c], s[3][c]));
        double sum = reduce16_exact(v);
        for (int64_t i = np; i < k; i++)
            sum = __dadd_rn(sum, double(__fmul_rn(load_half<false>(wr, i), load_half<false>(ar, i))));
        r = float(sum);
    } else {
        constexpr bool DP = O == float_order::vec_dp;
        constexpr int64_t STEP = DP ? 64 : 32;
        float s[2][16] = {};
        const int64_t np = k - k % STEP;
        for (int64_t i = 0; i < np; i += STEP)
#pragma unroll
            for (int q = 0; q < 2; q++)
#pragma unroll
                for (int c = 0; c < 16; c++) {
                    if constexpr (DP)
                        s[q][c] = dp_lane(s[q][c], wr + i + 32 * q + 2 * c, ar + i + 32 * q + 2 * c);
                    else
                        s[q][c] =
                            fmaf(load_half<true>(wr, i + 16 * q + c), load_half<true>(ar, i + 16 * q + c), s[q][c]);
                }
        double sum = 0.0;
        sum = __dadd_rn(sum, double(reduce16_exact(s[0])));
        sum = __dadd_rn(sum, double(reduce16_exact(s[1])));
        for (int64_t i = np; i < k; i++)
            sum = __dadd_rn(sum, double(__fmul_rn(load_half<true>(wr, i), load_half<true>(ar, i))));
        r = float(sum);
    }
    y[exact_col_of(cm, col).y + row] = r;
}

// mul_mat of f32 weights and mul_mat_id of float experts: the CPU's row dots (mul_mat.cpp and moe.cpp take the type's
// vec_dot, vec_dot.cpp): f32 and f16
// (activations rounded to f16) in the AVX2 kernels' order, elements i .. i + 7 and i + 8 .. i + 15 of each 16-element
// step into two 8-lane fma chains, added lane by lane and folded as hsum8, the rest multiplied and added one by one;
// bf16 (activations rounded to bf16) one double sum in order of the exact products.
// A thread a row and pair.
template <class T>
static __global__ void __launch_bounds__(EX_THREADS) float_id_exact_kernel(const uint8_t* w, int64_t w_nb1,
                                                                            int64_t w_nb2, const float* x, float* y,
                                                                            int64_t n, int64_t k, exact_cols cm) {
    const int64_t row = int64_t(blockIdx.x) * EX_THREADS + threadIdx.x;
    const exact_col cj = exact_col_of(cm, blockIdx.y);
    if (row >= n || cj.row0 < 0) return;
    const int64_t e = cm.ids ? cj.row0 / cm.rows : 0; // the expert (mul_mat: the one matrix)
    const T* wr = reinterpret_cast<const T*>(w + e * w_nb2 + row * w_nb1);
    const float* ar = x + cj.act * k;
    const auto wv = [&](int64_t i) {
        if constexpr (std::is_same_v<T, float>) return wr[i];
        else return load_half<std::is_same_v<T, bf16>>(reinterpret_cast<const uint16_t*>(wr), i);
    };
    const auto av = [&](int64_t i) {
        if constexpr (std::is_same_v<T, float>) return ar[i];
        else if constexpr (std::is_same_v<T, bf16>) return bf16_to_fp32(fp32_to_bf16(ar[i]));
        else return __half2float(__float2half_rn(ar[i]));
    };
    float r;
    if constexpr (std::is_same_v<T, bf16>) {
        double s = 0.0;
        for (int64_t i = 0; i < k; i++) s = __dadd_rn(s, __dmul_rn(double(wv(i)), double(av(i))));
        r = float(s);
    } else {
        float a0[8] = {}, a1[8] = {};
        int64_t i = 0;
        for (; i + 16 <= k; i += 16)
#pragma unroll
            for (int l = 0; l < 8; l++) {
                a0[l] = fmaf(wv(i + l), av(i + l), a0[l]);
                a1[l] = fmaf(wv(i + 8 + l), av(i + 8 + l), a1[l]);
            }
        float v[8];
#pragma unroll
        for (int l = 0; l < 8; l++) v[l] = __fadd_rn(a0[l], a1[l]);
        r = fold8(v);
        for (; i < k; i++) r = __fadd_rn(r, __fmul_rn(wv(i), av(i)));
    }
    y[cj.y + row] = r;
}

// dst's columns as exact_cols (mul_mat: dst's dims; mul_mat_id: its pairs) and their count
exact_cols cols_of(const cuda_context& ctx, const tensor& dst, int64_t& cols) {
    exact_cols c;
    const shape4 sy = shape_of(dst, 4);
    c.y_nb1 = sy.nb[1], c.y_nb2 = sy.nb[2], c.y_nb3 = sy.nb[3];
    if (dst.o == op::mul_mat_id) {
        const tensor* w = dst.src[0];
        const tensor* ids = dst.src[2];
        c.ids = ctx.as<int32_t>(ids);
        c.ids_nb1 = int64_t(ids->nb[1] / 4);
        c.n_used = ids->ne[0];
        c.n_b = dst.src[1]->ne[1];
        c.n_expert = w->ne[2];
        c.rows = w->ne[1];
        cols = ids->ne[0] * ids->ne[1];
    } else {
        const tensor* x = dst.src[1];
        c.m = x->ne[1], c.ne2 = x->ne[2], c.ne3 = x->ne[3];
        cols = c.m * c.ne2 * c.ne3;
    }
    return c;
}

template <int NC> dim3 exact_grid(int64_t n, int64_t cols) {
    const dim3 grid(unsigned(ceil_div(n, EX_THREADS)), unsigned(ceil_div(cols, NC)));
    TS_ASSERT(grid.y <= 65535);
    return grid;
}

template <int NC>
void gemm_exact_launch(cuda_context& ctx, const split_weight& w, const tensor& weight, tensor& dst,
                       const exact_cols& cm, int64_t cols) {
    const tensor* x = dst.src[1];
    const dim3 grid = exact_grid<NC>(w.n, cols);
    if (w.t == type::i2_s || w.t == type::tq2_0) {
        // their activations in the q8_1 room (mul_mat_work_size, mul_mat_id_work_size): q as large, the rest in the
        // k / 32 x 4 bytes a column of the second array; not q8_1, so no later GEMV may take them for its own
        const split_acts room = split_activation_ptrs(ctx, *x);
        auto* qs = const_cast<int8_t*>(room.q);
        void* meta = const_cast<__half2*>(room.ds);
        const int64_t n_act = x->ne[1] * x->ne[2] * x->ne[3];
        ctx.act_src = nullptr;
        ctx.act_form = cuda_context::act_none;
        if (w.t == type::i2_s) {
            TS_ASSERT(w.k % 128 == 0);
            auto* dt = static_cast<i8s_row*>(meta);
            i8s_quantize_kernel<<<unsigned(n_act), 256, 0, ctx.stream>>>(ctx.as<float>(x), shape_of(*x, 4), qs, dt);
            i2s_exact_kernel<NC><<<grid, EX_THREADS, 0, ctx.stream>>>(w.qs, qs, dt, ctx.as<float>(&dst), w.n, w.k, cm,
                                                                      cols, w.out_scale);
        } else {
            static_assert(sizeof(q8k_meta) <= 256 / 32 * sizeof(__half2), "a block's q8_K meta in its q8_1 room");
            TS_ASSERT(w.k % 256 == 0 && n_act <= 65535);
            auto* md = static_cast<q8k_meta*>(meta);
            q8k_quantize_kernel<<<dim3(unsigned(w.k / 256), unsigned(n_act)), 32, 0, ctx.stream>>>(
                ctx.as<float>(x), shape_of(*x, 4), qs, md);
            tq2_exact_kernel<NC>
                <<<grid, EX_THREADS, 0, ctx.stream>>>(w.qs, w.sc, qs, md, ctx.as<float>(&dst), w.n, w.k, cm, cols);
        }
        TS_CUDA_CHECK(cudaGetLastError());
        return;
    }
    const split_acts acts = split_activations(ctx, *x, w.t);
    const ex_args a{w.qs, w.sc, acts.q, acts.ds, ctx.as<float>(&dst), w.n, w.k, w.out_scale};
    // the CPU's choice (backends/cpu/ops/mul_mat.cpp row_ops_for, moe.cpp; the repacked kinds keep its order): q4_0,
    // mxfp4 and iq4_nl matrices of a multiple of 8 rows, a tied output's token table among them (not a plain token
    // table), are summed blockwise; other iq4_nl ones in vec_dot's pairs for one activation row (and every expert
    // pair), in tinyBLAS's lanes for more
    const bool blockwise = (w.t == type::q4_0 || w.t == type::mxfp4 || w.t == type::iq4_nl) &&
                           !weight.lookup_only() && weight.ne[1] % 8 == 0;
    const bool pairs = w.t == type::mxfp4 || (w.t == type::iq4_nl && (cm.ids || x->ne[1] == 1));
    visit_format(w.t, [&]<class F>() {
        using D = cuda_format<F>;
        if constexpr (has_mmq<F>::value) {
            if (D::chunks_per_scale > 1 && D::mmq_sub == 1)
                gemm_exact_kernel<D, exact_order::grouped, NC><<<grid, EX_THREADS, 0, ctx.stream>>>(a, cm, cols);
            else if (blockwise)
                gemm_exact_kernel<D, exact_order::blockwise, NC><<<grid, EX_THREADS, 0, ctx.stream>>>(a, cm, cols);
            else if (pairs)
                gemm_exact_kernel<D, exact_order::pairs, NC><<<grid, EX_THREADS, 0, ctx.stream>>>(a, cm, cols);
            else
                gemm_exact_kernel<D, exact_order::lanes, NC><<<grid, EX_THREADS, 0, ctx.stream>>>(a, cm, cols);
        } else {
            TS_ASSERT(!"gemm_exact: a format without mmq_unpack");
        }
    });
    TS_CUDA_CHECK(cudaGetLastError());
}

} // namespace

bool gemm_exact_available(type t) {
    bool ok = false;
    // the CPU pairs the K formats with q8_K activations (a scale per 256): no integer kernel here gives its sums
    visit_format(t, [&]<class F>() { ok = has_mmq<F>::value && F::dot_type != type::q8_k; });
    return ok || t == type::i2_s || t == type::tq2_0;
}

void gemm_exact(cuda_context& ctx, const split_weight& w, const tensor& weight, tensor& dst) {
    int64_t cols = 0;
    const exact_cols cm = cols_of(ctx, dst, cols);
    if (cols == 0 || w.n == 0) return;
    if (cm.ids)
        gemm_exact_launch<1>(ctx, w, weight, dst, cm, cols);
    else
        gemm_exact_launch<EX_COLS>(ctx, w, weight, dst, cm, cols);
}

void float_id_exact(cuda_context& ctx, tensor& dst) {
    const tensor* w = dst.src[0];
    const tensor* x = dst.src[1];
    int64_t cols = 0;
    const exact_cols cm = cols_of(ctx, dst, cols);
    if (cols == 0 || w->ne[1] == 0) return;
    TS_ASSERT(x->t == type::f32 && x->is_contiguous());
    const dim3 grid = exact_grid<1>(w->ne[1], cols);
    const auto go = [&]<class T>() {
        float_id_exact_kernel<T><<<grid, EX_THREADS, 0, ctx.stream>>>(ctx.ptr(w), int64_t(w->nb[1]),
                                                                      int64_t(w->nb[2]), ctx.as<float>(x),
                                                                      ctx.as<float>(&dst), w->ne[1], w->ne[0], cm);
    };
    if (w->t == type::f32) go.template operator()<float>();
    else if (w->t == type::f16) go.template operator()<__half>();
    else go.template operator()<bf16>();
    TS_CUDA_CHECK(cudaGetLastError());
}

bool float_exact_available(const tensor& node) {
    const tensor* w = node.src[0];
    const tensor* x = node.src[1];
    if (w->t == type::f32) // the row-dot kernel reads x's rows densely
        return x->t == type::f32 && x->is_contiguous() && w->ne[2] == 1 && w->ne[3] == 1 && w->nb[0] == 4 &&
               w->ne[0] == x->ne[0];
    return (w->t == type::f16 || w->t == type::bf16) && x->t == type::f32 && w->ne[2] == 1 && w->ne[3] == 1 &&
           w->nb[0] == 2 && w->nb[1] % 2 == 0 && w->ne[0] == x->ne[0];
}

void float_exact(cuda_context& ctx, tensor& dst) {
    const tensor* w = dst.src[0];
    const tensor* x = dst.src[1];
    const int64_t k = w->ne[0], n = w->ne[1], m = x->ne[1];
    int64_t cols = 0;
    const exact_cols cm = cols_of(ctx, dst, cols);
    if (cols == 0 || n == 0) return;
    if (w->t == type::f32) {
        float_id_exact_kernel<float><<<exact_grid<1>(n, cols), EX_THREADS, 0, ctx.stream>>>(
            ctx.ptr(w), int64_t(w->nb[1]), 0, ctx.as<float>(x), ctx.as<float>(&dst), n, k, cm);
        TS_CUDA_CHECK(cudaGetLastError());
        return;
    }
    // the activations as halves in the scratch (mul_mat_work_size)
    TS_ASSERT(ctx.scratch_size >= size_t(cols * k) * sizeof(uint16_t) && cols <= 65535);
    auto* a = static_cast<uint16_t*>(ctx.scratch);
    const bool bf16 = w->t == type::bf16;
    const dim3 rgrid(unsigned(ceil_div(k, 256)), unsigned(cols));
    if (bf16)
        half_round_kernel<true><<<rgrid, 256, 0, ctx.stream>>>(ctx.as<float>(x), shape_of(*x, 4), a);
    else
        half_round_kernel<false><<<rgrid, 256, 0, ctx.stream>>>(ctx.as<float>(x), shape_of(*x, 4), a);
    ctx.act_src = nullptr;
    ctx.act_form = cuda_context::act_none;
    const dim3 grid(unsigned(ceil_div(n, EX_THREADS)), unsigned(cols));
    // the CPU's choice (mul_mat_float16; float16.cpp find_float16_kernels): tinyBLAS where m >= 2, k is a multiple
    // of its step and the rows of 4; bf16 through vdpbf16ps where the host has AVX512_BF16
    const bool dp = bf16 && cpu::cpu_has_avx512bf16();
    const bool tiny = m >= 2 && k % (dp ? 32 : 16) == 0 && n % 4 == 0;
    const auto* wp = reinterpret_cast<const uint16_t*>(ctx.ptr(w));
    const int64_t ws = int64_t(w->nb[1] / 2);
    float* y = ctx.as<float>(&dst);
    const auto go = [&]<bool B, float_order O>() {
        float_exact_kernel<B, O><<<grid, EX_THREADS, 0, ctx.stream>>>(wp, ws, a, y, n, k, cm);
    };
    if (!bf16)
        tiny ? go.template operator()<false, float_order::tiny16>()
             : go.template operator()<false, float_order::vec_f16>();
    else if (dp)
        tiny ? go.template operator()<true, float_order::tiny_dp>()
             : go.template operator()<true, float_order::vec_dp>();
    else
        tiny ? go.template operator()<true, float_order::tiny16>()
             : go.template operator()<true, float_order::vec_bf16>();
    TS_CUDA_CHECK(cudaGetLastError());
}

} // namespace tessera::cuda
