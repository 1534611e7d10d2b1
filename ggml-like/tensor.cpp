// tensor.cpp: tensor helpers (byte sizes, contiguity, names) and op names.
#include "tensor.h"

#include <fmt/core.h>

namespace tessera {

const char* op_name(op o) {
    switch (o) {
    case op::none: return "none";
    case op::view: return "view";
    case op::get_rows: return "get_rows";
    case op::mul_mat: return "mul_mat";
    case op::add: return "add";
    case op::mul: return "mul";
    case op::scale: return "scale";
    case op::rms_norm: return "rms_norm";
    case op::rope: return "rope";
    case op::soft_max: return "soft_max";
    case op::silu: return "silu";
    case op::swiglu: return "swiglu";
    case op::geglu: return "geglu";
    case op::relu2_glu: return "relu2_glu";
    case op::score: return "score";
    case op::top_k: return "top_k";
    case op::mul_mat_id: return "mul_mat_id";
    case op::add_id: return "add_id";
    case op::sum_rows: return "sum_rows";
    case op::div: return "div";
    case op::clamp: return "clamp";
    case op::swiglu_oai: return "swiglu_oai";
    case op::tanh: return "tanh";
    case op::cpy: return "cpy";
    case op::set_rows: return "set_rows";
    case op::attention: return "attention";
    case op::all_reduce: return "all_reduce";
    case op::rms_norm_part: return "rms_norm_part";
    case op::all_gather: return "all_gather";
    }
    return "?";
}

size_t tensor::n_bytes() const {
    if (n_elements() == 0) return 0;
    size_t bytes = row_size(t, ne[0]);
    for (int d = 1; d < TS_MAX_DIMS; d++) bytes += size_t(ne[d] - 1) * nb[d];
    return bytes;
}

bool tensor::is_contiguous() const {
    size_t expect = type_size(t);
    if (nb[0] != expect) return false;
    expect = row_size(t, ne[0]);
    for (int d = 1; d < TS_MAX_DIMS; d++) {
        if (ne[d] != 1 && nb[d] != expect) return false;
        expect *= size_t(ne[d]);
    }
    return true;
}

void tensor::set_name(const std::string& s) {
    std::snprintf(name, sizeof(name), "%s", s.c_str());
}

bool same_shape(const tensor& a, const tensor& b) {
    for (int d = 0; d < TS_MAX_DIMS; d++)
        if (a.ne[d] != b.ne[d]) return false;
    return true;
}

std::string shape_str(const tensor& t) {
    int n = TS_MAX_DIMS;
    while (n > 1 && t.ne[n - 1] == 1) n--;
    std::string s = std::to_string(t.ne[0]);
    for (int d = 1; d < n; d++) s += " x " + std::to_string(t.ne[d]);
    return s;
}

} // namespace tessera
