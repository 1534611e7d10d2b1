// ws_q4_proto.cu: a standalone warp-specialized q4_0 x f16 GEMM on Hopper's wgmma (sm_90a), to see what the prefill
// GEMM (ops/gemm_wgmma.cu) would gain from (1) tiles of 256 activation columns, so that a weight row is dequantized once
// per 256 columns rather than per 128 (half the dequantization a FLOP), and (2) a producer warpgroup that does all the
// loading and dequantizing while one or two consumer warpgroups only issue wgmma, one CTA an SM with 4-5 stages.
//   C (n rows, m columns, f32, column j at C + j n) = W (n x k, q4_0 in the split layout) X^T (X: m x k f16)
// W: chunks [n][k / 32][16 bytes] (byte b: value b in the low nibble, value b + 16 in the high one), scales [n][k / 32]
// f16; a value is (q - 8) d, rounded to f16 as gemm_wgmma.cu's dequantization.
// CTA: warpgroup 0 produces (16-byte cp.async of the activation tile, the weights' chunks into registers R steps
// ahead, dequantized into the 128-byte swizzle of the stage), warpgroups 1 .. BM / 64 multiply 64 weight rows x 256
// columns each (wgmma m64n256k16, 128 f32 accumulators a thread). Stages pass between them through mbarriers: `full`
// (128 producer arrivals, each LAG steps after the thread's cp.async group, after fence.proxy.async) and `empty` (one
// arrival per consumer thread, once its wgmma on the stage has finished).
// A 64 x 256 variant with two producer warpgroups taking turns by step (NP = 2): H100, 2026-11-28, TFLOP/s at the
// shapes below, two rounds: 486-487 / 384-385 / 436 / 494-495 / 515-516 vs one producer's 455-456 / 361-363 / 416 /
// 471-473 / 492-493 (cuBLAS f16 633-753); gemm_wgmma.cu took it.
// A persistent variant, CTAs over 64 x 256 tiles with two consumer warpgroups taking turns (ping-pong) and the
// activations by TMA, measured no faster than 64 x 256 (H200, 2026-11-28: 487 / 387 / 450 / 515 / 530 vs 489 / 381 /
// 439 / 501 / 531 TFLOP/s on the shapes below) and was deleted (git log).
// Build: nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a ws_q4_proto.cu -lcublas -o ws_q4_proto
// Run:   ./ws_q4_proto   (each shape checked against a CUDA-core reference (NMSE), then TFLOP/s of the two tilings,
//        the two-producer one and cuBLAS's f16 GEMM on the same shape; weights in enough copies to stream from HBM)
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "proto_check.cuh"
#include "proto_ptx.cuh"

constexpr int BK = 64, BN = 256, LAG = 2, R = 4; // k a step; columns a tile; producer lag; weight steps in registers

template <int BM, int NP = 1> struct cfg {
    static constexpr int NC = BM / 64, THREADS = 128 * (NC + NP);
    static constexpr int A_BYTES = BM * 128, B_BYTES = BN * 128, ST = BM == 64 ? 5 : 4;
    // a producer completes its step LAGP of its own steps after issuing it, and waits for the stage of step s - ST to
    // be released, which the consumer does once step s - ST + 1 is complete: ST >= NP (LAGP + 1) + 1, else deadlock
    static constexpr int LAGP = NP == 1 ? LAG : 1;
    static_assert(ST >= NP * (LAGP + 1) + 1, "stages for the producers' lag");
    static constexpr size_t SMEM = size_t(ST) * (A_BYTES + B_BYTES) + 2 * ST * 8 + 1024;
};

#define R8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t da, uint64_t db) {
    asm volatile("{\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, "
                 "%22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, "
                 "%42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, "
                 "%62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, "
                 "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, "
                 "%102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, "
                 "%119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, 1, 1, 1, 0, 0;\n"
                 "}\n"
                 : R8(0), R8(8), R8(16), R8(24), R8(32), R8(40), R8(48), R8(56), R8(64), R8(72), R8(80), R8(88), R8(96),
                   R8(104), R8(112), R8(120)
                 : "l"(da), "l"(db));
}
#undef R8

