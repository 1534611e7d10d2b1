// vec_dot_vnni.cpp: vec_dot_avx2.cpp compiled with AVX-512 VNNI + VL (namespace avx512vnni): the byte dots use
// vpdpbusd. Selected at run time when the CPU has them (cpu_has_avx512vnni); same results as the AVX2 build.
#define TS_SIMD_NS avx512vnni
#include "backends/cpu/quant/vec_dot_avx2.cpp"
