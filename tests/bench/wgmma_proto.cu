// wgmma_proto.cu: a standalone plain f16 GEMM on Hopper's warpgroup MMA (wgmma, sm_90a): the ceiling of the pipeline
// ops/gemm_wgmma.cu uses, without any dequantization, in four variants (stages 4 or 6; wgmma.wait_group 0 after each
// step with the loads issued before the wgmma, or wait_group 1 with them issued while it runs).
//   C (n rows, m columns, f32, column j at C + j * n) = W (n x k f16, K-major) X^T (X: m x k f16, K-major)
// 128 x 128 tiles, two warpgroups of 64 rows each, 64-element k steps (one 128-byte swizzle row) through cp.async
// stages written in the 128-byte swizzle (16-byte chunk c of row r at r * 128 + ((c ^ r % 8) * 16)), then 4 x
// wgmma.mma_async m64n128k16 per stage. Limits: n, m multiples of 128, k of 64.
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a wgmma_proto.cu -o wgmma_proto
// Run:   ./wgmma_proto   (checks each variant against a CUDA-core reference: NMSE; prints TFLOP/s per shape)
// Measured (H100, 2026-11-22), TFLOP/s at m = 512, (n, k) = 4096^2 / (14336, 4096) / (4096, 14336) / 2048^2:
//   stages 4, wait 0: 390 / 335 / 457 / 164     stages 4, wait 1: 376 / 305 / 471 / 210
//   stages 6, wait 1: 485 / 349 / 472 / 205 (gemm_wgmma.cu's choice)     stages 6, wait 0: 406 / 324 / 463 / 164
// cuBLAS f16 on the same shapes: 621-830 (tests/bench/bench_mmv).
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>

#include "proto_check.cuh"
#include "proto_ptx.cuh"

constexpr int BM = 128, BN = 128, BK = 64, THREADS = 256;
constexpr int TILE_BYTES = 128 * BK * 2; // A or B stage: 16 KiB
template <int ST> constexpr size_t SMEM = size_t(ST) * 2 * TILE_BYTES + 1024;

