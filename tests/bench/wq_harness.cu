// wq_harness.cu: the project's prefill GEMM kernels outside the model, on random q4_0, q8_0, nvfp4 or mxfp4 weights:
// gemm_wq_kernel (BM 64 in clusters of two / BM 128, and BM 64 as a grouped launch of two matrices split off a tile
// boundary, which leaves an odd number of row tiles and a cluster across the two) and
// gemm_wgmma_kernel (128 x 128, 3 stages), and the model's launch (the tile rule wq_plan, without and with the split
// tail: the columns rule / split, the plan printed after them), TFLOP/s at m = 512 with the weights streamed from HBM
// (in separate allocations, or in one arena), and each warp-specialized result against the old kernel's (max
// |difference|; outputs poisoned with NaN first), on 8B and 1B shapes. Usage: wqh [q4_0|q8_0|nvfp4|mxfp4] [arena].
// Build (about 60 s, no project build needed; the source file's host functions stay unresolved, never called), on an
// sm_90a machine:
//   nvcc -std=c++20 -O3 -DNDEBUG -I. --generate-code=arch=compute_90a,code=sm_90a tests/bench/wq_harness.cu \
//     -o /tmp/wqh -Xlinker --unresolved-symbols=ignore-all
#include "backends/cuda/ops/gemm_wgmma.cu"
#include "tests/bench/harness_check.h"
#include <cstdio>
#include <string>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cstring>
using namespace tessera;
using namespace tessera::cuda;
// arena: every copy of the weights in one allocation, one after the other (as the model's weights)
// A scale group's bytes: an f16 0.01 (q4_0, q8_0), two f16 half sub-scales 0.01 (nvfp4), E8M0 2^-7 (mxfp4)
template <class D> void fill_scale(uint8_t* g) {
    if constexpr (D::scale_bytes == 1) {
        g[0] = 127 - 7;
    } else {
        const __half h = __float2half(0.01f);
        for (int i = 0; i < D::scale_bytes / 2; i++) std::memcpy(g + 2 * i, &h, 2);
    }
}
template <class D> int run_format(bool arena) {
    static_assert(D::chunks_per_scale == 1, "formats with one scale group a chunk");
    allow_smem_wq<D>();
    CKH(cudaFuncSetAttribute(gemm_wgmma_kernel<D, 128, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(smem_bytes<128, 3>())));
    struct shape {
        int n, m, k;
    };
    int n_sm = 0;
    CKH(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0));
    float* part = nullptr;
    int* counters = nullptr;
    const size_t part_bytes = size_t(n_sm) * 128 * 256 * sizeof(float), n_counters = 4096;
    CKH(cudaMalloc(&part, part_bytes));
    CKH(cudaMalloc(&counters, n_counters * sizeof(int)));
    CKH(cudaMemset(counters, 0, n_counters * sizeof(int)));
    std::printf("%6s %6s %6s %8s %8s %8s %10s %8s %8s  %s\n", "n", "m", "k", "old128", "wq64", "wq128", "wq64 group",
                "rule", "split", "split plan");
    // 8B's o (and q / k / v of one activation as one grid), gate + up, down; one of gate / up; 1B's o, q / k / v, gate
    // + up, down
    for (shape s : {shape{4096, 512, 4096}, shape{6144, 512, 4096}, shape{28672, 512, 4096}, shape{4096, 512, 14336},
                    shape{14336, 512, 4096}, shape{2048, 512, 2048}, shape{3072, 512, 2048}, shape{16384, 512, 2048},
                    shape{2048, 512, 8192}}) {
        const int64_t nb = s.k / 32;
        const size_t q_row = size_t(nb) * sizeof(typename D::chunk_t), s_row = size_t(nb) * D::scale_bytes;
        const size_t qbytes = size_t(s.n) * q_row, sbytes = size_t(s.n) * s_row;
        const int copies = int(std::max<size_t>(2, (160u << 20) / (qbytes + sbytes) + 1));
        std::vector<uint8_t> q(qbytes);
        uint32_t st = 1;
        for (auto& b : q) {
            st = st * 1664525u + 1013904223u;
            b = uint8_t(st >> 24);
        }
        std::vector<uint8_t> sc(sbytes + 4); // (padded to a word: load_scale_word)
        for (size_t g = 0; g < size_t(s.n) * nb; g++) fill_scale<D>(sc.data() + g * D::scale_bytes);
        std::vector<__half> x(size_t(s.m) * s.k);
        for (auto& v : x) {
            st = st * 1664525u + 1013904223u;
            v = __float2half(float(st >> 8) / float(1 << 24) - 0.5f);
        }
        std::vector<uint8_t*> dq(copies), ds(copies);
        uint8_t* big = nullptr;
        if (arena) CKH(cudaMalloc(&big, (qbytes + sbytes) * copies + 4));
        for (int c = 0; c < copies; c++) {
            if (arena) {
                dq[c] = big + (qbytes + sbytes) * c;
                ds[c] = dq[c] + qbytes;
            } else {
                CKH(cudaMalloc(&dq[c], qbytes));
                CKH(cudaMalloc(&ds[c], sbytes + 4));
            }
            CKH(cudaMemcpy(dq[c], q.data(), qbytes, cudaMemcpyHostToDevice));
            CKH(cudaMemcpy(ds[c], sc.data(), sbytes, cudaMemcpyHostToDevice));
        }
        __half* dx;
        float* dy;
        CKH(cudaMalloc(&dx, x.size() * 2));
        CKH(cudaMalloc(&dy, size_t(s.n) * s.m * 4));
        CKH(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        CUtensorMap xm64, xm128;
        if (!x_tensor_map(dx, s.k, s.m, xm64, WQ_CL<64>) || !x_tensor_map(dx, s.k, s.m, xm128, WQ_CL<128>)) {
            std::printf("no tensor map\n");
            return 1;
        }
        constexpr int NV = 6;
        double tf[NV], diff[NV] = {};
        std::vector<float> ref(size_t(s.n) * s.m), got(ref.size());
        for (int var = 0; var < NV; var++) {
            auto run = [&](int c) {
                wgmma_args a{dq[c], ds[c], dx, dy,   s.n, s.n * int64_t(s.m), s.n * int64_t(s.m), s.n, 0, s.m,
                             s.k,   1,     1,  1.0f, true};
                if (var == 0) {
                    gemm_wgmma_kernel<D, 128, 3><<<dim3(s.m / 128, s.n / 128), THREADS, smem_bytes<128, 3>()>>>(a);
                } else if (var == 1) {
                    launch_wq<D, 64>(a, xm64, s.m, set_row_tiles(a, 64), nullptr);
                } else if (var == 2) {
                    launch_wq<D, 128>(a, xm128, s.m, set_row_tiles(a, 128), nullptr);
                } else if (var >= 4) { // the model's launch: the tile rule without (4) and with (5) the split tail
                    if (var == 5)
                        a.part = part, a.part_bytes = part_bytes, a.counters = counters, a.n_counters = n_counters;
                    launch<D>(a, s.m, n_sm, nullptr);
                } else { // two matrices of one grouped launch, split 32 rows off a tile boundary: an odd number of
                         // 64-row tiles (the last cluster's second tile is past the end), a cluster across the two
                    const int h = s.n / 2 - 32;
                    a.n = h;
                    a.n_more = 1;
                    a.more[0] = wgmma_part{dq[c] + size_t(h) * q_row,
                                           ds[c] + size_t(h) * s_row,
                                           dy + h,
                                           s.n,
                                           s.n * int64_t(s.m),
                                           s.n * int64_t(s.m),
                                           s.n - h,
                                           1.0f,
                                           0,
                                           nullptr};
                    launch_wq<D, 64>(a, xm64, s.m, set_row_tiles(a, 64), nullptr);
                }
            };
            CKH(cudaMemset(dy, 0xff, size_t(s.n) * s.m * 4)); // NaN: every output must be written
            run(0);
            CKH(cudaDeviceSynchronize());
            CKH(cudaMemcpy(var == 0 ? ref.data() : got.data(), dy, ref.size() * 4, cudaMemcpyDeviceToHost));
            if (var != 0)
                for (size_t i = 0; i < ref.size(); i++)
                    diff[var] = std::max(diff[var], std::isnan(got[i]) ? 1e30 : double(std::fabs(got[i] - ref[i])));
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            std::vector<float> t;
            for (int r = 0; r < 10; r++) {
                cudaEventRecord(e0);
                for (int c = 0; c < copies; c++) run(c);
                cudaEventRecord(e1);
                cudaEventSynchronize(e1);
                float ms;
                cudaEventElapsedTime(&ms, e0, e1);
                t.push_back(ms / copies);
            }
            CKH(cudaGetLastError());
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
            std::sort(t.begin(), t.end());
            tf[var] = 2.0 * s.n * double(s.m) * s.k / (t[t.size() / 2] * 1e-3) * 1e-12;
        }
        wgmma_args pa{nullptr, nullptr, nullptr, nullptr, 0, 0, 0, s.n, 0, s.m, s.k, 1, 1, 1.0f, true};
        pa.part = part, pa.part_bytes = part_bytes, pa.counters = counters, pa.n_counters = n_counters;
        const wq_choice ch = wq_plan(pa, s.m, n_sm, wq_ties_to_64<D>);
        std::printf("%6d %6d %6d %8.1f %8.1f %8.1f %10.1f %8.1f %8.1f  BM %d, split from row tile %d in %d"
                    "   max |x - old| %.3g %.3g %.3g %.3g %.3g\n",
                    s.n, s.m, s.k, tf[0], tf[1], tf[2], tf[3], tf[4], tf[5], ch.bm, ch.ksplit > 1 ? ch.split_y0 : -1,
                    ch.ksplit, diff[1], diff[2], diff[3], diff[4], diff[5]);
        if (arena)
            cudaFree(big);
        else
            for (int c = 0; c < copies; c++) {
                cudaFree(dq[c]);
                cudaFree(ds[c]);
            }
        cudaFree(dx);
        cudaFree(dy);
    }
    cudaFree(part);
    cudaFree(counters);
    return 0;
}

// arguments: the format (q4_0, the default, q8_0, nvfp4 or mxfp4), then optionally `arena`
int main(int argc, char** argv) {
    const std::string fmt = argc > 1 ? argv[1] : "q4_0";
    const bool arena = argc > 2 && std::string(argv[2]) == "arena";
    std::printf("%s, weights %s\n", fmt.c_str(), arena ? "in one arena" : "in separate allocations");
    if (fmt == "q4_0") return run_format<cuda_format<q4_0>>(arena);
    if (fmt == "q8_0") return run_format<cuda_format<q8_0>>(arena);
    if (fmt == "nvfp4") return run_format<cuda_format<nvfp4>>(arena);
    if (fmt == "mxfp4") return run_format<cuda_format<mxfp4>>(arena);
    std::printf("error: format %s (q4_0, q8_0, nvfp4 or mxfp4)\n", fmt.c_str());
    return 1;
}
