// attn_harness.cu: the decode attention kernel (attention.cu, attention_decode_split_kernel) outside the model, on one
// token of an 8B- or 1B-shaped layer (32 query heads, 8 KV heads of 128 or 64 dimensions, the f16 cache laid out as
// the model's: positions n_head_kv * hd halves apart) at a given depth: microseconds a call for decode_split_plan's
// split, for fixed splits of whole 8-warp rounds at 4, 2 and 1 query heads a block, and for the tensor-core
// prototype below ("mma"), with the caches streamed from HBM (copies rotated past the L2), each result against the
// first (the plan's; max |diff| and the largest |output|; outputs poisoned with NaN first), and a plain kernel
// reading the same bytes as the floor. Usage: ah [depth] [64|128]. Build (about 40 s, no project build needed), on
// an sm_90a machine:
//   nvcc -std=c++20 -O3 -DNDEBUG -I. --generate-code=arch=compute_90a,code=sm_90a tests/bench/attn_harness.cu \
//     -o /tmp/ah -Xlinker --unresolved-symbols=ignore-all
#include "backends/cuda/ops/attention.cu"
#include "tests/bench/harness_check.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>
using namespace tessera;
using namespace tessera::cuda;

namespace tessera::cuda {
namespace {
// ---- prototype (session 34, not yet measured): the split decode kernel's QK and PV on tensor cores ----
// A warp's round of 32 keys as mma.sync m16n8k16 (f16 in, f32 accumulate): S (16 x 32) = Q (16 x HD) K^T with the
// GQA group's query heads as rows 0 .. GM - 1 (the rest zero), then O (16 x HD) += P V. The k order inside each
// product is free, so the K rows arrive as 16-byte loads: thread (row g = lane / 4, pair c = lane % 4) of n-tile nt
// loads key j0 + 8 nt + g's dims 32 u + 8 c .. + 7, which serve k-steps 2u (dims + 0..3) and 2u + 1 (+ 4..7); Q is
// packed in the same order once. P's fragments are S's accumulators (rows g, keys 2c, 2c + 1 of n-tiles 2 ks and
// 2 ks + 1) rounded to f16, so the PV keys of k-step ks are j0 + 16 ks + {2c, 2c + 1, 8 + 2c, 9 + 2c}, whose V rows
// each thread loads at dims g * NT .. + NT - 1 (NT = HD / 8 n-tiles; column g of n-tile nt is dim g * NT + nt) and
// pairs by byte_perm. Masked keys' V rows are zeroed before the MMA (0 * NaN of a never-written row would reach
// the output). Q and P are rounded to f16 (the CPU rounds Q to f16 for decode as ggml); the merge of warps and splits
// is the split kernel's.
template <int HD, int GM>
static __global__ void __launch_bounds__(256) attention_decode_mma_kernel(attn_args a, int64_t kc, int n_split) {
    static_assert((HD == 64 || HD == 128) && GM <= 8, "head sizes 64 / 128, up to 8 query heads a block");
    constexpr int NU = HD / 32, NT = HD / 8, WMAX = 8;
    __shared__ float m_s[WMAX][GM], l_s[WMAX][GM];
    __shared__ float acc_s[WMAX][GM][HD];
    __shared__ int last_s;
    const int W = int(blockDim.x) / WARP_SIZE;
    const int hblocks = (a.group + GM - 1) / GM;
    const int hk = blockIdx.x / hblocks, g0 = blockIdx.x % hblocks * GM;
    const int G = min(GM, a.group - g0), h0 = hk * a.group + g0;
    const int s = blockIdx.y, t = blockIdx.z;
    const int warp = threadIdx.x / WARP_SIZE, lane = threadIdx.x % WARP_SIZE, gq = lane / 4, c = lane % 4;
    const int64_t k0 = int64_t(s) * kc, k1 = min(a.n_kv, k0 + kc);
    const float* mr = a.mask ? a.mask + t * a.mask_nb1 : nullptr;
    const __half* kh = a.k + hk * a.kv_nb1;
    const __half* vh = a.v + hk * a.kv_nb1 + gq * NT;
    pdl_wait();
    pdl_trigger();
    // Q row gq in the k order: qa[u][h] = {a0, a2} of k-step 2u + h
    uint32_t qa[NU][2][2];
    {
        const float* qr = a.q + (h0 + (gq < G ? gq : 0)) * a.q_nb1 + t * a.q_nb2;
#pragma unroll
        for (int u = 0; u < NU; u++) {
            float4 x0 = *reinterpret_cast<const float4*>(qr + 32 * u + 8 * c);
            float4 x1 = *reinterpret_cast<const float4*>(qr + 32 * u + 8 * c + 4);
            if (gq >= G) x0 = x1 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            qa[u][0][0] = pack_half2(x0.x, x0.y), qa[u][0][1] = pack_half2(x0.z, x0.w);
            qa[u][1][0] = pack_half2(x1.x, x1.y), qa[u][1][1] = pack_half2(x1.z, x1.w);
        }
    }
    float M = -INFINITY, L = 0.0f; // row gq's running max; this thread's part of its sum
    float o[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) o[nt][0] = o[nt][1] = o[nt][2] = o[nt][3] = 0.0f;
    for (int64_t j0 = k0 + warp * WARP_SIZE; j0 < k1; j0 += W * WARP_SIZE) {
        uint4 kq[4][NU];
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            const int64_t j = j0 + 8 * nt + gq;
            const __half* kr = kh + (j < k1 ? j : j0) * a.kv_nb2 + 8 * c;
#pragma unroll
            for (int u = 0; u < NU; u++) kq[nt][u] = *reinterpret_cast<const uint4*>(kr + 32 * u);
        }
        // V rows of k-step ks, slot e4: key j0 + 16 ks + 2c + (e4 & 1) + 8 (e4 >> 1); NT halves each
        uint4 vq[2][4][NT / 8];
#pragma unroll
        for (int ks = 0; ks < 2; ks++)
#pragma unroll
            for (int e4 = 0; e4 < 4; e4++) {
                const int64_t j = j0 + 16 * ks + 2 * c + (e4 & 1) + 8 * (e4 >> 1);
                const __half* vr = vh + (j < k1 ? j : j0) * a.kv_nb2;
#pragma unroll
                for (int q = 0; q < NT / 8; q++) vq[ks][e4][q] = *reinterpret_cast<const uint4*>(vr + 8 * q);
            }
        // this thread's 8 score keys: n-tile nt, column 2c + e
        float mv[4][2];
        bool any = false;
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int64_t j = j0 + 8 * nt + 2 * c + e;
                mv[nt][e] = j < k1 ? (mr ? mr[j] : 0.0f) : -INFINITY;
                any |= mv[nt][e] != -INFINITY;
            }
        if (!__any_sync(0xffffffffu, any)) continue; // the same for every lane
        float sc[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; nt++) {
            sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
            for (int u = 0; u < NU; u++) {
                const uint32_t a0[4] = {qa[u][0][0], 0u, qa[u][0][1], 0u}, a1[4] = {qa[u][1][0], 0u, qa[u][1][1], 0u};
                mma_16816(sc[nt], a0, kq[nt][u].x, kq[nt][u].y);
                mma_16816(sc[nt], a1, kq[nt][u].z, kq[nt][u].w);
            }
        }
        float p[4][2], rmax = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                p[nt][e] = mv[nt][e] != -INFINITY ? sc[nt][e] * a.scale + mv[nt][e] : -INFINITY;
                rmax = fmaxf(rmax, p[nt][e]);
            }
        rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, 1));
        rmax = fmaxf(rmax, __shfl_xor_sync(0xffffffffu, rmax, 2));
        const float m_new = fmaxf(M, rmax); // finite: some key of the round is live (one mask for every head)
        const float corr = M == -INFINITY ? 0.0f : __expf(M - m_new);
        float psum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                p[nt][e] = p[nt][e] == -INFINITY || gq >= G ? 0.0f : __expf(p[nt][e] - m_new);
                psum += p[nt][e];
            }
        L = L * corr + psum;
        M = m_new;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) o[nt][0] *= corr, o[nt][1] *= corr;
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            const uint32_t pa[4] = {pack_half2(p[2 * ks][0], p[2 * ks][1]), 0u,
                                    pack_half2(p[2 * ks + 1][0], p[2 * ks + 1][1]), 0u};
