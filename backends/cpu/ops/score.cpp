// score.cpp: the score op (ops.h in ggml-like): each thread scores its share of the rows with score.h's arithmetic.
#include "backends/cpu/ops/ops.h"

#include "ggml-like/error.h"
#include "ggml-like/score.h"

namespace tessera::cpu {

void score(const compute_params& p, tensor& dst) {
    const tensor& logits = *dst.src[0];
    const tensor& targets = *dst.src[1];
    const tensor* base = dst.src[2];
    const auto mode = score_mode(dst.op_params.i[0]);
    const int64_t n_vocab = logits.ne[0];
    int64_t r0, r1;
    split(logits.ne[1], p.ith, p.nth, r0, r1);
    for (int64_t r = r0; r < r1; r++) {
        const int32_t target = static_cast<const int32_t*>(targets.data)[r];
        TS_ASSERT(target >= 0 && target < n_vocab);
        const auto* row = reinterpret_cast<const float*>(static_cast<const uint8_t*>(logits.data) + r * logits.nb[1]);
        const auto* rec =
            base ? reinterpret_cast<const uint16_t*>(static_cast<const uint8_t*>(base->data) + r * base->nb[1])
                 : nullptr;
        score_row(mode, row, n_vocab, target, rec,
                  reinterpret_cast<int32_t*>(static_cast<uint8_t*>(dst.data) + r * dst.nb[1]));
    }
}

} // namespace tessera::cpu
