// k_quants.h: what ggml's "K" super-block formats (q2_K .. q6_K: 256 elements a block, sub-block scales quantized
// against one f16 super-scale) share: the packing of q4_K / q5_K's eight 6-bit (scale, min) pairs into 12 bytes and
// the scale searches of ggml's reference quantizers, which llama-quantize runs when it has no importance matrix. The
// searches are written here from the algorithm (FORMATS.md §2; ggml-quants.c names in brackets): they make the same
// choices, so a tensor quantized here holds the bytes llama-quantize writes for it.
#pragma once

#include "quant/q8_k.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace tessera::kq {

// a sub-block scale this small means "all zero" (ggml's GROUP_MAX_EPS)
constexpr float group_max_eps = 1e-15f;

// Sub-block j (0..7) of the 12 packed bytes: 6-bit scale and min (FORMATS.md §2, q4_K) [get_scale_min_k4]
TS_HD void scale_min(const uint8_t* s, int j, int& sc, int& m) {
    if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
// ... and the inverse: eight (scale, min) codes below 64 -> 12 bytes
inline void pack_scale_mins(const uint8_t (&ls)[8], const uint8_t (&lm)[8], uint8_t* s) {
    for (int j = 0; j < 12; j++) s[j] = 0;
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = uint8_t((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] = uint8_t(s[j - 4] | ((ls[j] >> 4) << 6));
            s[j] = uint8_t(s[j] | ((lm[j] >> 4) << 6));
        }
    }
}

// An asymmetric scale for n values on 0..nmax with weights w: starts from (max - min) / nmax, then tries nstep + 1
// other steps (rmin + rdelta i + nmax levels over the range), each fitted by weighted least squares for scale and
// offset, and keeps the one of least weighted error (squared; absolute with use_mad, q2_K's choice). Returns the
// scale; *neg_min = -offset (>= 0, the offset is clamped to <= 0); L the levels. [make_qkx2_quants]
inline float search_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min, float rmin,
                              float rdelta, int nstep, bool use_mad = false) {
    auto cost = [use_mad](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };
    float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = float(nmax) / (max - min);
    float scale = 1.0f / iscale;
    float best = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = std::clamp(nearest_int_ggml(iscale * (x[i] - min)), 0, nmax);
        L[i] = uint8_t(l);
        const float diff = scale * float(l) + min - x[i];
        best += w[i] * cost(diff);
    }
    uint8_t aux[32];
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            const int l = std::clamp(nearest_int_ggml(iscale * (x[i] - min)), 0, nmax);
            aux[i] = uint8_t(l);
            sum_l += w[i] * float(l);
            sum_l2 += w[i] * float(l) * float(l);
            sum_xl += w[i] * float(l) * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                const float diff = this_scale * float(aux[i]) + this_min - x[i];
                err += w[i] * cost(diff);
            }
            if (err < best) {
                for (int i = 0; i < n; i++) L[i] = aux[i];
                best = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

// The value of largest magnitude among n (the first one wins); amax its magnitude
inline float largest_magnitude(int n, const float* x, float& amax) {
    float max = 0;
    amax = 0;
    for (int i = 0; i < n; i++)
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    return max;
}

// A symmetric scale for n values on -nmax..nmax-1 (stored + nmax in L), weights x^2: from -nmax / max (max = the value
// of largest magnitude, first one wins), its least-squares refit, then 18 nearby steps, keeping the best fit.
// [make_qx_quants with rmse_type = 1 and no importance weights]
inline float search_scale_sym(int n, int nmax, const float* x, int8_t* L) {
    float amax;
    const float max = largest_magnitude(n, x, amax);
    if (amax < group_max_eps) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    auto level = [&](float iscale, int i) { return std::clamp(nearest_int_ggml(iscale * x[i]), -nmax, nmax - 1); };
    float iscale = -float(nmax) / max;
    float sum_lx = 0, sum_l2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = level(iscale, i);
        L[i] = int8_t(l + nmax);
        const float w = x[i] * x[i];
        sum_lx += w * x[i] * float(l);
        sum_l2 += w * float(l) * float(l);
    }
    float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
    float best = scale * sum_lx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(float(nmax) + 0.1f * float(is)) / max;
        sum_lx = sum_l2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = level(iscale, i);
            const float w = x[i] * x[i];
            sum_lx += w * x[i] * float(l);
            sum_l2 += w * float(l) * float(l);
        }
        if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
            for (int i = 0; i < n; i++) L[i] = int8_t(level(iscale, i) + nmax);
            scale = sum_lx / sum_l2;
            best = scale * sum_lx;
        }
    }
    return scale;
}

