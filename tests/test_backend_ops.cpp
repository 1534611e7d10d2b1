// test_backend_ops.cpp: every op on the CUDA backend against the CPU backend (the reference, itself checked against
// naive code in test_ops.cpp): every op x every weight type x shapes with odd sizes and non-multiples of the tiles,
// seeded random inputs (never zeros), outputs NaN-poisoned before each run, an NMSE bound stated per case. Weights go
// through backend::load_weights as the model's do. Then the default model end to end: top-1 agreement of CUDA with
// the CPU over teacher-forced steps. Every test skips with a message where there is no CUDA device (CI).
#include "helpers.h"

#include "backends/cpu/cpu_backend.h"
#include "ggml-like/error.h"
#include "ggml-like/ops.h"
#include "llm/device.h"
#include "llm/model.h"
#include "llm/sampler.h"
#include "quant/format.h"
#include "quant/nvfp4.h"

#ifdef TESSERA_HAS_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace tessera;
using tessera::test::nmse;
using tessera::test::random_normal;

namespace {

bool have_cuda(std::string* why) {
    return find_gpu(why).has_value();
}

#define TS_REQUIRE_CUDA()                                                                                              \
    do {                                                                                                               \
        std::string why_;                                                                                              \
        if (!have_cuda(&why_)) GTEST_SKIP() << "no CUDA device: " << why_;                                             \
    } while (0)

// ---- cases: leaves described once, built on each backend ----

struct leaf {
    type t = type::f32;
    int64_t ne[4] = {1, 1, 1, 1};
    // The data. Random leaves make theirs when a test first reads it (data()): every test process instantiates the
    // whole case list for its names, and quantizing every case's weights up front cost each process ~3 s (~7 s under
    // AddressSanitizer), ctest running each case as its own process.
    mutable std::vector<uint8_t> bytes;
    std::function<std::vector<uint8_t>()> make;
    const std::vector<uint8_t>& data() const {
        if (bytes.empty() && make) bytes = make();
        return bytes;
    }
    bool weight = false; // flag_param with host data, loaded through backend::load_weights
    uint32_t flags = 0;  // more tensor flags (flag_embedding: a token table, which the CUDA upload keeps as in the file)
};

// Tensors a case's build adds here are expanded into the graph before its output, in this order (a graph built as
// the model builds it: q, k and v next to each other, then rope(Q) first; run_case sets it around build).
thread_local std::vector<tensor*>* expand_first = nullptr;

struct op_case {
    std::string name;
    std::vector<leaf> leaves;
    std::function<tensor*(context&, const std::vector<tensor*>&)> build; // the node to check, from the leaves
    double max_nmse = 0;                                                 // CUDA vs CPU, over the output
    int check_leaf = -1; // also compare this leaf's bytes exactly afterwards (the cache a cpy writes into)
};

template <class T> std::vector<uint8_t> to_bytes(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

leaf f32_leaf(std::initializer_list<int64_t> ne, uint32_t seed, float sigma = 1.0f) {
    leaf l;
    int i = 0;
    for (int64_t d : ne) l.ne[i++] = d;
    const size_t n = size_t(l.ne[0] * l.ne[1] * l.ne[2] * l.ne[3]);
    l.make = [n, seed, sigma] { return to_bytes(random_normal(n, seed, sigma)); };
    return l;
}

leaf i32_leaf(std::vector<int32_t> v) {
    leaf l;
    l.t = type::i32;
    l.ne[0] = int64_t(v.size());
    l.bytes = to_bytes(v);
    return l;
}

leaf i64_leaf(std::vector<int64_t> v) {
    leaf l;
    l.t = type::i64;
    l.ne[0] = int64_t(v.size());
    l.bytes = to_bytes(v);
    return l;
}

// Random rows quantized to t with the reference quantizer; a weight (load_weights) unless told otherwise.
leaf typed_leaf(type t, std::initializer_list<int64_t> ne, uint32_t seed, bool weight = true) {
    leaf l;
    l.t = t;
    l.weight = weight;
    int i = 0;
    for (int64_t d : ne) l.ne[i++] = d;
    const int64_t k = l.ne[0], n_rows = l.ne[1] * l.ne[2] * l.ne[3];
    l.make = [t, k, n_rows, seed] {
        const auto v = random_normal(size_t(k * n_rows), seed);
        std::vector<uint8_t> b;
        // the whole tensor through the reference quantizer where the type has a tail (i2_s: the scale after the rows)
        if (type_info(t).tail_bytes) {
            b.resize(tensor_bytes(t, k * n_rows));
            TS_ASSERT(quantize_tensor_ref(t, v.data(), b.data(), k, n_rows));
            return b;
        }
        const size_t row = row_size(t, k);
        b.resize(row * size_t(n_rows));
        const row_ops* ops = find_row_ops(t);
        for (int64_t r = 0; r < n_rows; r++) ops->from_float(v.data() + r * k, b.data() + size_t(r) * row, k);
        return b;
    };
    return l;
}

// (n_kv, n_rows) additive mask: row r sees keys j <= n_past + r
leaf causal_mask(int64_t n_kv, int64_t n_rows) {
    std::vector<float> m(size_t(n_kv * n_rows));
    const int64_t n_past = n_kv - n_rows;
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t j = 0; j < n_kv; j++) m[size_t(r * n_kv + j)] = j <= n_past + r ? 0.0f : -INFINITY;
    leaf l;
    l.ne[0] = n_kv;
    l.ne[1] = n_rows;
    l.bytes = to_bytes(m);
    return l;
}

// (n_kv, n_rows) additive mask that is not causal, in key ranges of 64 (the tensor-core prefill's tiles): keys
// 0..63 a mix (-inf, 0 and random biases in [-2, 2]), 64..127 -inf for every row, 128..191 zero for every row,
// 192..255 a constant bias of 0.5, the rest a mix again; row 5 sees no key at all (its output is 0)
leaf pattern_mask(int64_t n_kv, int64_t n_rows, uint64_t seed) {
    std::vector<float> m(size_t(n_kv * n_rows));
    const std::vector<float> u = random_normal(m.size(), seed);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t j = 0; j < n_kv; j++) {
            const float x = u[size_t(r * n_kv + j)];
            float v = x < -0.8f ? -INFINITY : x < 0.3f ? 0.0f : std::clamp(x - 1.0f, -2.0f, 2.0f);
            if (j >= 64 && j < 128) v = -INFINITY;
            else if (j >= 128 && j < 192) v = 0.0f;
            else if (j >= 192 && j < 256) v = 0.5f;
            if (r == 5) v = -INFINITY;
            m[size_t(r * n_kv + j)] = v;
        }
    leaf l;
    l.ne[0] = n_kv;
    l.ne[1] = n_rows;
    l.bytes = to_bytes(m);
    return l;
}

struct run_result {
    std::vector<float> out;       // the output, in row-major order of its shape (f32 outputs)
    std::vector<uint8_t> raw;     // the output's bytes (i32 outputs, contiguous)
    std::vector<uint8_t> checked; // check_leaf's bytes
};

run_result run_on(backend& be, const op_case& c) {
    context ctx;
    std::vector<tensor*> ts;
    std::vector<tensor*> weights;
    std::vector<std::unique_ptr<buffer>> bufs;
    for (const leaf& l : c.leaves) {
        tensor* t = ctx.new_tensor(l.t, l.ne, 4);
        const std::vector<uint8_t>& bytes = l.data();
        TS_ASSERT(t->n_bytes() + type_info(l.t).tail_bytes == bytes.size());
        t->flags |= l.flags;
        if (l.weight) {
            t->flags |= flag_param;
            t->data = const_cast<uint8_t*>(bytes.data());
            weights.push_back(t);
        } else {
            bufs.push_back(be.alloc(bytes.size()));
            t->data = bufs.back()->base();
            be.set(*t, bytes.data(), 0, bytes.size());
        }
        ts.push_back(t);
    }
    be.load_weights(weights);
    std::vector<tensor*> first;
    expand_first = &first;
    tensor* out = c.build(ctx, ts);
    expand_first = nullptr;
    out->flags |= flag_output;
    graph g;
    for (tensor* t : first) g.expand(t);
    g.expand(out);
    graph_runner runner(be);
    runner.prepare(g);
    for (tensor* n : g.nodes) // NaN-poison every computed tensor that owns memory (0xff bytes: NaN in f32 and f16)
        if (!n->view_src) {
            const std::vector<uint8_t> nan(n->n_bytes(), 0xff);
            be.set(*n, nan.data(), 0, nan.size());
        }
    runner.compute(g);
    be.synchronize();

    run_result r;
    TS_ASSERT(out->t == type::f32 || out->t == type::i32 || c.check_leaf >= 0);
    if (out->t == type::i32) {
        TS_ASSERT(out->is_contiguous());
        r.raw.resize(out->n_bytes());
        be.get(*out, r.raw.data(), 0, r.raw.size());
    }
    if (out->t == type::f32) {
        std::vector<uint8_t> raw(out->n_bytes());
        be.get(*out, raw.data(), 0, raw.size());
        r.out.resize(size_t(out->n_elements()));
        for (int64_t i = 0; i < out->n_elements(); i++) {
            const int64_t i0 = i % out->ne[0], i1 = (i / out->ne[0]) % out->ne[1];
            const int64_t i2 = (i / (out->ne[0] * out->ne[1])) % out->ne[2];
            const int64_t i3 = i / (out->ne[0] * out->ne[1] * out->ne[2]);
            std::memcpy(&r.out[size_t(i)],
                        raw.data() + i0 * out->nb[0] + i1 * out->nb[1] + i2 * out->nb[2] + i3 * out->nb[3], 4);
        }
    }
    if (c.check_leaf >= 0) {
        tensor* t = ts[size_t(c.check_leaf)];
        r.checked.resize(t->n_bytes());
        be.get(*t, r.checked.data(), 0, r.checked.size());
    }
    return r;
}

std::string shape_name(std::initializer_list<int64_t> ne) {
    std::string s;
    for (int64_t d : ne) s += (s.empty() ? "" : "x") + std::to_string(d);
    return s;
}

const type weight_types[] = {type::f32, type::f16, type::bf16, type::q4_0, type::q4_1, type::q8_0};

// ---- the cases ----