// 8 nibbles of word w (bytes 4 j .. 4 j + 3 of a chunk) -> values 4 j .. 4 j + 3 (lo) and 16 + 4 j .. (hi) as f16
// pairs: (1024 + q) by the exponent trick, minus 1032, times d
__device__ __forceinline__ void dq_word(uint32_t w, __half2 d2, __half2 (&lo)[2], __half2 (&hi)[2]) {
    const uint32_t p = __byte_perm(w, 0, 0x3120); // bytes 0 2 1 3: byte 0's and 1's low nibbles at bits 0 and 16
    const __half2 bias = __halves2half2(__ushort_as_half(0x6408), __ushort_as_half(0x6408)); // 1032
    auto cv = [&](uint32_t v) {
        const uint32_t h = (v & 0x000F000Fu) | 0x64006400u;
        return __hmul2(__hsub2(*reinterpret_cast<const __half2*>(&h), bias), d2);
    };
    lo[0] = cv(p), lo[1] = cv(p >> 8), hi[0] = cv(p >> 4), hi[1] = cv(p >> 12);
}

// chunk q (scale d) of weight row `row` dequantized into 32 halves at pieces ci * 4 .. ci * 4 + 3 of the row's
// 128-byte swizzle in the A stage at `ast`
__device__ __forceinline__ void dq_chunk_to_stage(const uint4& q, __half d, uint8_t* ast, int row, int ci) {
    const __half2 d2 = __half2half2(d);
    const uint32_t w4[4] = {q.x, q.y, q.z, q.w};
    __half2 v[16]; // values 0..31 of the chunk in order
#pragma unroll
    for (int t = 0; t < 4; t++) {
        __half2 lo[2], hi[2];
        dq_word(w4[t], d2, lo, hi);
        v[2 * t] = lo[0], v[2 * t + 1] = lo[1], v[8 + 2 * t] = hi[0], v[8 + 2 * t + 1] = hi[1];
    }
    uint8_t* rp = ast + row * 128;
#pragma unroll
    for (int c = 0; c < 4; c++)
        *reinterpret_cast<uint4*>(rp + (((ci * 4 + c) ^ (row & 7)) << 4)) = *reinterpret_cast<const uint4*>(&v[4 * c]);
}