__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t da, uint64_t db) {
    asm volatile("{\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 0;\n"
                 "}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db));
}

template <int ST, int V> __global__ void __launch_bounds__(THREADS, 1) gemm_wgmma(const __half* W, const __half* X, float* C, int n, int m, int k) {
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t base = (smem_addr(smem_raw) + 1023) & ~1023u; // swizzle atoms need 1024-byte alignment
    const uint32_t sA = base, sB = base + ST * TILE_BYTES;
    const int tid = threadIdx.x, wg = tid / 128;
    const int64_t row0 = int64_t(blockIdx.x) * BM, col0 = int64_t(blockIdx.y) * BN;
    const int kt_n = k / BK;

    auto load = [&](int stage, int kt) {
        if (kt < kt_n) {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int p = tid + i * THREADS, r = p / 8, c = p % 8;
                const uint32_t off = uint32_t(r * 128 + ((c ^ (r & 7)) << 4));
                cp_async16(sA + stage * TILE_BYTES + off, W + (row0 + r) * k + kt * BK + c * 8);
                cp_async16(sB + stage * TILE_BYTES + off, X + (col0 + r) * k + kt * BK + c * 8);
            }
        }
        cp_async_commit();
    };
    float d[64];
#pragma unroll
    for (int i = 0; i < 64; i++) d[i] = 0.0f;
    // V 0: the loads of the step ST - 1 ahead go out before the wgmma, which is waited for at once; V 1: ST - 2
    // ahead, issued while the wgmma runs, one step of wgmma left in flight
    constexpr int AH = V == 0 ? ST - 1 : ST - 2;
#pragma unroll
    for (int s = 0; s < AH; s++) load(s, s);
    for (int kt = 0; kt < kt_n; kt++) {
        cp_async_wait<AH - 1>();
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        __syncthreads();
        if constexpr (V == 0) load((kt + AH) % ST, kt + AH);
        const int st = kt % ST;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
            wgmma_m64n128k16(d, desc(sA + st * TILE_BYTES + wg * 64 * 128 + kk * 32), desc(sB + st * TILE_BYTES + kk * 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        if constexpr (V == 0) {
            asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        } else {
            load((kt + AH) % ST, kt + AH);
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        }
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    store_fragment<BN>(d, C, n, row0 + wg * 64, col0);
}

__global__ void gemm_ref(const __half* W, const __half* X, float* C, int n, int m, int k) {
    const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, c = blockIdx.y;
    if (r >= n) return;
    float s = 0.0f;
    for (int i = 0; i < k; i++) s = fmaf(__half2float(W[r * k + i]), __half2float(X[c * k + i]), s);
    C[c * n + r] = s;
}

int main() {
    CK(cudaFuncSetAttribute(gemm_wgmma<4, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(SMEM<4>)));
    CK(cudaFuncSetAttribute(gemm_wgmma<4, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(SMEM<4>)));
    CK(cudaFuncSetAttribute(gemm_wgmma<6, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(SMEM<6>)));
    CK(cudaFuncSetAttribute(gemm_wgmma<6, 0>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(SMEM<6>)));
    for (int var = 0; var < 4; var++) {
    auto run = [&](dim3 grid, const __half* dw, const __half* dx, float* dc, int n, int m, int k) {
        if (var == 0) gemm_wgmma<4, 0><<<grid, THREADS, (SMEM<4>)>>>(dw, dx, dc, n, m, k);
        if (var == 1) gemm_wgmma<4, 1><<<grid, THREADS, (SMEM<4>)>>>(dw, dx, dc, n, m, k);
        if (var == 2) gemm_wgmma<6, 1><<<grid, THREADS, (SMEM<6>)>>>(dw, dx, dc, n, m, k);
        if (var == 3) gemm_wgmma<6, 0><<<grid, THREADS, (SMEM<6>)>>>(dw, dx, dc, n, m, k);
    };
    std::printf("variant %d (%s)\n", var, var == 0 ? "ST4 wait0" : var == 1 ? "ST4 wait1" : var == 2 ? "ST6 wait1" : "ST6 wait0");
    struct shape { int n, m, k; };
    std::printf("%6s %6s %6s %10s %10s %12s\n", "n", "m", "k", "us", "TFLOP/s", "NMSE vs ref");
    for (shape s : {shape{4096, 512, 4096}, shape{14336, 512, 4096}, shape{4096, 512, 14336}, shape{2048, 512, 2048}}) {
        std::vector<__half> w(size_t(s.n) * s.k), x(size_t(s.m) * s.k);
        uint32_t st = 12345;
        auto rnd = [&] { st = st * 1664525u + 1013904223u; return float(st >> 8) / float(1 << 24) * 2.0f - 1.0f; };
        for (auto& v : w) v = __float2half(rnd());
        for (auto& v : x) v = __float2half(rnd());
        __half *dw, *dx;
        float *dc, *dr;
        CK(cudaMalloc(&dw, w.size() * 2));
        CK(cudaMalloc(&dx, x.size() * 2));
        CK(cudaMalloc(&dc, size_t(s.n) * s.m * 4));
        CK(cudaMalloc(&dr, size_t(s.n) * s.m * 4));
        CK(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemset(dc, 0xff, size_t(s.n) * s.m * 4)); // NaN: every output must be written
        gemm_ref<<<dim3((s.n + 255) / 256, s.m), 256>>>(dw, dx, dr, s.n, s.m, s.k);
        const dim3 grid(s.n / BM, s.m / BN);
        run(grid, dw, dx, dc, s.n, s.m, s.k);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        std::vector<float> c(size_t(s.n) * s.m), r(c.size());
        CK(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(r.data(), dr, r.size() * 4, cudaMemcpyDeviceToHost));
        double num = 0, den = 0;
        for (size_t i = 0; i < c.size(); i++) {
            const double e = double(c[i]) - r[i];
            num += std::isfinite(c[i]) ? e * e : 1e30;
            den += double(r[i]) * r[i];
        }
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        std::vector<float> times;
        for (int rep = 0; rep < 21; rep++) {
            CK(cudaEventRecord(e0));
            run(grid, dw, dx, dc, s.n, s.m, s.k);
            CK(cudaEventRecord(e1));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            times.push_back(ms);
        }
        std::sort(times.begin(), times.end());
        const double us = 1e3 * times[times.size() / 2];
        std::printf("%6d %6d %6d %10.1f %10.1f %12.3g\n", s.n, s.m, s.k, us, 2.0 * s.n * s.m * s.k / us * 1e-6, num / den);
        CK(cudaFree(dw));
        CK(cudaFree(dx));
        CK(cudaFree(dc));
        CK(cudaFree(dr));
    }
    }
    return 0;
}
