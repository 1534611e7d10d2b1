// norm.cu: rms_norm: y = x / sqrt(mean(x^2) + eps) per row (rms_norm_part: the sum of squares given). One block per
// row (a decode row: up to 16 blocks, each summing the whole row); the sum of squares is a float block reduction (the
// CPU sums in double; the two differ by float rounding, about 1e-7 relative). Contiguous rows of ne0 % 32 == 0 take
// the vector kernel, which fused.cu also runs for add -> rms_norm -> mul [-> q8_1].
#include "backends/cuda/ops/ops.cuh"

namespace tessera::cuda {

namespace {

// x rows (ne0, rows over dims 1..3) strided; one block per row, thread t takes elements t, t + blockDim, ...
static __global__ void __launch_bounds__(1024)
    rms_norm_kernel(const float* x, shape4 sx, float* y, shape4 sy, float eps) {
    __shared__ float red[32];
    pdl_wait();
    pdl_trigger();
    const int64_t r = blockIdx.x;
    const float* xr = x + row_offset(sx, r);
    float* yr = y + row_offset(sy, r);
    const int64_t ne0 = sx.ne[0];
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
        const float v = xr[i * sx.nb[0]];
        ss = fmaf(v, v, ss);
    }
    ss = block_sum(ss, red);
    const float s = 1.0f / sqrtf(ss / float(ne0) + eps);
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) yr[i * sy.nb[0]] = xr[i * sx.nb[0]] * s;
}

// The vector path for contiguous rows of ne0 % 32 == 0 floats, 16-byte aligned (add_rms_norm_mul_rows): thread t holds
// float4s t, t + T, t + 2T, t + 3T of the row in registers (T = norm_vec_threads), so the row is read once, and the
// q8_1 groups of 32 values are 8 consecutive threads' float4s (3 shuffle steps instead of 5). A decode step's norm is
// one block on one SM, on the critical path between two GEMVs: the strided kernel above read the row twice and ran a
// warp-wide q8 reduction per element step (ncu, 8B decode: 9 us a call, 17% of a step's kernel time).
constexpr int NORM_VEC = 4;
int norm_vec_threads(int64_t ne0) {
    return int(ceil_div(ceil_div(ne0 / 4, NORM_VEC), WARP_SIZE) * WARP_SIZE);
}

