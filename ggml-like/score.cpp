// score.cpp: the per-row arithmetic of perplexity and the KL-divergence mode (score.h), in llama-perplexity's order.
#include "score.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace tessera {

namespace {

// llama.cpp's nearest_int: the 1.5 * 2^23 trick (round half to even)
inline int nearest_int(float v) {
    float x = v + 12582912.f;
    int i;
    std::memcpy(&i, &x, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

} // namespace

double score_nll(const float* logits, int64_t n_vocab, int32_t target) {
    float mx = logits[0];
    for (int64_t i = 1; i < n_vocab; i++) mx = std::max(mx, logits[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < n_vocab; i++) sum += std::exp(logits[i] - mx);
    return -(double(logits[target] - mx) - std::log(sum));
}

double score_encode(const float* logits, int64_t n_vocab, int32_t target, uint16_t* record) {
    float mx = logits[0], mn = logits[0];
    for (int64_t i = 1; i < n_vocab; i++) {
        mx = std::max(mx, logits[i]);
        mn = std::min(mn, logits[i]);
    }
    mn = std::max(mn, mx - 16);
    double sum = 0.0;
    for (int64_t i = 0; i < n_vocab; i++) sum += std::exp(logits[i] - mx);
    const float log_sum = float(std::log(sum));
    const float min_log_prob = mn - mx - log_sum;
    const float scale = (mx - mn) / 65535.f;
    std::memcpy(record, &scale, 4);
    std::memcpy(record + 2, &min_log_prob, 4);
    uint16_t* codes = record + 4;
    if (scale != 0.0f) {
        const float inv = 1 / scale;
        for (int64_t i = 0; i < n_vocab; i++)
            codes[i] = logits[i] > mn ? uint16_t(nearest_int(inv * (logits[i] - mn))) : 0;
    } else {
        std::memset(codes, 0, size_t(n_vocab) * 2);
    }
    if (n_vocab % 2) codes[n_vocab] = 0; // padding
    return double(mx + log_sum - logits[target]);
}

kld_row score_compare(const float* logits, int64_t n_vocab, const uint16_t* rec, int32_t target) {
    float mx = logits[0];
    int64_t imax = 0;
    for (int64_t i = 1; i < n_vocab; i++)
        if (logits[i] > mx) {
            mx = logits[i];
            imax = i;
        }
    double sum_exp = 0.0;
    for (int64_t i = 0; i < n_vocab; i++) sum_exp += std::exp(logits[i] - mx);
    const float log_sum = float(std::log(sum_exp));
    float scale, min_log_prob;
    std::memcpy(&scale, rec, 4);
    std::memcpy(&min_log_prob, rec + 2, 4);
    const uint16_t* base = rec + 4;

    // KLD = sum_i p_base,i (log p_base,i - log q_i), terms with log p_base <= -16 skipped
    const float log_z = mx + log_sum;
    double kld = 0;
    int64_t imax_base = -1;
    float best = 0;
    for (int64_t i = 0; i < n_vocab; i++) {
        const float lp_base = scale * base[i] + min_log_prob;
        if (i == 0 || lp_base > best) {
            best = lp_base;
            imax_base = i;
        }
        if (lp_base > -16.f) kld += std::exp(lp_base) * (lp_base - logits[i] + log_z);
    }
    return {mx + log_sum - logits[target], kld, imax == imax_base};
}

void score_row(score_mode mode, const float* logits, int64_t n_vocab, int32_t target, const uint16_t* base_record,
               int32_t* out) {
    double nll = 0, kld = 0;
    float nll_f = 0;
    int32_t same = 0;
    switch (mode) {
    case score_mode::nll:
        nll = score_nll(logits, n_vocab, target);
        break;
    case score_mode::encode:
        nll = score_encode(logits, n_vocab, target, reinterpret_cast<uint16_t*>(out + score_header_words));
        break;
    case score_mode::compare: {
        const kld_row r = score_compare(logits, n_vocab, base_record, target);
        nll = score_nll(logits, n_vocab, target);
        kld = r.kld;
        nll_f = r.nll;
        same = r.same_top;
        break;
    }
    }
    std::memcpy(out, &nll, 8);
    std::memcpy(out + 2, &kld, 8);
    std::memcpy(out + 4, &nll_f, 4);
    out[5] = same;
}

} // namespace tessera
