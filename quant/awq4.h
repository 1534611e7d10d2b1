// awq4.h: AWQ int4 (tessera's own type; ggml has none): asymmetric 4-bit codes in groups of G along the input
// dimension (a row), an f16 scale s and an integer zero point z per group. x = s * (q - z), exactly, q and z in 0..15.
// G = 128 (awq4, type 1024): 68 bytes, 4.25 bits per weight; G = 64 (awq4_g64, type 1025): 36 bytes, 4.5 bits.
// Bytes: s f16 @0, z u8 @2, a zero pad byte @3, then G/8 little-endian u32 words @4 (4-byte aligned).
// Element order (AutoAWQ's packing, FORMATS.md §3): word c covers elements 8c .. 8c+7; nibble slot i (bits 4i..4i+3)
// holds element 8c + ORDER[i], ORDER = {0,2,4,6,1,3,5,7}; i.e. byte 4c+0 = e0 | e2<<4, +1 = e4 | e6<<4,
// +2 = e1 | e3<<4, +3 = e5 | e7<<4. The GPU's LOP3 magic-number decode (mask 0x000f000f, then the word >> 8 ...)
// then yields halves in natural order (e0,e1), (e2,e3), ...
// Quantize (AutoAWQ): s = max(max - min, 1e-5) / 15 (rounded to f16, and the codes use the rounded s so that the
// stored s and z reproduce grid values exactly), z = clamp(-round(min / s), 0, 15), q = clamp(round(x / s) + z, 0, 15),
// round = half to even as torch.round.
#pragma once

#include "quant/q8_1.h"

#include <algorithm>

namespace tessera {

// nibble slot of element 8c + t inside word c: {0,4,1,5,2,6,3,7}[t], the inverse of ORDER = {0,2,4,6,1,3,5,7}
TS_HD int awq_slot(int t) { return (t >> 1) | ((t & 1) << 2); }

template <int G> struct block_awq4 {
    f16 s;               // scale
    uint8_t z;           // zero point, 0..15
    uint8_t pad;         // 0
    uint32_t qs[G / 8];  // word c: slot i (bits 4i..4i+3) = element 8c + ORDER[i]
};
static_assert(sizeof(block_awq4<128>) == 68, "awq4 block: f16 s, u8 z, pad, 64 bytes of words");
static_assert(sizeof(block_awq4<64>) == 36, "awq4_g64 block: f16 s, u8 z, pad, 32 bytes of words");

// G/32 q8_1 blocks: the activations of one awq4 group
template <int G> struct block_q8_1xn {
    block_q8_1 b[G / 32];
};
static_assert(sizeof(block_q8_1xn<128>) == 4 * sizeof(block_q8_1), "a row of q8_1 blocks must read as groups of 4");

template <int G, type Id> struct awq4_format {
    static_assert(G % 32 == 0, "a group must cover whole q8_1 blocks (the dot partner)");
    using block = block_awq4<G>;
    using dot_block = block_q8_1xn<G>;
    static constexpr type id = Id;
    static constexpr int block_size = G;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_1; // dot_block is G/32 of these

    TS_HD static int code(const block& b, int j) { return int(b.qs[j / 8] >> (4 * awq_slot(j % 8))) & 0xf; }

    static void quantize(const float* x, block& y) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < G; j++) {
            mn = std::min(mn, x[j]);
            mx = std::max(mx, x[j]);
        }
        const float s = to_f32(to_f16(std::max(mx - mn, 1e-5f) / 15.0f));
        const float z = std::clamp(-std::nearbyint(mn / s), 0.0f, 15.0f);
        y.s = to_f16(s);
        y.z = uint8_t(z);
        y.pad = 0;
        for (int c = 0; c < G / 8; c++) {
            uint32_t w = 0;
            for (int t = 0; t < 8; t++) {
                const float q = std::clamp(std::nearbyint(x[8 * c + t] / s) + z, 0.0f, 15.0f);
                w |= uint32_t(q) << (4 * awq_slot(t));
            }
            y.qs[c] = w;
        }
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float s = to_f32(b.s);
        for (int j = 0; j < G; j++) y[j] = s * float(code(b, j) - int(b.z));
    }
    // sum_j s (q_j - z) d8 q8_j = s * sum_b d8_b * I_b with the exact integers I_b = sum over q8_1 block b of
    // (q - z) q8 (the q8_1 `s` term, rounded to f16, is not needed: the zero point stays in the integers)
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        float dot = 0.0f;
        for (int i = 0; i < G / 32; i++) {
            int32_t sumi = 0;
            for (int j = 0; j < 32; j++) sumi += (code(w, 32 * i + j) - int(w.z)) * int32_t(a.b[i].qs[j]);
            dot += to_f32(a.b[i].d) * float(sumi);
        }
        return to_f32(w.s) * dot;
    }
};

struct awq4 : awq4_format<128, type::awq4> {
    static constexpr const char* name = "awq4";
};
struct awq4_g64 : awq4_format<64, type::awq4_g64> {
    static constexpr const char* name = "awq4_g64";
};

} // namespace tessera
