// iq3_quantize.cpp: ggml's IQ3_XXS and IQ3_S quantizers without an importance matrix, the bytes llama-quantize
// writes (ggml-quants.c names in brackets). Both run one search on each 32-value sub-block:
//   - weights w = x^2; the search fits |x| (the signs are stored apart) with points of the grid on levels 2l + 1
//     (1 .. 15, for both sizes: IQ3_XXS's stored levels are another scale of the same points);
//   - IQ3_XXS stores 7 signs per 8 values, the 8th making the count of minus signs even: a group with an odd count
//     flips the sign of its value of least w x^2 (the first of equals), whose |x| the search then sees negated;
//   - 31 (IQ3_XXS) or 19 (IQ3_S) trial scales max / (15 + 0.2 t): each value rounded to its level, each 4-value group
//     that misses the grid replaced by its best neighbour (below), the weighted least-squares scale of the result;
//     the trial of largest sum(w x q)^2 / sum(w q^2) wins;
//   - when groups of the winner missed the grid, they (IQ3_S: all groups) are rounded again at the winning scale,
//     again through the neighbours, and the scale refitted;
//   - the super-block scale d = (largest sub-block scale) / 31, stored in f16 as d x 1.0125 (IQ3_XXS) or d x 1.033
//     (IQ3_S), and each sub-block scale s rounded to ls = nearest((s / d - 1) / 2) in 0 .. 15.
// A group's neighbours are the grid points at the 2 (IQ3_XXS) or 3 (IQ3_S) smallest squared distances from its
// off-grid level code, all of them, by distance then index; the best one has the least weighted squared error
// (weights sqrt(w)) at the trial scale, the first of equals. [iq3xs_init_impl, iq3_find_best_neighbour]
// IQ3_S keeps a quirk of ggml's loop: an all-zero sub-block writes no indices or signs and the next sub-blocks' ones
// move up into its place (the high index bits and the scales stay in place), so the files match byte for byte.
// Built with -ffp-contract=off (quant/CMakeLists.txt): ggml's reference quantizer is compiled without FMA, and a
// fused multiply-add would round differently and change choices.
#include "ggml-like/error.h"
#include "quant/iq3_s.h"
#include "quant/iq3_xxs.h"
#include "quant/k_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

namespace tessera::iq3 {

namespace {

// IQ3_XXS's sub-block max below which the sub-block is all zero (ggml's GROUP_MAX_EPS_IQ3_XXS); IQ3_S tests max == 0
constexpr float xxs_max_eps = 1e-8f;

// level index (0..7) of value k of a code
constexpr int level_of(int code, int k) {
    return code >> (3 * k) & 7;
}

// A grid as the search sees it: code -> index (-1 when off the grid) and, for each off-grid code, its neighbours
// (CSR: near[first[c] .. first[c + 1]) ).
struct search_grid {
    const uint16_t* codes = nullptr;
    std::vector<int16_t> index = std::vector<int16_t>(4096, -1);
    std::vector<uint32_t> first = std::vector<uint32_t>(4097, 0);
    std::vector<uint16_t> near;

    template <size_t N> search_grid(const std::array<uint16_t, N>& member_codes, int n_distances) {
        codes = member_codes.data();
        for (int i = 0; i < int(N); i++) index[member_codes[size_t(i)]] = int16_t(i);
        std::vector<std::pair<int, int>> by_distance(N); // (squared distance, grid index)
        for (int c = 0; c < 4096; c++) {
            first[size_t(c)] = uint32_t(near.size());
            if (index[size_t(c)] >= 0) continue;
            for (int j = 0; j < int(N); j++) {
                int d2 = 0;
                for (int k = 0; k < 4; k++) {
                    const int diff = 2 * level_of(member_codes[size_t(j)], k) - 2 * level_of(c, k);
                    d2 += diff * diff;
                }
                by_distance[size_t(j)] = {d2, j};
            }
            std::sort(by_distance.begin(), by_distance.end()); // by distance, then index (ggml's iq3_compare_func)
            int n_seen = 1, last = by_distance[0].first;
            for (const auto& [d2, j] : by_distance) {
                if (d2 > last && ++n_seen > n_distances) break;
                last = d2;
                near.push_back(uint16_t(j));
            }
        }
        first[4096] = uint32_t(near.size());
    }