// NP producer warpgroups: producer g takes steps g, g + NP, ... (each its own pipeline of R register sets and LAG)
template <int BM, int NP = 1>
__global__ void __launch_bounds__(cfg<BM, NP>::THREADS, 1)
    ws_q4_gemm(const uint4* wq, const __half* wd, const __half* X, float* C, int n, int m, int k) {
    using K = cfg<BM, NP>;
    constexpr int ST = K::ST;
    extern __shared__ __align__(1024) uint8_t smem_raw[];
    const uint32_t raw = smem_addr(smem_raw), base = (raw + 1023) & ~1023u;
    uint8_t* const sm = smem_raw + (base - raw);
    const uint32_t sA = base, sB = base + ST * K::A_BYTES, bars = sB + ST * K::B_BYTES;
    auto full = [&](int s) { return bars + 8 * s; };
    auto empty = [&](int s) { return bars + 8 * (ST + s); };
    const int tid = threadIdx.x, wg = tid / 128;
    const int64_t row0 = int64_t(blockIdx.y) * BM, col0 = int64_t(blockIdx.x) * BN;
    const int nb = k / 32, steps = k / BK;
    if (tid == 0) {
        for (int s = 0; s < ST; s++) {
            mbar_init(full(s), 128);
            mbar_init(empty(s), 128 * K::NC);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (wg < NP) {
        // producer: activation pieces p + 128 i (row p / 8 + 16 i, piece p % 8); weight items p + 128 j (row
        // (p + 128 j) / 2, chunk (p + 128 j) % 2 of the step)
        const int p = tid % 128, pc = p % 8;
        const int my = (steps - wg + NP - 1) / NP; // this producer's steps wg + NP i
        auto step_of = [&](int i) { return wg + NP * i; };
        constexpr int WI = BM / 64; // weight chunks a thread a step
        const uint4* wrow[WI];
        const __half* drow[WI];
        int wr[WI];
#pragma unroll
        for (int j = 0; j < WI; j++) {
            wr[j] = (p + 128 * j) / 2;
            wrow[j] = wq + (row0 + wr[j]) * nb + (p % 2);
            drow[j] = wd + (row0 + wr[j]) * nb + (p % 2);
        }
        uint4 q[R][WI];
        __half dd[R][WI];
        auto load_w = [&](int i, int r) {
            const int s = step_of(i);
            if (i < my)
#pragma unroll
                for (int j = 0; j < WI; j++) {
                    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                                 : "=r"(q[r][j].x), "=r"(q[r][j].y), "=r"(q[r][j].z), "=r"(q[r][j].w)
                                 : "l"(wrow[j] + 2 * s));
                    dd[r][j] = drow[j][2 * s];
                }
        };
        auto complete = [&](int i) {
            asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
            mbar_arrive(full(step_of(i) % ST));
        };
#pragma unroll
        for (int r = 0; r < R; r++) load_w(r, r);
        for (int i0 = 0; i0 < my; i0 += R) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const int i = i0 + r, s = step_of(i);
                if (i >= my) break;
                const int stage = s % ST;
                if (s >= ST) mbar_wait(empty(stage), unsigned((s / ST + 1) & 1));
                const uint32_t xst = sB + stage * K::B_BYTES;
#pragma unroll
                for (int i = 0; i < BN / 16; i++) {
                    const int row = p / 8 + 16 * i;
                    cp_async16(xst + row * 128 + ((pc ^ (row & 7)) << 4), X + (col0 + row) * k + int64_t(s) * BK + pc * 8);
                }
                cp_async_commit();
                uint8_t* ast = sm + stage * K::A_BYTES;
#pragma unroll
                for (int j = 0; j < WI; j++) dq_chunk_to_stage(q[r][j], dd[r][j], ast, wr[j], p % 2);
                load_w(i + R, r);
                if (i >= K::LAGP) {
                    cp_async_wait<K::LAGP>();
                    complete(i - K::LAGP);
                }
            }
        }
        asm volatile("cp.async.wait_all;\n" ::: "memory");
        for (int i = my > K::LAGP ? my - K::LAGP : 0; i < my; i++) complete(i);
        return;
    }

    // consumers: warpgroup c multiplies weight rows 64 c .. 64 c + 63 of the tile by its 256 columns
    const int c = wg - NP;
    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    for (int s = 0; s < steps; s++) {
        const int stage = s % ST;
        mbar_wait(full(stage), unsigned((s / ST) & 1));
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
            wgmma_m64n256k16(d, desc(sA + stage * K::A_BYTES + c * 64 * 128 + kk * 32),
                             desc(sB + stage * K::B_BYTES + kk * 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        if (s > 0) mbar_arrive(empty((s - 1) % ST));
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    store_fragment<BN>(d, C, n, row0 + c * 64, col0);
}

// reference: the same f16 values, f32 sums on CUDA cores
__global__ void gemm_ref(const uint4* wq, const __half* wd, const __half* X, float* C, int n, int m, int k) {
    const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, col = blockIdx.y;
    if (r >= n) return;
    const int nb = k / 32;
    float s = 0.0f;
    for (int b = 0; b < nb; b++) {
        const uint4 q = wq[r * nb + b];
        const float d = __half2float(wd[r * nb + b]);
        const uint8_t* by = reinterpret_cast<const uint8_t*>(&q);
        for (int i = 0; i < 32; i++) {
            const int v = i < 16 ? by[i] & 15 : by[i - 16] >> 4;
            const float w = __half2float(__float2half_rn(float(v - 8) * d));
            s = fmaf(w, __half2float(X[col * k + b * 32 + i]), s);
        }
    }
    C[col * n + r] = s;
}

int main() {
    CK(cudaFuncSetAttribute(ws_q4_gemm<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(cfg<64>::SMEM)));
    CK(cudaFuncSetAttribute(ws_q4_gemm<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(cfg<128>::SMEM)));
    CK(cudaFuncSetAttribute(ws_q4_gemm<64, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(cfg<64, 2>::SMEM)));
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
    struct shape { int n, m, k; };
    std::printf("%6s %6s %6s %12s %12s %12s %12s %12s\n", "n", "m", "k", "64x256", "128x256", "64x256 2P", "cuBLAS f16",
                "NMSE 64/128/2P");
    for (shape s : {shape{4096, 512, 4096}, shape{6144, 512, 4096}, shape{14336, 512, 4096}, shape{28672, 512, 4096},
                    shape{4096, 512, 14336}}) {
        const int nb = s.k / 32;
        const size_t wbytes = size_t(s.n) * nb * 18;
        const int copies = int(std::max<size_t>(2, (160u << 20) / wbytes + 1));
        std::vector<uint4> wq(size_t(s.n) * nb);
        std::vector<__half> wd(size_t(s.n) * nb), x(size_t(s.m) * s.k);
        uint32_t st = 12345;
        auto rnd = [&] { st = st * 1664525u + 1013904223u; return st; };
        for (auto& v : wq) v = make_uint4(rnd(), rnd(), rnd(), rnd());
        for (auto& v : wd) v = __float2half(float(rnd() >> 8) / float(1 << 24) * 0.02f + 0.001f);
        for (auto& v : x) v = __float2half(float(rnd() >> 8) / float(1 << 24) * 2.0f - 1.0f);
        std::vector<uint4*> dq(copies);
        std::vector<__half*> dd(copies);
        for (int c = 0; c < copies; c++) {
            CK(cudaMalloc(&dq[c], wq.size() * 16));
            CK(cudaMalloc(&dd[c], wd.size() * 2));
            CK(cudaMemcpy(dq[c], wq.data(), wq.size() * 16, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dd[c], wd.data(), wd.size() * 2, cudaMemcpyHostToDevice));
        }
        __half *dx, *dwh;
        float *dc, *dr;
        CK(cudaMalloc(&dx, x.size() * 2));
        CK(cudaMalloc(&dc, size_t(s.n) * s.m * 4));
        CK(cudaMalloc(&dr, size_t(s.n) * s.m * 4));
        CK(cudaMalloc(&dwh, size_t(s.n) * s.k * 2));
        CK(cudaMemset(dwh, 0x3c, size_t(s.n) * s.k * 2));
        CK(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
        gemm_ref<<<dim3((s.n + 255) / 256, s.m), 256>>>(dq[0], dd[0], dx, dr, s.n, s.m, s.k);
        CK(cudaGetLastError());
        std::vector<float> ref(size_t(s.n) * s.m), got(ref.size());
        CK(cudaMemcpy(ref.data(), dr, ref.size() * 4, cudaMemcpyDeviceToHost));
        auto run = [&](int var, int c) {
            if (var == 0)
                ws_q4_gemm<64><<<dim3(s.m / BN, s.n / 64), cfg<64>::THREADS, cfg<64>::SMEM>>>(dq[c], dd[c], dx, dc, s.n,
                                                                                            s.m, s.k);
            else if (var == 1)
                ws_q4_gemm<128><<<dim3(s.m / BN, s.n / 128), cfg<128>::THREADS, cfg<128>::SMEM>>>(dq[c], dd[c], dx, dc,
                                                                                                s.n, s.m, s.k);
            else if (var == 3)
                ws_q4_gemm<64, 2><<<dim3(s.m / BN, s.n / 64), cfg<64, 2>::THREADS, cfg<64, 2>::SMEM>>>(
                    dq[c], dd[c], dx, dc, s.n, s.m, s.k);
            else {
                const float one = 1.0f, zero = 0.0f;
                if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.n, s.m, s.k, &one, dwh, CUDA_R_16F, s.k, dx, CUDA_R_16F,
                                 s.k, &zero, dc, CUDA_R_32F, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) !=
                    CUBLAS_STATUS_SUCCESS)
                    std::exit(1);
            }
        };
        double tf[4], err[4];
        for (int var : {0, 1, 2, 3}) {
            if (var != 2) {
                CK(cudaMemset(dc, 0xff, size_t(s.n) * s.m * 4)); // NaN: every output must be written
                run(var, 0);
                CK(cudaGetLastError());
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(got.data(), dc, got.size() * 4, cudaMemcpyDeviceToHost));
                double num = 0, den = 0;
                for (size_t i = 0; i < got.size(); i++) {
                    const double e = double(got[i]) - ref[i];
                    num += std::isfinite(got[i]) ? e * e : 1e30;
                    den += double(ref[i]) * ref[i];
                }
                err[var] = num / den;
            }
            cudaEvent_t e0, e1;
            CK(cudaEventCreate(&e0));
            CK(cudaEventCreate(&e1));
            std::vector<float> times;
            for (int rep = 0; rep < 15; rep++) {
                CK(cudaEventRecord(e0));
                for (int c = 0; c < copies; c++) run(var, c);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                float ms;
                CK(cudaEventElapsedTime(&ms, e0, e1));
                times.push_back(ms / float(copies));
            }
            CK(cudaGetLastError());
            std::sort(times.begin(), times.end());
            tf[var] = 2.0 * s.n * s.m * double(s.k) / (1e-3 * times[times.size() / 2]) * 1e-12;
            CK(cudaEventDestroy(e0));
            CK(cudaEventDestroy(e1));
            std::printf("  variant %d done: %.1f TFLOP/s\n", var, tf[var]);
        }
        std::printf("%6d %6d %6d %12.1f %12.1f %12.1f %12.1f %7.2g/%.2g/%.2g\n", s.n, s.m, s.k, tf[0], tf[1], tf[3], tf[2],
                    err[0], err[1], err[3]);
        for (int c = 0; c < copies; c++) {
            CK(cudaFree(dq[c]));
            CK(cudaFree(dd[c]));
        }
        CK(cudaFree(dx));
        CK(cudaFree(dc));
        CK(cudaFree(dr));
        CK(cudaFree(dwh));
    }
    cublasDestroy(h);
    return 0;
}
