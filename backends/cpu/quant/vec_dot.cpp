// vec_dot.cpp: the table of CPU row kernels: scalar references from quant/ and, when the CPU has AVX2/FMA/F16C,
// the versions in vec_dot_avx2.cpp.
#include "vec_dot.h"

#include "quant/format.h"

namespace tessera::cpu {

// Defined in vec_dot_avx2.cpp (compiled with -mavx2 -mfma -mf16c); only called when cpu_has_avx2().
namespace avx2 {
float vec_dot_q4_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q4_1_q8_1(const void* w, const void* a, int64_t n);
float vec_dot_q8_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_f16_f16(const void* w, const void* a, int64_t n);
float vec_dot_f32_f32(const void* w, const void* a, int64_t n);
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void quantize_row_q8_1(const float* x, void* y, int64_t n);
void f32_to_f16_row(const float* x, void* y, int64_t n);
void f16_to_f32_row(const void* x, float* y, int64_t n);
} // namespace avx2

namespace {

float vec_dot_f32_ref(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const float*>(w);
    auto* y = static_cast<const float*>(a);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += double(x[i]) * double(y[i]);
    return float(s);
}
float vec_dot_f16_ref(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += double(fp16_to_fp32(x[i])) * double(fp16_to_fp32(y[i]));
    return float(s);
}
float vec_dot_bf16_ref(const void* w, const void* a, int64_t n) {
    auto* x = static_cast<const uint16_t*>(w);
    auto* y = static_cast<const uint16_t*>(a);
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += double(bf16_to_fp32(x[i])) * double(bf16_to_fp32(y[i]));
    return float(s);
}

cpu_type_ops make_ref(type t) {
    const row_ops* r = find_row_ops(t);
    const row_ops* d = find_row_ops(r->dot_type);
    cpu_type_ops o{r->dot_type, d->from_float, nullptr, r->to_float};
    switch (t) {
    case type::f32: o.vec_dot = vec_dot_f32_ref; break;
    case type::f16: o.vec_dot = vec_dot_f16_ref; break;
    case type::bf16: o.vec_dot = vec_dot_bf16_ref; break;
    default: visit_format(t, [&]<class F>() { o.vec_dot = vec_dot_row_ref<F>; }); break;
    }
    return o;
}

struct tables {
    cpu_type_ops ref[64];
    cpu_type_ops fast[64];
    bool has[64] = {};
    tables() {
        const type all[] = {type::f32, type::f16, type::bf16, type::q4_0, type::q4_1, type::q8_0, type::q8_1};
        for (type t : all) {
            const auto i = size_t(t);
            has[i] = true;
            ref[i] = fast[i] = make_ref(t);
        }
        if (!cpu_has_avx2()) return;
        fast[size_t(type::q4_0)].vec_dot = avx2::vec_dot_q4_0_q8_0;
        fast[size_t(type::q4_0)].act_from_float = avx2::quantize_row_q8_0;
        fast[size_t(type::q8_0)].vec_dot = avx2::vec_dot_q8_0_q8_0;
        fast[size_t(type::q8_0)].act_from_float = avx2::quantize_row_q8_0;
        fast[size_t(type::q4_1)].vec_dot = avx2::vec_dot_q4_1_q8_1;
        fast[size_t(type::q4_1)].act_from_float = avx2::quantize_row_q8_1;
        fast[size_t(type::f16)].vec_dot = avx2::vec_dot_f16_f16;
        fast[size_t(type::f16)].act_from_float = avx2::f32_to_f16_row;
        fast[size_t(type::f16)].to_float = avx2::f16_to_f32_row;
        fast[size_t(type::f32)].vec_dot = avx2::vec_dot_f32_f32;
    }
};

} // namespace

bool cpu_has_avx2() {
    static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                            __builtin_cpu_supports("f16c");
    return has;
}

const cpu_type_ops* find_cpu_ops(type t, bool reference) {
    static const tables tab;
    const auto i = size_t(t);
    if (i >= 64 || !tab.has[i]) return nullptr;
    return reference ? &tab.ref[i] : &tab.fast[i];
}

} // namespace tessera::cpu