std::vector<op_case> all_cases() {
    std::vector<op_case> cs;
    auto add_case = [&](std::string name, std::vector<leaf> leaves,
                        std::function<tensor*(context&, const std::vector<tensor*>&)> build, double bound,
                        int check_leaf = -1) {
        cs.push_back({std::move(name), std::move(leaves), std::move(build), bound, check_leaf});
    };

    // elementwise. bound 0: one f32 operation per element, the same on both; silu: expf vs ggml's exp (~2 ulp)
    for (auto b : {std::initializer_list<int64_t>{37}, {37, 5, 1}, {37, 1, 3}}) {
        add_case(
            "add_37x5x3_by_" + shape_name(b), {f32_leaf({37, 5, 3}, 1), f32_leaf(b, 2)},
            [](context& c, const auto& t) { return add(c, t[0], t[1]); }, 0.0);
        add_case(
            "mul_37x5x3_by_" + shape_name(b), {f32_leaf({37, 5, 3}, 3), f32_leaf(b, 4)},
            [](context& c, const auto& t) { return mul(c, t[0], t[1]); }, 0.0);
    }
    add_case(
        "add_transposed_5x37", {f32_leaf({5, 37}, 5), f32_leaf({37}, 6)},
        [](context& c, const auto& t) { return add(c, transpose(c, t[0]), t[1]); }, 0.0);
    add_case(
        "scale_131x7", {f32_leaf({131, 7}, 7, 3.0f)}, [](context& c, const auto& t) { return scale(c, t[0], 0.37f); },
        0.0);
    for (int64_t n : {131, 4099}) {
        add_case(
            "silu_" + std::to_string(n) + "x7", {f32_leaf({n, 7}, 8, 3.0f)},
            [](context& c, const auto& t) { return silu(c, t[0]); }, 1e-12);
        add_case(
            "swiglu_" + std::to_string(n) + "x7", {f32_leaf({n, 7}, 9, 3.0f), f32_leaf({n, 7}, 10)},
            [](context& c, const auto& t) { return swiglu(c, t[0], t[1]); }, 1e-12);
        // geglu: the same f16 table on both (exact); relu2: three f32 products (exact); tanh: tanhf vs glibc, ~1 ulp
        add_case(
            "geglu_" + std::to_string(n) + "x7", {f32_leaf({n, 7}, 11, 6.0f), f32_leaf({n, 7}, 10)},
            [](context& c, const auto& t) { return geglu(c, t[0], t[1]); }, 0.0);
        add_case(
            "relu2_glu_" + std::to_string(n) + "x7", {f32_leaf({n, 7}, 11, 3.0f), f32_leaf({n, 7}, 10)},
            [](context& c, const auto& t) { return relu2_glu(c, t[0], t[1]); }, 0.0);
        add_case(
            "tanh_" + std::to_string(n) + "x7", {f32_leaf({n, 7}, 11, 3.0f)},
            [](context& c, const auto& t) { return tanh(c, t[0]); }, 1e-12);
    }

    // Chains CUDA runs as one kernel (ops/fused.cu): add -> rms_norm -> mul by a weight row [-> q8_1 for the mul_mat
    // after it], rms_norm -> mul, swiglu -> q8_1. The fused kernels do the unfused kernels' arithmetic; vs the CPU:
    // float vs double sums of squares (~1e-7 relative) -> 1e-12 without a mul_mat; with one, a q8 value may flip at a
    // rounding tie -> the quantized bound, 1e-6. Row lengths: 576 (not a multiple of 256: partial warps of the block),
    // 4096; 1 and 5 rows (decode, a small batch) and 40 (prefill: the tensor-core GEMM reads the q8_1 the fused kernel
    // left, on Hopper as f16 values).
    // (576, 4096, 14336: the vector kernel of norm.cu, up to its largest block; 100: the strided one)
    // per-head Q / K norms (qwen3, gemma3): the rows of a contiguous view of the projection, as heads
    for (int64_t rows : {int64_t(1), int64_t(7)})
        add_case("fused_norm_mul_heads_128x8x" + std::to_string(rows), {f32_leaf({1024, rows}, 56), f32_leaf({128}, 57)},
                 [=](context& c, const auto& t) {
                     return mul(c, rms_norm(c, reshape_3d(c, t[0], 128, 8, rows), 1e-6f), t[1]);
                 },
                 1e-12);
    add_case("fused_add_norm_mul_100x5", {f32_leaf({100, 5}, 53), f32_leaf({100, 5}, 54), f32_leaf({100}, 55)},
             [](context& c, const auto& t) { return mul(c, rms_norm(c, add(c, t[0], t[1]), 1e-5f), t[2]); }, 1e-12);
    for (int64_t n : {int64_t(576), int64_t(4096), int64_t(14336)})
        for (int64_t rows : {int64_t(1), int64_t(5), int64_t(40)}) {
            const std::string sh = std::to_string(n) + "x" + std::to_string(rows);
            add_case("fused_add_norm_mul_" + sh, {f32_leaf({n, rows}, 40), f32_leaf({n, rows}, 41), f32_leaf({n}, 42)},
                     [](context& c, const auto& t) { return mul(c, rms_norm(c, add(c, t[0], t[1]), 1e-5f), t[2]); },
                     1e-12);
            add_case("fused_add_norm_mul_q8_mul_mat_" + sh,
                     {f32_leaf({n, rows}, 43), f32_leaf({n, rows}, 44), f32_leaf({n}, 45),
                      typed_leaf(type::q4_0, {n, 96}, 46)},
                     [](context& c, const auto& t) {
                         return mul_mat(c, t[3], mul(c, rms_norm(c, add(c, t[0], t[1]), 1e-5f), t[2]));
                     },
                     1e-6);
            add_case("fused_norm_mul_q8_mul_mat_" + sh,
                     {f32_leaf({n, rows}, 47), f32_leaf({n}, 48), typed_leaf(type::q8_0, {n, 40}, 49)},
                     [](context& c, const auto& t) { return mul_mat(c, t[2], mul(c, rms_norm(c, t[0], 1e-5f), t[1])); },
                     1e-6);
            add_case("fused_swiglu_q8_mul_mat_" + sh,
                     {f32_leaf({n, rows}, 50, 3.0f), f32_leaf({n, rows}, 51), typed_leaf(type::q4_1, {n, 33}, 52)},
                     [](context& c, const auto& t) { return mul_mat(c, t[2], swiglu(c, t[0], t[1])); }, 1e-6);
            // gemma3's and bitnet-b1.58's gates through the same fused kernel (the activation a template parameter)
            add_case("fused_geglu_q8_mul_mat_" + sh,
                     {f32_leaf({n, rows}, 53, 3.0f), f32_leaf({n, rows}, 54), typed_leaf(type::q8_0, {n, 33}, 55)},
                     [](context& c, const auto& t) { return mul_mat(c, t[2], geglu(c, t[0], t[1])); }, 1e-6);
            add_case("fused_relu2_glu_q8_mul_mat_" + sh,
                     {f32_leaf({n, rows}, 56, 3.0f), f32_leaf({n, rows}, 57), typed_leaf(type::q4_0, {n, 33}, 58)},
                     [](context& c, const auto& t) { return mul_mat(c, t[2], relu2_glu(c, t[0], t[1])); }, 1e-6);
        }
    // swiglu -> mul_mat where something else reads swiglu's f32 result too (the fused kernel writes it only then).
    // bound: two quantized mul_mats, the second on s * s (a wider spread than one mul_mat's cases: 1.05e-6 measured on
    // the H100's GEMM path, f16 activations) -> 3e-6; an unwritten f32 result would give NMSE ~1
    for (int64_t rows : {int64_t(5), int64_t(40)})
        add_case("fused_swiglu_q8_mul_mat_f32_read_too_576x" + std::to_string(rows),
                 {f32_leaf({576, rows}, 56, 3.0f), f32_leaf({576, rows}, 57), typed_leaf(type::q4_1, {576, 33}, 58)},
                 [](context& c, const auto& t) {
                     tensor* s = swiglu(c, t[0], t[1]);
                     tensor* m = mul_mat(c, t[2], s);
                     return add(c, m, mul_mat(c, t[2], mul(c, s, s)));
                 },
                 3e-6);
    // add -> rms_norm -> mul read by q, k and v mul_mats (one grouped GEMM in prefill: the fused kernel writes their f16
    // activations and no f32 result), and read by a mul_mat and an add (the f32 result written too). bound: the fused
    // q8 cases', 1e-6 (two GEMM outputs summed: as one); an unwritten f32 result would give NMSE ~1
    for (int64_t rows : {int64_t(5), int64_t(40)}) {
        const std::string sh = "4096x" + std::to_string(rows);
        add_case("fused_add_norm_mul_q8_qkv_" + sh,
                 {f32_leaf({4096, rows}, 60), f32_leaf({4096, rows}, 61), f32_leaf({4096}, 62),
                  typed_leaf(type::q4_0, {4096, 256}, 63), typed_leaf(type::q4_0, {4096, 256}, 64),
                  typed_leaf(type::q4_0, {4096, 256}, 65)},
                 [](context& c, const auto& t) {
                     tensor* x = mul(c, rms_norm(c, add(c, t[0], t[1]), 1e-5f), t[2]);
                     tensor* q = mul_mat(c, t[3], x);
                     tensor* k = mul_mat(c, t[4], x);
                     tensor* v = mul_mat(c, t[5], x);
                     for (tensor* e : {q, k, v}) expand_first->push_back(e);
                     return add(c, add(c, q, k), v);
                 },
                 1e-6);
        add_case("fused_add_norm_mul_q8_mul_mat_f32_read_too_" + sh,
                 {f32_leaf({4096, rows}, 66), f32_leaf({4096, rows}, 67), f32_leaf({4096}, 68),
                  typed_leaf(type::q8_0, {4096, 4096}, 69)},
                 [](context& c, const auto& t) {
                     tensor* x = mul(c, rms_norm(c, add(c, t[0], t[1]), 1e-5f), t[2]);
                     return add(c, mul_mat(c, t[3], x), x);
                 },
                 1e-6);
    }
    // The llama feed-forward block as the model builds it: gate and up mul_mats (one GEMV launch on <= 8 columns),
    // swiglu with the q8_1 of its result, the down mul_mat reading that. vs the CPU: gate and up summed in another
    // float order move a q8 value of swiglu's result at a rounding tie -> as the two chained mul_mats above, 3e-6 (the
    // GEMV: < 1e-6 measured); the GEMM's f16 activations on top, 2e-5 (6e-6 measured at 40 columns, H100); tq2_0, q4_K,
    // q6_K: the CPU's q8_K integers too, but a flip at the maximum of a 256-value block moves its scale and so all of
    // its values -> 2e-4 (H200: 1.4e-5 to 5.7e-5). Shapes: 512 -> 1536 on 1, 3 and 8 columns (the GEMV split over k),
    // 2048 -> 8192 and 40 columns (the GEMM).
    {
        struct ffn_shape {
            int64_t k, n, cols;
        };
        for (type t :
             {type::q4_0, type::q4_1, type::q8_0, type::nvfp4, type::awq4, type::tq2_0, type::q4_k, type::q6_k,
              type::q2_k, type::q3_k, type::iq4_nl, type::iq4_xs, type::iq3_xxs, type::iq3_s})
            for (ffn_shape f : {ffn_shape{512, 1536, 1}, ffn_shape{512, 1536, 3}, ffn_shape{512, 1536, 8},
                                ffn_shape{2048, 8192, 1}, ffn_shape{512, 1536, 40}}) {
                if (t != type::q4_0 && (f.k == 2048 || f.cols == 40)) continue;
                add_case(std::string("ffn_gate_up_swiglu_down_") + type_name(t) + "_" + std::to_string(f.k) + "x" +
                             std::to_string(f.n) + "x" + std::to_string(f.cols),
                         {f32_leaf({f.k, f.cols}, 60), typed_leaf(t, {f.k, f.n}, 61), typed_leaf(t, {f.k, f.n}, 62),
                          typed_leaf(t, {f.n, f.k}, 63)},
                         [](context& c, const auto& l) {
                             return mul_mat(c, l[3], swiglu(c, mul_mat(c, l[1], l[0]), mul_mat(c, l[2], l[0])));
                         },
                         t == type::tq2_0 || t == type::q4_k || t == type::q6_k || t == type::q2_k ||
                                 t == type::q3_k || t == type::iq4_xs || t == type::iq3_xxs || t == type::iq3_s
                             ? 2e-4
                         : f.cols > 8 ? 2e-5
                                      : 3e-6);
            }
    }
    // Two mul_mats right after each other on the same activations (q, k, v; gate, up) convert them once; the second
    // must read what the first left, on the GEMV (5 columns) and the GEMM (40, 200). Same bound as one mul_mat.
    for (int64_t cols : {int64_t(5), int64_t(40), int64_t(200)})
        add_case("shared_acts_mul_mat_pair_576x" + std::to_string(cols),
                 {f32_leaf({576, cols}, 53), typed_leaf(type::q4_0, {576, 200}, 54), typed_leaf(type::q4_0, {576, 200}, 55)},
                 [](context& c, const auto& t) { return add(c, mul_mat(c, t[1], t[0]), mul_mat(c, t[2], t[0])); }, 1e-6);
    // q, k, v of different widths (256, 128, 128 rows) on one activation, each output read whole: q's two 128-row
    // halves, k and v summed. expand: q, k and v next to each other in the graph, as the model builds them.
    const auto add_qkv_case = [&](type t, int64_t k, int64_t cols, double bound, bool expand) {
        add_case(std::string("grouped_qkv_") + type_name(t) + "_" + std::to_string(k) + "x" + std::to_string(cols),
                 {f32_leaf({k, cols}, 56), typed_leaf(t, {k, 256}, 57), typed_leaf(t, {k, 128}, 58),
                  typed_leaf(t, {k, 128}, 59)},
                 [cols, expand](context& c, const auto& l) {
                     tensor* q = mul_mat(c, l[1], l[0]);
                     tensor* k = mul_mat(c, l[2], l[0]);
                     tensor* v = mul_mat(c, l[3], l[0]);
                     if (expand)
                         for (tensor* e : {q, k, v}) expand_first->push_back(e);
                     tensor* q0 = view_3d(c, q, 128, cols, 1, q->nb[1], q->nb[1] * cols, 0);
                     tensor* q1 = view_3d(c, q, 128, cols, 1, q->nb[1], q->nb[1] * cols, 128 * sizeof(float));
                     return add(c, add(c, q0, q1), add(c, k, v));
                 },
                 bound);
    };
    // In prefill one grouped wgmma launch (their row tiles one after the other in the grid; formats dequantized to f16
    // first take one GEMM each). The grouping changes no arithmetic: the bound of one mul_mat. Also over a longer k
    // (2048: 32 steps of 64).
    for (type t : {type::q4_0, type::q8_0, type::awq4, type::nvfp4})
        for (auto [k, cols] : {std::pair<int64_t, int64_t>{512, 3}, {512, 40}, {512, 200}, {2048, 200}})
            add_qkv_case(t, k, cols, 1e-6, false);
    // The same on float weights (decode: one launch of the float GEMV, mul_mat_f_group); and gate, up and the GLU of
    // the two (its epilogue), the products read by nothing else or (_read_too) also by the output. The bounds of one
    // float mul_mat (the CPU rounds x to f16 / bf16 for those).
    for (type t : {type::f32, type::f16, type::bf16}) {
        const double bound = t == type::f32 ? 1e-10 : t == type::f16 ? 1e-6 : 1e-4;
        for (auto [k, cols] : {std::pair<int64_t, int64_t>{512, 1}, {512, 3}, {4096, 1}, {512, 8}})
            add_qkv_case(t, k, cols, bound, true);
        for (auto [k, n, cols] : {std::tuple<int64_t, int64_t, int64_t>{512, 1536, 1}, {512, 1536, 5}, {2048, 700, 1}})
            for (int act = 0; act < 3; act++)
                for (bool read_too : {false, true}) {
                    if (read_too && (act != 0 || cols != 1)) continue;
                    const char* an = act == 0 ? "swiglu" : act == 1 ? "geglu" : "relu2_glu";
                    add_case(std::string("ffn_gate_up_") + an + "_down_" + type_name(t) + "_" + std::to_string(k) +
                                 "x" + std::to_string(n) + "x" + std::to_string(cols) + (read_too ? "_read_too" : ""),
                             // x at sigma 0.1: relu(g)^2 u of unit-sigma x passes f16's 65504, where the CPU
                             // rounds the down projection's activations to f16
                             {f32_leaf({k, cols}, 60, 0.1f), typed_leaf(t, {k, n}, 61), typed_leaf(t, {k, n}, 62),
                              typed_leaf(t, {n, k}, 63)},
                             [act, read_too](context& c, const auto& l) {
                                 tensor* g = mul_mat(c, l[1], l[0]);
                                 tensor* u = mul_mat(c, l[2], l[0]);
                                 tensor* y = act == 0 ? swiglu(c, g, u) : act == 1 ? geglu(c, g, u) : relu2_glu(c, g, u);
                                 tensor* d = mul_mat(c, l[3], y);
                                 if (!read_too) return d;
                                 // gate and up read again after the GLU: both products must be written
                                 tensor* gs = sum_rows(c, add(c, g, u));
                                 return add(c, d, view_2d(c, gs, 1, 1, gs->nb[1], 0));
                             },
                             // geglu: a g on either side of an f16 rounding step of the gelu table -> f32's bound
                             // rises to ~1e-10 per flipped element of ~1500
                             act == 1 ? std::max(bound, 1e-8) : bound);
                }
    }
    // rms_norm. bound: f32 sum of squares vs the CPU's double sum, ~1e-7 relative
    for (auto ne : {std::initializer_list<int64_t>{577, 9}, {576, 1}, {4096, 5, 2}})
        add_case(
            "rms_norm_" + shape_name(ne), {f32_leaf(ne, 11, 2.0f)},
            [](context& c, const auto& t) { return rms_norm(c, t[0], 1e-5f); }, 1e-12);
    add_case(
        "rms_norm_strided_9x577", {f32_leaf({9, 577}, 12)},
        [](context& c, const auto& t) { return rms_norm(c, transpose(c, t[0]), 1e-6f); }, 1e-12);

    // rope. Same angles (repeated f32 products) and rotation as the CPU; bound: sincosf vs libm, ~1 ulp
    for (auto mode : {rope_mode::normal, rope_mode::neox})
        for (bool ff : {false, true})
            for (int64_t hd : {64, 128}) {
                const int n_rot = hd == 128 ? 96 : 64; // 96 of 128: the last 32 dimensions pass through
                std::vector<leaf> l = {f32_leaf({hd, 3, 5}, 13), i32_leaf({0, 1, 7, 100, 4095})};
                if (ff) {
                    std::vector<float> f(size_t(n_rot / 2));
                    for (size_t i = 0; i < f.size(); i++) f[i] = 1.0f + 0.1f * float(i % 5);
                    leaf fl;
                    fl.ne[0] = n_rot / 2;
                    fl.bytes = to_bytes(f);
                    fl.weight = true; // rope_freqs is a model weight
                    l.push_back(fl);
                }
                add_case(
                    std::string("rope_") + (mode == rope_mode::neox ? "neox" : "normal") + "_hd" + std::to_string(hd) +
                        (ff ? "_freq_factors" : ""),
                    l,
                    [=](context& c, const auto& t) {
                        return rope(c, t[0], t[1], ff ? t[2] : nullptr, n_rot, mode, 10000.0f, 0.5f);
                    },
                    1e-10);
            }
    // YaRN (qwen2's long-context files) and LongRoPE's magnitude factor (phi3): the same angle code on both
    // (ggml-like/rope_angles.h); bound as above
    for (float ext : {0.0f, 1.0f}) {
        rope_params rp;
        rp.n_rot = 128;
        rp.mode = rope_mode::neox;
        rp.freq_base = 1000000.0f;
        rp.freq_scale = 0.25f;
        rp.ext_factor = ext;
        rp.attn_factor = 1.19f;
        rp.n_ctx_orig = 2048;
        add_case(
            std::string("rope_neox_hd128_") + (ext != 0.0f ? "yarn" : "attn_factor"),
            {f32_leaf({128, 3, 5}, 14), i32_leaf({0, 1, 7, 100, 4095})},
            [=](context& c, const auto& t) { return rope(c, t[0], t[1], nullptr, rp); }, 1e-10);
    }

    // soft_max. bound: float sums vs the CPU's double sums
    add_case(
        "soft_max_19x6_mask", {f32_leaf({19, 6}, 14, 4.0f), causal_mask(19, 6)},
        [](context& c, const auto& t) { return soft_max(c, t[0], t[1], 0.3f); }, 1e-12);
    add_case(
        "soft_max_19x6x2_mask_broadcast", {f32_leaf({19, 6, 2}, 15, 4.0f), causal_mask(19, 6)},
        [](context& c, const auto& t) { return soft_max(c, t[0], t[1], 0.3f); }, 1e-12);
    add_case(
        "soft_max_1000x3", {f32_leaf({1000, 3}, 16, 4.0f)},
        [](context& c, const auto& t) { return soft_max(c, t[0], nullptr, 1.0f); }, 1e-12);

    // get_rows of every type from a token table (flag_embedding: uploaded as in the file): the same dequantization
    // code (quant/<format>.h); bound: FMA contraction on the GPU. From a weight the upload keeps only in the split
    // layout (a matrix that is not a token table): values through the GEMM's f16 dequantization -> relative 2^-11
    // per value, NMSE < 1e-6.
    for (type t : {type::f32, type::f16, type::bf16, type::q4_0, type::q4_1, type::q5_0, type::q5_1, type::q8_0,
                   type::nvfp4, type::awq4, type::awq4_g64, type::tq2_0, type::i2_s, type::q2_k, type::q3_k, type::q4_k,
                   type::q5_k, type::q6_k, type::iq4_nl, type::iq4_xs, type::iq3_xxs, type::iq3_s})
        for (auto sh : {std::pair<int64_t, int64_t>{256, 11}, {1024, 50}})
            for (bool table : {true, false}) {
                std::vector<int32_t> ids = {3, 0, 10, 3, 7};
                if (sh.second == 50) ids = {49, 0, 1, 17, 25, 33, 2, 48};
                leaf w = typed_leaf(t, {sh.first, sh.second}, 17);
                if (table) w.flags = flag_embedding;
                const bool split = !table && t != type::f32 && t != type::f16 && t != type::bf16;
                if (!table && !split) continue;
                add_case(std::string("get_rows_") + type_name(t) + "_" + std::to_string(sh.first) + "x" +
                             std::to_string(sh.second) + (table ? "" : "_split"),
                         {std::move(w), i32_leaf(ids)},
                         [](context& c, const auto& l) { return get_rows(c, l[0], l[1]); }, split ? 1e-6 : 1e-12);
            }

    // mul_mat of every weight type. Both quantize activations to the same q8 values as ggml's AVX2 code (q8_0 and
    // q8_1 share d and qs); bounds: quantized types: float summation order, plus, on a CPU without AVX2, a q that
    // differs by one at a rounding tie (the scalar reference rounds ties away from zero) -> 1e-6; f16/bf16: the CPU
    // rounds activations to f16/bf16, CUDA keeps f32 -> 1e-6 / 1e-4; f32: summation order -> 1e-10
    struct mm_shape {
        int64_t k, n, m;
    };
    const mm_shape shapes[] = {{64, 1, 1},     {96, 17, 3},   {256, 33, 37},  {576, 5, 1},   {576, 49, 2},
                               {1024, 129, 8}, {1024, 67, 9}, {4096, 100, 4}, {1536, 70, 1}, {576, 150, 3}};
    // More than 8 columns go to the tensor-core GEMM (ops/gemm.cu). Its int8 kernel (q4_0, q4_1, q8_0, nvfp4, awq4)
    // multiplies the same q8 integers as the CPU, exactly, and scales per chunk as the CPU does: only the f32 order of
    // the sums over chunks differs -> the decode bound, 1e-6. With TESSERA_CUDA_MMQ=0 it multiplies f16 activations
    // (the previous kernel): the CPU's q8 rounding (step amax/127, about 0.02 sigma for a block of 32) then dominates,
    // NMSE ~ 3e-5 -> 2e-4.
    const bool mmq_off = [] {
        const char* e = std::getenv("TESSERA_CUDA_MMQ");
        return e && std::string(e) == "0";
    }();
    auto gemm_bound = [&](int64_t) { return mmq_off ? 2e-4 : 1e-6; };
    auto same_ints_gemm = [&](int64_t m) { return m <= 8 || !mmq_off; };
    for (type t : weight_types) {
        const double bound = t == type::f32 ? 1e-10 : t == type::f16 ? 1e-6 : t == type::bf16 ? 1e-4 : 1e-6;
        const bool gemm = t == type::q4_0 || t == type::q4_1 || t == type::q8_0;
        for (mm_shape s : shapes)
            add_case(
                std::string("mul_mat_") + type_name(t) + "_k" + std::to_string(s.k) + "_n" + std::to_string(s.n) +
                    "_m" + std::to_string(s.m),
                {typed_leaf(t, {s.k, s.n}, 18), f32_leaf({s.k, s.m}, 19)},
                [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); },
                gemm && s.m > 8 ? gemm_bound(s.m) : bound);
        // the GEMM's tiles: 128 weight rows x 64 columns x 64 k; partial tiles every way (k = 96, 160: a last k step
        // of one chunk), and exact multiples; f16 / bf16 weights take the wgmma GEMM on Hopper (the CPU's activation
        // rounding, f32 sums: the decode bounds). Also few tiles over a long k (2080: 33 steps of 64, the last one
        // half; 4096 x 256 x 512: 8 tiles of 64 steps).
        if (gemm || t == type::f16 || t == type::bf16)
            for (mm_shape s : {mm_shape{512, 300, 100}, mm_shape{256, 128, 64}, mm_shape{2048, 257, 513},
                               mm_shape{96, 40, 20}, mm_shape{160, 130, 70}, mm_shape{160, 130, 130},
                               mm_shape{256, 384, 128}, mm_shape{96, 1000, 300}, mm_shape{2080, 200, 150},
                               mm_shape{4096, 256, 512}})
                add_case(std::string("mul_mat_") + type_name(t) + "_gemm_k" + std::to_string(s.k) + "_n" +
                             std::to_string(s.n) + "_m" + std::to_string(s.m),
                         {typed_leaf(t, {s.k, s.n}, 26), f32_leaf({s.k, s.m}, 27)},
                         [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); },
                         gemm ? gemm_bound(s.m) : bound);
        // W broadcast over dim 2 of x; x the last column of a wider tensor (a view, as llama's last-token logits)
        add_case(
            std::string("mul_mat_") + type_name(t) + "_broadcast_k64_n7_m3x2",
            {typed_leaf(t, {64, 7}, 20), f32_leaf({64, 3, 2}, 21)},
            [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); }, bound);
        add_case(
            std::string("mul_mat_") + type_name(t) + "_last_column_k128_n33",
            {typed_leaf(t, {128, 33}, 22), f32_leaf({128, 5}, 23)},
            [](context& c, const auto& l) {
                return mul_mat(c, l[0], view_2d(c, l[1], 128, 1, l[1]->nb[1], 4 * l[1]->nb[1]));
            },
            bound);
    }
    // The formats CUDA runs only in the split layout (quant/format.cuh): decode GEMV (<= 8 columns) and the GEMM.
    // nvfp4 (CPU partner q8_0: q8_1's integers and d) and awq4 (q8_1) dot the CPU's integers on both paths -> 1e-6
    // (the GEMM with TESSERA_CUDA_MMQ=0: f16 activations -> 5e-4); so do q5_0 / q5_1 (q8_0 / q8_1). The K formats (q4_K, q5_K, q6_K) and tq2_0's
    // decode: CUDA's activations are the CPU's q8_K integers (a scale per 256 values, split_acts' q8k), its d as f16
    // (f32 on the CPU); the K formats' GEMM takes their values as f16 and the weights rounded to f16 -> 1e-6 (H200:
    // at most 2.2e-7 / 4.5e-7 for tq2_0). tq2_0's GEMM (f16 activations) and i2_s (CPU i8_s per row, CUDA q8_1 per 32
    // or f16): the CPU's coarser rounding sets the bound, i8_s per row of 2048 the worst (step ~0.03 sigma -> NMSE
    // ~1e-4) -> 5e-4. One column also over long rows (k 4096, 14336: the GEMV's k split in parts).
    for (type t : {type::nvfp4, type::awq4, type::awq4_g64, type::q5_0, type::q5_1, type::tq2_0, type::i2_s,
                   type::q2_k, type::q3_k, type::q4_k, type::q5_k, type::q6_k, type::iq4_nl, type::iq4_xs,
                   type::iq3_xxs, type::iq3_s})
        for (mm_shape s : {mm_shape{256, 33, 1}, mm_shape{4096, 300, 1}, mm_shape{14336, 40, 1}, mm_shape{512, 70, 3},
                           mm_shape{1024, 129, 8}, mm_shape{1024, 67, 9}, mm_shape{2048, 300, 100},
                           mm_shape{512, 200, 140}, mm_shape{2048, 257, 260}}) {
            const bool same_ints = t == type::nvfp4 || t == type::awq4 || t == type::awq4_g64 || t == type::q5_0 ||
                                   t == type::q5_1 || t == type::iq4_nl;
            // q2_K: no int8 GEMM (a min a sub-block of 16), the f16 one from 8 columns: tq2_0's bound there
            const bool k_format = t == type::q3_k || t == type::q4_k || t == type::q5_k || t == type::q6_k ||
                                  t == type::iq4_xs || t == type::iq3_xxs || t == type::iq3_s ||
                                  (t == type::q2_k && s.m < 8);
            add_case(std::string("mul_mat_") + type_name(t) + "_k" + std::to_string(s.k) + "_n" +
                         std::to_string(s.n) + "_m" + std::to_string(s.m),
                     {typed_leaf(t, {s.k, s.n}, 28), f32_leaf({s.k, s.m}, 29)},
                     [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); },
                     ((same_ints || k_format) && same_ints_gemm(s.m)) || (t == type::tq2_0 && s.m <= 8) ? 1e-6
                                                                                                         : 5e-4);
        }
    // nvfp4 whose sub-scales take every UE4M3 code 0..255 (the subnormals e = 0, 0x7f and 0xff read as 0, bit 7
    // ignored: the CPU's ue4m3_to_fp32_half), on the decode GEMV (1, 3 columns), the GEMM (40) and as a token table;
    // the random data's own scales span only a few codes. Same integers on both sides -> 1e-6 as above.
    {
        auto all_scales = [](leaf w) {
            auto make = w.make;
            w.make = [make] {
                std::vector<uint8_t> b = make();
                auto* blocks = reinterpret_cast<block_nvfp4*>(b.data());
                for (size_t i = 0; i < b.size() / sizeof(block_nvfp4); i++)
                    for (int j = 0; j < 4; j++) blocks[i].d[j] = uint8_t((4 * i + size_t(j)) % 256);
                return b;
            };
            return w;
        };
        for (int64_t m : {1, 3, 40})
            add_case("mul_mat_nvfp4_every_scale_code_m" + std::to_string(m),
                     {all_scales(typed_leaf(type::nvfp4, {1024, 36}, 61)), f32_leaf({1024, m}, 62)},
                     [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); },
                     same_ints_gemm(m) ? 1e-6 : 5e-4);
        leaf table = all_scales(typed_leaf(type::nvfp4, {1024, 36}, 63));
        table.flags = flag_embedding;
        add_case("get_rows_nvfp4_every_scale_code", {std::move(table), i32_leaf({35, 0, 17, 4, 20})},
                 [](context& c, const auto& l) { return get_rows(c, l[0], l[1]); }, 1e-12);
        add_case("get_rows_nvfp4_every_scale_code_split",
                 {all_scales(typed_leaf(type::nvfp4, {1024, 36}, 64)), i32_leaf({35, 0, 17, 4, 20})},
                 [](context& c, const auto& l) { return get_rows(c, l[0], l[1]); }, 1e-6);
    }
    for (type t : {type::f32, type::f16, type::bf16}) // odd k: one element per load
        for (mm_shape s : {mm_shape{37, 5, 3}, mm_shape{37, 130, 1}, mm_shape{6, 3, 11}})
            add_case(
                std::string("mul_mat_") + type_name(t) + "_odd_k" + std::to_string(s.k) + "_n" + std::to_string(s.n) +
                    "_m" + std::to_string(s.m),
                {typed_leaf(t, {s.k, s.n}, 24), f32_leaf({s.k, s.m}, 25)},
                [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); },
                t == type::f32   ? 1e-10
                : t == type::f16 ? 1e-6
                                 : 1e-4);

    // cpy into rows 4..6 of a cache (the KV-cache write): bytes compared exactly, outside the view untouched.
    // f16: both round to nearest even; bf16: the same code (fp16.h)
    for (type t : {type::f32, type::f16, type::bf16}) {
        leaf cache = typed_leaf(t, {24, 10}, 26, false);
        add_case(
            std::string("cpy_f32_to_") + type_name(t) + "_view", {f32_leaf({24, 3}, 27), cache},
            [](context& c, const auto& l) {
                return cpy(c, l[0], view_2d(c, l[1], 24, 3, l[1]->nb[1], 4 * l[1]->nb[1]));
            },
            0.0, 1);
        add_case(
            std::string("cpy_f32_flat_to_") + type_name(t), {f32_leaf({72}, 28), cache}, // element order
            [](context& c, const auto& l) {
                return cpy(c, l[0], view_2d(c, l[1], 24, 3, l[1]->nb[1], 2 * l[1]->nb[1]));
            },
            0.0, 1);
    }

    // set_rows (the KV-cache write): 7 rows of 200 into scattered rows of a 23-row cache, by i32 and i64 indices, two
    // of them outside the cache (skipped): the whole cache compared byte for byte (f16 / bf16: both round to nearest
    // even, as cpy). 70 rows of 1100 (the batch of a prompt, a row longer than a block of threads) in reverse order.
    for (type t : {type::f32, type::f16, type::bf16}) {
        for (type it : {type::i32, type::i64}) {
            const std::vector<int64_t> rows = {17, 3, -1, 9, 0, 22, 23};
            leaf idx = it == type::i64 ? i64_leaf(rows) : i32_leaf(std::vector<int32_t>(rows.begin(), rows.end()));
            add_case(
                std::string("set_rows_f32_to_") + type_name(t) + "_by_" + type_name(it),
                {f32_leaf({200, 7}, 32, 3.0f), typed_leaf(t, {200, 23}, 33, false), idx},
                [](context& c, const auto& l) { return set_rows(c, l[1], l[0], l[2]); }, 0.0, 1);
        }
        std::vector<int32_t> rev;
        for (int32_t i = 0; i < 70; i++) rev.push_back(79 - i);
        add_case(
            std::string("set_rows_f32_to_") + type_name(t) + "_70_rows_of_1100",
            {f32_leaf({1100, 70}, 34), typed_leaf(t, {1100, 80}, 35, false), i32_leaf(rev)},
            [](context& c, const auto& l) { return set_rows(c, l[1], l[0], l[2]); }, 0.0, 1);
    }

    // attention over an f16 cache with GQA and a causal mask; n_tok <= 8 takes the decode kernel, more the tiled
    // prefill (partial tiles of 32 queries and 32 keys). bound: the CPU rounds Q and its V accumulator to f16 below
    // 64 queries (ggml's numerics); CUDA's decode kernels round Q and P to f16 on the tensor cores (head sizes 64 and
    // 128) or stay in f32 (others), its f32 prefill stays in f32; the CPU's error grows with the keys (NMSE against
    // exact math: ~1e-7 at 100 keys, 3.1e-5 at 1501) -> 5e-6, 1e-4 past 256 keys, 5e-4 past 4096 (1.4e-4 measured at
    // 9001 keys, H100), 1e-3 past 16384 (3.9e-4 at 17001); >= 64 queries the CPU is f32 -> 1e-10, except that CUDA's
    // tensor-core prefill (head sizes 64 / 128 / 256, > 8 queries) rounds Q and P to f16 (relative error <= 2^-11
    // each, NMSE ~1e-7 measured) -> at least 2e-6 there
    struct attn_shape {
        int64_t hd, n_head, n_head_kv, n_tok, n_past;
        bool mask;
    };
    const attn_shape attn_shapes[] = {{64, 6, 2, 1, 8, true},    {64, 6, 2, 3, 40, true},  {64, 9, 3, 5, 0, true},
                                      {64, 6, 2, 1, 1500, true}, {64, 6, 2, 9, 0, true},   {64, 6, 2, 33, 7, true},
                                      {64, 6, 2, 70, 8, true},   {128, 4, 4, 1, 20, true}, {128, 4, 1, 70, 30, true},
                                      {80, 4, 2, 40, 5, true},   {256, 2, 1, 37, 3, true}, {64, 6, 2, 12, 3, false},
                                      {64, 6, 2, 2, 3, false},   {256, 2, 1, 1, 50, true}, {128, 8, 2, 4, 300, true},
                                      {96, 2, 1, 1, 9, true},    {128, 32, 8, 200, 0, true}, {64, 6, 2, 130, 70, true},
                                      {128, 4, 4, 65, 0, false}, {64, 3, 3, 64, 1000, true},
                                      // decode split over the keys (256 a split, more past 16384 keys), query heads per
                                      // KV head 1 / 3 / 4 / 8 / 12 (two blocks of 8 and 4), 8 tokens
                                      {128, 16, 2, 1, 600, true}, {64, 24, 2, 2, 260, true}, {128, 4, 4, 8, 400, true},
                                      {256, 4, 2, 3, 500, false}, {64, 4, 1, 1, 17000, true},
                                      // an 8B layer's decode at depths 4200 and 9000: on 132 SMs the tensor-core
                                      // kernel's one-wave splits with V loaded after the scores (9 warps, one round;
                                      // 12 warps, two rounds)
                                      {128, 32, 8, 1, 4200, true}, {128, 32, 8, 1, 9000, true},
                                      // head size 256 on the tensor cores (gemma3): Q read from shared memory per tile
                                      {256, 8, 4, 130, 0, true}, {256, 4, 1, 70, 300, true}, {256, 2, 2, 65, 0, false}};
    for (attn_shape s : attn_shapes) {
        const int64_t n_kv = s.n_past + s.n_tok;
        std::vector<leaf> l = {f32_leaf({s.hd, s.n_head, s.n_tok}, 29),
                               typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, 30, false),
                               typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, 31, false)};
        if (s.mask) l.push_back(causal_mask(n_kv, s.n_tok));
        const float sc = 1.0f / std::sqrt(float(s.hd));
        add_case(
            "attention_hd" + std::to_string(s.hd) + "_h" + std::to_string(s.n_head) + "_kv" +
                std::to_string(s.n_head_kv) + "_tok" + std::to_string(s.n_tok) + "_past" + std::to_string(s.n_past) +
                (s.mask ? "" : "_nomask"),
            l,
            [=](context& c, const auto& t) {
                tensor* k = view_3d(c, t[1], s.hd, s.n_head_kv, n_kv, size_t(s.hd) * 2, t[1]->nb[1], 0);
                tensor* v = view_3d(c, t[2], s.hd, s.n_head_kv, n_kv, size_t(s.hd) * 2, t[2]->nb[1], 0);
                return attention(c, t[0], k, v, s.mask ? t[3] : nullptr, sc);
            },
            std::max(s.n_tok > 8 && (s.hd == 64 || s.hd == 128 || s.hd == 256) ? 2e-6 : 0.0,
                     s.n_tok >= 64  ? 1e-10
                     : n_kv > 16384 ? 1e-3
                     : n_kv > 4096  ? 5e-4
                     : n_kv > 256  ? 1e-4
                                   : 5e-6));
    }
    // the same with a mask that is not causal (pattern_mask: tiles nobody sees, tiles all zero, biases, a row that
    // sees nothing); bounds as above
    for (attn_shape s : {attn_shape{64, 6, 2, 100, 200, true}, attn_shape{128, 4, 2, 70, 230, true},
                         attn_shape{64, 4, 2, 20, 280, true}, attn_shape{128, 4, 4, 9, 300, true},
                         attn_shape{256, 4, 2, 70, 230, true}}) {
        const int64_t n_kv = s.n_past + s.n_tok;
        const float sc = 1.0f / std::sqrt(float(s.hd));
        add_case(
            "attention_pattern_mask_hd" + std::to_string(s.hd) + "_h" + std::to_string(s.n_head) + "_kv" +
                std::to_string(s.n_head_kv) + "_tok" + std::to_string(s.n_tok) + "_keys" + std::to_string(n_kv),
            {f32_leaf({s.hd, s.n_head, s.n_tok}, 36), typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, 37, false),
             typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, 38, false), pattern_mask(n_kv, s.n_tok, 39)},
            [=](context& c, const auto& t) {
                tensor* k = view_3d(c, t[1], s.hd, s.n_head_kv, n_kv, size_t(s.hd) * 2, t[1]->nb[1], 0);
                tensor* v = view_3d(c, t[2], s.hd, s.n_head_kv, n_kv, size_t(s.hd) * 2, t[2]->nb[1], 0);
                return attention(c, t[0], k, v, t[3], sc);
            },
            std::max(2e-6, s.n_tok >= 64 ? 1e-10 : n_kv > 256 ? 1e-4 : 5e-6));
    }

    // A layer's attention input as the model builds it: rope(Q), rope(K), the rotated K and V written into f16 caches
    // at rows n_past.. (set_rows), attention over views of the written caches; a wrong row, head or rounding in any of
    // them shows in the attention output. Normal and neox rope, GQA, decode (1 token) and prefill sizes. bound: the
    // attention cases'.
    struct rope_kv_shape {
        int64_t hd, n_head, n_head_kv, n_tok, n_past;
        bool neox;
    };
    for (rope_kv_shape s : {rope_kv_shape{64, 6, 2, 1, 9, false}, rope_kv_shape{128, 8, 2, 5, 20, true},
                            rope_kv_shape{128, 8, 2, 1, 256, false}, // decode split over the keys (2 splits)
                            rope_kv_shape{64, 4, 4, 40, 3, false}, rope_kv_shape{128, 4, 1, 70, 30, true},
                            // 64 tokens or more: blocks of 16 heads, the last one partial
                            rope_kv_shape{64, 20, 4, 72, 5, false}, rope_kv_shape{128, 36, 18, 64, 0, true}}) {
        const int64_t n_kv = s.n_past + s.n_tok;
        std::vector<int32_t> rows;
        for (int64_t t = 0; t < s.n_tok; t++) rows.push_back(int32_t(s.n_past + t));
        const float sc = 1.0f / std::sqrt(float(s.hd));
        // leaves: Q, K, V, the two caches, the rows, the mask
        const auto layer_attention = [=](context& c, const auto& t) {
            const rope_mode mode = s.neox ? rope_mode::neox : rope_mode::normal;
            tensor* q = rope(c, t[0], t[5], nullptr, int(s.hd), mode, 10000.0f, 1.0f);
            tensor* k = rope(c, t[1], t[5], nullptr, int(s.hd), mode, 10000.0f, 1.0f);
            tensor* kw = set_rows(c, t[3], reshape_2d(c, k, s.hd * s.n_head_kv, s.n_tok), t[5]);
            tensor* vw = set_rows(c, t[4], t[2], t[5]);
            tensor* kv = view_3d(c, kw, s.hd, s.n_head_kv, n_kv, size_t(s.hd) * 2, kw->nb[1], 0);
            tensor* vv = view_3d(c, vw, s.hd, s.n_head_kv, n_kv, size_t(s.hd) * 2, vw->nb[1], 0);
            return attention(c, q, kv, vv, t[6], sc);
        };
        const auto layer_leaves = [&](uint32_t seed) {
            return std::vector<leaf>{f32_leaf({s.hd, s.n_head, s.n_tok}, seed),
                                     f32_leaf({s.hd, s.n_head_kv, s.n_tok}, seed + 1),
                                     f32_leaf({s.hd * s.n_head_kv, s.n_tok}, seed + 2),
                                     typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, seed + 3, false),
                                     typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, seed + 4, false),
                                     i32_leaf(rows),
                                     causal_mask(n_kv, s.n_tok)};
        };
        add_case("rope_kv_attention_hd" + std::to_string(s.hd) + "_h" + std::to_string(s.n_head) + "_kv" +
                     std::to_string(s.n_head_kv) + "_tok" + std::to_string(s.n_tok) + (s.neox ? "_neox" : ""),
                 layer_leaves(60), layer_attention,
                 std::max(s.n_tok > 8 ? 2e-6 : 0.0, s.n_tok >= 64 ? 1e-10 : n_kv > 256 ? 1e-4 : 5e-6));
        if (s.n_tok > 8) continue;
        // ... and on into the output projection, as the model goes on: on a decode step CUDA's attention kernel also
        // writes its output as the q8_1 activations of the mul_mat after it (fused.cu). bound: the two backends'
        // attention outputs differ by ~1e-3 relative (the attention bound, 5e-6 NMSE); quantized again to q8_1, a
        // value near a step (1/127 of its group's largest) rounds to different integers on the two, so the product's
        // NMSE grows to ~1e-5 (1.3e-5 measured on the H100 for 5 tokens, hd 128): 5e-5; past 256 keys the CPU's f16
        // accumulator adds its own (7.4e-5 measured at 257 keys): 2e-4
        std::vector<leaf> leaves = layer_leaves(65);
        leaves.push_back(typed_leaf(type::q4_0, {s.hd * s.n_head, 48}, 70));
        add_case("rope_kv_attention_wo_hd" + std::to_string(s.hd) + "_h" + std::to_string(s.n_head) + "_tok" +
                     std::to_string(s.n_tok),
                 leaves,
                 [=](context& c, const auto& t) {
                     return mul_mat(c, t[7], reshape_2d(c, layer_attention(c, t), s.hd * s.n_head, s.n_tok));
                 },
                 n_kv > 256 ? 2e-4 : 5e-5);
    }
    // The whole attention input of a layer as the model builds it, from the normalized activations: the q, k and v
    // mul_mats (in that order), rope(Q), rope(K), the cache writes, attention over the caches. On the decode GEMV
    // (<= 8 tokens, normal or NEOX rope) CUDA runs the first seven as one kernel (the GEMV's epilogue rotates and
    // writes the caches: fused.cu fuse_qkv_rope); 40 tokens take the separate kernels. Also: rope over 96 of 128
    // dimensions (normal and NEOX), rope_freqs factors. bound: q and k here are 256-wide products of N(0, 1) data, so the logits are
    // large (~100) and the softmax sharp, so the attention output's differences grow with it: < 1e-6 measured at 1
    // and 3 tokens, 2.1e-5 - 3.7e-5 at 5, 8 and 40 tokens, the same with the fusion off (H100) -> 5e-6 for one token
    // (the attention cases' bound), else 1e-4, as past 256 keys.
    // With biases (qwen2): an add of a bias row after each product, which the fused GEMV's epilogue does too.
    // bf16 weights: the CPU's products take x rounded to bf16 (2^-9 relative), the bound of a bf16 mul_mat, 1e-4.
    struct qkv_shape {
        type t;
        int64_t hd, n_head, n_head_kv, n_tok, n_past;
        bool neox;
        int n_rot;
        bool ff;
        bool bias = false;
        bool qk_norm = false; // qwen3's / gemma3's per-head RMS norms of Q and K before rope
        float q_scale = 0.0f; // gemma3's query_pre_attn_scalar: a scale of the rotated Q (CUDA: in the rope_kv kernel)
    };
    for (qkv_shape s : {qkv_shape{type::q4_0, 64, 6, 2, 1, 9, false, 64, false},
                        qkv_shape{type::q8_0, 128, 8, 2, 3, 20, false, 128, true},
                        qkv_shape{type::awq4, 128, 8, 2, 1, 256, false, 96, false}, // 2 key splits, 32 dims unrotated
                        qkv_shape{type::q4_1, 64, 4, 4, 8, 30, false, 64, true},
                        qkv_shape{type::q4_0, 128, 8, 2, 5, 20, true, 128, false},
                        qkv_shape{type::q8_0, 128, 8, 2, 1, 20, true, 96, true}, // NEOX over 96 of 128, factors
                        qkv_shape{type::q4_1, 64, 4, 1, 2, 7, true, 64, false},
                        qkv_shape{type::q4_0, 64, 4, 1, 40, 3, false, 64, false},
                        qkv_shape{type::q8_0, 128, 7, 1, 1, 20, true, 128, false, true}, // qwen2-like, biased
                        qkv_shape{type::q4_0, 64, 6, 2, 3, 9, false, 64, false, true},
                        qkv_shape{type::q4_1, 64, 4, 2, 40, 3, true, 64, false, true},
                        qkv_shape{type::q8_0, 128, 8, 2, 1, 20, true, 128, false, false, true}, // qwen3-like
                        qkv_shape{type::q4_0, 256, 4, 1, 1, 9, true, 256, false, false, true},  // gemma3-like
                        qkv_shape{type::q4_0, 128, 6, 2, 3, 9, true, 128, false, false, true},
                        qkv_shape{type::q4_1, 128, 4, 2, 40, 3, true, 128, false, false, true},
                        qkv_shape{type::q4_0, 256, 4, 1, 1, 9, true, 256, false, false, true, 0.0625f}, // gemma3
                        qkv_shape{type::q4_0, 256, 4, 2, 40, 3, true, 256, false, false, true, 0.0625f},
                        qkv_shape{type::q8_0, 64, 4, 2, 40, 3, false, 64, false, false, false, 0.2f},
                        // float weights: the float GEMV (one launch) then rope_kv's kernel; the GEMM at 40 tokens
                        qkv_shape{type::f16, 128, 8, 2, 1, 20, false, 128, false},
                        qkv_shape{type::bf16, 128, 8, 2, 1, 20, true, 96, true},
                        qkv_shape{type::f32, 64, 6, 2, 3, 9, false, 64, false, true},
                        qkv_shape{type::f16, 64, 4, 1, 8, 30, true, 64, false, true},
                        qkv_shape{type::bf16, 128, 4, 2, 40, 3, false, 128, false}}) {
        const bool float_w = s.t == type::f32 || s.t == type::f16 || s.t == type::bf16;
        const int64_t E = 256, n_kv = s.n_past + s.n_tok;
        std::vector<int32_t> rows;
        for (int64_t t = 0; t < s.n_tok; t++) rows.push_back(int32_t(s.n_past + t));
        // the biased cases' activations at sigma 1/8: logits ~3 instead of ~250, a soft softmax, so that a near-tie
        // between two keys (one f32 rounding apart) cannot move a row's whole output (the first run, at sigma 1:
        // the 40-token case over the bound on an H200, the value not recorded); the float weights' too, where the
        // CPU rounds the activations to f16 / bf16 before its products
        std::vector<leaf> leaves = {f32_leaf({E, s.n_tok}, 80, s.bias || float_w ? 0.125f : 1.0f),
                                    typed_leaf(s.t, {E, s.hd * s.n_head}, 81),
                                    typed_leaf(s.t, {E, s.hd * s.n_head_kv}, 82),
                                    typed_leaf(s.t, {E, s.hd * s.n_head_kv}, 83),
                                    typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, 84, false),
                                    typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, 85, false),
                                    i32_leaf(rows),
                                    causal_mask(n_kv, s.n_tok)};
        if (s.ff) {
            std::vector<float> f(size_t(s.n_rot / 2));
            for (size_t i = 0; i < f.size(); i++) f[i] = 1.0f + 0.1f * float(i % 5);
            leaf fl;
            fl.ne[0] = s.n_rot / 2;
            fl.bytes = to_bytes(f);
            fl.weight = true;
            leaves.push_back(fl);
        }
        const size_t b0 = leaves.size(); // the biases of q, k, v
        if (s.bias)
            for (int64_t rows : {s.hd * s.n_head, s.hd * s.n_head_kv, s.hd * s.n_head_kv}) {
                leaf bl = f32_leaf({rows}, uint32_t(90 + leaves.size()), 0.5f);
                bl.weight = true;
                leaves.push_back(bl);
            }
        const size_t n0 = leaves.size(); // the Q and K norm weights
        if (s.qk_norm)
            for (int w = 0; w < 2; w++) {
                leaf nl = f32_leaf({s.hd}, uint32_t(95 + w));
                nl.weight = true;
                leaves.push_back(nl);
            }
        add_case(std::string("qkv_rope_kv_attention_") + type_name(s.t) + "_hd" + std::to_string(s.hd) + "_h" +
                     std::to_string(s.n_head) + "_kv" + std::to_string(s.n_head_kv) + "_rot" + std::to_string(s.n_rot) +
                     "_tok" + std::to_string(s.n_tok) + (s.neox ? "_neox" : "") + (s.ff ? "_ff" : "") +
                     (s.bias ? "_bias" : "") + (s.qk_norm ? "_qknorm" : "") + (s.q_scale != 0.0f ? "_qscale" : ""),
                 leaves,
                 [=](context& c, const auto& t) {
                     const rope_mode mode = s.neox ? rope_mode::neox : rope_mode::normal;
                     tensor* ff = s.ff ? t[8] : nullptr;
                     tensor* q = mul_mat(c, t[1], t[0]);
                     tensor* k = mul_mat(c, t[2], t[0]);
                     tensor* v = mul_mat(c, t[3], t[0]);
                     if (s.bias) { // as builder::attention: the three products, then their biased sums
                         for (tensor* e : {q, k, v}) expand_first->push_back(e);
                         q = add(c, q, t[b0]);
                         k = add(c, k, t[b0 + 1]);
                         v = add(c, v, t[b0 + 2]);
                     }
                     tensor* q3 = reshape_3d(c, q, s.hd, s.n_head, s.n_tok);
                     tensor* k3 = reshape_3d(c, k, s.hd, s.n_head_kv, s.n_tok);
                     if (s.qk_norm) { // as builder::attention: both norms before either rope
                         for (tensor* e : {q, k, v}) expand_first->push_back(e);
                         q3 = mul(c, rms_norm(c, q3, 1e-6f), t[n0]);
                         k3 = mul(c, rms_norm(c, k3, 1e-6f), t[n0 + 1]);
                     }
                     tensor* qr = rope(c, q3, t[6], ff, s.n_rot, mode, 10000.0f, 1.0f);
                     tensor* kr = rope(c, k3, t[6], ff, s.n_rot, mode, 10000.0f, 1.0f);
                     tensor* kw = set_rows(c, t[4], reshape_2d(c, kr, s.hd * s.n_head_kv, s.n_tok), t[6]);
                     tensor* vw = set_rows(c, t[5], v, t[6]);
                     for (tensor* e : {q, k, v}) expand_first->push_back(e);
                     if (s.qk_norm) {
                         expand_first->push_back(q3);
                         expand_first->push_back(k3);
                     }
                     for (tensor* e : {qr, kw, vw}) expand_first->push_back(e);
                     tensor* kv = view_3d(c, kw, s.hd, s.n_head_kv, n_kv, size_t(s.hd) * 2, kw->nb[1], 0);
                     tensor* vv = view_3d(c, vw, s.hd, s.n_head_kv, n_kv, size_t(s.hd) * 2, vw->nb[1], 0);
                     if (s.q_scale != 0.0f) return attention(c, scale(c, qr, s.q_scale), kv, vv, t[7], 1.0f);
                     return attention(c, qr, kv, vv, t[7], 1.0f / std::sqrt(float(s.hd)));
                 },
                 s.n_tok > 1 || n_kv > 256 || s.t == type::bf16 ? 1e-4 : 5e-6);
    }

    // ---- expert routing (mixture-of-experts feed-forward) and gpt-oss's ops ----
    // elementwise: one f32 operation per element on both (0), swiglu_oai's expf vs glibc's (~1 ulp: 1e-12); sum_rows
    // sums in double on both (a different order, then rounded to f32: 1e-12)
    add_case(
        "div_37x5x3_by_1x5x3", {f32_leaf({37, 5, 3}, 70), f32_leaf({1, 5, 3}, 71)},
        [](context& c, const auto& t) { return div(c, t[0], t[1]); }, 0.0);
    add_case(
        "clamp_131x7", {f32_leaf({131, 7}, 72, 3.0f)},
        [](context& c, const auto& t) { return clamp(c, t[0], -1.5f, 2.0f); }, 0.0);
    add_case(
        "swiglu_oai_131x4x3", {f32_leaf({131, 4, 3}, 73, 6.0f), f32_leaf({131, 4, 3}, 74, 6.0f)},
        [](context& c, const auto& t) { return swiglu_oai(c, t[0], t[1], 1.702f, 7.0f); }, 1e-12);
    add_case(
        "sum_rows_300x5x3", {f32_leaf({300, 5, 3}, 75)}, [](context& c, const auto& t) { return sum_rows(c, t[0]); },
        1e-12);
    // rms_norm_part (a sub-norm under tensor parallelism): a part of 300 of each 577-wide row, normalized by the
    // whole rows' sums of squares (the same f32 steps on both; the sums as sum_rows: 1e-12)
    add_case(
        "rms_norm_part_300x9_of_577", {f32_leaf({300, 9}, 77, 2.0f), f32_leaf({577, 9}, 78, 2.0f)},
        [](context& c, const auto& t) {
            return rms_norm_part(c, t[0], sum_rows(c, mul(c, t[1], t[1])), 577, 1e-5f);
        },
        1e-12);
    // top_k: the same indices in the same order (i32 outputs compare byte for byte): sorted (llama.cpp's
    // build_moe_ffn) and ggml_top_k's order (the first two swapped); 128 experts (a power of two), 60 (padded), 1 row
    struct topk_shape {
        int64_t n, rows, k;
    };
    for (bool sorted : {true, false})
        for (topk_shape s : {topk_shape{128, 9, 8}, topk_shape{60, 40, 4}, topk_shape{32, 1, 1}})
            add_case(std::string("top_k_") + (sorted ? "sorted_" : "") + std::to_string(s.n) + "x" +
                         std::to_string(s.rows) + "_k" + std::to_string(s.k),
                     {f32_leaf({s.n, s.rows}, 76)},
                     [=](context& c, const auto& t) { return top_k(c, t[0], s.k, sorted); }, 0.0);
    // (slot, token) -> expert ids: each token n_used distinct experts of n_expert, expert 0 taken by every token (its
    // pairs span several of the grouped kernel's 8-pair tiles), the last expert by none
    auto ids_leaf = [](int64_t n_used, int64_t n_tok, int64_t n_expert, uint32_t seed) {
        std::vector<int32_t> v;
        uint32_t s = seed;
        for (int64_t t = 0; t < n_tok; t++) {
            std::vector<int32_t> pool;
            for (int32_t e = 1; e < int32_t(n_expert - 1); e++) pool.push_back(e);
            v.push_back(0);
            for (int64_t i = 1; i < n_used; i++) {
                s = s * 1664525u + 1013904223u;
                const size_t j = size_t(s >> 8) % pool.size();
                v.push_back(pool[j]);
                pool.erase(pool.begin() + std::ptrdiff_t(j));
            }
            std::swap(v[size_t(t * n_used)], v[size_t(t * n_used + t % n_used)]); // expert 0 in every slot position
        }
        leaf l = i32_leaf(v);
        l.ne[0] = n_used;
        l.ne[1] = n_tok;
        return l;
    };
    add_case(
        "get_rows_batched_1x16x40", {f32_leaf({1, 16, 40}, 77), ids_leaf(4, 40, 16, 1)},
        [](context& c, const auto& t) { return get_rows(c, t[0], t[1]); }, 0.0);
    add_case(
        "add_id_37x4x9", {f32_leaf({37, 4, 9}, 78), f32_leaf({37, 16}, 79), ids_leaf(4, 9, 16, 2)},
        [](context& c, const auto& t) { return add_id(c, t[0], t[1], t[2]); }, 0.0);
    // mul_mat_id: 16 experts of (k, n), 4 used a token; activations shared by a token's slots (gate, up: n_b = 1) or
    // one row a slot (down); 1 token (decode: pair by pair), 3 (a small batch), 40 (grouped by expert: tiles of 64
    // pairs on the tensor cores, of 8 on the GEMV for formats without them). Bounds: mul_mat's decode and GEMM bounds
    // (the same integers, f32 sums in another order; Hopper: the q8_1 values as f16, as the dense GEMM)
    // (K formats: the CPU's q8_K integers, d as f16 -> 2e-6; H200: at most 5.7e-7)
    for (type t : {type::f32, type::f16, type::bf16, type::q4_0, type::q4_1, type::q5_0, type::q5_1, type::q8_0,
                   type::mxfp4, type::nvfp4, type::q2_k, type::q3_k, type::q4_k, type::q6_k, type::iq4_nl,
                   type::iq4_xs, type::iq3_xxs, type::iq3_s})
        for (int64_t n_tok : {1, 3, 40})
            for (bool shared : {true, false}) {
                const int64_t k = 256, n = 72, n_expert = 16, n_used = 4;
                add_case(std::string("mul_mat_id_") + type_name(t) + "_k256_n72_e16_u4_tok" + std::to_string(n_tok) +
                             (shared ? "_shared" : "_per_slot"),
                         {typed_leaf(t, {k, n, n_expert}, 80), f32_leaf({k, shared ? 1 : n_used, n_tok}, 81),
                          ids_leaf(n_used, n_tok, n_expert, 3)},
                         [](context& c, const auto& l) { return mul_mat_id(c, l[0], l[1], l[2]); },
                         t == type::f32                          ? 1e-10
                         : t == type::bf16                       ? 1e-4
                         : t == type::q4_k || t == type::q6_k || t == type::q3_k || t == type::iq4_xs ||
                                 t == type::iq3_xxs || t == type::iq3_s
                             ? 2e-6
                         : t == type::q2_k                       ? 5e-4
                                                                 : 1e-6);
            }
    // qwen3moe-small's expert shape (whole 16-row groups, k of 4 staging steps, 64 experts, 8 used)
    for (type t : {type::q4_0, type::q8_0})
        for (int64_t n_tok : {1, 3})
            add_case(std::string("mul_mat_id_") + type_name(t) + "_k1024_n256_e64_u8_tok" + std::to_string(n_tok),
                     {typed_leaf(t, {1024, 256, 64}, 95), f32_leaf({1024, 1, n_tok}, 96), ids_leaf(8, n_tok, 64, 7)},
                     [](context& c, const auto& l) { return mul_mat_id(c, l[0], l[1], l[2]); }, 1e-6);
    // the route of more experts than its block has threads (each thread a run of experts in the scan), and an expert
    // chosen by more pairs than a tile holds (ids_leaf gives every token expert 0: 300 pairs, tiles of 64)
    add_case("mul_mat_id_q8_0_k64_n40_e1100_u2_tok300",
             {typed_leaf(type::q8_0, {64, 40, 1100}, 91), f32_leaf({64, 1, 300}, 99), ids_leaf(2, 300, 1100, 5)},
             [](context& c, const auto& l) { return mul_mat_id(c, l[0], l[1], l[2]); }, 1e-6);
    // Hopper's warp-specialized GEMM (gemm_wgmma.cu gemm_wq_kernel: 256-column tiles of 64 or 128 weight rows, for
    // 192 columns or more where 64-row tiles give half the SMs a CTA; the shapes are sized for 132 SMs): every format
    // dequantized inside the GEMM (mxfp4, dequantized to f16 rows first, takes the other kernels at the same shapes);
    // partial row tiles (2100 rows), a last column tile of one column (513), k % 64 == 32 (2080, 288: the last step's
    // second chunk zeros; formats of 32-value blocks), 6144 rows (128-row tiles), and q, k, v of one activation as one
    // grouped launch. Bounds: the GEMM bounds above (f16 activations: the formats with q8_1 partners 1e-6, the ternary
    // ones and mxfp4 5e-4).
    for (type t :
         {type::q4_0, type::q4_1, type::q8_0, type::awq4, type::awq4_g64, type::tq2_0, type::i2_s, type::mxfp4})
        for (mm_shape s : {mm_shape{2080, 2100, 513}, mm_shape{288, 6144, 300}}) {
            // formats of 64-, 128- or 256-value groups take k = 2048 / 256 (whole groups)
            if (t == type::awq4 || t == type::awq4_g64 || t == type::tq2_0 || t == type::i2_s) s.k = s.k / 256 * 256;
            const bool tern = t == type::tq2_0 || t == type::i2_s || t == type::mxfp4;
            add_case(
                std::string("mul_mat_") + type_name(t) + "_wq_k" + std::to_string(s.k) + "_n" + std::to_string(s.n) +
                    "_m" + std::to_string(s.m),
                {typed_leaf(t, {s.k, s.n}, 84), f32_leaf({s.k, s.m}, 85)},
                [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); }, tern ? 5e-4 : gemm_bound(s.m));
        }
    // a batch of two activation matrices (150 columns each, W broadcast over them): 300 columns through the warp-
    // specialized kernel's epilogue with its per-column batch offsets (66 row tiles of 64 x 2 column tiles)
    add_case("mul_mat_q4_0_wq_batched_k256_n2112_m150x2",
             {typed_leaf(type::q4_0, {256, 2112}, 90), f32_leaf({256, 150, 2}, 91)},
             [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); }, gemm_bound(300));
    // the split tail (gemm_wgmma.cu wq_plan; on 132 SMs): 2048 rows, 64 CTAs, every tile in halves of k; 6144 rows
    // (q, k, v's shape), the last 30 of 96 row tiles in halves; 1280 rows, 40 CTAs, in thirds; a batch of two in halves
    for (type t : {type::q4_0, type::q8_0})
        for (mm_shape s : {mm_shape{2048, 2048, 300}, mm_shape{4096, 6144, 512}, mm_shape{4096, 1280, 300}})
            add_case(
                std::string("mul_mat_") + type_name(t) + "_wq_split_k" + std::to_string(s.k) + "_n" +
                    std::to_string(s.n) + "_m" + std::to_string(s.m),
                {typed_leaf(t, {s.k, s.n}, 92), f32_leaf({s.k, s.m}, 93)},
                [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); }, gemm_bound(s.m));
    add_case(
        "mul_mat_q4_0_wq_split_batched_k2048_n2048_m150x2",
        {typed_leaf(type::q4_0, {2048, 2048}, 94), f32_leaf({2048, 150, 2}, 95)},
        [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); }, gemm_bound(300));
    for (type t : {type::q4_0, type::q8_0})
        add_case(
            std::string("grouped_qkv_wq_") + type_name(t) + "_512x300",
            {f32_leaf({512, 300}, 86), typed_leaf(t, {512, 4096}, 87), typed_leaf(t, {512, 1024}, 88),
             typed_leaf(t, {512, 1000}, 89)},
            [](context& c, const auto& l) {
                tensor* q = mul_mat(c, l[1], l[0]);
                tensor* k = mul_mat(c, l[2], l[0]);
                tensor* v = mul_mat(c, l[3], l[0]);
                for (tensor* e : {q, k, v}) expand_first->push_back(e);
                tensor* q0 = view_2d(c, q, 1000, 300, q->nb[1], 0);
                tensor* k0 = view_2d(c, k, 1000, 300, k->nb[1], 0);
                return add(c, add(c, q0, k0), v);
            },
            gemm_bound(300));
    // mxfp4 as a plain (2-D) weight: the decode GEMV and the GEMM (f16 on Hopper: its bound as nvfp4's GEMM)
    for (mm_shape s : {mm_shape{256, 33, 1}, mm_shape{1024, 67, 9}, mm_shape{512, 200, 140}})
        add_case("mul_mat_mxfp4_k" + std::to_string(s.k) + "_n" + std::to_string(s.n) + "_m" + std::to_string(s.m),
                 {typed_leaf(type::mxfp4, {s.k, s.n}, 82), f32_leaf({s.k, s.m}, 83)},
                 [](context& c, const auto& l) { return mul_mat(c, l[0], l[1]); }, s.m <= 8 ? 1e-6 : 5e-4);
    // the whole block as build_moe_ffn builds it (qwen3moe: softmax, top 4 of 16, weights renormalized; gpt-oss:
    // top 4 of the biased logits, softmax over them, per-expert biases, swiglu_oai), decode and prefill (200 tokens:
    // experts with more pairs than a tile); CUDA fuses the gate and up mul_mat_id into one launch (qwen3moe: one
    // format), the biases and the routing weights into the experts' epilogue and the weighted sum over the slots into
    // one kernel. The routing is the same on both as long as no two router probabilities tie within
    // rounding (random logits: they do not).
    // (leaves: x, logits, up, gate, down, up / gate biases, down biases)
    const auto moe_block = [](context& c, const std::vector<tensor*>& l, bool oai, int64_t n_tok) {
        const int64_t E = 64, X = 16, K = 4;
        tensor* x = l[0];
        tensor* probs = oai ? l[1] : soft_max(c, l[1], nullptr, 1.0f);
        tensor* chosen = top_k(c, probs, K, true);
        tensor* w = get_rows(c, reshape_3d(c, probs, 1, X, n_tok), chosen);
        if (oai) {
            w = reshape_3d(c, soft_max(c, reshape_2d(c, w, K, n_tok), nullptr, 1.0f), 1, K, n_tok);
        } else {
            tensor* w2 = reshape_2d(c, w, K, n_tok);
            tensor* sum = clamp(c, sum_rows(c, w2), 6.103515625e-5f, INFINITY);
            w = reshape_3d(c, div(c, w2, sum), 1, K, n_tok);
        }
        tensor* xe = reshape_3d(c, x, E, 1, n_tok);
        tensor* up = mul_mat_id(c, l[2], xe, chosen);
        tensor* gate = mul_mat_id(c, l[3], xe, chosen);
        if (oai) {
            up = add_id(c, up, l[5], chosen);
            gate = add_id(c, gate, l[5], chosen);
        }
        tensor* cur = oai ? swiglu_oai(c, gate, up, 1.702f, 7.0f) : swiglu(c, gate, up);
        tensor* ex = mul_mat_id(c, l[4], cur, chosen);
        if (oai) ex = add_id(c, ex, l[6], chosen);
        ex = mul(c, ex, w);
        tensor* out = view_2d(c, ex, E, n_tok, ex->nb[2], 0);
        for (int64_t i = 1; i < K; i++) out = add(c, out, view_2d(c, ex, E, n_tok, ex->nb[2], size_t(i) * ex->nb[1]));
        return out;
    };
    const auto moe_leaves = [](bool oai, int64_t n_tok) {
        const int64_t E = 64, X = 16, F = 96;
        return std::vector<leaf>{f32_leaf({E, n_tok}, 84), f32_leaf({X, n_tok}, 85, 2.0f),
                                 typed_leaf(type::q8_0, {E, F, X}, 86),
                                 typed_leaf(oai ? type::mxfp4 : type::q8_0, {E, F, X}, 87),
                                 typed_leaf(type::q8_0, {F, E, X}, 88), f32_leaf({F, X}, 89), f32_leaf({E, X}, 90)};
    };
    for (bool oai : {false, true})
        for (int64_t n_tok : {1, 40, 200})
            add_case(std::string("moe_ffn_") + (oai ? "gpt_oss" : "qwen3moe") + "_tok" + std::to_string(n_tok),
                     moe_leaves(oai, n_tok),
                     [=](context& c, const auto& l) { return moe_block(c, l, oai, n_tok); }, 1e-5);
    // the block's end as a layer's: the residual's add and the next block's norm [and its q8_1 for a mul_mat, at one
    // token], which CUDA runs with the slots' sum as one kernel (fused.cu fuse_add_norm with add_norm_slots: the
    // routing weights in the down GEMV's epilogue at one token; the weighted sum inside the kernel at 40). Bound:
    // moe_ffn's. (At 40 tokens the q8_1 rounding of the norm's output turns the block's prefill differences into
    // more than 1e-5 after a mul_mat: measured on the H200, session 54, without a finer bound.)
    for (bool oai : {false, true})
        for (int64_t n_tok : {1, 40})
            for (bool mm : {false, true}) {
                if (mm && n_tok > 1) continue;
                std::vector<leaf> ls = moe_leaves(oai, n_tok);
                ls.push_back(f32_leaf({64, n_tok}, 100));
                ls.push_back(f32_leaf({64}, 101));
                ls.push_back(typed_leaf(type::q4_0, {64, 40}, 102));
                add_case(std::string("moe_ffn_") + (oai ? "gpt_oss" : "qwen3moe") + "_add_norm" + (mm ? "_q8" : "") +
                             "_tok" + std::to_string(n_tok),
                         ls,
                         [=](context& c, const auto& l) {
                             tensor* h = add(c, l[7], moe_block(c, l, oai, n_tok));
                             tensor* y = mul(c, rms_norm(c, h, 1e-6f), l[8]);
                             return mm ? mul_mat(c, l[9], y) : y;
                         },
                         1e-5);
            }
    // qwen3moe's block behind its norm, as the model orders it (the residual add, norm, router, routing, experts): the
    // norm kernel leaves the experts' q8_1 activations past the router's float GEMV (fused.cu q8_target_ahead); 1
    // token (and 3: not ahead). Bound: moe_ffn's.
    for (int64_t n_tok : {1, 3}) {
        const int64_t E = 64, X = 16, K = 4, F = 96;
        add_case("moe_ffn_qwen3moe_normed_tok" + std::to_string(n_tok),
                 {f32_leaf({E, n_tok}, 92), f32_leaf({E, n_tok}, 93, 3.0f), f32_leaf({E}, 94),
                  typed_leaf(type::f32, {E, X}, 95), typed_leaf(type::q4_0, {E, F, X}, 96),
                  typed_leaf(type::q4_0, {E, F, X}, 97), typed_leaf(type::q8_0, {F, E, X}, 98)},
                 [=](context& c, const auto& l) {
                     tensor* x = mul(c, rms_norm(c, add(c, l[0], l[1]), 1e-6f), l[2]);
                     tensor* probs = soft_max(c, mul_mat(c, l[3], x), nullptr, 1.0f);
                     tensor* chosen = top_k(c, probs, K, true);
                     tensor* w2 = reshape_2d(c, get_rows(c, reshape_3d(c, probs, 1, X, n_tok), chosen), K, n_tok);
                     tensor* w = reshape_3d(c, div(c, w2, clamp(c, sum_rows(c, w2), 6.103515625e-5f, INFINITY)), 1, K,
                                            n_tok);
                     expand_first->push_back(w);
                     tensor* xe = reshape_3d(c, x, E, 1, n_tok);
                     tensor* up = mul_mat_id(c, l[4], xe, chosen);
                     tensor* gate = mul_mat_id(c, l[5], xe, chosen);
                     tensor* ex = mul(c, mul_mat_id(c, l[6], swiglu(c, gate, up), chosen), w);
                     tensor* out = view_2d(c, ex, E, n_tok, ex->nb[2], 0);
                     for (int64_t i = 1; i < K; i++)
                         out = add(c, out, view_2d(c, ex, E, n_tok, ex->nb[2], size_t(i) * ex->nb[1]));
                     return out;
                 },
                 1e-5);
    }
    // a decode token's routing alone (CUDA: one block, ranks instead of a sort, fused.cu), 128 experts, top 8, with three logits tied for the
    // largest and two tied further down: the chosen ids byte for byte (ties: the lower index first, as the CPU's sort),
    // then the renormalized weights (expf against the CPU's: the softmax bound)
    for (bool ids : {true, false}) {
        leaf logits = f32_leaf({128, 1}, 91, 2.0f);
        logits.make = [] {
            auto v = random_normal(128, 91, 2.0f);
            v[10] = v[20] = v[30] = 9.0f;
            v[99] = v[5] = 7.5f;
            return to_bytes(v);
        };
        add_case(std::string("moe_route_decode_128_top8_") + (ids ? "ids" : "weights"), {logits},
                 [ids](context& c, const auto& l) {
                     tensor* probs = soft_max(c, l[0], nullptr, 1.0f);
                     tensor* chosen = top_k(c, probs, 8, true);
                     tensor* w2 = reshape_2d(c, get_rows(c, reshape_3d(c, probs, 1, 128, 1), chosen), 8, 1);
                     tensor* w = div(c, w2, clamp(c, sum_rows(c, w2), 6.103515625e-5f, INFINITY));
                     if (!ids) return w;
                     expand_first->push_back(w);
                     return chosen;
                 },
                 ids ? 0.0 : 1e-12);
    }
    // gpt-oss's routing of a decode token (biased logits, top 4 of 32, soft_max over the 4; CUDA: one block, fused.cu):
    // ids byte for byte with a tie at the top, then the weights (the softmax bound)
    for (bool ids : {true, false}) {
        leaf logits = f32_leaf({32, 1}, 99, 2.0f);
        logits.make = [] {
            auto v = random_normal(32, 99, 2.0f);
            v[3] = v[17] = 8.0f; // tied once the bias (0 there) is added
            return to_bytes(v);
        };
        leaf bias = f32_leaf({32}, 100, 0.5f);
        bias.make = [] {
            auto v = random_normal(32, 100, 0.5f);
            v[3] = v[17] = 0.0f;
            return to_bytes(v);
        };
        add_case(std::string("moe_route_oai_decode_32_top4_") + (ids ? "ids" : "weights"), {logits, bias},
                 [ids](context& c, const auto& l) {
                     tensor* p = add(c, l[0], l[1]);
                     tensor* chosen = top_k(c, p, 4, true);
                     tensor* g = get_rows(c, reshape_3d(c, p, 1, 32, 1), chosen);
                     tensor* w = soft_max(c, reshape_2d(c, g, 4, 1), nullptr, 1.0f);
                     if (!ids) return w;
                     expand_first->push_back(w);
                     return chosen;
                 },
                 ids ? 0.0 : 1e-12);
    }
    // attention with gpt-oss's sinks (one logit per head in the softmax's denominator; values around the scores so
    // that both of the fold's branches run): the decode kernel (split over the keys past 256), the tensor-core
    // prefill (head size 64) and the f32 prefill (head size 80); bounds as the attention cases above
    for (attn_shape s : {attn_shape{64, 8, 2, 1, 20, true}, attn_shape{64, 8, 2, 2, 600, true},
                         attn_shape{64, 8, 2, 40, 30, true}, attn_shape{80, 4, 2, 40, 5, true},
                         attn_shape{64, 8, 1, 100, 0, true}}) {
        const int64_t n_kv = s.n_past + s.n_tok;
        const float sc = 1.0f / std::sqrt(float(s.hd));
        add_case(
            "attention_sinks_hd" + std::to_string(s.hd) + "_h" + std::to_string(s.n_head) + "_kv" +
                std::to_string(s.n_head_kv) + "_tok" + std::to_string(s.n_tok) + "_past" + std::to_string(s.n_past),
            {f32_leaf({s.hd, s.n_head, s.n_tok}, 91), typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, 92, false),
             typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, 93, false), causal_mask(n_kv, s.n_tok),
             f32_leaf({s.n_head}, 94, 3.0f)},
            [=](context& c, const auto& t) {
                tensor* k = view_3d(c, t[1], s.hd, s.n_head_kv, n_kv, size_t(s.hd) * 2, t[1]->nb[1], 0);
                tensor* v = view_3d(c, t[2], s.hd, s.n_head_kv, n_kv, size_t(s.hd) * 2, t[2]->nb[1], 0);
                return attention(c, t[0], k, v, t[3], sc, t[4]);
            },
            std::max(s.n_tok > 8 && (s.hd == 64 || s.hd == 128 || s.hd == 256) ? 2e-6 : 0.0,
                     s.n_tok >= 64 ? 1e-10 : n_kv > 256 ? 1e-4 : 5e-6));
    }
    return cs;
}

