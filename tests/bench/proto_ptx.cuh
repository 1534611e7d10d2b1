// proto_ptx.cuh: the PTX wrappers the standalone wgmma prototypes share (wgmma_proto.cu, ws_q4_proto.cu; they build
// without the project's headers): cp.async, the shared-memory matrix descriptor of wgmma's 128-byte swizzle,
// mbarrier init / arrive / wait, and the store of a warpgroup's accumulators.
#pragma once

#include <cstdint>

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// shared-memory matrix descriptor: start >> 4, leading byte offset 16 >> 4 (unused with K-major swizzle), stride byte
// offset 1024 >> 4 (8-row groups), 128-byte swizzle
__device__ __forceinline__ uint64_t desc(uint32_t addr) {
    return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t(16 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
// until the phase of parity `parity` of the barrier has completed
__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity) {
    asm volatile("{\n.reg .pred p;\nWAIT:\nmbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

// A warpgroup's wgmma accumulators (64 rows from row0 x N columns from col0, f32) into C (column j at C + j n). The
// fragment: warp w of the warpgroup holds rows 16 w .. 16 w + 15; register 4 j + e is row lane / 4 + 8 (e / 2),
// column 8 j + 2 (lane % 4) + e % 2.
template <int N>
__device__ __forceinline__ void store_fragment(const float (&d)[N / 2], float* C, int64_t n, int64_t row0, int64_t col0) {
    const int w = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        const int j = i / 4, e = i % 4;
        const int64_t r = row0 + w * 16 + lane / 4 + 8 * (e / 2);
        const int64_t c = col0 + j * 8 + 2 * (lane % 4) + (e % 2);
        C[c * n + r] = d[i];
    }
}