#pragma unroll
            for (int e4 = 0; e4 < 4; e4++)
                if (mv[2 * ks + (e4 >> 1)][e4 & 1] == -INFINITY)
#pragma unroll
                    for (int q = 0; q < NT / 8; q++) vq[ks][e4][q] = make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const int q = nt / 8, w = (nt % 8) / 2;
                const unsigned sel = nt % 2 ? 0x7632u : 0x5410u;
                auto word = [&](int e4) {
                    const uint4& r = vq[ks][e4][q];
                    return w == 0 ? r.x : w == 1 ? r.y : w == 2 ? r.z : r.w;
                };
                mma_16816(o[nt], pa, __byte_perm(word(0), word(1), sel), __byte_perm(word(2), word(3), sel));
            }
        }
    }
    L += __shfl_xor_sync(0xffffffffu, L, 1);
    L += __shfl_xor_sync(0xffffffffu, L, 2);
    if (gq < G) {
        if (c == 0) m_s[warp][gq] = M, l_s[warp][gq] = L;
#pragma unroll
        for (int nt = 0; nt < NT; nt++) {
            acc_s[warp][gq][2 * c * NT + nt] = o[nt][0];
            acc_s[warp][gq][(2 * c + 1) * NT + nt] = o[nt][1];
        }
    }
    __syncthreads();
    decode_merge<HD, GM, WMAX>(a, m_s, l_s, acc_s, last_s, W, G, h0, n_split);
}

} // namespace
} // namespace tessera::cuda

