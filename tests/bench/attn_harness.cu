// attn_harness.cu: the decode attention kernels (attention.cu: attention_decode_split_kernel in f32 and
// attention_decode_stage_kernel on tensor cores) outside the model, on one token of an 8B- or 1B-shaped layer (32
// query heads, 8 KV heads of 128 or 64 dimensions, the f16 cache laid out as the model's: positions n_head_kv * hd
// halves apart) at a given depth: microseconds a call for decode_split_plan's split ("plan"), fixed splits of whole
// 8-warp rounds ("fixed"), decode_stage_plan's ("splan") and every one-wave split of the tensor-core kernel
// ("stage"), at 4, 2 and 1 query heads a block, with the caches streamed from HBM (copies rotated past the L2), each
// result against the first (the f32 plan's; max |diff| and the largest |output|; outputs poisoned with NaN first), and
// a plain kernel reading the same bytes as the floor. Usage: ah [depth] [64|128]. Build (about 40 s, no project build
// needed), on an sm_90a machine:
//   nvcc -std=c++20 -O3 -DNDEBUG -I. --generate-code=arch=compute_90a,code=sm_90a tests/bench/attn_harness.cu \
//     -o /tmp/ah -Xlinker --unresolved-symbols=ignore-all
#include "backends/cuda/ops/attention.cu"
#include "tests/bench/harness_check.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
using namespace tessera;
using namespace tessera::cuda;

// every live K and V byte of the layer read once (16 bytes a thread a step), summed so nothing is dropped
static __global__ void read_floor_kernel(const uint4* k, const uint4* v, int64_t n, float* out) {
    float s = 0.0f;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const uint4 a = k[i], b = v[i];
        s += __uint_as_float(a.x ^ b.y) + __uint_as_float(a.z ^ b.w);
    }
    if (s == 1.2345f) *out = s;
}

template <int HD> int run_shape(int64_t depth, const char* only);

// arguments: the depth (default 4096), then the head size: 128 (an 8B layer, the default) or 64 (a 1B layer: 32
// query heads, 8 KV heads), then optionally one configuration to run alone, as NAME:GM:KC:WARPS (e.g. stage:4:288:9;
// for profiling: its first launch is the checked one), or "plans" for the plans' rows alone)
int main(int argc, char** argv) {
    const int64_t depth = argc > 1 ? std::atoll(argv[1]) : 4096;
    const int hd = argc > 2 ? std::atoi(argv[2]) : 128;
    const char* only = argc > 3 ? argv[3] : nullptr;
    if (hd == 128) return run_shape<128>(depth, only);
    if (hd == 64) return run_shape<64>(depth, only);
    std::printf("error: head size %d (64 or 128)\n", hd);
    return 1;
}

template <int HD> int run_shape(int64_t depth, const char* only) {
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
        bool stage = false; // attention_decode_stage_kernel
    };
    std::vector<config> configs;
    for (int gm : {4, 2, 1}) {
        const int64_t blocks_x = n_kv_head * ((group + gm - 1) / gm);
        configs.push_back({"plan", gm, decode_split_plan(n_kv, gm, hd, blocks_x, n_sm)});
        for (int64_t kc : {256, 512}) // splits of whole rounds of ds_warps (the plan before)
            if ((n_kv + kc - 1) / kc <= DS_MAX_SPLITS)
                configs.push_back({"fixed", gm, split_plan{kc, int((n_kv + kc - 1) / kc), ds_warps(gm, hd)}});
    }
    // the tensor-core kernel: its plan, then every split of whole rounds (1 or 2 a warp) whose blocks fit one wave
    const int st_wmax = stage_max_warps<HD>();
    for (int gm : {4, 2, 1}) {
        const int64_t blocks_x = n_kv_head * ((group + gm - 1) / gm);
        configs.push_back({"splan", gm, decode_stage_plan(n_kv, st_wmax, blocks_x, n_sm), true});
        for (int rpw : {1, 2})
            for (int w = 4; w <= st_wmax; w++) {
                const int64_t kc = int64_t(w) * rpw * 32, n_split = (n_kv + kc - 1) / kc;
                if (n_split <= DS_MAX_SPLITS && blocks_x * n_split <= n_sm)
                    configs.push_back({"stage", gm, split_plan{kc, int(n_split), w}, true});
            }
    }
    for (const config& cf : configs) {
        char key[64];
        std::snprintf(key, sizeof key, "%s:%d:%lld:%d", cf.name, cf.gm, (long long)cf.sp.kc, cf.sp.warps);
        const bool plans_only = only && std::strcmp(only, "plans") == 0; // the plans' rows alone
        if (plans_only ? !std::strstr(cf.name, "plan") : only && std::strcmp(key, only) != 0) continue;
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
            if (cf.stage) {
                auto fn = gm == 4   ? attention_decode_stage_kernel<HD, 4>
                          : gm == 2 ? attention_decode_stage_kernel<HD, 2>
                                    : attention_decode_stage_kernel<HD, 1>;
                const size_t smem = gm == 4   ? stage_smem<HD, 4>(warps)
                                    : gm == 2 ? stage_smem<HD, 2>(warps)
                                              : stage_smem<HD, 1>(warps);
                CKH(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
                fn<<<grid, warps * 32, smem>>>(a, kc, n_split);
            } else if (gm == 4)
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
