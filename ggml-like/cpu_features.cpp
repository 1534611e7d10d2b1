// cpu_features.cpp: the CPUID checks of cpu_features.h.
#include "ggml-like/cpu_features.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tessera::cpu {

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
    // CPUID leaf 1: ECX bit 12 FMA, bit 29 F16C; leaf 7: EBX bit 5 AVX2 (clang 14 has no "f16c" in
    // __builtin_cpu_supports, so we ask the CPU directly)
    static const bool has = [] {
        unsigned a, b, c, d;
        if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
        const bool fma = (c >> 12) & 1, f16c = (c >> 29) & 1, osxsave = (c >> 27) & 1;
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
        return fma && f16c && osxsave && ((b >> 5) & 1);
    }();
    return has;
#else
    return false;
#endif
}

bool cpu_has_avx512vnni() {
#if defined(__x86_64__) || defined(__i386__)
    // leaf 7: EBX bit 16 AVX512F, bit 30 AVX512BW, bit 31 AVX512VL; ECX bit 11 AVX512_VNNI; and the OS saves ZMM state
    static const bool has = [] {
        unsigned a, b, c, d;
        if (!cpu_has_avx2() || !__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
        const bool feats = ((b >> 16) & 1) && ((b >> 30) & 1) && ((b >> 31) & 1) && ((c >> 11) & 1);
        unsigned lo, hi;
        __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        return feats && (lo & 0xe6) == 0xe6;
    }();
    return has;
#else
    return false;
#endif
}

bool cpu_has_avx512bf16() {
#if defined(__x86_64__) || defined(__i386__)
    // leaf 7 sub-leaf 1: EAX bit 5 AVX512_BF16 (vdpbf16ps), on top of cpu_has_avx512vnni's features
    static const bool has = [] {
        unsigned a, b, c, d;
        return cpu_has_avx512vnni() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 5) & 1);
    }();
    return has;
#else
    return false;
#endif
}

} // namespace tessera::cpu