// sum = a + b (ADD), x = ADD ? sum : a; y = (x * s) * w (w == nullptr: x * s) with s = 1 / sqrt(mean(x^2) + eps),
// written where y is given; then y to q8_1 when q is given (q8x4_store, as quantize_q8_lane: d = amax / 127, q = round
// half even (y * 127 / amax), s = d sum q), and its values as f16 into xh when given. w is read before pdl_wait when
// w_early (a weight or an input: no kernel writes it). P2P: a is this member's partial sums, and the rows are first
// summed over the device group's members (p2p.cuh; the all_reduce before the add, which then is not written).
// Grid (rows, slices): every block of a row reads the whole row and sums its squares in the same order (one s per row),
// and writes only its slice of the outputs (float4s [slice * n4 / slices, ..), a multiple of 8: whole q8_1 groups).
// A decode step's norm is on the critical path between two GEMVs: in slices, each block's output work is a fraction
// of the single block's (see add_rms_norm_mul_rows for the measurement). q8k: a scale per 256 values (T a multiple of
// 64, slices whole 256-value blocks), each block's maximum through shared memory (q8x4_store's gmax).
template <bool ADD, bool P2P>
static __global__ void __launch_bounds__(1024)
    add_norm_vec_kernel(const float* a, const float* b, float* sum, const float* w, float* y, int64_t ne0, float eps,
                        int8_t* q, __half2* ds, uint2* xh, bool w_early, bool begin_early, p2p_args pa, bool q8k) {
    __shared__ float red[32];
    __shared__ float gmax[NORM_VEC * 1024 / 64];
    __shared__ p2p_call call;
    const int64_t r = blockIdx.x;
    const int n4 = int(ne0 / 4), T = int(blockDim.x);
    const int per = n4 / int(gridDim.y), lo = int(blockIdx.y) * per, hi = lo + per; // this block's float4s
    const int warp_i0 = int(threadIdx.x) / WARP_SIZE * WARP_SIZE; // the warp's first i for j = 0
    const auto* w4 = reinterpret_cast<const float4*>(w);
    float4 wv[NORM_VEC];
    auto load_w = [&] {
#pragma unroll
        for (int j = 0; j < NORM_VEC; j++) {
            const int i = int(threadIdx.x) + j * T;
            wv[j] = w4 && i < n4 ? w4[i] : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        }
    };
    if (w_early) load_w();
    // With a residual, L2 is asked for both inputs' rows before the wait, each block its share of the lines: the
    // residual was written kernels ago and may have left L2 since (the other input, the kernel before's result, lands
    // in L2 when written: asking for it early is harmless). Measured (H100, 2026-11-27, one call, same greedy text):
    // 8B q4_0 tg128 485.8-491.1 vs 485.9-486.1 t/s without, at depth 4096 367.3 vs 360.0; 1B within noise.
    if (ADD) {
        const char* la = reinterpret_cast<const char*>(a + r * ne0);
        const char* lb = reinterpret_cast<const char*>(b + r * ne0);
        const int lines = int(ne0 * 4 / 128);
        for (int l = int(blockIdx.y) + int(gridDim.y) * int(threadIdx.x); l < lines; l += int(gridDim.y) * T)
            prefetch_l2(la + l * 128), prefetch_l2(lb + l * 128);
    }
    // With the all-reduce, the call begins (its buffer from the member's state, the previous call's buffer emptied)
    // before the wait where the launch saw another kernel between the previous peer-memory call and this one
    // (begin_early): that call's kernel has then ended (at most this kernel's predecessor still runs), and its buffer
    // is not written again before this call's values have reached the peers. The exception to "nothing written before
    // pdl_wait": no running kernel reads that buffer. Measured (p2p_harness chain, 2 H200, 2026-11-29): the
    // all-reduce costs 3.16 us a call against 4.05 begun after the wait.
    // With the all-reduce and a residual, the residual (rows up to P2P_STAGE floats) is copied into shared memory
    // (cp.async) once this block's values are sent, so the add after the wait reads it there instead of from L2.
    // Measured (2 H200, 2026-11-29, one call, two rounds): 70B q4_0 row tg128 143.9 / 144.6 against 142.9 / 142.9
    // read from L2 after the wait, same greedy text. But p2p_harness's chain has the all-reduce at 4.4 us against
    // 3.15, probably because its GEMV stand-in uses no shared memory (an SM's carveout then has to change before this
    // kernel's 33 KB fit beside it; the model's GEMVs stage their weights in shared memory): to be checked. Loaded into
    // registers instead (harness): spills at the 64-register cap, 3.25 us; its lines prefetched into L1: 3.3.
    constexpr int P2P_STAGE = 8192;
    __shared__ float4 b_stage[P2P && ADD ? P2P_STAGE / 4 : 1];
    const bool b_staged = P2P && ADD && ne0 <= P2P_STAGE;
    p2p_call c{};
    if constexpr (P2P)
        if (begin_early) {
            c = p2p_begin(pa, &call);
            p2p_clear_previous(pa, c, int64_t(blockIdx.x) * gridDim.y + blockIdx.y, int64_t(gridDim.x) * gridDim.y);
        }
    pdl_wait();
    pdl_trigger();
    if (!w_early) load_w();
    const auto* a4 = reinterpret_cast<const float4*>(a + r * ne0);
    const auto* b4 = reinterpret_cast<const float4*>(ADD ? b + r * ne0 : nullptr);
    auto* s4 = reinterpret_cast<float4*>(ADD ? sum + r * ne0 : nullptr);
    float4 v[NORM_VEC];
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NORM_VEC; j++) {
        const int i = int(threadIdx.x) + j * T;
        v[j] = i < n4 ? a4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    if constexpr (P2P) { // this block's slice to the peers, its share of emptying the last call's buffer, the sums
        if (!begin_early) c = p2p_begin(pa, &call);
        for (int m = 0; m < pa.n_ranks; m++)
            if (m != pa.rank) {
                auto* to = reinterpret_cast<float4*>(p2p_slot(pa, m, pa.rank, c.buf)) + r * n4;
#pragma unroll
                for (int j = 0; j < NORM_VEC; j++)
                    if (const int i = int(threadIdx.x) + j * T; i >= lo && i < hi) to[i] = p2p_canonical(v[j]);
            }
        if (!begin_early)
            p2p_clear_previous(pa, c, int64_t(blockIdx.x) * gridDim.y + blockIdx.y, int64_t(gridDim.x) * gridDim.y);
        if constexpr (ADD)
            if (b_staged) { // the residual on its way into shared memory while the peers' values come
#pragma unroll
                for (int j = 0; j < NORM_VEC; j++)
                    if (const int i = int(threadIdx.x) + j * T; i < n4)
                        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(
                                         uint32_t(__cvta_generic_to_shared(&b_stage[i]))),
                                     "l"(b4 + i)
                                     : "memory");
                asm volatile("cp.async.commit_group;" ::: "memory");
            }
#pragma unroll
        for (int j = 0; j < NORM_VEC; j++)
            if (const int i = int(threadIdx.x) + j * T; i < n4) v[j] = p2p_sum_at4(pa, c, r * n4 + i, v[j]);
        if constexpr (ADD)
            if (b_staged) asm volatile("cp.async.wait_all;" ::: "memory"); // each thread reads only its own copies
    }
    if constexpr (ADD) {
#pragma unroll
        for (int j = 0; j < NORM_VEC; j++)
            if (const int i = int(threadIdx.x) + j * T; i < n4) {
                const float4 bv = P2P && b_staged ? b_stage[i] : b4[i];
                v[j].x += bv.x, v[j].y += bv.y, v[j].z += bv.z, v[j].w += bv.w;
                if (i >= lo && i < hi) s4[i] = v[j];
            }
    }
