// repack_x16_vnni.cpp: repack_x16.cpp compiled with AVX-512 VNNI (namespace avx512vnni): 16-lane vectors and vpdpbusd.
// Selected at run time when the CPU has them (cpu_has_avx512vnni); same results as the AVX2 build.
#define TS_SIMD_NS avx512vnni
#include "backends/cpu/quant/repack_x16.cpp"