// A symmetric scale for n values on -nmax..nmax-1 (stored + nmax in L), weights x^2: from -nmax / max, then up to 5
// passes that move single levels to their least-squares value while that raises sum(w x l)^2 / sum(w l^2) (q3_K's
// search). Returns sum(w x l) / sum(w l^2). [make_q3_quants with do_rmse = true]
inline float search_scale_q3(int n, int nmax, const float* x, int8_t* L) {
    float amax;
    const float max = largest_magnitude(n, x, amax);
    if (amax < group_max_eps) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    const float iscale = -float(nmax) / max;
    float sum_lx = 0, sum_l2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = std::clamp(nearest_int_ggml(iscale * x[i]), -nmax, nmax - 1);
        L[i] = int8_t(l);
        const float w = x[i] * x[i];
        sum_lx += w * x[i] * float(l);
        sum_l2 += w * float(l) * float(l);
    }
    for (int pass = 0; pass < 5; pass++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sum_lx - w * x[i] * float(L[i]);
            if (!(slx > 0)) continue;
            float sl2 = sum_l2 - w * float(L[i]) * float(L[i]);
            const int l = std::clamp(nearest_int_ggml(x[i] * sl2 / slx), -nmax, nmax - 1);
            if (l == L[i]) continue;
            slx += w * x[i] * float(l);
            sl2 += w * float(l) * float(l);
            if (sl2 > 0 && slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
                L[i] = int8_t(l);
                sum_lx = slx;
                sum_l2 = sl2;
                changed++;
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = int8_t(L[i] + nmax);
    return sum_l2 > 0.0f ? sum_lx / sum_l2 : 0.0f;
}

// q4_K / q5_K's quantizer for one super-block of 256 values, levels 0..nmax: each sub-block of 32 gets a scale and
// min by search_scale_min (weights sqrt(mean x^2) + |x|), those are quantized to 6 bits against d = max scale / 63
// and dmin = max min / 63, and the levels are taken again from the rounded scales. [quantize_row_q4_K_ref's body]
inline void quantize_super_asym(const float* x, int nmax, float rmin, int nstep, uint8_t (&L)[256], uint8_t* scales,
                                f16& d_out, f16& dmin_out) {
    float sc[8], mn[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; l++) w[l] = av_x + std::fabs(x[32 * j + l]);
        sc[j] = search_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &mn[j], rmin, 0.1f, nstep);
        if (sc[j] > max_scale) max_scale = sc[j];
        if (mn[j] > max_min) max_min = mn[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        // ggml stores nearest_int's result in a uint8_t before clamping to 63
        ls[j] = std::min<uint8_t>(63, uint8_t(nearest_int_ggml(inv_scale * sc[j])));
        lm[j] = std::min<uint8_t>(63, uint8_t(nearest_int_ggml(inv_min * mn[j])));
    }
    pack_scale_mins(ls, lm, scales);
    d_out = to_f16(max_scale / 63.0f);
    dmin_out = to_f16(max_min / 63.0f);
    for (int j = 0; j < 8; j++) {
        int s, m;
        scale_min(scales, j, s, m);
        const float d = to_f32(d_out) * float(s);
        if (d == 0.0f) continue;
        const float dm = to_f32(dmin_out) * float(m);
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = uint8_t(std::clamp(nearest_int_ggml((x[32 * j + l] + dm) / d), 0, nmax));
    }
}

// q4_K / q5_K's shared reference math (block fields d, dmin, scales; F::level(b, e) the element's level):
// x = d sc_j q - dmin m_j, and the dot with q8_K, d_a (d sum_j sc_j sum q q_a - dmin sum_j m_j sum q_a), whose
// integer sums are exact
template <class F> TS_HD void dequantize_asym(const typename F::block& b, float* y) {
    const float d = to_f32(b.d), dmin = to_f32(b.dmin);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        scale_min(b.scales, j, sc, m);
        const float d1 = d * float(sc), m1 = dmin * float(m);
        for (int l = 0; l < 32; l++) y[32 * j + l] = d1 * float(F::level(b, 32 * j + l)) - m1;
    }
}
template <class F> TS_HD float vec_dot_asym(const typename F::block& w, const block_q8_k& a) {
    int32_t sumi = 0, summ = 0;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        scale_min(w.scales, j, sc, m);
        int32_t s = 0;
        for (int l = 0; l < 32; l++) s += F::level(w, 32 * j + l) * int32_t(a.qs[32 * j + l]);
        sumi += sc * s;
        summ += m * (int32_t(a.bsums[2 * j]) + int32_t(a.bsums[2 * j + 1]));
    }
    return a.d * to_f32(w.d) * float(sumi) - a.d * to_f32(w.dmin) * float(summ);
}

} // namespace tessera::kq