const std::vector<op_case>& cases() {
    static const std::vector<op_case> cs = all_cases();
    return cs;
}

class backend_ops : public ::testing::TestWithParam<size_t> {};

TEST_P(backend_ops, cuda_matches_cpu) {
    TS_REQUIRE_CUDA();
    const op_case& c = cases()[GetParam()];
    cpu::cpu_backend cpu_be(cpu::cpu_options{3, false});
    std::unique_ptr<backend> cuda_be = make_backend(device_type::cuda, 0);
    const run_result ref = run_on(cpu_be, c);
    const run_result got = run_on(*cuda_be, c);
    ASSERT_EQ(ref.out.size(), got.out.size());
    if (!ref.out.empty()) {
        const double e = nmse(got.out.data(), ref.out.data(), ref.out.size());
        EXPECT_LE(e, c.max_nmse) << c.name << ": NMSE " << e << " (bound " << c.max_nmse << ")";
        RecordProperty("nmse", std::to_string(e));
    }
    if (c.check_leaf >= 0) {
        EXPECT_TRUE(ref.checked == got.checked) << c.name << ": written bytes differ";
    }
}

INSTANTIATE_TEST_SUITE_P(cuda, backend_ops, ::testing::Range(size_t(0), cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) { return cases()[i.param].name; });

