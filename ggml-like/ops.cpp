// ops.cpp: graph-node builders (shape checks and result shapes only).
#include "ops.h"

#include "error.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace tessera {

namespace {

tensor* new_view(context& ctx, tensor* a, size_t offset) {
    tensor* r = ctx.dup_header(*a);
    r->o = op::view;
    r->src[0] = a;
    r->view_src = a->view_src ? a->view_src : a;
    r->view_offs = (a->view_src ? a->view_offs : 0) + offset;
    return r;
}

tensor* new_result(context& ctx, op o, const tensor& shape_of, type t = type::f32) {
    tensor* r = ctx.new_tensor(t, shape_of.ne, TS_MAX_DIMS);
    r->o = o;
    return r;
}

bool can_broadcast(const tensor& a, const tensor& b) {
    for (int d = 0; d < TS_MAX_DIMS; d++)
        if (b.ne[d] == 0 || a.ne[d] % b.ne[d] != 0) return false;
    return true;
}

} // namespace

tensor* view_1d(context& ctx, tensor* a, int64_t ne0, size_t offset) {
    tensor* r = new_view(ctx, a, offset);
    r->ne[0] = ne0;
    r->ne[1] = r->ne[2] = r->ne[3] = 1;
    r->nb[1] = r->nb[2] = r->nb[3] = row_size(a->t, ne0);
    return r;
}

tensor* view_2d(context& ctx, tensor* a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset) {
    tensor* r = new_view(ctx, a, offset);
    r->ne[0] = ne0;
    r->ne[1] = ne1;
    r->ne[2] = r->ne[3] = 1;
    r->nb[1] = nb1;
    r->nb[2] = r->nb[3] = nb1 * size_t(ne1);
    return r;
}

tensor* view_3d(context& ctx, tensor* a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2,
                size_t offset) {
    tensor* r = new_view(ctx, a, offset);
    r->ne[0] = ne0;
    r->ne[1] = ne1;
    r->ne[2] = ne2;
    r->ne[3] = 1;
    r->nb[1] = nb1;
    r->nb[2] = nb2;
    r->nb[3] = nb2 * size_t(ne2);
    return r;
}

tensor* reshape_2d(context& ctx, tensor* a, int64_t ne0, int64_t ne1) {
    TS_ASSERT(a->is_contiguous() && ne0 * ne1 == a->n_elements());
    return view_2d(ctx, a, ne0, ne1, row_size(a->t, ne0), 0);
}

tensor* reshape_3d(context& ctx, tensor* a, int64_t ne0, int64_t ne1, int64_t ne2) {
    TS_ASSERT(a->is_contiguous() && ne0 * ne1 * ne2 == a->n_elements());
    const size_t nb1 = row_size(a->t, ne0);
    return view_3d(ctx, a, ne0, ne1, ne2, nb1, nb1 * size_t(ne1), 0);
}

tensor* permute(context& ctx, tensor* a, int axis0, int axis1, int axis2, int axis3) {
    const int axis[4] = {axis0, axis1, axis2, axis3};
    tensor* r = new_view(ctx, a, 0);
    for (int d = 0; d < TS_MAX_DIMS; d++) {
        r->ne[axis[d]] = a->ne[d];
        r->nb[axis[d]] = a->nb[d];
    }
    return r;
}

tensor* transpose(context& ctx, tensor* a) { return permute(ctx, a, 1, 0, 2, 3); }

tensor* get_rows(context& ctx, tensor* a, tensor* ids) {
    TS_ASSERT(ids->t == type::i32 && ids->ne[2] == 1 && ids->ne[3] == 1 && a->ne[3] == 1);
    TS_ASSERT(ids->ne[1] == a->ne[2] && (ids->ne[1] == 1 || a->t == type::f32));
    tensor* r = ctx.new_tensor(type::f32, {a->ne[0], ids->ne[0], ids->ne[1]});
    r->o = op::get_rows;
    r->src[0] = a;
    r->src[1] = ids;
    return r;
}

tensor* mul_mat(context& ctx, tensor* a, tensor* b) {
    TS_ASSERT(a->ne[0] == b->ne[0]);
    TS_ASSERT(b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0);
    TS_ASSERT(b->t == type::f32);
    tensor* r = ctx.new_tensor(type::f32, {a->ne[1], b->ne[1], b->ne[2], b->ne[3]});
    r->o = op::mul_mat;
    r->src[0] = a;
    r->src[1] = b;
    return r;
}

