// iq4_xs.h: ggml's IQ4_XS, super-blocks of 256 values in 8 sub-blocks of 32, each value a 4-bit index into IQ4_NL's
// level table (iq4_nl.h), each sub-block a signed 6-bit scale against one f16 d; 136 bytes, 4.25 bits per weight.
// x = d (ls_s - 32) iq4_levels[q], ls_s = 0..63: its low 4 bits in scales_l[s / 2] (low nibble for even s, high for
// odd), its high 2 bits in bits 2s, 2s + 1 of scales_h. Sub-block s's 16 index bytes qs[16s ..] hold elements 32s + j
// (low nibble) and 32s + 16 + j (high), as q4_0's block. The dot partner is q8_K, as ggml's CPU.
// Quantize (ggml's quantize_iq4_xs without an importance matrix): each sub-block's scale by IQ4_NL's search; d = -(the
// scale of largest magnitude) / 32; each scale rounded to ls - 32 = nearest(scale / d) in [-32, 31]; the indices
// taken again against d (ls - 32) with d as computed, before its f16 rounding.
#pragma once

#include "quant/iq4_nl.h"
#include "quant/q8_k.h"

#include <algorithm>
#include <cstring>

namespace tessera {

struct block_iq4_xs {
    f16 d;               // super-scale
    uint16_t scales_h;   // high 2 bits of the 8 scale codes
    uint8_t scales_l[4]; // low 4 bits of the 8 scale codes
    uint8_t qs[128];     // level indices, 16 bytes a sub-block
};
static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs block must match GGUF (f16 d, u16 scales_h, 4 scales_l, 128 qs)");

struct iq4_xs {
    using block = block_iq4_xs;
    using dot_block = block_q8_k; // ggml's CPU dot partner for IQ4_XS
    static constexpr type id = type::iq4_xs;
    static constexpr const char* name = "iq4_xs";
    static constexpr int block_size = 256;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_k;

    // sub-block s's scale, -32..31
    TS_HD static int scale(const block& b, int s) {
        return (((b.scales_l[s / 2] >> (4 * (s % 2))) & 0xf) | (((b.scales_h >> (2 * s)) & 3) << 4)) - 32;
    }

    static void quantize(const float* x, block& y) {
        float sc[8], max_scale = 0.0f, amax = 0.0f;
        for (int s = 0; s < 8; s++) {
            sc[s] = iq4::search_scale(x + 32 * s);
            if (std::fabs(sc[s]) > amax) {
                amax = std::fabs(sc[s]);
                max_scale = sc[s];
            }
        }
        const float d = -max_scale / 32.0f;
        y.d = to_f16(d);
        y.scales_h = 0;
        std::memset(y.scales_l, 0, 4);
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int s = 0; s < 8; s++) {
            const int l = std::clamp(nearest_int_ggml(id * sc[s]), -32, 31);
            iq4::pack_indices(x + 32 * s, d * float(l), y.qs + 16 * s);
            const int code = l + 32;
            y.scales_l[s / 2] = uint8_t(y.scales_l[s / 2] | ((code & 0xf) << (4 * (s % 2))));
            y.scales_h = uint16_t(y.scales_h | ((code >> 4) << (2 * s)));
        }
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int s = 0; s < 8; s++) {
            const float dl = d * float(scale(b, s));
            for (int j = 0; j < 16; j++) {
                y[32 * s + j] = dl * float(iq4::level(b.qs[16 * s + j] & 0xf));
                y[32 * s + 16 + j] = dl * float(iq4::level(b.qs[16 * s + j] >> 4));
            }
        }
    }
    // d d_a sum_s ls_s sum level(q) q_a, the integer part exact
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int s = 0; s < 8; s++) {
            int32_t t = 0;
            for (int j = 0; j < 16; j++) {
                t += iq4::level(w.qs[16 * s + j] & 0xf) * int32_t(a.qs[32 * s + j]);
                t += iq4::level(w.qs[16 * s + j] >> 4) * int32_t(a.qs[32 * s + 16 + j]);
            }
            sumi += scale(w, s) * t;
        }
        return a.d * to_f32(w.d) * float(sumi);
    }
};

} // namespace tessera
