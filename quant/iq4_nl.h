// iq4_nl.h: ggml's IQ4_NL, 32 values as 4-bit indices into a fixed non-uniform table of 16 int8 levels, and one f16
// scale; 18 bytes, 4.5 bits per weight. x = d * iq4_levels[q]. Element order as q4_0: qs[j] low nibble = element j,
// high nibble = element j + 16. The levels (ggml's kvalues_iq4nl) crowd near zero, where most weights are, so the
// same bits as q4_0 spend fewer codes on the rare large values.
// Quantize (ggml's quantize_iq4_nl, llama-quantize's bytes without an importance matrix): each element weighted by
// x^2; d starts at max / 127 (max: the element of largest |x|), is refined to the weighted least-squares scale for
// the indices it gives, and 15 more starting scales (127 + t) / max, t = -7..7, are tried; the scale with the smallest
// weighted error is kept and the indices are taken again against it. The IQ4_XS super-block (iq4_xs.h) runs the same
// search on each of its 32-element sub-blocks, then quantizes the scales. The dot partner is q8_0, as ggml's CPU.
#pragma once

#include "quant/k_quants.h"
#include "quant/q8_0.h"

#include <cmath>

namespace tessera {

namespace iq4 {

// the 16 levels, ascending (ggml's kvalues_iq4nl)
inline constexpr int8_t levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

TS_HD int level(int q) {
    constexpr int8_t l[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    return l[q];
}

// The index of the level nearest to x (a tie goes to the upper one; beyond either end, that end) [best_index_int8]
inline int nearest_level(float x) {
    if (x <= float(levels[0])) return 0;
    if (x >= float(levels[15])) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < float(levels[mid])) hi = mid;
        else lo = mid;
    }
    return x - float(levels[hi - 1]) < float(levels[hi]) - x ? hi - 1 : hi;
}

// The scale search for one 32-element sub-block (weights x^2): returns its scale (0 for an all-but-zero block); the
// indices are chosen again by the caller once the scale is final
inline float search_scale(const float* x) {
    float w[32], amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        w[j] = x[j] * x[j];
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    if (amax < kq::group_max_eps) return 0.0f;
    // the weighted sums for the indices that scale 1 / inv gives
    auto fit = [&](float inv, float& sumqx, float& sumq2) {
        sumqx = sumq2 = 0.0f;
        for (int j = 0; j < 32; j++) {
            const float q = float(levels[nearest_level(inv * x[j])]);
            sumqx += w[j] * q * x[j];
            sumq2 += w[j] * q * q;
        }
    };
    float sumqx, sumq2;
    fit(1.0f / (-max / float(levels[0])), sumqx, sumq2);
    float d = sumq2 > 0.0f ? sumqx / sumq2 : 0.0f;
    float best = d * sumqx;
    for (int t = -7; t <= 7; t++) {
        fit(float(t + levels[0]) / max, sumqx, sumq2);
        if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

// 32 indices against scale d (0: every index nearest to 0) as q4_0 packs nibbles
inline void pack_indices(const float* x, float d, uint8_t* qs) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 16; j++)
        qs[j] = uint8_t(nearest_level(id * x[j]) | (nearest_level(id * x[j + 16]) << 4));
}

} // namespace iq4

struct block_iq4_nl {
    f16 d;          // scale
    uint8_t qs[16]; // level indices: low nibble = element j, high = element j + 16
};
static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl block must match GGUF (f16 d + 16 bytes of indices)");

struct iq4_nl {
    using block = block_iq4_nl;
    using dot_block = block_q8_0; // ggml's CPU dot partner for IQ4_NL
    static constexpr type id = type::iq4_nl;
    static constexpr const char* name = "iq4_nl";
    static constexpr int block_size = 32;
    static constexpr int type_size = sizeof(block);
    static constexpr type dot_type = type::q8_0;

    static void quantize(const float* x, block& y) {
        const float d = iq4::search_scale(x);
        y.d = to_f16(d);
        iq4::pack_indices(x, d, y.qs);
    }
    TS_HD static void dequantize(const block& b, float* y) {
        const float d = to_f32(b.d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * float(iq4::level(b.qs[j] & 0xf));
            y[j + 16] = d * float(iq4::level(b.qs[j] >> 4));
        }
    }
    // (d_a d_w) sum_j level(q_j) q_a[j], the integer sum exact
    TS_HD static float vec_dot(const block& w, const dot_block& a) {
        int32_t sumi = 0;
        for (int j = 0; j < 16; j++) {
            sumi += iq4::level(w.qs[j] & 0xf) * int32_t(a.qs[j]);
            sumi += iq4::level(w.qs[j] >> 4) * int32_t(a.qs[j + 16]);
        }
        return (to_f32(a.d) * to_f32(w.d)) * float(sumi);
    }
};

} // namespace tessera