tensor* add(context& ctx, tensor* a, tensor* b) {
    TS_ASSERT(can_broadcast(*a, *b));
    tensor* r = new_result(ctx, op::add, *a);
    r->src[0] = a;
    r->src[1] = b;
    return r;
}

tensor* mul(context& ctx, tensor* a, tensor* b) {
    TS_ASSERT(can_broadcast(*a, *b));
    tensor* r = new_result(ctx, op::mul, *a);
    r->src[0] = a;
    r->src[1] = b;
    return r;
}

tensor* div(context& ctx, tensor* a, tensor* b) {
    TS_ASSERT(can_broadcast(*a, *b));
    tensor* r = new_result(ctx, op::div, *a);
    r->src[0] = a;
    r->src[1] = b;
    return r;
}

tensor* scale(context& ctx, tensor* a, float s) {
    tensor* r = new_result(ctx, op::scale, *a);
    r->src[0] = a;
    r->op_params.f[0] = s;
    return r;
}

tensor* rms_norm(context& ctx, tensor* a, float eps) {
    tensor* r = new_result(ctx, op::rms_norm, *a);
    r->src[0] = a;
    r->op_params.f[0] = eps;
    return r;
}

void rope_yarn_corr_dims(int n_rot, int n_ctx_orig, float freq_base, float beta_fast, float beta_slow, float dims[2]) {
    // the dimension whose wavelength fits `rotations` times into n_ctx_orig; the float expression is ggml's
    auto corr_dim = [&](float rotations) {
        return float(n_rot) * std::log(float(n_ctx_orig) / (rotations * 2 * float(M_PI))) / (2 * std::log(freq_base));
    };
    dims[0] = std::max(0.0f, std::floor(corr_dim(beta_fast)));
    dims[1] = std::min(float(n_rot - 1), std::ceil(corr_dim(beta_slow)));
}

tensor* rope(context& ctx, tensor* a, tensor* pos, tensor* freq_factors, const rope_params& rp) {
    TS_ASSERT(pos->t == type::i32 && pos->ne[0] == a->ne[2]);
    TS_ASSERT(rp.n_rot % 2 == 0 && rp.n_rot > 0 && rp.n_rot <= a->ne[0]);
    TS_ASSERT(!freq_factors || (freq_factors->t == type::f32 && freq_factors->ne[0] >= rp.n_rot / 2));
    tensor* r = new_result(ctx, op::rope, *a);
    r->src[0] = a;
    r->src[1] = pos;
    r->src[2] = freq_factors;
    r->op_params.i[0] = rp.n_rot;
    r->op_params.i[1] = int32_t(rp.mode);
    r->op_params.f[2] = rp.freq_base;
    r->op_params.f[3] = rp.freq_scale;
    r->op_params.f[4] = rp.ext_factor;
    r->op_params.f[5] = rp.attn_factor;
    float dims[2] = {0.0f, 0.0f};
    if (rp.ext_factor != 0.0f) rope_yarn_corr_dims(rp.n_rot, rp.n_ctx_orig, rp.freq_base, rp.beta_fast, rp.beta_slow, dims);
    r->op_params.f[6] = dims[0];
    r->op_params.f[7] = dims[1];
    return r;
}

tensor* rope(context& ctx, tensor* a, tensor* pos, tensor* freq_factors, int n_rot, rope_mode mode, float freq_base,
             float freq_scale) {
    rope_params rp;
    rp.n_rot = n_rot;
    rp.mode = mode;
    rp.freq_base = freq_base;
    rp.freq_scale = freq_scale;
    return rope(ctx, a, pos, freq_factors, rp);
}

tensor* soft_max(context& ctx, tensor* a, tensor* mask, float scale) {
    TS_ASSERT(!mask || (mask->t == type::f32 && mask->ne[0] == a->ne[0] && mask->ne[1] >= a->ne[1]));
    tensor* r = new_result(ctx, op::soft_max, *a);
    r->src[0] = a;
    r->src[1] = mask;
    r->op_params.f[0] = scale;
    return r;
}

tensor* silu(context& ctx, tensor* a) {
    tensor* r = new_result(ctx, op::silu, *a);
    r->src[0] = a;
    return r;
}