#pragma unroll
    for (int j = 0; j < NORM_VEC; j++) {
        ss = fmaf(v[j].x, v[j].x, ss);
        ss = fmaf(v[j].y, v[j].y, ss);
        ss = fmaf(v[j].z, v[j].z, ss);
        ss = fmaf(v[j].w, v[j].w, ss);
    }
    if (q8k && q)
        for (int g = int(threadIdx.x); g < n4 / 64; g += T) gmax[g] = 0.0f; // before block_sum's barriers
    ss = block_sum(ss, red);
    const float s = 1.0f / sqrtf(ss / float(ne0) + eps);
    auto* y4 = y ? reinterpret_cast<float4*>(y + r * ne0) : nullptr;
#pragma unroll
    for (int j = 0; j < NORM_VEC; j++) { // v becomes the output
        if (w4) {
            v[j].x = (v[j].x * s) * wv[j].x, v[j].y = (v[j].y * s) * wv[j].y;
            v[j].z = (v[j].z * s) * wv[j].z, v[j].w = (v[j].w * s) * wv[j].w;
        } else {
            v[j].x = v[j].x * s, v[j].y = v[j].y * s, v[j].z = v[j].z * s, v[j].w = v[j].w * s;
        }
    }
    if (q8k && q) { // a warp's float4s of one j lie in one 256-value block (T and n4 multiples of 64)
#pragma unroll
        for (int j = 0; j < NORM_VEC; j++) {
            const int i = int(threadIdx.x) + j * T;
            float m = fmaxf(fmaxf(fabsf(v[j].x), fabsf(v[j].y)), fmaxf(fabsf(v[j].z), fabsf(v[j].w)));
#pragma unroll
            for (int o = 1; o < WARP_SIZE; o <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
            if (i < n4 && threadIdx.x % WARP_SIZE == 0)
                atomicMax(reinterpret_cast<int*>(gmax + i / 64), __float_as_int(m));
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < NORM_VEC; j++) {
        const int i = int(threadIdx.x) + j * T;
        if (warp_i0 + j * T >= hi || warp_i0 + j * T + WARP_SIZE <= lo) continue; // the whole warp: none of its i
        const bool mine = i >= lo && i < hi;
        const float4 o = v[j];
        if (mine && y4) y4[i] = o;
        if (q) { // every lane of the warp takes part in the shuffles; lanes outside the slice store nothing
            const float ov[4] = {o.x, o.y, o.z, o.w};
            q8x4_store(ov, r * (ne0 / 4) + i, mine, reinterpret_cast<char4*>(q), ds, xh,
                       q8k ? (i < n4 ? gmax[i / 64] : 0.0f) : -1.0f);
        }
    }
    if constexpr (P2P) p2p_end(pa, c, gridDim.x * gridDim.y, unsigned(gridDim.x * ne0));
}

// add_rms_norm_mul_rows with norm_slots: b (ne0, K, rows) is a mixture's experts' outputs, a row's K <= 8 slots
// loaded at once and summed in order (moe_slot_sum_kernel's steps, fused.cu), then the add and the norm as
// add_norm_vec_kernel does them. One float4 of the row a thread (n4 <= 1024), so every slot's load is in flight
// together; the squares are thus summed in another grouping than the unfused kernel's (y may differ from it in the
// last place). Grid (rows, slices) as there: every block sums the whole row, writes its slice.
constexpr int SLOTS_MAX = 8;
static __global__ void __launch_bounds__(1024)
    add_norm_slots_kernel(const float* a, const float* b, norm_slots sl, float* sum, const float* w, float* y,
                          int64_t ne0, float eps, int8_t* q, __half2* ds, uint2* xh, bool w_early, bool q8k) {
    __shared__ float red[32];
    __shared__ float gmax[1024 / 64];
    const int64_t r = blockIdx.x;
    const int n4 = int(ne0 / 4), i = int(threadIdx.x);
    const int per = n4 / int(gridDim.y), lo = int(blockIdx.y) * per, hi = lo + per; // this block's float4s
    const bool in = i < n4, mine = i >= lo && i < hi;
    const auto* w4 = reinterpret_cast<const float4*>(w);
    float4 wv = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    if (w_early && w4 && in) wv = w4[i];
    pdl_wait();
    pdl_trigger();
    if (!w_early && w4 && in) wv = w4[i];
    const int k = int(sl.k);
    const auto* b4 = reinterpret_cast<const float4*>(b + r * k * ne0);
    float4 t[SLOTS_MAX];
#pragma unroll
    for (int s = 0; s < SLOTS_MAX; s++)
        t[s] = in && s < k ? b4[s * n4 + i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 av = in ? reinterpret_cast<const float4*>(a + r * ne0)[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float* sw = sl.w ? sl.w + r * k : nullptr;
    auto weighted = [&](int s) {
        const float4 x = t[s];
        return sw ? make_float4(__fmul_rn(x.x, sw[s]), __fmul_rn(x.y, sw[s]), __fmul_rn(x.z, sw[s]),
                                __fmul_rn(x.w, sw[s]))
                  : x;
    };
    float4 bv = weighted(0);
#pragma unroll
    for (int s = 1; s < SLOTS_MAX; s++)
        if (s < k) {
            const float4 x = weighted(s);
            bv = make_float4(__fadd_rn(bv.x, x.x), __fadd_rn(bv.y, x.y), __fadd_rn(bv.z, x.z), __fadd_rn(bv.w, x.w));
        }
    const float4 v = make_float4(__fadd_rn(av.x, bv.x), __fadd_rn(av.y, bv.y), __fadd_rn(av.z, bv.z),
                                 __fadd_rn(av.w, bv.w));
    if (in && mine) reinterpret_cast<float4*>(sum + r * ne0)[i] = v;
    float ss = 0.0f;
    ss = fmaf(v.x, v.x, ss);
    ss = fmaf(v.y, v.y, ss);
    ss = fmaf(v.z, v.z, ss);
    ss = fmaf(v.w, v.w, ss);
    ss = block_sum(ss, red);
    const float sc = 1.0f / sqrtf(ss / float(ne0) + eps);
    float4 o;
    if (w4) {
        o.x = (v.x * sc) * wv.x, o.y = (v.y * sc) * wv.y;
        o.z = (v.z * sc) * wv.z, o.w = (v.w * sc) * wv.w;
    } else {
        o.x = v.x * sc, o.y = v.y * sc, o.z = v.z * sc, o.w = v.w * sc;
    }
    const float ov[4] = {o.x, o.y, o.z, o.w};
    // q8k: every thread of the block (blockDim and n4 multiples of 64; the zeros past the row are a block of their own)
    const float gm = q8k && q ? block_q8k_amax(ov, gmax) : -1.0f;
    const int warp_i0 = i / WARP_SIZE * WARP_SIZE;
    if (warp_i0 >= hi || warp_i0 + WARP_SIZE <= lo) return; // the whole warp: none of its i
    if (mine && y) reinterpret_cast<float4*>(y + r * ne0)[i] = o;
    // every lane of the warp takes part in the shuffles; lanes outside the slice store nothing
    if (q) q8x4_store(ov, r * n4 + i, mine, reinterpret_cast<char4*>(q), ds, xh, gm);
}

// Exact mode: the CPU's arithmetic (backends/cpu/ops/norm.cpp): squares in f32, summed in double (in another order
// than the CPU's sequential one: the double sums differ in their last bits, which the rounding of the mean to float
// absorbs but in ~1e-9 of rows), mean = float(sum / ne0), s = 1 / sqrt(mean + eps), y = x s.
static __global__ void __launch_bounds__(256) rms_norm_exact_kernel(const float* x, shape4 sx, float* y, shape4 sy,
                                                                    float eps) {
    __shared__ double red[32];
    const int64_t r = blockIdx.x;
    const float* xr = x + row_offset(sx, r);
    float* yr = y + row_offset(sy, r);
    const int64_t ne0 = sx.ne[0];
    double ss = 0.0;
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) {
        const float v = xr[i * sx.nb[0]];
        ss = __dadd_rn(ss, double(__fmul_rn(v, v)));
    }
    const int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE;
    for (int o = WARP_SIZE / 2; o > 0; o >>= 1) ss = __dadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, o));
    if (lane == 0) red[warp] = ss;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < int(blockDim.x / WARP_SIZE); w++) total = __dadd_rn(total, red[w]);
    const float mean = __double2float_rn(__ddiv_rn(total, double(ne0)));
    const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) yr[i * sy.nb[0]] = __fmul_rn(xr[i * sx.nb[0]], s);
}

