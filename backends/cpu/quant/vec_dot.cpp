// vec_dot.cpp: the table of CPU row kernels: scalar references from quant/ for every format in TS_BLOCK_FORMATS and,
// when the CPU has AVX2/FMA/F16C, the versions in vec_dot_avx2.cpp and <format>_avx2.cpp (with AVX-512: the VNNI
// byte dots, vec_dot_vnni.cpp, and the prefill attention tiles, attention_avx512.cpp).
#include "vec_dot.h"

#include "ggml-like/error.h"
#include "quant/format.h"

#include <algorithm>
#include <cmath>


namespace tessera::cpu {

// Defined in vec_dot_avx2.cpp (compiled with -mavx2 -mfma -mf16c); only called when cpu_has_avx2().
namespace avx2 {
float vec_dot_q5_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q5_1_q8_1(const void* w, const void* a, int64_t n);
void gemm4_q5_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q5_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemm4_q5_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q5_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
float vec_dot_q4_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q4_1_q8_1(const void* w, const void* a, int64_t n);
float vec_dot_q8_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_f16_f16(const void* w, const void* a, int64_t n);
float vec_dot_f32_f32(const void* w, const void* a, int64_t n);
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void gemm4_q4_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemm4_q4_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemm4_q8_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q4_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
float vec_dot_q4_0_q8_0_blockwise(const void* w, const void* a, int64_t n);
void gemm4_q4_0_q8_0_blockwise(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q4_0_q8_0_blockwise(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q4_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q8_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void quantize_row_q8_1(const float* x, void* y, int64_t n);
// one file per newer format: <format>_avx2.cpp
float vec_dot_tq2_0_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q4_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q4_k_q8_k_rows8(const void* w, const void* a, int64_t n);
void gemm4_q4_k_q8_k_rows8(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q4_k_q8_k_rows8(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
float vec_dot_q2_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q3_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q2_k_q8_k_tiled(const void* w, const void* a, int64_t n);
float vec_dot_q3_k_q8_k_tiled(const void* w, const void* a, int64_t n);
float vec_dot_q5_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q6_k_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_q4_k_q8_k_tiled(const void* w, const void* a, int64_t n);
float vec_dot_q5_k_q8_k_tiled(const void* w, const void* a, int64_t n);
float vec_dot_q6_k_q8_k_tiled(const void* w, const void* a, int64_t n);
void quantize_row_q8_k(const float* x, void* y, int64_t n);
float vec_dot_i2_s_i8_s(const void* w, const void* a, int64_t n);
void quantize_row_i8_s(const float* x, void* y, int64_t n);
float vec_dot_nvfp4_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_mxfp4_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_mxfp4_q8_0_blockwise(const void* w, const void* a, int64_t n);
float vec_dot_iq3_xxs_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq3_xxs_q8_k_tiled(const void* w, const void* a, int64_t n);
float vec_dot_iq3_s_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq3_s_q8_k_tiled(const void* w, const void* a, int64_t n);
void row_panel_iq3_xxs_q8_k(const void* w, const void* a, size_t as, int64_t na, int64_t n, float* y, size_t ys);
void row_panel_iq3_xxs_q8_k_tiled(const void* w, const void* a, size_t as, int64_t na, int64_t n, float* y, size_t ys);
void row_panel_iq3_s_q8_k(const void* w, const void* a, size_t as, int64_t na, int64_t n, float* y, size_t ys);
void row_panel_iq3_s_q8_k_tiled(const void* w, const void* a, size_t as, int64_t na, int64_t n, float* y, size_t ys);
float vec_dot_iq4_nl_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_iq4_nl_q8_0_lanes(const void* w, const void* a, int64_t n);
float vec_dot_iq4_nl_q8_0_blockwise(const void* w, const void* a, int64_t n);
float vec_dot_iq4_xs_q8_k(const void* w, const void* a, int64_t n);
float vec_dot_iq4_xs_q8_k_tiled(const void* w, const void* a, int64_t n);
template <int G> float vec_dot_awq4_q8_1(const void* w, const void* a, int64_t n);
void f32_to_f16_row(const float* x, void* y, int64_t n);
void f16_to_f32_row(const void* x, float* y, int64_t n);
float dot_ggml_order(const float* x, const float* y, int64_t n);
float dot_f16(const float* x, const uint16_t* y, int64_t n);
void attend_f16(const float* q, const uint16_t* k, const uint16_t* v, int64_t stride, const float* mask, int64_t n,
                float scale, int64_t hd, float& M, float& S, float* acc);
void mad(float* acc, const float* v, float s, int64_t n, bool round_f16);
void mad_f16(float* acc, const uint16_t* v, float s, int64_t n, bool round_f16);
void scale(float* acc, float s, int64_t n, bool round_f16);
void swiglu(const float* g, const float* u, float* y, int64_t n);
void silu(const float* x, float* y, int64_t n);
void kq_tile(const float* const* q, int nr, const float* kt, int64_t hd, float* s);
double softmax_tile(float* s, float m);
void pv_tile(float* const* acc, const float* const* p, int nr, const float* v, int64_t n, int64_t hd);
} // namespace avx2

// The integer-dot kernels again, built with AVX-512 VNNI (vec_dot_vnni.cpp)
namespace avx512vnni {
float vec_dot_q5_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q5_1_q8_1(const void* w, const void* a, int64_t n);
void gemm4_q5_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q5_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemm4_q5_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q5_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
float vec_dot_q4_0_q8_0(const void* w, const void* a, int64_t n);
float vec_dot_q4_1_q8_1(const void* w, const void* a, int64_t n);
float vec_dot_q8_0_q8_0(const void* w, const void* a, int64_t n);
void gemm4_q4_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemm4_q4_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemm4_q8_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q4_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q4_1_q8_1(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q8_0_q8_0(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
float vec_dot_q4_0_q8_0_blockwise(const void* w, const void* a, int64_t n);
void gemm4_q4_0_q8_0_blockwise(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
void gemv4_q4_0_q8_0_blockwise(const void* w, size_t ws, const void* a, size_t as, int64_t n, float* y, size_t ys);
} // namespace avx512vnni

// The prefill attention tile kernels with 16 lanes (attention_avx512.cpp), the same bits as the AVX2 ones
namespace avx512 {
void kq_tile(const float* const* q, int nr, const float* kt, int64_t hd, float* s);
float score_tile(float* s, const float* mask, float scale, int64_t n);
double softmax_tile(float* s, float m);
void pv_tile(float* const* acc, const float* const* p, int nr, const float* v, int64_t n, int64_t hd);
} // namespace avx512

// ---- scalar references of the float kernels (see vec_dot.h) ----
namespace ref {

inline float at1(const float* p, int64_t i) { return p[i]; }
inline float at1(const uint16_t* p, int64_t i) { return fp16_to_fp32(p[i]); }

template <class Y> float dot_ggml_order_t(const float* x, const Y* y, int64_t n) {
    constexpr int64_t lanes = 16, regs = 4, step = lanes * regs;
    float sum[regs][lanes] = {};
    const int64_t np = n - n % step;
    for (int64_t i = 0; i < np; i += step)
        for (int64_t j = 0; j < regs; j++)
            for (int64_t l = 0; l < lanes; l++)
                sum[j][l] = std::fma(x[i + j * lanes + l], at1(y, i + j * lanes + l), sum[j][l]);
    float v[lanes];
    for (int64_t l = 0; l < lanes; l++) v[l] = (sum[0][l] + sum[2][l]) + (sum[1][l] + sum[3][l]);
    float h8[8], h4[4];
    for (int l = 0; l < 8; l++) h8[l] = v[l + 8] + v[l];
    for (int l = 0; l < 4; l++) h4[l] = h8[l + 4] + h8[l];
    double total = double((h4[0] + h4[2]) + (h4[1] + h4[3]));
    for (int64_t i = np; i < n; i++) total += double(x[i] * at1(y, i));
    return float(total);
}
float dot_ggml_order(const float* x, const float* y, int64_t n) { return dot_ggml_order_t(x, y, n); }
float dot_f16(const float* x, const uint16_t* y, int64_t n) { return dot_ggml_order_t(x, y, n); }

inline float round_f16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

template <class Y> void mad_t(float* acc, const Y* v, float s, int64_t n, bool f16) {
    for (int64_t i = 0; i < n; i++) {
        const float a = std::fma(at1(v, i), s, acc[i]);
        acc[i] = f16 ? round_f16(a) : a;
    }
}
void mad(float* acc, const float* v, float s, int64_t n, bool f16) { mad_t(acc, v, s, n, f16); }
void mad_f16(float* acc, const uint16_t* v, float s, int64_t n, bool f16) { mad_t(acc, v, s, n, f16); }

void scale(float* acc, float s, int64_t n, bool f16) {
    for (int64_t i = 0; i < n; i++) acc[i] = f16 ? round_f16(acc[i] * s) : acc[i] * s;
}

} // namespace ref


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

// Slot of a type in the tables: ggml's ids below 64, tessera's own (1024..) after them; -1 for neither.
constexpr int n_slots = 64 + 16;
int slot(type t) {
    const auto id = uint32_t(t);
    if (id < 64) return int(id);
    if (id >= 1024 && id < 1024 + 16) return int(64 + id - 1024);
    return -1;
}

struct tables {
    cpu_type_ops ref[n_slots];
    cpu_type_ops fast[n_slots];
    bool has[n_slots] = {};
    void add(type t) {
        const int i = slot(t);
        TS_ASSERT(i >= 0);
        has[i] = true;
        ref[i] = fast[i] = make_ref(t);
    }
    void set_fast(type t, vec_dot_fn dot, from_float_fn act) {
        fast[slot(t)].vec_dot = dot;
        fast[slot(t)].act_from_float = act;
    }
    tables() {
        for (type t : {type::f32, type::f16, type::bf16}) add(t);
#define TS_ADD_FORMAT(F) add(F::id);
        TS_BLOCK_FORMATS(TS_ADD_FORMAT)
#undef TS_ADD_FORMAT
        if (!cpu_has_avx2()) return;
        set_fast(type::q4_0, avx2::vec_dot_q4_0_q8_0, avx2::quantize_row_q8_0);
        set_fast(type::q8_0, avx2::vec_dot_q8_0_q8_0, avx2::quantize_row_q8_0);
        set_fast(type::q4_1, avx2::vec_dot_q4_1_q8_1, avx2::quantize_row_q8_1);
        // q5_0 / q5_1: ggml's vec_dot (llama.cpp neither repacks them nor, for q5_1, runs tinyBLAS; q5_0's
        // tinyBLAS_Q0_AVX keeps vec_dot's lanes and order, as for q8_0); 4 x 4 blocks in that order
        set_fast(type::q5_0, avx2::vec_dot_q5_0_q8_0, avx2::quantize_row_q8_0);
        set_fast(type::q5_1, avx2::vec_dot_q5_1_q8_1, avx2::quantize_row_q8_1);
        fast[slot(type::q5_0)].gemm4 = avx2::gemm4_q5_0_q8_0;
        fast[slot(type::q5_0)].gemv4 = avx2::gemv4_q5_0_q8_0;
        fast[slot(type::q5_1)].gemm4 = avx2::gemm4_q5_1_q8_1;
        fast[slot(type::q5_1)].gemv4 = avx2::gemv4_q5_1_q8_1;
        set_fast(type::tq2_0, avx2::vec_dot_tq2_0_q8_k, avx2::quantize_row_q8_k);
        set_fast(type::q2_k, avx2::vec_dot_q2_k_q8_k, avx2::quantize_row_q8_k);
        set_fast(type::q3_k, avx2::vec_dot_q3_k_q8_k, avx2::quantize_row_q8_k);
        set_fast(type::q4_k, avx2::vec_dot_q4_k_q8_k, avx2::quantize_row_q8_k);
        set_fast(type::q5_k, avx2::vec_dot_q5_k_q8_k, avx2::quantize_row_q8_k);
        set_fast(type::q6_k, avx2::vec_dot_q6_k_q8_k, avx2::quantize_row_q8_k);
        fast[slot(type::q4_k)].vec_dot_rows8 = avx2::vec_dot_q4_k_q8_k_rows8; // llama.cpp's q4_K_8x8 orders
        fast[slot(type::q4_k)].gemm4_rows8 = avx2::gemm4_q4_k_q8_k_rows8;
        fast[slot(type::q4_k)].gemv4_rows8 = avx2::gemv4_q4_k_q8_k_rows8;
        fast[slot(type::q4_k)].vec_dot_batch8 = avx2::vec_dot_q4_k_q8_k_tiled; // ggml's tiled kernels' order
        fast[slot(type::q2_k)].vec_dot_batch8 = avx2::vec_dot_q2_k_q8_k_tiled;
        fast[slot(type::q3_k)].vec_dot_batch8 = avx2::vec_dot_q3_k_q8_k_tiled;
        fast[slot(type::q5_k)].vec_dot_batch8 = avx2::vec_dot_q5_k_q8_k_tiled;
        fast[slot(type::q6_k)].vec_dot_batch8 = avx2::vec_dot_q6_k_q8_k_tiled;
        set_fast(type::i2_s, avx2::vec_dot_i2_s_i8_s, avx2::quantize_row_i8_s);
        set_fast(type::nvfp4, avx2::vec_dot_nvfp4_q8_0, avx2::quantize_row_q8_0);
        set_fast(type::mxfp4, avx2::vec_dot_mxfp4_q8_0, avx2::quantize_row_q8_0);
        set_fast(type::awq4, avx2::vec_dot_awq4_q8_1<128>, avx2::quantize_row_q8_1);
        set_fast(type::awq4_g64, avx2::vec_dot_awq4_q8_1<64>, avx2::quantize_row_q8_1);
        fast[slot(type::q4_0)].gemm4 = avx2::gemm4_q4_0_q8_0;
        fast[slot(type::q4_1)].gemm4 = avx2::gemm4_q4_1_q8_1;
        fast[slot(type::q8_0)].gemm4 = avx2::gemm4_q8_0_q8_0;
        fast[slot(type::q4_0)].gemv4 = avx2::gemv4_q4_0_q8_0;
        fast[slot(type::q4_0)].vec_dot_rows8 = avx2::vec_dot_q4_0_q8_0_blockwise;
        fast[slot(type::q4_0)].gemm4_rows8 = avx2::gemm4_q4_0_q8_0_blockwise;
        fast[slot(type::q4_0)].gemv4_rows8 = avx2::gemv4_q4_0_q8_0_blockwise;
        fast[slot(type::mxfp4)].vec_dot_rows8 = avx2::vec_dot_mxfp4_q8_0_blockwise; // llama.cpp's mxfp4_8x8 order
        // iq4_nl: ggml_vec_dot's order, tinyBLAS's for batches, iq4_nl_8x8's for the matrices it repacks; iq4_xs:
        // ggml_vec_dot's and the tiled kernels'
        set_fast(type::iq4_nl, avx2::vec_dot_iq4_nl_q8_0, avx2::quantize_row_q8_0);
        fast[slot(type::iq4_nl)].vec_dot_sgemm = avx2::vec_dot_iq4_nl_q8_0_lanes;
        fast[slot(type::iq4_nl)].vec_dot_rows8 = avx2::vec_dot_iq4_nl_q8_0_blockwise;
        set_fast(type::iq4_xs, avx2::vec_dot_iq4_xs_q8_k, avx2::quantize_row_q8_k);
        fast[slot(type::iq4_xs)].vec_dot_batch8 = avx2::vec_dot_iq4_xs_q8_k_tiled;
        // iq3_xxs / iq3_s: ggml_vec_dot's lanes and the tiled kernels' order (llama.cpp repacks neither)
        set_fast(type::iq3_xxs, avx2::vec_dot_iq3_xxs_q8_k, avx2::quantize_row_q8_k);
        fast[slot(type::iq3_xxs)].vec_dot_batch8 = avx2::vec_dot_iq3_xxs_q8_k_tiled;
        set_fast(type::iq3_s, avx2::vec_dot_iq3_s_q8_k, avx2::quantize_row_q8_k);
        fast[slot(type::iq3_s)].vec_dot_batch8 = avx2::vec_dot_iq3_s_q8_k_tiled;
        fast[slot(type::iq3_xxs)].row_panel = avx2::row_panel_iq3_xxs_q8_k;
        fast[slot(type::iq3_xxs)].row_panel_batch8 = avx2::row_panel_iq3_xxs_q8_k_tiled;
        fast[slot(type::iq3_s)].row_panel = avx2::row_panel_iq3_s_q8_k;
        fast[slot(type::iq3_s)].row_panel_batch8 = avx2::row_panel_iq3_s_q8_k_tiled;
        fast[slot(type::q4_1)].gemv4 = avx2::gemv4_q4_1_q8_1;
        // no gemv4 for q8_0: measured 3x slower than the row dot on 49152 x 576 (5 vs 16-20 GB/s, this machine,
        // 2026-11-22); not understood yet

        if (cpu_has_avx512vnni()) {
            namespace v = avx512vnni;
            auto& q40 = fast[slot(type::q4_0)];
            auto& q41 = fast[slot(type::q4_1)];
            auto& q80 = fast[slot(type::q8_0)];
            q40.vec_dot = v::vec_dot_q4_0_q8_0, q40.gemm4 = v::gemm4_q4_0_q8_0, q40.gemv4 = v::gemv4_q4_0_q8_0;
            q40.vec_dot_rows8 = v::vec_dot_q4_0_q8_0_blockwise;
            q40.gemm4_rows8 = v::gemm4_q4_0_q8_0_blockwise, q40.gemv4_rows8 = v::gemv4_q4_0_q8_0_blockwise;
            q41.vec_dot = v::vec_dot_q4_1_q8_1, q41.gemm4 = v::gemm4_q4_1_q8_1, q41.gemv4 = v::gemv4_q4_1_q8_1;
            q80.vec_dot = v::vec_dot_q8_0_q8_0, q80.gemm4 = v::gemm4_q8_0_q8_0;
            auto& q50 = fast[slot(type::q5_0)];
            auto& q51 = fast[slot(type::q5_1)];
            q50.vec_dot = v::vec_dot_q5_0_q8_0, q50.gemm4 = v::gemm4_q5_0_q8_0, q50.gemv4 = v::gemv4_q5_0_q8_0;
            q51.vec_dot = v::vec_dot_q5_1_q8_1, q51.gemm4 = v::gemm4_q5_1_q8_1, q51.gemv4 = v::gemv4_q5_1_q8_1;
        }
        set_fast(type::f16, avx2::vec_dot_f16_f16, avx2::f32_to_f16_row);
        fast[slot(type::f16)].to_float = avx2::f16_to_f32_row;
        fast[slot(type::f32)].vec_dot = avx2::vec_dot_f32_f32;
    }
};

} // namespace

float expf_ggml(float x) {
    const float r = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                      std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                             u, std::fma(0x1.ffffecp-1f, b, 1.0f));
    if (std::fabs(n) > 192.0f) return n <= 0.0f ? 0.0f : INFINITY;
    return std::ldexp(j, int(n));
}

namespace ref {
// ggml runs its vector expf over whole 16-element groups and libm's expf over the tail; so do we
void swiglu(const float* g, const float* u, float* y, int64_t n) {
    const int64_t nv = n - n % 16;
    for (int64_t i = 0; i < nv; i++) y[i] = g[i] / (1.0f + expf_ggml(0.0f - g[i])) * u[i];
    for (int64_t i = nv; i < n; i++) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}
void silu(const float* x, float* y, int64_t n) {
    const int64_t nv = n - n % 16;
    for (int64_t i = 0; i < nv; i++) y[i] = x[i] / (1.0f + expf_ggml(0.0f - x[i]));
    for (int64_t i = nv; i < n; i++) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}
void kq_tile(const float* const* q, int nr, const float* kt, int64_t hd, float* s) {
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < 64; j++) {
            float acc = 0.0f;
            for (int64_t d = 0; d < hd; d++) acc = std::fma(q[i][d], kt[d * 64 + j], acc);
            s[i * 64 + j] = acc;
        }
}

float score_tile(float* s, const float* mask, float scale, int64_t n) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < 64; j++) {
        s[j] = j < n ? s[j] * scale + (mask ? mask[j] : 0.0f) : -INFINITY;
        mx = std::max(mx, s[j]);
    }
    return mx;
}

double softmax_tile(float* s, float m) {
    double sum = 0.0;
    for (int g = 0; g < 64; g += 16) {
        float v[16];
        for (int l = 0; l < 16; l++) s[g + l] = v[l] = expf_ggml(s[g + l] - m);
        float h8[8], h4[4];
        for (int l = 0; l < 8; l++) h8[l] = v[l + 8] + v[l];
        for (int l = 0; l < 4; l++) h4[l] = h8[l + 4] + h8[l];
        sum += double((h4[0] + h4[2]) + (h4[1] + h4[3]));
    }
    return sum;
}

void pv_tile(float* const* acc, const float* const* p, int nr, const float* v, int64_t n, int64_t hd) {
    for (int i = 0; i < nr; i++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t d = 0; d < hd; d++) acc[i][d] = std::fma(v[j * hd + d], p[i][j], acc[i][d]);
}

} // namespace ref

const float_kernels& find_float_kernels(bool reference) {
    static const float_kernels scalar{ref::dot_ggml_order, ref::mad,     ref::scale,      ref::swiglu,
                                      ref::silu,           ref::kq_tile, ref::score_tile, ref::softmax_tile,
                                      ref::pv_tile,        ref::dot_f16, ref::mad_f16,    nullptr};
    static const float_kernels fast = [] {
        if (!cpu_has_avx2()) return scalar;
        // score_tile: the scalar loop (no AVX2 version)
        float_kernels k{avx2::dot_ggml_order, avx2::mad,     avx2::scale,     avx2::swiglu,
                        avx2::silu,           avx2::kq_tile, ref::score_tile, avx2::softmax_tile,
                        avx2::pv_tile,        avx2::dot_f16, avx2::mad_f16,   avx2::attend_f16};
        if (cpu_has_avx512vnni()) {
            k.kq_tile = avx512::kq_tile, k.score_tile = avx512::score_tile, k.softmax_tile = avx512::softmax_tile;
            k.pv_tile = avx512::pv_tile;
        }
        return k;
    }();
    return reference ? scalar : fast;
}

const cpu_type_ops* find_cpu_ops(type t, bool reference) {
    static const tables tab;
    const int i = slot(t);
    if (i < 0 || !tab.has[i]) return nullptr;
    return reference ? &tab.ref[i] : &tab.fast[i];
}

} // namespace tessera::cpu