// Exact mode's mul_mat (exact_mm.cu: the CPU's float orders) gives the CPU's bits for q4_0 and mxfp4 (summed
// blockwise where the CPU does: rows a multiple of 8, a tied output's token table too; 40 rows = 8 mod 16, whose last
// 8 the CPU computes on its row kernels in the same order), q4_1 and q8_0, for plain matrices and tied token tables,
// decode and prompt widths; mxfp4's pair order over 9 chunks (37 rows: an odd last chunk); iq4_nl as mxfp4 over 9
// chunks (blockwise, pairs) and tinyBLAS's lanes (37 rows, 19 activation rows); tq2_0 (the CPU's q8_K
// activations, ggml's 8 lanes) and i2_s (the CPU's per-token int8 activations, the row's exact integer sum, the
// tensor's scale) for matrices; f16 and bf16 in the CPU's float orders (tinyBLAS, ggml_vec_dot_f16 / _bf16; bf16
// through vdpbf16ps's order where this host has AVX512_BF16); f32 in its AVX2 row dot's lanes. Bound: every output
// bit.
TEST(backend_ops_cuda, exact_mul_mat_gives_the_cpus_bits) {
    TS_REQUIRE_CUDA();
    for (type t : {type::q4_0, type::q4_1, type::q8_0, type::mxfp4, type::iq4_nl, type::tq2_0, type::i2_s, type::f16,
                   type::bf16, type::f32})
        for (int64_t n : {int64_t(40), int64_t(48), int64_t(37)})
            for (uint32_t flags : {0u, uint32_t(flag_embedding | flag_tied)})
                for (int64_t m : {int64_t(1), int64_t(19)}) {
                    const bool ternary = t == type::i2_s || t == type::tq2_0;
                    const bool half = t == type::f16 || t == type::bf16 || t == type::f32;
                    if (ternary && flags) continue; // a ternary token table is not a case anyone has
                    // f16 / bf16: 37 rows take the CPU's vec_dot order at every width (rows % 4 != 0), over k = 200
                    // (a tail past the last 32 / 64: added in double); the others tinyBLAS's where m > 1. f32: its
                    // row dot, 200 = 12 x 16 + a tail of 8
                    const int64_t k = t == type::i2_s || t == type::tq2_0 ? 1024
                                      : half && n == 37               ? 200
                                      : t == type::mxfp4 || t == type::iq4_nl ? 288
                                                                      : 256;
                    leaf w = typed_leaf(t, {k, n}, 71);
                    w.flags = flags;
                    const op_case c{"exact_mul_mat",
                                    {std::move(w), f32_leaf({k, m}, 72)},
                                    [](context& cx, const std::vector<tensor*>& l) { return mul_mat(cx, l[0], l[1]); }};
                    cpu::cpu_backend cpu_be(cpu::cpu_options{3, false});
                    std::unique_ptr<backend> cuda_be = make_backend(device_type::cuda, 0, true);
                    const run_result ref = run_on(cpu_be, c), got = run_on(*cuda_be, c);
                    ASSERT_EQ(ref.out.size(), got.out.size());
                    size_t n_diff = 0;
                    for (size_t i = 0; i < ref.out.size(); i++)
                        n_diff += std::memcmp(&ref.out[i], &got.out[i], sizeof(float)) != 0;
                    EXPECT_EQ(n_diff, 0u) << type_name(t) << " n=" << n << " m=" << m << " tied table=" << (flags != 0);
                }
}