    // The neighbour of off-grid `code` nearest to x (weights sw) at `scale`; its levels into L
    // [iq3_find_best_neighbour]
    int best_neighbour(int code, const float* x, const float* sw, float scale, int8_t* L) const {
        float best = std::numeric_limits<float>::max();
        int best_i = -1;
        for (uint32_t n = first[size_t(code)]; n < first[size_t(code) + 1]; n++) {
            const int g = codes[near[n]];
            float d2 = 0.0f;
            for (int k = 0; k < 4; k++) {
                const float diff = scale * float(2 * level_of(g, k) + 1) - x[k];
                d2 += sw[k] * diff * diff;
            }
            if (d2 < best) {
                best = d2;
                best_i = near[n];
            }
        }
        TS_ASSERT(best_i >= 0);
        for (int k = 0; k < 4; k++) L[k] = int8_t(level_of(codes[best_i], k));
        return best_i;
    }
};

const search_grid& xxs_search_grid() {
    static const search_grid g(xxs_codes, 2);
    return g;
}
const search_grid& s_search_grid() {
    static const search_grid g(s_codes, 3);
    return g;
}

// the level index of x at inverse scale id: nearest((id x - 1) / 2) in 0..7
int level_at(float id, float x) {
    return std::clamp(nearest_int_ggml(0.5f * (id * x - 1.0f)), 0, 7);
}

int code_of(const int8_t* L) {
    return L[0] | L[1] << 3 | L[2] << 6 | L[3] << 9;
}

// sum(w x q), sum(w q^2) for q = 2L + 1 over a sub-block
void fit_sums(const float* x, const float* w, const int8_t* L, float& sumqx, float& sumq2) {
    sumqx = sumq2 = 0.0f;
    for (int i = 0; i < 32; i++) {
        const float q = float(2 * L[i] + 1);
        sumqx += w[i] * x[i] * q;
        sumq2 += w[i] * q * q;
    }
}

struct search_kind {
    const search_grid& grid;
    int n_steps;        // trial scales t = -n_steps .. n_steps
    bool refine_all;    // the second rounding redoes every group, not only those that missed the grid
    bool start_on_grid; // what counts as "on the grid" when no trial fits (sum(w q^2) = 0 everywhere)
};

// One 32-value sub-block: x the magnitudes (sign-folded), w the weights, max the largest x (> the all-zero test).
// Returns the scale (possibly < 0 in theory: the caller flips its signs); L gets the 32 level indices, on the grid.
float search_subblock(const search_kind& kind, const float* x, const float* w, float max, int8_t (&L)[32]) {
    const search_grid& grid = kind.grid;
    float sw[32];
    for (int i = 0; i < 32; i++) sw[i] = std::sqrt(w[i]);
    std::memset(L, 0, 32);
    bool on_grid[8];
    for (bool& b : on_grid) b = kind.start_on_grid;
    float best = 0.0f, scale = max / 15.0f;
    for (int t = -kind.n_steps; t <= kind.n_steps; t++) {
        const float id = (15.0f + float(t) * 0.2f) / max, trial_scale = 1.0f / id;
        int8_t La[32];
        bool on_grid_a[8];
        for (int k = 0; k < 8; k++) {
            for (int i = 0; i < 4; i++) La[4 * k + i] = int8_t(level_at(id, x[4 * k + i]));
            const int code = code_of(La + 4 * k);
            on_grid_a[k] = grid.index[size_t(code)] >= 0;
            if (!on_grid_a[k]) grid.best_neighbour(code, x + 4 * k, sw + 4 * k, trial_scale, La + 4 * k);
        }
        float sumqx, sumq2;
        fit_sums(x, w, La, sumqx, sumq2);
        if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            std::memcpy(L, La, 32);
            std::copy(on_grid_a, on_grid_a + 8, on_grid);
        }
    }
    if (std::count(on_grid, on_grid + 8, false) > 0 && scale > 0.0f) {
        const float id = 1.0f / scale;
        for (int k = 0; k < 8; k++) {
            if (!kind.refine_all && on_grid[k]) continue;
            int8_t l4[4];
            for (int i = 0; i < 4; i++) l4[i] = int8_t(level_at(id, x[4 * k + i]));
            int code = code_of(l4);
            if (grid.index[size_t(code)] < 0)
                code = grid.codes[grid.best_neighbour(code, x + 4 * k, sw + 4 * k, scale, L + 4 * k)];
            for (int i = 0; i < 4; i++) L[4 * k + i] = int8_t(level_of(code, i));
        }
        float sumqx, sumq2;
        fit_sums(x, w, L, sumqx, sumq2);
        if (sumq2 > 0.0f) scale = sumqx / sumq2;
    }
    return scale;
}

// the grid index of the 4 levels at L (on the grid by construction)
int grid_index(const search_grid& grid, const int8_t* L) {
    const int i = grid.index[size_t(code_of(L))];
    TS_ASSERT(i >= 0);
    return i;
}

// ls = nearest((s / d - 1) / 2) in 0..15 at inverse super-scale id
int scale_code(float id, float s) {
    return std::clamp(nearest_int_ggml(0.5f * (id * s - 1.0f)), 0, 15);
}

} // namespace