tensor* swiglu(context& ctx, tensor* gate, tensor* up) {
    TS_ASSERT(same_shape(*gate, *up));
    tensor* r = new_result(ctx, op::swiglu, *gate);
    r->src[0] = gate;
    r->src[1] = up;
    return r;
}

tensor* geglu(context& ctx, tensor* gate, tensor* up) {
    TS_ASSERT(same_shape(*gate, *up));
    tensor* r = new_result(ctx, op::geglu, *gate);
    r->src[0] = gate;
    r->src[1] = up;
    return r;
}

tensor* relu2_glu(context& ctx, tensor* gate, tensor* up) {
    TS_ASSERT(same_shape(*gate, *up));
    tensor* r = new_result(ctx, op::relu2_glu, *gate);
    r->src[0] = gate;
    r->src[1] = up;
    return r;
}

tensor* swiglu_oai(context& ctx, tensor* gate, tensor* up, float alpha, float limit) {
    TS_ASSERT(same_shape(*gate, *up));
    tensor* r = new_result(ctx, op::swiglu_oai, *gate);
    r->src[0] = gate;
    r->src[1] = up;
    r->op_params.f[0] = alpha;
    r->op_params.f[1] = limit;
    return r;
}

tensor* clamp(context& ctx, tensor* a, float lo, float hi) {
    tensor* r = new_result(ctx, op::clamp, *a);
    r->src[0] = a;
    r->op_params.f[0] = lo;
    r->op_params.f[1] = hi;
    return r;
}

tensor* sum_rows(context& ctx, tensor* a) {
    TS_ASSERT(a->t == type::f32);
    tensor* r = ctx.new_tensor(type::f32, {1, a->ne[1], a->ne[2], a->ne[3]});
    r->o = op::sum_rows;
    r->src[0] = a;
    return r;
}

tensor* score(context& ctx, tensor* logits, tensor* targets, tensor* base, score_mode mode) {
    TS_ASSERT(logits->t == type::f32 && logits->nb[0] == 4 && logits->ne[2] == 1 && logits->ne[3] == 1);
    TS_ASSERT(targets->t == type::i32 && targets->n_elements() == logits->ne[1]);
    TS_ASSERT((mode == score_mode::compare) == (base != nullptr));
    if (base)
        TS_ASSERT(base->t == type::i32 && base->ne[0] == kld_record_size(logits->ne[0]) / 2 &&
                  base->ne[1] == logits->ne[1] && base->is_contiguous());
    tensor* r = ctx.new_tensor(type::i32, {score_row_words(mode, logits->ne[0]), logits->ne[1]});
    r->o = op::score;
    r->op_params.i[0] = int32_t(mode);
    r->src[0] = logits;
    r->src[1] = targets;
    r->src[2] = base;
    return r;
}

tensor* top_k(context& ctx, tensor* a, int64_t k, bool sorted) {
    TS_ASSERT(a->t == type::f32 && a->nb[0] == 4 && k >= 1 && k <= a->ne[0] && a->ne[2] == 1 && a->ne[3] == 1);
    tensor* r = ctx.new_tensor(type::i32, {k, a->ne[1]});
    r->o = op::top_k;
    r->src[0] = a;
    r->op_params.i[0] = sorted ? 1 : 0;
    return r;
}

tensor* mul_mat_id(context& ctx, tensor* experts, tensor* b, tensor* ids) {
    TS_ASSERT(experts->ne[3] == 1 && b->t == type::f32 && b->ne[0] == experts->ne[0] && b->ne[3] == 1);
    TS_ASSERT(ids->t == type::i32 && ids->ne[1] == b->ne[2] && ids->ne[2] == 1 && ids->ne[3] == 1);
    TS_ASSERT(b->ne[1] == 1 || b->ne[1] == ids->ne[0]);
    tensor* r = ctx.new_tensor(type::f32, {experts->ne[1], ids->ne[0], b->ne[2]});
    r->o = op::mul_mat_id;
    r->src[0] = experts;
    r->src[1] = b;
    r->src[2] = ids;
    return r;
}

