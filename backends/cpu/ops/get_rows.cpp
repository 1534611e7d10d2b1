// get_rows.cpp: dst[:, i] = to_float(src0 row ids[i]) for any computable src0 type (token embeddings); batched for
// f32: dst[:, i, b] = src0[:, ids[i, b], b] (the chosen experts' router weights).
#include "ops.h"

#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "quant/format.h"

namespace tessera::cpu {

void get_rows(const compute_params& p, tensor& dst) {
    const tensor& a = *dst.src[0];
    const tensor& ids = *dst.src[1];
    const cpu_type_ops* ops = find_cpu_ops(a.t, p.reference);
    TS_ASSERT(ops != nullptr);
    // a per-tensor scale (i2_s keeps it after the rows of the whole tensor, i.e. of the view's source)
    const tensor& root = a.view_src ? *a.view_src : a;
    const float scale = read_tensor_scale(a.t, root.data, root.n_elements());
    int64_t r0, r1;
    split(ids.ne[0] * ids.ne[1], p.ith, p.nth, r0, r1);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t i = r % ids.ne[0], b = r / ids.ne[0];
        const int32_t id = *at<int32_t>(ids, i, b);
        TS_ASSERT(id >= 0 && id < a.ne[1]);
        float* y = at<float>(dst, 0, i, b);
        ops->to_float(at<uint8_t>(a, 0, id, b), y, a.ne[0]);
        if (scale != 1.0f)
            for (int64_t i = 0; i < a.ne[0]; i++) y[i] *= scale;
    }
}

} // namespace tessera::cpu