// rms_norm_part: s = 1 / sqrt(sum_sq / width + eps) from the row's given sum of squares, y = x s; the CPU's arithmetic
// (every step rounded once, in f32), in fast and exact mode alike. One block per row.
static __global__ void __launch_bounds__(256)
    rms_norm_part_kernel(const float* x, shape4 sx, const float* ss, shape4 sss, float* y, shape4 sy, float width,
                         float eps) {
    pdl_wait();
    pdl_trigger();
    const int64_t r = blockIdx.x;
    const float* xr = x + row_offset(sx, r);
    float* yr = y + row_offset(sy, r);
    const float s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss[row_offset(sss, r)], width), eps)));
    for (int64_t i = threadIdx.x; i < sx.ne[0]; i += blockDim.x) yr[i * sy.nb[0]] = __fmul_rn(xr[i * sx.nb[0]], s);
}

void rms_norm_launch(const cuda_context& ctx, const float* x, shape4 sx, float* y, shape4 sy, float eps) {
    const int64_t n_rows = sx.ne[1] * sx.ne[2] * sx.ne[3];
    if (n_rows == 0) return;
    launch(ctx, rms_norm_kernel, unsigned(n_rows), norm_threads(sx.ne[0]), 0, x, sx, y, sy, eps);
}

} // namespace

