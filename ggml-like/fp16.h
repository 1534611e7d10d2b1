// fp16.h: conversions between f32 and the small float formats of the block formats (f16, bf16, ue4m3), usable on host
// and device (TS_HD). Bit-exact with IEEE binary16 round-to-nearest-even, as F16C and ggml do.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define TS_HD __host__ __device__ __forceinline__
#else
#define TS_HD inline
#endif

namespace tessera {

// IEEE binary16, stored as its bits (the block structs hold raw bits so they are the bytes on disk).
struct f16 {
    uint16_t bits;
};
// bfloat16: the top half of an f32.
struct bf16 {
    uint16_t bits;
};

TS_HD float f32_from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
TS_HD uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

// binary16 -> f32, exact (normals, subnormals, inf, nan).
TS_HD float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    const uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0) return f32_from_bits(sign);
        // subnormal: man * 2^-24
        float v = float(man) * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

// f32 -> binary16 with round-to-nearest-even; overflow -> inf, nan stays nan.
TS_HD uint16_t fp32_to_fp16(float f) {
    const uint32_t x = f32_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return uint16_t(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00); // rounds to >= 65520 -> inf
    if (ax < 0x38800000u) {
        // result is subnormal (or zero): value / 2^-24 rounded to nearest even
        if (ax < 0x33000000u) return uint16_t(sign); // < 2^-25 rounds to zero
        const uint32_t e = ax >> 23;
        const uint32_t m = (ax & 0x7fffff) | 0x800000;
        const uint32_t shift = 126 - e; // 14..24
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return uint16_t(sign | r);
    }
    uint32_t r = ((ax >> 13) - (112u << 10));
    const uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
    return uint16_t(sign | r);
}

TS_HD float to_f32(f16 h) { return fp16_to_fp32(h.bits); }
TS_HD f16 to_f16(float f) { return f16{fp32_to_fp16(f)}; }

// bf16: ggml rounds to nearest-even and turns a nan into a quiet nan.
TS_HD float bf16_to_fp32(uint16_t b) { return f32_from_bits(uint32_t(b) << 16); }
TS_HD uint16_t fp32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 64); // quiet nan
    return uint16_t((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}
TS_HD float to_f32(bf16 b) { return bf16_to_fp32(b.bits); }
TS_HD bf16 to_bf16(float f) { return bf16{fp32_to_bf16(f)}; }

// UE4M3 (NVFP4 sub-scale): exponent bits 6..3 (bias 7), mantissa bits 2..0; e = 0: m * 2^-9, else (1 + m/8) * 2^(e-7);
// 0x7f (NaN) reads as 0, max finite 0x7e = 448. Both helpers follow ggml so values agree with llama.cpp exactly.
// ue4m3_to_fp32_half returns HALF the value (ggml's convention: it pairs with the doubled E2M1 table); bit 7 is
// ignored, as in ggml (only 0x7f, not 0xff, reads as 0).
TS_HD float ue4m3_to_fp32_half(uint8_t x) {
    if (x == 0 || x == 0x7f) return 0.0f;
    const int e = (x >> 3) & 0xf, m = x & 7;
    // half of m * 2^-9 = m * 2^-10; half of (8 + m) * 2^(e-10) = (8 + m) * 2^(e-11), a normal float: exact
    return e == 0 ? float(m) * 0x1p-10f : float(8 + m) * f32_from_bits(uint32_t(e - 11 + 127) << 23);
}
// f32 -> UE4M3 (ggml's encoder): 0 for x <= 0 or NaN, saturates at 448 (0x7e); the mantissa is rounded with one round
// bit (ties away from zero, not to even); below 2^-6 the subnormal code is round(x * 512), clamped to 7. Like ggml it
// sends every x >= 256 to 0x7e (codes 0x78..0x7d are never produced): only blocks with amax >= 1536 notice.
TS_HD uint8_t fp32_to_ue4m3(float x) {
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    const uint32_t bits = f32_bits(x);
    int e = int((bits >> 23) & 0xff) - 127 + 7;
    if (e <= 0) {
        const int m = int(x * 512.0f + 0.5f);
        return m < 1 ? 0 : uint8_t(m > 7 ? 7 : m);
    }
    if (e >= 15) return 0x7e;
    int m = int((bits >> 20) & 7) + int((bits >> 19) & 1);
    if (m > 7) {
        m = 0;
        if (++e >= 15) return 0x7e;
    }
    return uint8_t((e << 3) | m);
}

} // namespace tessera