// Runs the op cases whose name `wanted` accepts on the CPU and on CUDA in exact mode and expects every output bit
// equal; returns how many ran.
size_t expect_exact_cases(const std::function<bool(const std::string&)>& wanted) {
    size_t n_cases = 0;
    for (const op_case& c : cases()) {
        if (!wanted(c.name)) continue;
        n_cases++;
        cpu::cpu_backend cpu_be(cpu::cpu_options{3, false});
        std::unique_ptr<backend> cuda_be = make_backend(device_type::cuda, 0, true);
        const run_result ref = run_on(cpu_be, c), got = run_on(*cuda_be, c);
        EXPECT_EQ(ref.out.size(), got.out.size()) << c.name;
        if (ref.out.size() != got.out.size()) continue;
        size_t n_diff = 0;
        for (size_t i = 0; i < ref.out.size(); i++) n_diff += std::memcmp(&ref.out[i], &got.out[i], sizeof(float)) != 0;
        EXPECT_EQ(n_diff, 0u) << c.name << ": " << n_diff << " of " << ref.out.size() << " values differ";
    }
    return n_cases;
}

bool name_starts(const std::string& name, const char* prefix) {
    return name.rfind(prefix, 0) == 0;
}

// Exact mode on the op cases of the mixture-of-experts ops: mul_mat_id of every type (the CPU's row kernels pair by
// pair, expert by expert; float experts in its f32 / f16 lanes or bf16's double sum), soft_max (ggml's order),
// swiglu_oai (glibc's expf), the whole moe_ffn block (routing, experts, biases, weights, the slots' sum). Bound: every
// output bit.
TEST(backend_ops_cuda, exact_mode_gives_the_cpus_bits_on_moe_ops) {
    TS_REQUIRE_CUDA();
    const size_t n = expect_exact_cases([](const std::string& name) {
        // (not the K formats nor iq4_xs: exact mode refuses them, the CPU's q8_K activations)
        return (name_starts(name, "mul_mat_id_") && name.find("_K_") == std::string::npos &&
                name.find("iq4_xs") == std::string::npos) ||
               name_starts(name, "moe_ffn_") || name_starts(name, "soft_max") || name_starts(name, "swiglu_oai");
    });
    EXPECT_GE(n, 40u);
}