bool add_rms_norm_mul_rows(const cuda_context& ctx, const float* a, const float* b, float* sum, const float* w,
                           bool w_early, float* y, int64_t ne0, int64_t rows, float eps, int8_t* q, __half2* ds,
                           const p2p_args* group, __half* xh, const norm_slots* slots, bool q8k) {
    q8k = q8k && q;
    if (ne0 % (q8k ? 256 : 32) != 0 || ne0 / 4 > int64_t(NORM_VEC) * 1024 || rows <= 0 || rows > 65535 ||
        !aligned16(a) || !aligned16(y) || (b && (!aligned16(b) || !sum || !aligned16(sum))) || (w && !aligned16(w)))
        return false;
    if (slots && (!b || group || slots->k < 1 || slots->k > SLOTS_MAX || ne0 / 4 > 1024)) return false;
    // q8k: whole warps pairs (a 256-value block is 64 threads' float4s of one step)
    const int lanes = q8k ? 64 : WARP_SIZE;
    const int threads = int(ceil_div(norm_vec_threads(ne0), lanes) * lanes);
    // Slices for decode-sized calls (add_norm_vec_kernel): up to 16 blocks a row, each a whole number of q8_1 groups
    // (with the all-reduce inside, each pushes its slice to the peers); one where an output overlaps an input (a
    // block writes its slice while the others still read the row). Measured (H100, 2026-11-27, tg128, 16 slices vs
    // one block, two rounds in one call, same greedy text): 8B q4_0 468.5-469.7 vs 452.7-456.3 t/s, 1B 1810-1842 vs
    // 1787-1796; tests/bench/persist_proto.cu showed the same in a GEMV chain: 55.1 vs 57.0 us a layer. With the
    // all-reduce (70B q4_0 row split on 2 H200, 2026-11-29, same method): 139.9 / 139.9 vs 135.8 / 135.2.
    const int64_t n4 = ne0 / 4, bytes = rows * ne0 * int64_t(sizeof(float));
    const int64_t b_bytes = slots ? bytes * slots->k : bytes; // b: K slots a row
    const auto overlaps = [&](const void* o, const void* in) {
        const auto* p = static_cast<const uint8_t*>(o);
        const auto* i = static_cast<const uint8_t*>(in);
        return o && in && p < i + (in == b ? b_bytes : bytes) && i < p + bytes;
    };
    int slices = 1;
    if (rows <= 4 && !overlaps(y, a) && !overlaps(y, b) && !overlaps(sum, a) && !overlaps(sum, b) && !overlaps(y, w) &&
        !overlaps(sum, w))
        for (int s = 16; s > 1; s /= 2)
            if (n4 % ((q8k ? 64 : 8) * s) == 0) {
                slices = s;
                break;
            }
    if (slots) {
        // sum is written while the slots are read (each thread its own element, the weights by all): never over
        // them; y after the block's sums, so over them only with one block a row
        if (overlaps(sum, b) || (slots->w && overlaps(sum, slots->w))) return false;
        if (slots->w && overlaps(y, slots->w)) slices = 1;
        launch(ctx, add_norm_slots_kernel, dim3(unsigned(rows), unsigned(slices)),
               int(ceil_div(ne0 / 4, lanes) * lanes), 0, a, b, *slots, sum, w, y, ne0, eps, q, ds,
               reinterpret_cast<uint2*>(xh), w_early, q8k);
        return true;
    }
    const p2p_args none{};
    const p2p_args& pa = group ? *group : none;
    const auto pick = [&]<class K>(K plain, K add, K p2p, K p2p_add) {
        return group ? (b ? p2p_add : p2p) : (b ? add : plain);
    };
    const bool begin_early = group && ctx.launches != ctx.p2p_launch;
    launch(ctx,
           pick(add_norm_vec_kernel<false, false>, add_norm_vec_kernel<true, false>, add_norm_vec_kernel<false, true>,
                add_norm_vec_kernel<true, true>),
           dim3(unsigned(rows), unsigned(slices)), threads, 0, a, b, b ? sum : nullptr, w, y, ne0, eps, q, ds,
           reinterpret_cast<uint2*>(xh), w_early, begin_early, pa, q8k);
    if (group) ctx.p2p_launch = ctx.launches;
    return true;
}