// [quantize_row_iq3_xxs_impl(256, ...) with quant_weights = NULL]
void quantize_xxs(const float* x, block_iq3_xxs& y) {
    const search_kind kind{xxs_search_grid(), 15, false, true};
    std::memset(&y, 0, sizeof y);
    float scales[8], max_scale = 0.0f;
    for (int s = 0; s < 8; s++) {
        const float* xs = x + 32 * s;
        float w[32], xv[32];
        for (int i = 0; i < 32; i++) w[i] = xs[i] * xs[i];
        uint32_t signs[4];
        for (int g = 0; g < 4; g++) {
            uint32_t bits = 0;
            for (int i = 0; i < 8; i++) {
                const int j = 8 * g + i;
                if (xs[j] >= 0) {
                    xv[j] = xs[j];
                } else {
                    xv[j] = -xs[j];
                    bits |= 1u << i;
                }
            }
            if (__builtin_popcount(bits) % 2) { // an odd count: flip the value of least w x^2
                int jmin = 8 * g;
                float min = w[jmin] * xs[jmin] * xs[jmin];
                for (int i = 1; i < 8; i++) {
                    const int j = 8 * g + i;
                    const float v = w[j] * xs[j] * xs[j];
                    if (v < min) {
                        min = v;
                        jmin = j;
                    }
                }
                xv[jmin] = -xv[jmin];
                bits ^= 1u << (jmin - 8 * g);
            }
            signs[g] = bits & 127;
        }
        float max = xv[0];
        for (int i = 1; i < 32; i++) max = max > xv[i] ? max : xv[i];
        if (max < xxs_max_eps) { // all zero: indices, signs and scale code 0
            scales[s] = 0.0f;
            continue;
        }
        int8_t L[32];
        float scale = search_subblock(kind, xv, w, max, L);
        if (scale < 0) {
            scale = -scale;
            for (uint32_t& b : signs) b = ~b & 127;
        }
        for (int k = 0; k < 8; k++) y.qs[8 * s + k] = uint8_t(grid_index(kind.grid, L + 4 * k));
        const uint32_t word = signs[0] | signs[1] << 7 | signs[2] << 14 | signs[3] << 21;
        std::memcpy(y.qs + 64 + 4 * s, &word, 4);
        scales[s] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) {
        std::memset(&y, 0, sizeof y);
        return;
    }
    const float d = max_scale / 31.0f;
    y.d = to_f16(d * 1.0125f);
    const float id = 1.0f / d;
    for (int s = 0; s < 8; s++) {
        uint32_t word;
        std::memcpy(&word, y.qs + 64 + 4 * s, 4);
        word |= uint32_t(scale_code(id, scales[s])) << 28;
        std::memcpy(y.qs + 64 + 4 * s, &word, 4);
    }
}

// [quantize_row_iq3_s_impl(32, ...) with quant_weights = NULL]
void quantize_s(const float* x, block_iq3_s& y) {
    const search_kind kind{s_search_grid(), 9, true, false};
    std::memset(&y, 0, sizeof y);
    float scales[8], max_scale = 0.0f;
    int n_written = 0; // sub-blocks whose indices and signs are written so far (ggml's moving qs / signs pointers)
    for (int s = 0; s < 8; s++) {
        const float* xs = x + 32 * s;
        float w[32], xv[32];
        uint8_t signs[4] = {};
        for (int i = 0; i < 32; i++) {
            w[i] = xs[i] * xs[i];
            if (xs[i] >= 0) {
                xv[i] = xs[i];
            } else {
                xv[i] = -xs[i];
                signs[i / 8] = uint8_t(signs[i / 8] | 1 << (i % 8));
            }
        }
        float max = xv[0];
        for (int i = 1; i < 32; i++) max = max > xv[i] ? max : xv[i];
        if (!max) { // all zero: nothing written, the next sub-block's indices and signs take this one's place
            scales[s] = 0.0f;
            continue;
        }
        int8_t L[32];
        float scale = search_subblock(kind, xv, w, max, L);
        if (scale < 0) {
            scale = -scale;
            for (uint8_t& b : signs) b = uint8_t(~b);
        }
        for (int k = 0; k < 8; k++) {
            const int g = grid_index(kind.grid, L + 4 * k);
            y.qs[8 * n_written + k] = uint8_t(g & 255);
            y.qh[s] = uint8_t(y.qh[s] | (g >> 8) << k);
        }
        std::memcpy(y.signs + 4 * n_written, signs, 4);
        n_written++;
        scales[s] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return;
    const float d = max_scale / 31.0f;
    y.d = to_f16(d * 1.033f);
    const float id = 1.0f / d;
    for (int s = 0; s < 8; s += 2)
        y.scales[s / 2] = uint8_t(scale_code(id, scales[s]) | scale_code(id, scales[s + 1]) << 4);
}

} // namespace tessera::iq3