// top_k over rows full of ties (values on a coarse grid, and a run of columns copying others as a router with two
// equal expert rows gives): exact mode returns the CPU's very indices (libstdc++'s order among equal values); the fast
// kernel, which breaks ties by index, the same values in the same order. Sorted and ggml_top_k's order; 64 columns
// (qwen3moe-small's experts, a power of two) and 60 (padded). Bound: every index (exact), every value (fast).
TEST(backend_ops_cuda, top_k_on_ties) {
    TS_REQUIRE_CUDA();
    for (int64_t n : {64, 60})
        for (bool sorted : {true, false}) {
            const int64_t rows = 40, k = 8;
            std::vector<float> v = random_normal(size_t(n * rows), 120, 1.0f);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < n; j++) {
                    float& x = v[size_t(r * n + j)];
                    x = j >= 51 ? v[size_t(r * n + j - 51)] : std::round(x * 4.0f) / 4.0f;
                }
            leaf l;
            l.ne[0] = n;
            l.ne[1] = rows;
            l.bytes = to_bytes(v);
            const op_case c{"top_k_ties", {l},
                            [=](context& ctx, const auto& t) { return top_k(ctx, t[0], k, sorted); }, 0.0};
            cpu::cpu_backend cpu_be(cpu::cpu_options{3, false});
            const run_result ref = run_on(cpu_be, c);
            size_t ties = 0; // how many chosen values have an equal among the row's other values
            for (int64_t r = 0; r < rows; r++)
                for (int64_t i = 0; i < k; i++) {
                    int32_t id;
                    std::memcpy(&id, ref.raw.data() + size_t(r * k + i) * 4, 4);
                    ties += size_t(std::count(v.begin() + r * n, v.begin() + (r + 1) * n, v[size_t(r * n + id)])) > 1;
                }
            EXPECT_GT(ties, size_t(rows)) << "the rows should be full of ties";
            for (bool exact : {true, false}) {
                std::unique_ptr<backend> cuda_be = make_backend(device_type::cuda, 0, exact);
                const run_result got = run_on(*cuda_be, c);
                ASSERT_EQ(got.raw.size(), ref.raw.size());
                size_t n_diff = 0;
                for (int64_t q = 0; q < rows * k; q++) {
                    int32_t a, b;
                    std::memcpy(&a, ref.raw.data() + size_t(q) * 4, 4);
                    std::memcpy(&b, got.raw.data() + size_t(q) * 4, 4);
                    ASSERT_TRUE(b >= 0 && b < n) << b;
                    const int64_t r = q / k;
                    n_diff += exact ? a != b : v[size_t(r * n + a)] != v[size_t(r * n + b)];
                }
                EXPECT_EQ(n_diff, 0u) << "n " << n << (sorted ? " sorted" : " ggml_top_k's order")
                                      << (exact ? ", exact mode: indices" : ", fast: values");
            }
        }
}