void rms_norm(cuda_context& ctx, tensor& dst) {
    const tensor* a = dst.src[0];
    if (ctx.exact) {
        const shape4 sx = shape_of(*a, 4), sy = shape_of(dst, 4);
        const int64_t n_rows = sx.ne[1] * sx.ne[2] * sx.ne[3];
        if (n_rows == 0) return;
        rms_norm_exact_kernel<<<unsigned(n_rows), 256, 0, ctx.stream>>>(ctx.as<float>(a), sx, ctx.as<float>(&dst), sy,
                                                                      dst.op_params.f[0]);
        TS_CUDA_CHECK(cudaGetLastError());
        return;
    }
    if (a->is_contiguous() && dst.is_contiguous() &&
        add_rms_norm_mul_rows(ctx, ctx.as<float>(a), nullptr, nullptr, nullptr, false, ctx.as<float>(&dst), a->ne[0],
                              a->ne[1] * a->ne[2] * a->ne[3], dst.op_params.f[0], nullptr, nullptr, nullptr))
        return;
    rms_norm_launch(ctx, ctx.as<float>(a), shape_of(*a, 4), ctx.as<float>(&dst), shape_of(dst, 4), dst.op_params.f[0]);
}

void rms_norm_part(cuda_context& ctx, tensor& dst) {
    const tensor* a = dst.src[0];
    const shape4 sx = shape_of(*a, 4);
    const int64_t n_rows = sx.ne[1] * sx.ne[2] * sx.ne[3];
    if (n_rows == 0) return;
    launch(ctx, rms_norm_part_kernel, unsigned(n_rows), 256, 0, ctx.as<float>(a), sx, ctx.as<float>(dst.src[1]),
           shape_of(*dst.src[1], 4), ctx.as<float>(&dst), shape_of(dst, 4), float(dst.op_params.i[1]),
           dst.op_params.f[0]);
}

} // namespace tessera::cuda