tensor* add_id(context& ctx, tensor* a, tensor* b, tensor* ids) {
    TS_ASSERT(a->t == type::f32 && b->t == type::f32 && ids->t == type::i32 && a->ne[3] == 1);
    TS_ASSERT(b->ne[0] == a->ne[0] && b->ne[2] == 1 && b->ne[3] == 1);
    TS_ASSERT(ids->ne[0] == a->ne[1] && ids->ne[1] == a->ne[2] && ids->ne[2] == 1 && ids->ne[3] == 1);
    tensor* r = new_result(ctx, op::add_id, *a);
    r->src[0] = a;
    r->src[1] = b;
    r->src[2] = ids;
    return r;
}

tensor* tanh(context& ctx, tensor* a) {
    tensor* r = new_result(ctx, op::tanh, *a);
    r->src[0] = a;
    return r;
}

tensor* all_reduce(context& ctx, tensor* a) {
    TS_ASSERT(a->t == type::f32 && a->is_contiguous());
    tensor* r = new_result(ctx, op::all_reduce, *a);
    r->src[0] = a;
    return r;
}

tensor* all_gather(context& ctx, tensor* a, int n_members) {
    TS_ASSERT(a->t == type::f32 && a->is_contiguous() && n_members >= 1);
    tensor* r = ctx.new_tensor(type::f32, {a->ne[0] * n_members, a->ne[1], a->ne[2], a->ne[3]});
    r->o = op::all_gather;
    r->src[0] = a;
    r->op_params.i[0] = n_members;
    return r;
}

tensor* rms_norm_part(context& ctx, tensor* a, tensor* sum_sq, int64_t width, float eps) {
    TS_ASSERT(a->t == type::f32 && sum_sq->t == type::f32 && sum_sq->ne[0] == 1);
    TS_ASSERT(sum_sq->ne[1] == a->ne[1] && sum_sq->ne[2] == a->ne[2] && sum_sq->ne[3] == a->ne[3]);
    TS_ASSERT(width >= a->ne[0] && width <= INT32_MAX);
    tensor* r = new_result(ctx, op::rms_norm_part, *a);
    r->src[0] = a;
    r->src[1] = sum_sq;
    r->op_params.f[0] = eps;
    r->op_params.i[1] = int32_t(width);
    return r;
}

tensor* cpy(context& ctx, tensor* a, tensor* dst) {
    TS_ASSERT(a->n_elements() == dst->n_elements());
    tensor* r = new_view(ctx, dst, 0);
    r->o = op::cpy;
    r->src[0] = a;
    r->src[1] = dst;
    return r;
}

tensor* set_rows(context& ctx, tensor* dst, tensor* a, tensor* idx) {
    TS_ASSERT(idx->t == type::i32 || idx->t == type::i64);
    TS_ASSERT(idx->ne[1] == 1 && idx->ne[2] == 1 && idx->ne[3] == 1 && idx->ne[0] == a->ne[1]);
    TS_ASSERT(a->ne[2] == 1 && a->ne[3] == 1 && a->ne[0] == dst->ne[0]);
    TS_ASSERT(dst->ne[2] == 1 && dst->ne[3] == 1 && dst->nb[0] == type_size(dst->t) && !is_quantized(dst->t));
    tensor* r = new_view(ctx, dst, 0);
    r->o = op::set_rows;
    r->src[0] = a;
    r->src[1] = dst;
    r->src[2] = idx;
    return r;
}

tensor* attention(context& ctx, tensor* q, tensor* k, tensor* v, tensor* mask, float scale, tensor* sinks) {
    TS_ASSERT(q->t == type::f32 && q->ne[0] == k->ne[0] && k->ne[0] == v->ne[0]);
    TS_ASSERT(!sinks || (sinks->t == type::f32 && sinks->nb[0] == 4 && sinks->ne[0] == q->ne[1]));
    TS_ASSERT(k->ne[1] == v->ne[1] && k->ne[2] == v->ne[2] && q->ne[1] % k->ne[1] == 0);
    TS_ASSERT(!mask || (mask->t == type::f32 && mask->ne[0] == k->ne[2] && mask->ne[1] >= q->ne[2]));
    tensor* r = ctx.new_tensor(type::f32, {q->ne[0], q->ne[1], q->ne[2]});
    r->o = op::attention;
    r->src[0] = q;
    r->src[1] = k;
    r->src[2] = v;
    r->src[3] = mask;
    r->src[4] = sinks;
    r->op_params.f[0] = scale;
    return r;
}

} // namespace tessera