// Exact mode's attention on every attention op case (head sizes 64, 80, 96, 128, 256; decode, short prompts and
// >= 64 queries; causal, patterned and no masks; gpt-oss's sinks): the CPU's one_chunk path below 64 queries and its
// tiled path above, with its sink step. Bound: every output bit.
TEST(backend_ops_cuda, exact_mode_gives_the_cpus_bits_on_attention) {
    TS_REQUIRE_CUDA();
    const size_t n = expect_exact_cases([](const std::string& name) { return name_starts(name, "attention_"); });
    EXPECT_GE(n, 40u);
}

// The score op (perplexity / KLD words per row) on CUDA against the CPU's: the NLL within 1e-7 relative (expf vs
// libm's exp, summed in another order), the KLD
// within 1e-6 + 1e-6 relative, argmax agreement (first index on ties) exactly, the f32 NLL within 2 ulp-ish (2e-6
// relative), the base-file codes off by at most one step in a handful of places (f32 rounding of the bounds).
// Vocabularies odd, even, tiny and real-sized; rows with a tie for the maximum and one spanning more than 16.
TEST(backend_ops_cuda, score_matches_cpu) {
    TS_REQUIRE_CUDA();
    for (int64_t n_vocab : {int64_t(3), int64_t(1001), int64_t(49152), int64_t(128257)}) {
        const int64_t n_rows = 9;
        std::vector<float> l = random_normal(size_t(n_vocab * n_rows), 50, 3.0f);
        std::vector<float> o = random_normal(size_t(n_vocab * n_rows), 51, 3.0f);
        for (size_t i = 0; i < l.size(); i++) o[i] = 0.8f * l[i] + 0.6f * o[i];
        if (n_vocab > 1000) {
            for (auto* x : {&l, &o}) (*x)[size_t(2 * n_vocab + 17)] = (*x)[size_t(2 * n_vocab + 900)] = 20.0f;
            l[size_t(4 * n_vocab + 5)] = 40.0f;
        }
        std::vector<int32_t> tv;
        for (int64_t r = 0; r < n_rows; r++) tv.push_back(int32_t((r * 389 + 11) % n_vocab));
        auto logits_leaf = [&](const std::vector<float>& v) {
            leaf lf;
            lf.ne[0] = n_vocab;
            lf.ne[1] = n_rows;
            lf.bytes = to_bytes(v);
            return lf;
        };
        cpu::cpu_backend cpu_be(cpu::cpu_options{3, false});
        std::unique_ptr<backend> cuda_be = make_backend(device_type::cuda, 0);
        auto words = [](const std::vector<uint8_t>& raw) { return reinterpret_cast<const int32_t*>(raw.data()); };
        auto as_double = [](const int32_t* w) {
            double d;
            std::memcpy(&d, w, 8);
            return d;
        };

        op_case enc{"encode", {logits_leaf(l), i32_leaf(tv)},
                    [](context& c, const std::vector<tensor*>& t) {
                        return score(c, t[0], t[1], nullptr, score_mode::encode);
                    }};
        const run_result enc_cpu = run_on(cpu_be, enc), enc_gpu = run_on(*cuda_be, enc);
        const int64_t ew = score_row_words(score_mode::encode, n_vocab), rec_words = kld_record_size(n_vocab) / 2;
        std::vector<int32_t> base(size_t(rec_words * n_rows));
        int64_t codes_off = 0;
        for (int64_t r = 0; r < n_rows; r++) {
            const int32_t* a = words(enc_cpu.raw) + r * ew;
            const int32_t* b = words(enc_gpu.raw) + r * ew;
            EXPECT_NEAR(as_double(b), as_double(a), 2e-6 * as_double(a)) << n_vocab << " encode NLL row " << r;
            EXPECT_EQ(a[score_header_words], b[score_header_words]) << "scale, row " << r;
            float ma, mb;
            std::memcpy(&ma, a + score_header_words + 1, 4);
            std::memcpy(&mb, b + score_header_words + 1, 4);
            EXPECT_NEAR(ma, mb, 4e-6f * std::abs(ma)) << "min log-prob, row " << r;
            const auto* ca = reinterpret_cast<const uint16_t*>(a + score_header_words) + 4;
            const auto* cb = reinterpret_cast<const uint16_t*>(b + score_header_words) + 4;
            for (int64_t i = 0; i < 2 * (rec_words - 2); i++) {
                EXPECT_LE(std::abs(int(ca[i]) - int(cb[i])), 1) << "code " << i << " row " << r;
                codes_off += ca[i] != cb[i];
            }
            std::memcpy(&base[size_t(r * rec_words)], a + score_header_words, size_t(rec_words) * 4);
        }
        EXPECT_LE(codes_off, n_rows * 2) << n_vocab << ": codes one step apart";

        for (score_mode m : {score_mode::nll, score_mode::compare}) {
            leaf bl = i32_leaf(base);
            bl.ne[0] = rec_words;
            bl.ne[1] = n_rows;
            op_case c{"score", {logits_leaf(o), i32_leaf(tv), bl},
                      [m](context& cx, const std::vector<tensor*>& t) {
                          return score(cx, t[0], t[1], m == score_mode::compare ? t[2] : nullptr, m);
                      }};
            const run_result a = run_on(cpu_be, c), b = run_on(*cuda_be, c);
            for (int64_t r = 0; r < n_rows; r++) {
                const int32_t* wa = words(a.raw) + r * score_header_words;
                const int32_t* wb = words(b.raw) + r * score_header_words;
                EXPECT_NEAR(as_double(wb), as_double(wa), 1e-7 * as_double(wa)) << n_vocab << " NLL row " << r;
                if (m != score_mode::compare) continue;
                EXPECT_NEAR(as_double(wb + 2), as_double(wa + 2), 1e-6 + 1e-6 * as_double(wa + 2)) << "KLD row " << r;
                float fa, fb;
                std::memcpy(&fa, wa + 4, 4);
                std::memcpy(&fb, wb + 4, 4);
                EXPECT_NEAR(fb, fa, 2e-6f * std::abs(fa)) << "f32 NLL row " << r;
                EXPECT_EQ(wa[5], wb[5]) << "same top, row " << r;
                if (n_vocab > 1000 && r == 2) {
                    EXPECT_EQ(wb[5], 1) << "the tie: both first at 17";
                }
            }
        }
    }
}

// A session on CUDA runs no op the backend does not support, and a weight that was never loaded is a clear error.
TEST(backend_ops_cuda, unloaded_weight_is_an_error) {
    TS_REQUIRE_CUDA();
    std::unique_ptr<backend> be = make_backend(device_type::cuda, 0);
    context ctx;
    leaf w = typed_leaf(type::q8_0, {64, 4}, 40);
    tensor* wt = ctx.new_tensor(type::q8_0, w.ne, 4);
    wt->flags |= flag_param;
    wt->data = const_cast<uint8_t*>(w.data().data());
    tensor* x = ctx.new_tensor(type::f32, {64, 1});
    tensor* y = mul_mat(ctx, wt, x);
    y->flags |= flag_output;
    graph g;
    g.expand(y);
    graph_runner runner(*be);
    runner.prepare(g);
    EXPECT_THROW(runner.compute(g), tessera::error);
}

// More memory than the GPU has is one clear error naming the need, what is free and what to do (-ngl), and leaves
// the backend usable (no sticky CUDA error).
TEST(backend_ops_cuda, out_of_memory_is_a_clear_error) {
    TS_REQUIRE_CUDA();
    std::unique_ptr<backend> be = make_backend(device_type::cuda, 0);
    const size_t huge = size_t(1) << 50; // 1 PiB
    try {
        (void)be->alloc(huge);
        FAIL() << "a 1 PiB allocation succeeded";
    } catch (const tessera::error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("CUDA out of memory"), std::string::npos) << m;
        EXPECT_NE(m.find("1073741824.0 MiB"), std::string::npos) << m; // the need
        EXPECT_NE(m.find("free"), std::string::npos) << m;
        EXPECT_NE(m.find("-ngl"), std::string::npos) << m;
        EXPECT_EQ(m.find('\n'), std::string::npos) << m; // one line
    }
    // still usable (a sticky CUDA error would make the next checked call throw): a small buffer, then a whole case
    auto b = be->alloc(1024);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->size(), 1024u);
    const op_case& c = cases().front();
    cpu::cpu_backend cpu_be(cpu::cpu_options{1, false});
    const run_result ref = run_on(cpu_be, c), got = run_on(*be, c);
    ASSERT_EQ(ref.out.size(), got.out.size());
    EXPECT_LE(nmse(got.out.data(), ref.out.data(), ref.out.size()), c.max_nmse) << c.name;
}

// Attention over a KV length padded past the filled cache rows (backend::kv_pad: CUDA reads the cache in multiples
// of 256 rows), the rows past them never written: here NaN bytes (0xff), the mask -inf there. Every kernel (split
// decode kernel: head sizes 64/128/256, with several splits from 257 keys on, 4201 keys of 8 KV heads dealt out for
// one wave on 132 SMs (decode_split_plan); the key-per-thread decode kernel: 96;
// prefill: > 8 queries) must give those keys no weight at all, not 0 * NaN: the output is the unpadded one, bit for bit
// (the keys each warp / split / tile sees are the same, masked ones skipped).
TEST(backend_ops_cuda, attention_ignores_never_written_padded_rows) {
    TS_REQUIRE_CUDA();
    std::unique_ptr<backend> be = make_backend(device_type::cuda, 0);
    struct shape {
        int64_t hd, n_head, n_head_kv, n_tok, n_past, pad;
    };
    for (shape s : {shape{64, 6, 2, 1, 8, 256}, shape{128, 4, 1, 1, 300, 256}, shape{256, 2, 1, 3, 20, 64},
                    shape{128, 32, 8, 1, 700, 256}, shape{64, 6, 2, 4, 1000, 512}, shape{128, 32, 8, 1, 4200, 256},
                    shape{96, 2, 1, 1, 9, 256}, shape{64, 6, 2, 33, 7, 256}, shape{128, 4, 2, 70, 30, 256},
                    shape{64, 6, 2, 5, 0, 256}}) {
        const int64_t n_kv = s.n_past + s.n_tok, n_pad = (n_kv + s.pad - 1) / s.pad * s.pad;
        const leaf q = f32_leaf({s.hd, s.n_head, s.n_tok}, 50);
        const leaf k = typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, 51, false);
        const leaf v = typed_leaf(type::f16, {s.hd * s.n_head_kv, n_kv}, 52, false);
        auto padded = [&](const leaf& c) {
            leaf p = c;
            p.ne[1] = n_pad;
            p.bytes = c.data();
            p.make = nullptr;
            p.bytes.resize(size_t(s.hd * s.n_head_kv * n_pad) * 2, 0xff); // NaN halves
            return p;
        };
        auto make = [&](int64_t rows, const leaf& kc, const leaf& vc) {
            op_case c;
            c.leaves = {q, kc, vc, causal_mask(rows, s.n_tok)};
            if (rows > n_kv) { // causal_mask assumes the last row is the last token's: mask the padding out
                std::vector<float> m(size_t(rows * s.n_tok));
                for (int64_t r = 0; r < s.n_tok; r++)
                    for (int64_t j = 0; j < rows; j++)
                        m[size_t(r * rows + j)] = j <= s.n_past + r ? 0.0f : -INFINITY;
                c.leaves[3].bytes = to_bytes(m);
            }
            const float sc = 1.0f / std::sqrt(float(s.hd));
            c.build = [=](context& ctx, const std::vector<tensor*>& t) {
                tensor* kk = view_3d(ctx, t[1], s.hd, s.n_head_kv, rows, size_t(s.hd) * 2, t[1]->nb[1], 0);
                tensor* vv = view_3d(ctx, t[2], s.hd, s.n_head_kv, rows, size_t(s.hd) * 2, t[2]->nb[1], 0);
                return attention(ctx, t[0], kk, vv, t[3], sc);
            };
            return c;
        };
        const run_result plain = run_on(*be, make(n_kv, k, v));
        const run_result pad = run_on(*be, make(n_pad, padded(k), padded(v)));
        const std::string name = "hd " + std::to_string(s.hd) + ", " + std::to_string(s.n_tok) + " tokens, " +
                                 std::to_string(n_kv) + " keys padded to " + std::to_string(n_pad);
        ASSERT_EQ(plain.out.size(), pad.out.size()) << name;
        size_t n_nan = 0, n_diff = 0;
        for (size_t i = 0; i < pad.out.size(); i++) {
            n_nan += !std::isfinite(pad.out[i]);
            n_diff += std::memcmp(&pad.out[i], &plain.out[i], 4) != 0;
        }
        EXPECT_EQ(n_nan, 0u) << name;
        EXPECT_EQ(n_diff, 0u) << name;
    }
}