// every live K and V byte of the layer read once (16 bytes a thread a step), summed so nothing is dropped
static __global__ void read_floor_kernel(const uint4* k, const uint4* v, int64_t n, float* out) {
    float s = 0.0f;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const uint4 a = k[i], b = v[i];
        s += __uint_as_float(a.x ^ b.y) + __uint_as_float(a.z ^ b.w);
    }
    if (s == 1.2345f) *out = s;
}

template <int HD> int run_shape(int64_t depth);

// arguments: the depth (default 4096), then the head size: 128 (an 8B layer, the default) or 64 (a 1B layer: 32
// query heads, 8 KV heads)
int main(int argc, char** argv) {
    const int64_t depth = argc > 1 ? std::atoll(argv[1]) : 4096;
    const int hd = argc > 2 ? std::atoi(argv[2]) : 128;
    if (hd == 128) return run_shape<128>(depth);
    if (hd == 64) return run_shape<64>(depth);
    std::printf("error: head size %d (64 or 128)\n", hd);
    return 1;
}

template <int HD> int run_shape(int64_t depth) {
    const int hd = HD, n_head = 32, n_kv_head = 8, group = n_head / n_kv_head;
    constexpr int D = HD / 32;
    const int64_t n_kv = (depth + 1 + 255) / 256 * 256; // the model's padded cache (kv_pad 256)
    const size_t kv_elems = size_t(n_kv) * n_kv_head * hd;
    const int copies = int(std::max<size_t>(4, (400u << 20) / (2 * kv_elems * 2) + 1));
    std::printf("depth %lld: n_kv %lld, %d cache copies, %.1f MiB of live K + V a call\n", (long long)depth,
                (long long)n_kv, copies, 2.0 * double(depth + 1) * n_kv_head * hd * 2 / (1 << 20));
    std::vector<__half> hk(kv_elems), hv(kv_elems);
    uint32_t st = 7;
    auto rnd = [&] {
        st = st * 1664525u + 1013904223u;
        return float(st >> 8) / float(1 << 24) - 0.5f;
    };
    for (size_t i = 0; i < kv_elems; i++) hk[i] = __float2half(rnd()), hv[i] = __float2half(rnd());
    std::vector<float> hq(size_t(n_head) * hd), hm(static_cast<size_t>(n_kv));
    for (auto& x : hq) x = rnd();
    for (int64_t j = 0; j < n_kv; j++) hm[j] = j <= depth ? 0.0f : -INFINITY;
    std::vector<__half*> dk(copies), dv(copies);
    for (int c = 0; c < copies; c++) {
        CKH(cudaMalloc(&dk[c], kv_elems * 2));
        CKH(cudaMalloc(&dv[c], kv_elems * 2));
        CKH(cudaMemcpy(dk[c], hk.data(), kv_elems * 2, cudaMemcpyHostToDevice));
        CKH(cudaMemcpy(dv[c], hv.data(), kv_elems * 2, cudaMemcpyHostToDevice));
    }
    float *dq, *dm, *dout, *dpart, *dsink;
    int* dcnt;
    CKH(cudaMalloc(&dq, hq.size() * 4));
    CKH(cudaMalloc(&dm, hm.size() * 4));
    CKH(cudaMalloc(&dout, size_t(n_head) * hd * 4));
    CKH(cudaMalloc(&dpart, size_t(n_head) * DS_MAX_SPLITS * (hd + 2) * 4));
    CKH(cudaMalloc(&dcnt, 4096 * 4));
    CKH(cudaMalloc(&dsink, 4));
    CKH(cudaMemset(dcnt, 0, 4096 * 4));
    CKH(cudaMemcpy(dq, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
    CKH(cudaMemcpy(dm, hm.data(), hm.size() * 4, cudaMemcpyHostToDevice));

    auto time_it = [&](auto&& run) {
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        std::vector<float> t;
        for (int r = 0; r < 15; r++) {
            cudaEventRecord(e0);
            for (int i = 0; i < 4; i++)
                for (int c = 0; c < copies; c++) run(c);
            cudaEventRecord(e1);
            cudaEventSynchronize(e1);
            float ms;
            cudaEventElapsedTime(&ms, e0, e1);
            t.push_back(ms * 1000 / (4 * copies));
        }
        CKH(cudaGetLastError());
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        std::sort(t.begin(), t.end());
        return t[t.size() / 2];
    };
    const double bytes = 2.0 * double(depth + 1) * n_kv_head * hd * 2;
    const int64_t live16 = (depth + 1) * n_kv_head * hd * 2 / 16;
    const float floor_us = time_it([&](int c) {
        read_floor_kernel<<<132 * 8, 256>>>(reinterpret_cast<const uint4*>(dk[c]),
                                            reinterpret_cast<const uint4*>(dv[c]), live16, dsink);
    });
    std::printf("read floor: %.2f us (%.0f GB/s)\n", floor_us, bytes / floor_us * 1e-3);

    std::vector<float> ref(size_t(n_head) * hd), got(ref.size());
    bool have_ref = false;
    int n_sm = 0;
    CKH(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
    struct config {
        const char* name;
        int gm;
        split_plan sp;
        bool mma = false; // the prototype above
    };
    std::vector<config> configs;
    for (int gm : {4, 2, 1}) {
        const int64_t blocks_x = n_kv_head * ((group + gm - 1) / gm);
        configs.push_back({"plan", gm, decode_split_plan(n_kv, gm, hd, blocks_x, n_sm)});
        for (int64_t kc : {256, 512}) // splits of whole rounds of ds_warps (the plan before)
            if ((n_kv + kc - 1) / kc <= DS_MAX_SPLITS)
                configs.push_back({"fixed", gm, split_plan{kc, int((n_kv + kc - 1) / kc), ds_warps(gm, hd)}});
    }
    for (int gm : {4, 2})
        for (int64_t kc : {256, 512, 1024})
            if ((n_kv + kc - 1) / kc <= DS_MAX_SPLITS)
                configs.push_back({"mma", gm, split_plan{kc, int((n_kv + kc - 1) / kc), 8}, true});
    for (const config& cf : configs) {
        const int gm = cf.gm, n_split = cf.sp.n_split;
        const int64_t kc = cf.sp.kc;
        const int blocks_x = n_kv_head * ((group + gm - 1) / gm);
        const int warps = cf.sp.warps;
        auto run = [&](int c) {
            attn_args a{};
            a.q = dq, a.q_nb1 = hd, a.q_nb2 = int64_t(n_head) * hd;
            a.k = dk[c], a.v = dv[c], a.kv_nb1 = hd, a.kv_nb2 = int64_t(n_kv_head) * hd;
            a.mask = dm, a.mask_nb1 = n_kv, a.mask_early = true;
            a.o = dout, a.o_nb1 = hd, a.o_nb2 = int64_t(n_head) * hd;
            a.hd = hd, a.n_head = n_head, a.n_tok = 1, a.group = group, a.n_kv = n_kv;
            a.scale = 1.0f / std::sqrt(float(hd));
            a.part = dpart, a.counters = dcnt;
            const dim3 grid(unsigned(blocks_x), unsigned(n_split), 1);
            if (cf.mma && gm == 4)
                attention_decode_mma_kernel<HD, 4><<<grid, warps * 32>>>(a, kc, n_split);
            else if (cf.mma)
                attention_decode_mma_kernel<HD, 2><<<grid, warps * 32>>>(a, kc, n_split);
            else if (gm == 4)
                attention_decode_split_kernel<D, 4><<<grid, warps * 32>>>(a, kc, n_split);
            else if (gm == 2)
                attention_decode_split_kernel<D, 2><<<grid, warps * 32>>>(a, kc, n_split);
            else
                attention_decode_split_kernel<D, 1><<<grid, warps * 32>>>(a, kc, n_split);
        };
        CKH(cudaMemset(dout, 0xff, got.size() * 4));
        run(0);
        CKH(cudaDeviceSynchronize());
        CKH(cudaMemcpy(have_ref ? got.data() : ref.data(), dout, got.size() * 4, cudaMemcpyDeviceToHost));
        double diff = 0, ref_max = 0;
        for (float x : ref) ref_max = std::max(ref_max, double(std::fabs(x)));
        if (have_ref)
            for (size_t i = 0; i < got.size(); i++)
                diff = std::max(diff, std::isnan(got[i]) ? 1e30 : double(std::fabs(got[i] - ref[i])));
        have_ref = true;
        const float us = time_it(run);
        std::printf("%-5s gm %d kc %5lld: %3d blocks x %2d splits, %2d warps: %7.2f us (%5.0f GB/s)  max |diff| %.3g "
                    "(of %.3g)\n",
                    cf.name, gm, (long long)kc, blocks_x, n_split, warps, us, bytes / us * 1e-3, diff, ref_max);
    }
    return 0;
}
