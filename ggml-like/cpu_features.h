// cpu_features.h: what the host CPU offers, asked once by CPUID (and XGETBV for the AVX-512 state). The CPU backend
// picks its kernels by these; the CUDA backend's exact mode asks them too, to follow the order the CPU's bf16 kernels
// sum in (backends/cpu/quant/float16.h).
#pragma once

namespace tessera::cpu {

bool cpu_has_avx2();       // AVX2 + FMA + F16C
bool cpu_has_avx512vnni(); // AVX-512 F/BW/VL + VNNI: the byte dots use vpdpbusd
bool cpu_has_avx512bf16(); // and AVX512_BF16: bf16 mul_mat through vdpbf16ps, as llama.cpp built for such a CPU

} // namespace tessera::cpu