// ---- the default model end to end ----

// Every f32 node of one graph, in graph order, read through the eval callback.
struct node_dump {
    std::vector<std::string> names;
    std::vector<std::vector<float>> values;
};
void record_nodes(session& s, node_dump& d) {
    backend& be = s.be();
    be.set_eval_callback([&d, &be](const tensor& n) {
        if (n.t != type::f32 || n.o == op::cpy) return;
        std::vector<float> v(n.n_bytes() / 4);
        be.get(n, v.data(), 0, v.size() * 4);
        d.names.push_back(std::string(op_name(n.o)) + " " + n.name);
        d.values.push_back(std::move(v));
    });
}

// Node by node, CUDA against the CPU on the same tokens: a prompt of 23 tokens (prefill), then one more token
// (decode). This model amplifies rounding-level differences layer after layer (activations are re-quantized to 8 bits
// before every matmul, so a difference of one ulp can move a q by one): on the CPU alone, multiplying one attention
// scale by 1 + 1e-6 gives node NMSE up to 3e-5 in layer 0 and 4e-3 by the last layer (2026-11-22). bounds: layer 0
// (and the embeddings) 3e-4, where a wrong kernel shows first, since every layer runs the same kernels; every node
// 5e-2, which catches a wrong op in one place (the output layer, say) without failing on that growth.
TEST(backend_ops_model, every_node_agrees_with_cpu) {
    TS_REQUIRE_CUDA();
    TS_REQUIRE_MODEL();
    auto m = model::load(test::model_path());
    session cpu_s(*m, session_params{.n_ctx = 128});
    session gpu_s(*m, session_params{.n_ctx = 128, .device = device_type::cuda});
    std::vector<token> prompt = m->voc.tokenize("The quick brown fox jumps over the lazy dog, and then the dog "
                                                "wakes up and chases the fox across the",
                                                true, true);
    prompt.resize(std::min<size_t>(prompt.size(), 30));
    for (const auto& batch : {prompt, std::vector<token>{prompt[3]}}) {
        node_dump dc, dg;
        record_nodes(cpu_s, dc);
        record_nodes(gpu_s, dg);
        cpu_s.decode(batch);
        gpu_s.decode(batch);
        ASSERT_EQ(dc.names, dg.names);
        double worst = 0, worst_l0 = 0;
        size_t first_bad = SIZE_MAX;
        for (size_t i = 0; i < dc.values.size(); i++) {
            const double e = nmse(dg.values[i].data(), dc.values[i].data(), dc.values[i].size());
            const std::string& nm = dc.names[i];
            const bool layer0 = nm.ends_with("-0") || nm.ends_with("embd") || i < 3;
            worst = std::max(worst, e);
            if (layer0) worst_l0 = std::max(worst_l0, e);
            if ((e > 5e-2 || (layer0 && e > 3e-4)) && first_bad == SIZE_MAX) first_bad = i;
        }
        std::printf("%zu tokens: %zu nodes, worst NMSE in layer 0 %.3g, overall %.3g\n", batch.size(), dc.values.size(),
                    worst_l0, worst);
        if (first_bad != SIZE_MAX) {
            for (size_t i = first_bad >= 3 ? first_bad - 3 : 0; i < std::min(first_bad + 6, dc.values.size()); i++)
                std::printf("  node %zu %-28s NMSE %.3g\n", i, dc.names[i].c_str(),
                            nmse(dg.values[i].data(), dc.values[i].data(), dc.values[i].size()));
            ADD_FAILURE() << batch.size() << " tokens: node " << first_bad << " (" << dc.names[first_bad]
                          << ") is the first past its bound";
        }
    }
}

// Greedy text from the CPU (72 tokens after each of 3 prompts), then top-1 agreement at every position:
//   CUDA batch vs CPU batch (the text as one batch of >= 64 tokens: f32 attention on both),
//   CUDA decode vs CPU decode (one token per graph; the CPU rounds attention to f16 there, as ggml),
//   CUDA decode vs CUDA batch.
// Exact ids are not required, and 99% against the CPU is not reachable by any other implementation on this model:
// two f32 CPU attention paths agree on 97.7% of these steps, and the CPU against itself with one attention scale
// times 1 + 1e-6 also on 97.7% (max |dlogit| 1.7; 2026-11-22). The same holds for CUDA against itself since both of
// its paths re-quantize activations to q8_1 (the GEMV sums chunks lane by lane, the int8 GEMM chunk after chunk: one
// ulp apart, then amplified): measured 97.2% (H100, 2026-11-22); the CPU's scalar reference kernels against its AVX2
// ones (TESSERA_CPU_REFERENCE=1) agree on 95.8% of wiki.test.raw's positions. bounds: 90% against the CPU (a wrong
// kernel gives far less), 93% for CUDA decode against CUDA batch.
TEST(backend_ops_model, cuda_agrees_with_cpu_on_the_default_model) {
    TS_REQUIRE_CUDA();
    TS_REQUIRE_MODEL();
    auto m = model::load(test::model_path());
    const int64_t n_vocab = m->hp.n_vocab;
    auto argmax = [&](const float* l) { return int32_t(std::max_element(l, l + n_vocab) - l); };
    int batch_agree = 0, decode_self = 0, decode_cpu = 0, total = 0;
    double max_dlogit = 0;
    for (const char* prompt : {"The capital of France is", "def fibonacci(n):", "Once upon a time"}) {
        // the text: prompt + 72 greedy tokens on the CPU, one token per step
        std::vector<token> text = m->voc.tokenize(prompt, true, true);
        const size_t n_prompt = text.size();
        std::vector<std::vector<float>> cpu_steps; // CPU decode logits for positions n_prompt - 1 ...
        {
            session s(*m, session_params{.n_ctx = 256});
            auto l = s.decode(text);
            for (int i = 0; i < 72; i++) {
                cpu_steps.emplace_back(l.begin(), l.end());
                const token t = argmax(l.data());
                text.push_back(t);
                const token one[1] = {t};
                l = s.decode(one);
            }
        }
        // one batch on each backend, logits of every position
        session cpu_b(*m, session_params{.n_ctx = 256});
        session gpu_b(*m, session_params{.n_ctx = 256, .device = device_type::cuda});
        const auto cb = cpu_b.decode(text, true);
        std::vector<float> cpu_all(cb.begin(), cb.end());
        const auto gb = gpu_b.decode(text, true);
        std::vector<float> gpu_all(gb.begin(), gb.end());
        for (size_t i = 0; i < text.size(); i++) {
            const float* c = cpu_all.data() + i * size_t(n_vocab);
            const float* g = gpu_all.data() + i * size_t(n_vocab);
            batch_agree += argmax(c) == argmax(g);
            for (int64_t j = 0; j < n_vocab; j++) max_dlogit = std::max(max_dlogit, double(std::fabs(c[j] - g[j])));
        }
        // the CUDA decode path over the same text, one token per graph
        session gpu_s(*m, session_params{.n_ctx = 256, .device = device_type::cuda});
        auto l = gpu_s.decode(std::span<const token>(text.data(), n_prompt));
        for (size_t i = 0; i < cpu_steps.size(); i++) {
            const size_t pos = n_prompt - 1 + i;
            decode_self += argmax(l.data()) == argmax(gpu_all.data() + pos * size_t(n_vocab));
            decode_cpu += argmax(l.data()) == argmax(cpu_steps[i].data());
            total++;
            const token one[1] = {text[pos + 1]};
            if (pos + 1 < text.size()) l = gpu_s.decode(one);
        }
    }
    int n_batch_pos = 0;
    for (const char* prompt : {"The capital of France is", "def fibonacci(n):", "Once upon a time"})
        n_batch_pos += int(m->voc.tokenize(prompt, true, true).size()) + 72;
    const double batch_rate = double(batch_agree) / n_batch_pos, self_rate = double(decode_self) / total;
    std::printf("CUDA vs CPU on %s: batch top-1 %d/%d (%.2f%%), max |dlogit| %.4f; CUDA decode vs CUDA batch %d/%d "
                "(%.2f%%); CUDA decode vs CPU decode %d/%d (%.2f%%)\n",
                test::model_path().c_str(), batch_agree, n_batch_pos, 100.0 * batch_rate, max_dlogit, decode_self,
                total, 100.0 * self_rate, decode_cpu, total, 100.0 * decode_cpu / total);
    RecordProperty("batch_top1", std::to_string(batch_rate));
    EXPECT_GE(batch_rate, 0.90);
    EXPECT_GE(double(decode_cpu) / total, 0.90);
    EXPECT_GE(self_rate, 0.93);
}

// Exact mode (session_params::exact, TESSERA_CUDA_EXACT=1): a batch of >= 64 tokens (the CPU's tiled attention), then
// decode steps (its f16 one_chunk path), on CUDA give the CPU's logits bit for bit: the same integers and the same float order in every op (gemm.cu's
// exact_order, norm.cu, elementwise.cu's swiglu, rope's host-side angles, attention.cu's tiled kernel). Bound: 0.
// (Measured 2026-11-22 on the H100: 0 on every node of the default model, and over 40 chunks of wiki.test.raw the
// same top-1 on 100% of positions for q8_0, q4_1, awq4 and 99.99% for nvfp4.)
TEST(backend_ops_model, exact_mode_gives_the_cpus_logits_bit_for_bit) {
    TS_REQUIRE_CUDA();
    TS_REQUIRE_MODEL();
    auto m = model::load(test::model_path());
    const std::vector<token> text = m->voc.tokenize(
        "The history of the city begins in the Roman period, when a small settlement grew up around a bridge over the "
        "river. Over the following centuries it became a market town, then a regional capital, and finally one of the "
        "largest cities in the country. Its museums, parks and old streets attract visitors from all over the world.",
        true, true);
    ASSERT_GE(text.size(), 64u);
    session cpu_s(*m, session_params{.n_ctx = 256});
    session gpu_s(*m, session_params{.n_ctx = 256, .device = device_type::cuda, .exact = true});
    const auto c = cpu_s.decode(text, true);
    const std::vector<float> cpu_all(c.begin(), c.end());
    const auto g = gpu_s.decode(text, true);
    ASSERT_EQ(g.size(), cpu_all.size());
    size_t n_diff = 0;
    double max_d = 0;
    for (size_t i = 0; i < cpu_all.size(); i++) {
        n_diff += g[i] != cpu_all[i];
        max_d = std::max(max_d, double(std::fabs(g[i] - cpu_all[i])));
    }
    EXPECT_EQ(n_diff, 0u) << "max |dlogit| " << max_d << " over " << text.size() << " tokens";
    // then 16 decode steps on both (fewer than 64 queries: the CPU's f16 attention path)
    token next = token(std::max_element(cpu_all.end() - m->hp.n_vocab, cpu_all.end()) - (cpu_all.end() - m->hp.n_vocab));
    size_t steps_diff = 0;
    for (int i = 0; i < 16; i++) {
        const token one[1] = {next};
        const auto lc = cpu_s.decode(one);
        const std::vector<float> cl(lc.begin(), lc.end());
        const auto lg = gpu_s.decode(one);
        for (size_t j = 0; j < cl.size(); j++) steps_diff += lg[j] != cl[j];
        next = token(std::max_element(cl.begin(), cl.end()) - cl.begin());
    }
    EXPECT_EQ(steps_diff, 0u) << "decode steps: logits that differ";
}

// A decode step launches the CUDA graph captured for the token before, unchanged (the KV length padded to 256: the
// graph stays the same for 256 tokens; the cache rows to write are a graph input), and gives the logits of a session
// that captures every token (kv_pad 1: the KV length changes every token, so does the graph). A prompt of ~230 tokens,
// then 48 greedy steps across the pad's end (n_kv 256 -> 512, a new capture). The two differ only in masked keys,
// which every kernel skips: the same bits expected; bound 1e-4.
TEST(backend_ops_model, decode_graph_replayed_unchanged_gives_the_same_logits) {
    TS_REQUIRE_CUDA();
    TS_REQUIRE_MODEL();
    if (const char* e = std::getenv("TESSERA_CUDA_EXACT"); e && std::string(e) == "1")
        GTEST_SKIP() << "TESSERA_CUDA_EXACT=1: the exact mode launches without CUDA graphs";
    auto m = model::load(test::model_path());
    const int64_t n_vocab = m->hp.n_vocab;
    std::vector<token> prompt;
    while (prompt.size() < 230) {
        const auto t = m->voc.tokenize("The river flows past the old mill, under the stone bridge and out to the sea, "
                                       "where the fishing boats wait for the tide. ",
                                       prompt.empty(), true);
        prompt.insert(prompt.end(), t.begin(), t.end());
    }
    prompt.resize(230);
    std::vector<std::vector<float>> logits[2];
    std::vector<token> text[2];
    int64_t reused[2] = {0, 0}, captured[2] = {0, 0};
    for (int padded = 0; padded < 2; padded++) {
        session s(*m, session_params{.n_ctx = 512, .device = device_type::cuda, .kv_pad = padded ? 256 : 1});
        auto l = s.decode(prompt);
        for (int i = 0; i < 48; i++) {
            logits[padded].emplace_back(l.begin(), l.end());
            const token t = token(std::max_element(l.begin(), l.end()) - l.begin());
            text[padded].push_back(t);
            l = s.decode(std::span<const token>(&t, 1));
        }
        logits[padded].emplace_back(l.begin(), l.end());
#ifdef TESSERA_HAS_CUDA
        if (const auto* cb = dynamic_cast<const cuda::cuda_backend*>(&s.be())) {
            reused[padded] = cb->graphs_reused();
            captured[padded] = cb->graphs_captured();
        }
#endif
    }
    EXPECT_EQ(text[0], text[1]);
    double worst = 0;
    for (size_t i = 0; i < logits[0].size(); i++)
        for (int64_t j = 0; j < n_vocab; j++)
            worst = std::max(worst, double(std::fabs(logits[0][i][size_t(j)] - logits[1][i][size_t(j)])));
    std::printf("kv_pad 1: %lld graphs captured, %lld replayed; kv_pad 256: %lld captured, %lld replayed; max "
                "|dlogit| %g\n",
                (long long)captured[0], (long long)reused[0], (long long)captured[1], (long long)reused[1], worst);
    EXPECT_LE(worst, 1e-4);
    const char* graphs = std::getenv("TESSERA_CUDA_GRAPHS");
    const char* prof = std::getenv("TESSERA_CUDA_PROFILE");
    if (!(graphs && std::string(graphs) == "0") && !(prof && std::string(prof) != "0" && std::string(prof) != "host")) {
        // padded: the prompt, the first decode graph, the one past 256 keys; the other 46 steps replay
        EXPECT_GE(reused[1], 44);
        EXPECT_LE(captured[1], 4);
        EXPECT_EQ(reused[0], 0);
    }
}

} // namespace
