// get_rows.cpp: dst[:, i] = to_float(src0 row ids[i]) for any computable src0 type (token embeddings).
#include "ops.h"

#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"

namespace tessera::cpu {

void get_rows(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const tensor& ids = *dst.src[1];
    const cpu_type_ops* ops = find_cpu_ops(a.t, p.reference);
    TS_ASSERT(ops != nullptr);
    int64_t r0, r1;
    split(ids.ne[0], p.ith, p.nth, r0, r1);
    for (int64_t r = r0; r < r1; r++) {
        const int32_t id = *at<int32_t>(ids, r);
        TS_ASSERT(id >= 0 && id < a.ne[1]);
        ops->to_float(at<uint8_t>(a, 0, id), at<float>(dst, 0, r), a.ne[0]);
    }
}

} // namespace tessera::cpu
