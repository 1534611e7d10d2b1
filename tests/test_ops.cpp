// test_ops.cpp: every CPU op against a naive double-precision implementation written here, on seeded random inputs
// (never zeros) with NaN-poisoned outputs and odd sizes; each case states its NMSE bound. The CPU backend is the
// reference other backends are checked against, so it is itself checked against the plainest code possible.
#include "helpers.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/ops.h"
#include "quant/format.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

using namespace tessera;
using tessera::test::nmse;
using tessera::test::random_normal;

namespace {

// Owns a context, the data of leaf tensors, and runs the graph on a CPU backend.
struct harness {
    context ctx;
    std::vector<std::vector<uint8_t>> storage;
    cpu::cpu_backend be;
    explicit harness(int n_threads = 3, bool reference = false) : be(cpu::cpu_options{n_threads, reference}) {}

    tensor* leaf_f32(std::initializer_list<int64_t> ne, uint32_t seed, float sigma = 1.0f) {
        tensor* t = ctx.new_tensor(type::f32, ne);
        auto v = random_normal(size_t(t->n_elements()), seed, sigma);
        storage.emplace_back(reinterpret_cast<uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(v.data() + v.size()));
        t->data = storage.back().data();
        return t;
    }
    tensor* leaf_i32(std::vector<int32_t> v) {
        tensor* t = ctx.new_tensor(type::i32, {int64_t(v.size())});
        storage.emplace_back(reinterpret_cast<uint8_t*>(v.data()), reinterpret_cast<uint8_t*>(v.data() + v.size()));
        t->data = storage.back().data();
        return t;
    }
    // quantizes random data to type t with the reference quantizer (whole tensor: i2_s gets its scale tail); returns
    // also the dequantized floats
    tensor* leaf_typed(type t, int64_t ne0, int64_t ne1, uint32_t seed, std::vector<float>& deq) {
        tensor* x = ctx.new_tensor(t, {ne0, ne1});
        auto v = random_normal(size_t(ne0 * ne1), seed);
        storage.emplace_back(tensor_bytes(t, ne0 * ne1));
        x->data = storage.back().data();
        deq.resize(v.size());
        quantize_tensor_ref(t, v.data(), x->data, ne0, ne1);
        dequantize_tensor_ref(t, x->data, deq.data(), ne0, ne1);
        return x;
    }
    // computes out (a contiguous tensor); returns its bytes
    std::vector<uint8_t> run_bytes(tensor* out) {
        out->flags |= flag_output;
        graph g;
        g.expand(out);
        // a node an earlier run computed still points into that run's freed buffer: plan it again
        for (tensor* n : g.nodes)
            if (!n->view_src) n->data = nullptr;
        memory_plan plan = plan_memory(g);
        std::vector<uint8_t> mem(plan.size + 64);
        bind_memory(g, plan, mem.data());
        for (tensor* n : g.nodes)
            if (!n->view_src) std::memset(n->data, 0xff, n->n_bytes());
        be.compute(g);
        const auto* d = static_cast<const uint8_t*>(out->data);
        return {d, d + out->n_bytes()};
    }
    // computes out (the nodes of `first` placed first, in that order); returns its values (contiguous copy)
    std::vector<float> run(tensor* out, const std::vector<tensor*>& first = {}) {
        out->flags |= flag_output;
        graph g;
        for (tensor* t : first) g.expand(t);
        g.expand(out);
        // a node an earlier run computed still points into that run's freed buffer: plan it again
        for (tensor* n : g.nodes)
            if (!n->view_src) n->data = nullptr;
        memory_plan plan = plan_memory(g);
        std::vector<uint8_t> mem(plan.size + 64);
        bind_memory(g, plan, mem.data());
        // poison every computed tensor
        for (tensor* n : g.nodes)
            if (!n->view_src) std::fill_n(static_cast<float*>(n->data), n->n_bytes() / 4, std::nanf(""));
        be.compute(g);
        std::vector<float> r(size_t(out->n_elements()));
        for (int64_t i = 0; i < out->n_elements(); i++) {
            const int64_t i0 = i % out->ne[0], i1 = (i / out->ne[0]) % out->ne[1];
            const int64_t i2 = (i / (out->ne[0] * out->ne[1])) % out->ne[2];
            const int64_t i3 = i / (out->ne[0] * out->ne[1] * out->ne[2]);
            r[size_t(i)] = *reinterpret_cast<float*>(static_cast<uint8_t*>(out->data) + i0 * out->nb[0] +
                                                     i1 * out->nb[1] + i2 * out->nb[2] + i3 * out->nb[3]);
        }
        return r;
    }
};

const float* f32(const tensor* t) { return static_cast<const float*>(t->data); }

} // namespace

TEST(ops, add_mul_broadcast) {
    harness h;
    tensor* a = h.leaf_f32({37, 5, 3}, 1);
    tensor* b = h.leaf_f32({37}, 2);
    auto ra = h.run(add(h.ctx, a, b));
    auto rm = h.run(mul(h.ctx, a, b));
    std::vector<float> ea(ra.size()), em(rm.size());
    for (size_t i = 0; i < ea.size(); i++) {
        ea[i] = f32(a)[i] + f32(b)[i % 37];
        em[i] = f32(a)[i] * f32(b)[i % 37];
    }
    EXPECT_EQ(nmse(ra.data(), ea.data(), ea.size()), 0.0); // exact: one f32 operation per element
    EXPECT_EQ(nmse(rm.data(), em.data(), em.size()), 0.0);
}

TEST(ops, scale_silu_swiglu) {
    harness h;
    tensor* a = h.leaf_f32({131, 7}, 3, 3.0f);
    tensor* b = h.leaf_f32({131, 7}, 4);
    auto rs = h.run(scale(h.ctx, a, 0.37f));
    auto rl = h.run(silu(h.ctx, a));
    auto rg = h.run(swiglu(h.ctx, a, b));
    std::vector<float> es(rs.size()), el(rs.size()), eg(rs.size());
    for (size_t i = 0; i < es.size(); i++) {
        const double x = f32(a)[i];
        es[i] = float(x * 0.37);
        el[i] = float(x / (1.0 + std::exp(-x)));
        eg[i] = float(x / (1.0 + std::exp(-x)) * f32(b)[i]);
    }
    EXPECT_LT(nmse(rs.data(), es.data(), es.size()), 1e-12);
    EXPECT_LT(nmse(rl.data(), el.data(), el.size()), 1e-12); // bound: f32 exp and division, ~1e-7 relative
    EXPECT_LT(nmse(rg.data(), eg.data(), eg.size()), 1e-12);
}

// geglu (gelu through ggml's f16 table), relu2_glu and tanh against double references. bound: geglu rounds gelu's
// input and result to f16 (relative 2^-11 each), ~1e-6 in nmse; the others are one or two f32 operations.
TEST(ops, geglu_relu2_glu_tanh) {
    harness h;
    tensor* a = h.leaf_f32({131, 7}, 13, 4.0f);
    tensor* b = h.leaf_f32({131, 7}, 14);
    float* av = static_cast<float*>(a->data);
    av[0] = -12.0f; // the table's ends: 0 below -10, x above 10
    av[1] = 11.5f;
    av[2] = -0.0f;
    auto rg = h.run(geglu(h.ctx, a, b));
    auto rr = h.run(relu2_glu(h.ctx, a, b));
    auto rt = h.run(tanh(h.ctx, a));
    std::vector<float> eg(rg.size()), er(rg.size()), et(rg.size());
    for (size_t i = 0; i < eg.size(); i++) {
        const double x = f32(a)[i], u = f32(b)[i];
        const double gelu = 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * x * (1.0 + 0.044715 * x * x)));
        eg[i] = float(gelu * u);
        er[i] = float((x > 0 ? x * x : 0.0) * u);
        et[i] = float(std::tanh(x));
    }
    EXPECT_LT(nmse(rg.data(), eg.data(), eg.size()), 1e-6);
    EXPECT_EQ(rg[0], 0.0f);
    EXPECT_EQ(rg[1], f32(a)[1] * f32(b)[1]);
    EXPECT_LT(nmse(rr.data(), er.data(), er.size()), 1e-12);
    EXPECT_LT(nmse(rt.data(), et.data(), et.size()), 1e-12);
}

TEST(ops, rms_norm) {
    harness h;
    tensor* a = h.leaf_f32({577, 9}, 5, 2.0f);
    auto r = h.run(rms_norm(h.ctx, a, 1e-5f));
    std::vector<float> e(r.size());
    for (int64_t row = 0; row < 9; row++) {
        double ss = 0;
        for (int64_t i = 0; i < 577; i++) ss += double(f32(a)[row * 577 + i]) * f32(a)[row * 577 + i];
        const double s = 1.0 / std::sqrt(ss / 577 + 1e-5);
        for (int64_t i = 0; i < 577; i++) e[size_t(row * 577 + i)] = float(f32(a)[row * 577 + i] * s);
    }
    EXPECT_LT(nmse(r.data(), e.data(), e.size()), 1e-12);
}

// A part of each row (columns [200, 500) of 577, strided) normalized by the whole row's sum of squares, given: the
// whole row's rms_norm there, and the f32 formula bit for bit.
TEST(ops, rms_norm_part) {
    harness h;
    tensor* a = h.leaf_f32({577, 9}, 8, 2.0f);
    tensor* part = view_2d(h.ctx, a, 300, 9, a->nb[1], 200 * sizeof(float));
    tensor* ss = sum_rows(h.ctx, mul(h.ctx, a, a));
    const auto sums = h.run(ss);
    const auto r = h.run(rms_norm_part(h.ctx, part, ss, 577, 1e-5f));
    const auto whole = h.run(rms_norm(h.ctx, a, 1e-5f));
    ASSERT_EQ(r.size(), size_t(300 * 9));
    std::vector<float> e(r.size()), w(r.size());
    for (int64_t row = 0; row < 9; row++) {
        const float s = 1.0f / std::sqrt(sums[size_t(row)] / 577.0f + 1e-5f);
        for (int64_t i = 0; i < 300; i++) {
            e[size_t(row * 300 + i)] = f32(a)[row * 577 + 200 + i] * s;
            w[size_t(row * 300 + i)] = whole[size_t(row * 577 + 200 + i)];
        }
    }
    EXPECT_EQ(std::memcmp(r.data(), e.data(), e.size() * sizeof(float)), 0);
    EXPECT_LT(nmse(r.data(), w.data(), w.size()), 1e-12);
}

TEST(ops, rope_normal_and_neox) {
    for (auto mode : {rope_mode::normal, rope_mode::neox}) {
        harness h;
        const int64_t hd = 64, n_head = 3, n_tok = 5;
        tensor* a = h.leaf_f32({hd, n_head, n_tok}, 6);
        tensor* pos = h.leaf_i32({0, 1, 7, 100, 4095});
        tensor* ff = h.leaf_f32({hd / 2}, 7);
        for (int64_t i = 0; i < hd / 2; i++) static_cast<float*>(ff->data)[i] = 1.0f + 0.1f * float(i % 5);
        const float base = 10000.0f, fscale = 0.5f;
        auto r = h.run(rope(h.ctx, a, pos, ff, int(hd), mode, base, fscale));
        std::vector<float> e(r.size());
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t hh = 0; hh < n_head; hh++) {
                const float* x = f32(a) + (t * n_head + hh) * hd;
                float* y = e.data() + (t * n_head + hh) * hd;
                for (int64_t i = 0; i < hd / 2; i++) {
                    const double th = static_cast<const int32_t*>(pos->data)[t] * fscale *
                                      std::pow(double(base), -2.0 * double(i) / double(hd)) / f32(ff)[i];
                    const int64_t j0 = mode == rope_mode::neox ? i : 2 * i;
                    const int64_t j1 = mode == rope_mode::neox ? i + hd / 2 : 2 * i + 1;
                    y[j0] = float(x[j0] * std::cos(th) - x[j1] * std::sin(th));
                    y[j1] = float(x[j0] * std::sin(th) + x[j1] * std::cos(th));
                }
            }
        // bound: the angle is built by repeated f32 multiplication (as ggml); at position 4095 that is ~1e-4 rad
        EXPECT_LT(nmse(r.data(), e.data(), e.size()), 1e-7) << "mode " << int(mode);
    }
}

// YaRN (ext_factor 1, the correction dimensions from base and original context) and a magnitude factor, against
// the formula in double: theta_interp = s theta, theta_extrap = theta, mixed by the ramp over pair index; cos and sin
// times attn_factor (1 + 0.1 ln(1/s)). bound: as rope_normal_and_neox.
TEST(ops, rope_yarn_and_attn_factor) {
    for (float ext : {0.0f, 1.0f}) {
        harness h;
        const int64_t hd = 64, n_head = 2, n_tok = 4;
        tensor* a = h.leaf_f32({hd, n_head, n_tok}, 16);
        tensor* pos = h.leaf_i32({0, 3, 900, 4000});
        rope_params rp;
        rp.n_rot = int(hd);
        rp.mode = rope_mode::neox;
        rp.freq_base = 1000000.0f;
        rp.freq_scale = 0.25f;
        rp.ext_factor = ext;
        rp.attn_factor = 0.9f;
        rp.n_ctx_orig = 2048;
        auto r = h.run(rope(h.ctx, a, pos, nullptr, rp));
        float dims[2];
        rope_yarn_corr_dims(rp.n_rot, rp.n_ctx_orig, rp.freq_base, rp.beta_fast, rp.beta_slow, dims);
        EXPECT_LT(dims[0], dims[1]);
        std::vector<float> e(r.size());
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t hh = 0; hh < n_head; hh++) {
                const float* x = f32(a) + (t * n_head + hh) * hd;
                float* y = e.data() + (t * n_head + hh) * hd;
                for (int64_t i = 0; i < hd / 2; i++) {
                    const double extrap = static_cast<const int32_t*>(pos->data)[t] *
                                          std::pow(double(rp.freq_base), -2.0 * double(i) / double(hd));
                    double th = rp.freq_scale * extrap, ms = rp.attn_factor;
                    if (ext != 0.0f) {
                        const double yv = (double(i) - dims[0]) / std::max(0.001, double(dims[1] - dims[0]));
                        const double mix = (1.0 - std::min(1.0, std::max(0.0, yv))) * ext;
                        th = th * (1.0 - mix) + extrap * mix;
                        ms *= 1.0 + 0.1 * std::log(1.0 / rp.freq_scale);
                    }
                    const int64_t j0 = i, j1 = i + hd / 2;
                    y[j0] = float((x[j0] * std::cos(th) - x[j1] * std::sin(th)) * ms);
                    y[j1] = float((x[j0] * std::sin(th) + x[j1] * std::cos(th)) * ms);
                }
            }
        EXPECT_LT(nmse(r.data(), e.data(), e.size()), 1e-7) << "ext_factor " << ext;
    }
}

// rows of 19 (libm's expf alone) and 133 (ggml's vector expf over 8 groups of 16, then libm's)
TEST(ops, soft_max_with_mask) {
    for (int64_t n_kv : {int64_t(19), int64_t(133)}) {
        harness h;
        const int64_t n_rows = 6;
        tensor* a = h.leaf_f32({n_kv, n_rows}, 8, 4.0f);
        tensor* mask = h.leaf_f32({n_kv, n_rows}, 9);
        for (int64_t r = 0; r < n_rows; r++)
            for (int64_t j = 0; j < n_kv; j++)
                static_cast<float*>(mask->data)[r * n_kv + j] = j <= r + n_kv - 9 ? 0.0f : -INFINITY;
        auto out = h.run(soft_max(h.ctx, a, mask, 0.3f));
        std::vector<float> e(out.size());
        for (int64_t r = 0; r < n_rows; r++) {
            double mx = -1e300, sum = 0;
            for (int64_t j = 0; j <= std::min(n_kv - 1, r + n_kv - 9); j++)
                mx = std::max(mx, 0.3 * f32(a)[r * n_kv + j]);
            for (int64_t j = 0; j < n_kv; j++)
                if (j <= r + n_kv - 9) sum += std::exp(0.3 * f32(a)[r * n_kv + j] - mx);
            for (int64_t j = 0; j < n_kv; j++)
                e[size_t(r * n_kv + j)] =
                    j <= r + n_kv - 9 ? float(std::exp(0.3 * f32(a)[r * n_kv + j] - mx) / sum) : 0.0f;
        }
        EXPECT_LT(nmse(out.data(), e.data(), e.size()), 1e-12) << n_kv;
    }
}

// i2_s is left out: get_rows does not apply its per-tensor scale yet (BitNet files keep token_embd in f16).
TEST(ops, get_rows_every_type) {
    for (type t : {type::f32, type::f16, type::bf16, type::q4_0, type::q4_1, type::q8_0, type::tq2_0, type::nvfp4,
                   type::awq4, type::awq4_g64, type::q2_k, type::q3_k, type::iq4_nl, type::iq4_xs, type::iq3_xxs,
                   type::iq3_s}) {
        harness h;
        std::vector<float> deq;
        const int64_t k = (96 + block_size(t) - 1) / block_size(t) * block_size(t);
        tensor* w = h.leaf_typed(t, k, 11, 10, deq);
        tensor* ids = h.leaf_i32({3, 0, 10, 3, 7});
        auto r = h.run(get_rows(h.ctx, w, ids));
        std::vector<float> e;
        for (int32_t id : {3, 0, 10, 3, 7}) e.insert(e.end(), deq.begin() + id * k, deq.begin() + (id + 1) * k);
        EXPECT_EQ(nmse(r.data(), e.data(), e.size()), 0.0) << type_name(t); // exact: same dequantization
    }
}

// mul_mat for every weight type, fast kernels and the reference, odd row/column counts, with broadcast over dim 2.
TEST(ops, mul_mat_every_type) {
    struct shape {
        int64_t k, n, m;
    };
    for (bool reference : {false, true})
        for (type t : {type::f32, type::f16, type::bf16, type::q4_0, type::q4_1, type::q8_0, type::tq2_0, type::i2_s,
                       type::nvfp4, type::awq4, type::awq4_g64, type::q2_k, type::q3_k, type::iq4_nl, type::iq4_xs,
                       type::iq3_xxs, type::iq3_s})
            for (shape s : {shape{64, 1, 1}, shape{96, 17, 3}, shape{256, 33, 37}, shape{576, 5, 1}}) {
                s.k = (s.k + block_size(t) - 1) / block_size(t) * block_size(t); // whole blocks: 64 -> 128 for awq4
                harness h(3, reference);
                std::vector<float> wd;
                tensor* w = h.leaf_typed(t, s.k, s.n, 11, wd);
                tensor* x = h.leaf_f32({s.k, s.m}, 12);
                auto r = h.run(mul_mat(h.ctx, w, x));
                std::vector<float> e(size_t(s.n * s.m));
                for (int64_t im = 0; im < s.m; im++)
                    for (int64_t in = 0; in < s.n; in++) {
                        double acc = 0;
                        for (int64_t i = 0; i < s.k; i++) acc += double(wd[in * s.k + i]) * f32(x)[im * s.k + i];
                        e[size_t(im * s.n + in)] = float(acc);
                    }
                // bound: activations are rounded to the dot type: q8 (~2^-8 relative per element) -> NMSE ~1e-4;
                // f16 ~1e-7; bf16 ~1e-5; f32 exact-ish
                const double bound = t == type::f32 ? 1e-10 : t == type::f16 ? 1e-6 : t == type::bf16 ? 1e-4 : 5e-4;
                EXPECT_LT(nmse(r.data(), e.data(), e.size()), bound)
                    << type_name(t) << " k=" << s.k << " n=" << s.n << " m=" << s.m << " ref=" << reference;
            }
}

// Weights repacked at load time (cpu_backend::load_weights, backends/cpu/quant/repack.h): the whole mul_mat op gives
// exactly the bits of the same backend without repacking (bound: equality), for decode and prompt shapes (odd
// activation row counts), a batch dimension on the activations and the tied-embedding case (the token table as the
// output matrix: the bits of the same matrix that is no token table, as llama.cpp repacks its output copy like any
// matrix), for every repacked type (i2_s: the tensor's scale applied after the repacked kernel as after the row
// kernel); also weights whose row count is not a multiple of 16 (the rows past the last group on the row kernels: 40
// rows, blockwise q4_0 / mxfp4 / q4_K as llama.cpp's; 37 and 25, where mxfp4 and q4_K stay in the file's layout); 5
// and 8 activation rows (the K formats' orders change at 8, q4_K's in groups of 4). A token table that is not the
// output (get_rows only) is never repacked.
TEST(ops, mul_mat_repacked_weights_same_bits) {
    if (!cpu::cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU: weights are not repacked";
    struct shape {
        int64_t k, n, m, b;
    };
    for (type t : {type::q4_0, type::q4_1, type::q5_0, type::q5_1, type::q8_0, type::nvfp4, type::awq4, type::awq4_g64,
                   type::tq2_0, type::i2_s, type::mxfp4, type::q4_k, type::q5_k, type::q6_k, type::q3_k, type::q2_k,
                   type::iq4_nl, type::iq4_xs})
        for (shape s : {shape{576, 48, 1, 1}, shape{96, 16, 19, 1}, shape{256, 32, 37, 2}, shape{256, 40, 1, 1},
                        shape{96, 40, 21, 1}, shape{128, 37, 1, 1}, shape{64, 25, 19, 2}, shape{96, 48, 5, 1},
                        shape{96, 32, 8, 1}}) {
            s.k = (s.k + block_size(t) - 1) / block_size(t) * block_size(t); // whole blocks: 96 -> 256 for tq2_0
            // [tied][repack]: a plain matrix, then the same values as a tied token table
            std::vector<float> out[2][2];
            for (int tied = 0; tied < 2; tied++)
                for (int repack = 0; repack < 2; repack++) {
                    harness h(3);
                    std::vector<float> wd;
                    tensor* w = h.leaf_typed(t, s.k, s.n, 21, wd);
                    w->flags |= flag_param | (tied ? flag_embedding | flag_tied : 0u);
                    tensor* x = h.leaf_f32({s.k, s.m, s.b}, 22);
                    tensor* y = mul_mat(h.ctx, w, x);
                    if (repack) {
                        tensor* ws[] = {w};
                        h.be.load_weights(ws);
                        // mxfp4 / q4_K / iq4_nl whose rows are not a multiple of 8 stay in the file's layout (as
                        // llama.cpp's)
                        if ((t == type::mxfp4 || t == type::q4_k || t == type::iq4_nl) && s.n % 8 != 0)
                            ASSERT_EQ(h.be.repacked_bytes(), 0u);
                        else
                            ASSERT_GT(h.be.repacked_bytes(), 0u) << type_name(t);
                    }
                    out[tied][repack] = h.run(y);
                }
            for (int tied = 0; tied < 2; tied++)
                for (int repack = 0; repack < 2; repack++) {
                    ASSERT_EQ(out[0][0].size(), out[tied][repack].size());
                    for (size_t i = 0; i < out[0][0].size(); i++)
                        ASSERT_EQ(out[0][0][i], out[tied][repack][i])
                            << type_name(t) << " k=" << s.k << " n=" << s.n << " m=" << s.m << " b=" << s.b
                            << " tied=" << tied << " repack=" << repack << " at " << i;
                }
            // a token table read only by get_rows gets no repacked copy
            harness h(3);
            std::vector<float> wd;
            tensor* table = h.leaf_typed(t, s.k, s.n, 23, wd);
            table->flags |= flag_param | flag_embedding;
            tensor* ws[] = {table};
            h.be.load_weights(ws);
            EXPECT_EQ(h.be.repacked_bytes(), 0u) << type_name(t);
        }
}

// A mul_mat followed by a mul of its result by a one-element tensor (NVFP4's per-tensor `.scale`) runs fused: mul_mat
// writes the mul's output, scaled. Bound: the same bits as the two ops one after the other (an eval callback, which
// must see every node, turns the fusion off), for repacked and row-kernel weights, decode and prompt shapes.
TEST(ops, mul_mat_times_scalar_fused_same_bits) {
    for (type t : {type::nvfp4, type::q4_0, type::f16})
        for (int64_t m : {int64_t(1), int64_t(37)}) {
            std::vector<float> out[2];
            for (int fused = 0; fused < 2; fused++) {
                harness h(3);
                std::vector<float> wd;
                tensor* w = h.leaf_typed(t, 256, 48, 31, wd);
                w->flags |= flag_param;
                tensor* x = h.leaf_f32({256, m}, 32);
                tensor* sc = h.leaf_f32({1}, 33, 0.7f);
                tensor* y = mul(h.ctx, mul_mat(h.ctx, w, x), sc);
                tensor* ws[] = {w};
                h.be.load_weights(ws);
                if (!fused) h.be.set_eval_callback([](const tensor&) {});
                out[fused] = h.run(y);
            }
            ASSERT_EQ(out[0].size(), out[1].size());
            for (size_t i = 0; i < out[0].size(); i++)
                ASSERT_EQ(out[0][i], out[1][i]) << type_name(t) << " m=" << m << " at " << i;
        }
}

// Consecutive mul_mats of one activation with weights repacked alike (q, k, v; gate, up) run as one node
// (mul_mat_group: the activations converted once, one tile loop). Bound: the same bits as the mul_mats one by one (an
// eval callback turns the fusion off), for 2 and 3 matrices (row counts 48 / 40 / 16: rows past the last group on
// the row kernels) and a fourth of another type right after them (not grouped), decode and prompt shapes, 3 threads;
// each product checked through three sums of its columns (plain, squared, weighted by position).
TEST(ops, mul_mat_group_fused_same_bits) {
    if (!cpu::cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU: weights are not repacked";
    for (type t : {type::q4_0, type::q8_0, type::tq2_0})
        for (int n_mat : {2, 3})
            for (int64_t m : {int64_t(1), int64_t(37)}) {
                const int64_t k = 256, rows[] = {48, 40, 16, 32};
                std::vector<float> out[2];
                for (int fused = 0; fused < 2; fused++) {
                    harness h(3);
                    tensor* x = h.leaf_f32({k, m}, 51);
                    std::vector<tensor*> ws, mats;
                    for (int i = 0; i <= n_mat; i++) {
                        std::vector<float> wd;
                        tensor* w = h.leaf_typed(i < n_mat ? t : type::q4_1, k, rows[i], uint32_t(52 + i), wd);
                        w->flags |= flag_param;
                        ws.push_back(w);
                        mats.push_back(mul_mat(h.ctx, w, x));
                    }
                    tensor* y = nullptr;
                    for (int i = 0; i <= n_mat; i++) {
                        tensor* r = mats[size_t(i)];
                        tensor* pos = h.leaf_f32({rows[i]}, uint32_t(60 + i));
                        tensor* s = add(h.ctx, add(h.ctx, sum_rows(h.ctx, r), sum_rows(h.ctx, mul(h.ctx, r, r))),
                                        sum_rows(h.ctx, mul(h.ctx, r, pos)));
                        y = y ? add(h.ctx, y, s) : s;
                    }
                    h.be.load_weights(ws);
                    if (!fused) h.be.set_eval_callback([](const tensor&) {});
                    out[fused] = h.run(y, mats);
                }
                ASSERT_EQ(out[0].size(), out[1].size());
                for (size_t i = 0; i < out[0].size(); i++)
                    ASSERT_EQ(out[0][i], out[1][i]) << type_name(t) << " n_mat=" << n_mat << " m=" << m << " at " << i;
            }
}

// add -> rms_norm -> mul by a weight row, and rms_norm -> mul, run as one node per chain (cpu_backend's
// plan_fusions). Bound: the same bits as the ops one after the other (an eval callback turns the fusion off): the
// residual's sum read again after the norm (as a layer's next add does), per-head norms of a 3-D view (qwen3's Q/K),
// a norm read twice (not fused), widths 576 / 4096 / 100, decode and prompt rows, 3 threads.
TEST(ops, add_norm_mul_fused_same_bits) {
    for (int64_t ne0 : {int64_t(576), int64_t(4096), int64_t(100)})
        for (int64_t rows : {int64_t(1), int64_t(7), int64_t(64)})
            for (int chain = 0; chain < 4; chain++) {
                std::vector<float> out[2];
                for (int fused = 0; fused < 2; fused++) {
                    harness h(3);
                    tensor* a = h.leaf_f32({ne0, rows}, 41);
                    tensor* b = h.leaf_f32({ne0, rows}, 42);
                    tensor* w = h.leaf_f32({ne0}, 43, 0.5f);
                    tensor* y = nullptr;
                    if (chain == 0) { // add -> norm -> mul, the sum read again
                        tensor* sum = add(h.ctx, a, b);
                        y = add(h.ctx, mul(h.ctx, rms_norm(h.ctx, sum, 1e-5f), w), sum);
                    } else if (chain == 1) { // norm -> mul
                        y = mul(h.ctx, rms_norm(h.ctx, a, 1e-6f), w);
                    } else if (chain == 2) { // per-head norms of a 3-D view, a head-sized weight
                        if (ne0 % 4 != 0) continue;
                        tensor* wh = h.leaf_f32({ne0 / 4}, 44, 0.5f);
                        y = mul(h.ctx, rms_norm(h.ctx, reshape_3d(h.ctx, a, ne0 / 4, 4, rows), 1e-6f), wh);
                    } else { // the norm read twice: not fused
                        tensor* nrm = rms_norm(h.ctx, add(h.ctx, a, b), 1e-5f);
                        y = add(h.ctx, mul(h.ctx, nrm, w), nrm);
                    }
                    if (!fused) h.be.set_eval_callback([](const tensor&) {});
                    out[fused] = h.run(y);
                }
                if (out[0].empty()) continue;
                ASSERT_EQ(out[0].size(), out[1].size());
                for (size_t i = 0; i < out[0].size(); i++)
                    ASSERT_EQ(out[0][i], out[1][i]) << "chain " << chain << " ne0=" << ne0 << " rows=" << rows
                                                    << " at " << i;
            }
}

TEST(ops, mul_mat_transposed_activation_and_batch) {
    // x given as a permuted view (non-contiguous rows are not allowed, but dims 2/3 broadcast are)
    harness h;
    std::vector<float> wd;
    tensor* w = h.leaf_typed(type::f32, 32, 3, 13, wd);
    tensor* x = h.leaf_f32({32, 4, 2}, 14);
    auto r = h.run(mul_mat(h.ctx, w, x));
    std::vector<float> e(3 * 4 * 2);
    for (int64_t b = 0; b < 2; b++)
        for (int64_t im = 0; im < 4; im++)
            for (int64_t in = 0; in < 3; in++) {
                double acc = 0;
                for (int64_t i = 0; i < 32; i++) acc += double(wd[in * 32 + i]) * f32(x)[(b * 4 + im) * 32 + i];
                e[size_t((b * 4 + im) * 3 + in)] = float(acc);
            }
    EXPECT_LT(nmse(r.data(), e.data(), e.size()), 1e-10);
}

TEST(ops, cpy_to_f16_view) {
    harness h;
    tensor* a = h.leaf_f32({24, 3}, 15);
    tensor* cache = h.ctx.new_tensor(type::f16, {24, 10});
    std::vector<uint16_t> mem(240, 0x7e00);
    cache->data = mem.data();
    tensor* dst = view_2d(h.ctx, cache, 24, 3, cache->nb[1], 4 * cache->nb[1]); // rows 4..6
    graph g;
    g.expand(cpy(h.ctx, a, dst));
    memory_plan plan = plan_memory(g);
    std::vector<uint8_t> buf(plan.size + 64);
    bind_memory(g, plan, buf.data());
    h.be.compute(g);
    for (int64_t i = 0; i < 72; i++) EXPECT_EQ(mem[size_t(96 + i)], fp32_to_fp16(f32(a)[i]));
    EXPECT_EQ(mem[95], 0x7e00); // untouched outside the view
    EXPECT_EQ(mem[168], 0x7e00);
}

// set_rows (the KV-cache write): rows of src go to scattered rows of an f16 / f32 / bf16 cache given by i32 or i64
// indices; the f16 bits are fp32_to_fp16's (round to nearest even, as cpy), rows not named and indices outside the
// cache (-1, 23) leave the cache untouched. 1 and 3 threads (threads split the source rows).
TEST(ops, set_rows_scattered) {
    for (type t : {type::f16, type::f32, type::bf16})
        for (type it : {type::i32, type::i64})
            for (int threads : {1, 3}) {
                harness h(threads);
                const int64_t ne0 = 200, n_rows = 23, n = 7;
                tensor* a = h.leaf_f32({ne0, n}, 40, 3.0f);
                const int64_t rows[n] = {17, 3, -1, 9, 0, 22, 23};
                tensor* idx = h.ctx.new_tensor(it, {n});
                std::vector<uint8_t> idx_mem(size_t(n) * type_size(it));
                for (int64_t i = 0; i < n; i++) {
                    if (it == type::i32)
                        reinterpret_cast<int32_t*>(idx_mem.data())[i] = int32_t(rows[i]);
                    else
                        reinterpret_cast<int64_t*>(idx_mem.data())[i] = rows[i];
                }
                idx->data = idx_mem.data();
                tensor* cache = h.ctx.new_tensor(t, {ne0, n_rows});
                const size_t row_bytes = cache->nb[1];
                std::vector<uint8_t> mem(row_bytes * size_t(n_rows));
                for (size_t i = 0; i < mem.size(); i++) mem[i] = uint8_t(i * 131 + 7); // anything but the results
                const std::vector<uint8_t> before = mem;
                cache->data = mem.data();
                graph g;
                g.expand(set_rows(h.ctx, cache, a, idx));
                ASSERT_EQ(g.nodes.size(), 1u);
                ASSERT_TRUE(h.be.supports(*g.nodes[0]));
                memory_plan plan = plan_memory(g);
                EXPECT_EQ(plan.size, 0u); // the node aliases the cache
                std::vector<uint8_t> buf(plan.size + 64);
                bind_memory(g, plan, buf.data());
                h.be.compute(g);
                std::vector<uint8_t> expect = before;
                for (int64_t i = 0; i < n; i++) {
                    if (rows[i] < 0 || rows[i] >= n_rows) continue;
                    uint8_t* dst = expect.data() + size_t(rows[i]) * row_bytes;
                    for (int64_t e = 0; e < ne0; e++) {
                        const float x = f32(a)[i * ne0 + e];
                        if (t == type::f16) {
                            const uint16_t v = fp32_to_fp16(x);
                            std::memcpy(dst + 2 * e, &v, 2);
                        } else if (t == type::bf16) {
                            const bf16 v = to_bf16(x);
                            std::memcpy(dst + 2 * e, &v, 2);
                        } else {
                            std::memcpy(dst + 4 * e, &x, 4);
                        }
                    }
                }
                EXPECT_TRUE(mem == expect) << type_name(t) << " indices " << type_name(it) << " threads " << threads;
            }
}

// set_rows writes the same f16 bits as cpy into a view at the same rows (the KV-cache write it replaced).
TEST(ops, set_rows_matches_cpy_into_a_view) {
    harness h;
    const int64_t ne0 = 192, n_ctx = 16, n = 5, n_past = 6;
    tensor* a = h.leaf_f32({ne0, n}, 41, 10.0f);
    std::vector<int32_t> pos;
    for (int64_t i = 0; i < n; i++) pos.push_back(int32_t(n_past + i));
    tensor* idx = h.leaf_i32(pos);
    std::vector<uint16_t> m1(size_t(ne0 * n_ctx), 0), m2 = m1;
    tensor* c1 = h.ctx.new_tensor(type::f16, {ne0, n_ctx});
    tensor* c2 = h.ctx.new_tensor(type::f16, {ne0, n_ctx});
    c1->data = m1.data();
    c2->data = m2.data();
    graph g;
    g.expand(set_rows(h.ctx, c1, a, idx));
    g.expand(cpy(h.ctx, a, view_2d(h.ctx, c2, ne0, n, c2->nb[1], size_t(n_past) * c2->nb[1])));
    memory_plan plan = plan_memory(g);
    std::vector<uint8_t> buf(plan.size + 64);
    bind_memory(g, plan, buf.data());
    h.be.compute(g);
    EXPECT_TRUE(m1 == m2);
    EXPECT_NE(m1[size_t(n_past * ne0)], 0); // written
}

// The fast attention (SIMD kernels, several query rows a pass, jobs per KV head) equals the scalar reference path bit
// for bit (bound zero: the prefill path reproduces ggml's float order, which greedy agreement with llama.cpp needs):
// prefill sizes across the 64-token tiles, GQA groups 1, 3 and 4 (row chunks of 12 with remainders), head sizes 64,
// 128 and 80 (the kernels' 32-wide passes and their tails), f16 and f32 caches, with and without sinks, 1 and 3 threads;
// decode sizes (runs of the heads sharing a K/V head: whole groups, and at 3 threads on one K/V head runs of 1).
TEST(ops, attention_fast_equals_reference_bit_for_bit) {
    struct shape {
        int64_t hd, n_head, n_head_kv, n_tok, n_past;
    };
    for (const shape& c : {shape{64, 9, 3, 130, 0}, shape{128, 8, 2, 64, 7}, shape{80, 4, 4, 70, 100},
                           shape{64, 3, 1, 200, 33}, shape{64, 8, 2, 1, 40}, shape{64, 4, 1, 5, 20},
                           shape{128, 6, 3, 2, 300}, shape{96, 8, 8, 1, 50}, shape{96, 6, 2, 3, 40},
                           shape{36, 4, 2, 1, 45}})
        for (type kt : {type::f16, type::f32})
            for (bool with_sinks : {false, true})
                for (int threads : {1, 3}) {
                    std::vector<uint8_t> out[2];
                    for (bool reference : {false, true}) {
                        harness h(threads, reference);
                        const int64_t n_kv = c.n_past + c.n_tok;
                        tensor* q = h.leaf_f32({c.hd, c.n_head, c.n_tok}, 60);
                        tensor* kf = h.leaf_f32({c.hd * c.n_head_kv, n_kv}, 61);
                        tensor* vf = h.leaf_f32({c.hd * c.n_head_kv, n_kv}, 62);
                        tensor* k = kf;
                        tensor* v = vf;
                        std::vector<uint16_t> k16, v16;
                        if (kt == type::f16) {
                            for (int64_t i = 0; i < kf->n_elements(); i++) {
                                k16.push_back(fp32_to_fp16(f32(kf)[i]));
                                v16.push_back(fp32_to_fp16(f32(vf)[i]));
                            }
                            k = h.ctx.new_tensor(type::f16, {c.hd * c.n_head_kv, n_kv});
                            v = h.ctx.new_tensor(type::f16, {c.hd * c.n_head_kv, n_kv});
                            k->data = k16.data();
                            v->data = v16.data();
                        }
                        tensor* mask = h.leaf_f32({n_kv, c.n_tok}, 63);
                        for (int64_t t = 0; t < c.n_tok; t++)
                            for (int64_t j = 0; j < n_kv; j++)
                                static_cast<float*>(mask->data)[t * n_kv + j] = j <= c.n_past + t ? 0.0f : -INFINITY;
                        tensor* kv = view_3d(h.ctx, k, c.hd, c.n_head_kv, n_kv, k->nb[0] * size_t(c.hd), k->nb[1], 0);
                        tensor* vv = view_3d(h.ctx, v, c.hd, c.n_head_kv, n_kv, v->nb[0] * size_t(c.hd), v->nb[1], 0);
                        tensor* sinks = with_sinks ? h.leaf_f32({c.n_head}, 64, 3.0f) : nullptr;
                        out[reference] = h.run_bytes(attention(h.ctx, q, kv, vv, mask, 0.125f, sinks));
                    }
                    EXPECT_TRUE(out[0] == out[1]) << "hd " << c.hd << " heads " << c.n_head << "/" << c.n_head_kv
                                                  << " n_tok " << c.n_tok << " " << type_name(kt) << " sinks "
                                                  << with_sinks << " threads " << threads;
                }
}

// attention against softmax(QK^T * scale + mask) V computed naively, with GQA and a causal mask over a cache.
// Fewer than 64 queries take ggml's decode numerics (Q and the V accumulator rounded to f16); 64 or more stay in f32.
class attention_case : public ::testing::TestWithParam<int64_t> {};
INSTANTIATE_TEST_SUITE_P(ops, attention_case, ::testing::Values(1, 5, 70));
TEST_P(attention_case, gqa_causal) {
    for (bool with_sinks : {false, true}) {
        harness h;
        const int64_t hd = 64, n_head = 6, n_head_kv = 2, n_tok = GetParam(), n_kv = n_tok + 8;
        tensor* q = h.leaf_f32({hd, n_head, n_tok}, 16);
        tensor* kf = h.leaf_f32({hd * n_head_kv, n_kv}, 17);
        tensor* vf = h.leaf_f32({hd * n_head_kv, n_kv}, 18);
        // f16 caches built from the f32 values
        std::vector<uint16_t> k16(size_t(hd * n_head_kv * n_kv)), v16(k16.size());
        for (size_t i = 0; i < k16.size(); i++) {
            k16[i] = fp32_to_fp16(f32(kf)[i]);
            v16[i] = fp32_to_fp16(f32(vf)[i]);
        }
        tensor* kc = h.ctx.new_tensor(type::f16, {hd * n_head_kv, n_kv});
        tensor* vc = h.ctx.new_tensor(type::f16, {hd * n_head_kv, n_kv});
        kc->data = k16.data();
        vc->data = v16.data();
        tensor* mask = h.leaf_f32({n_kv, n_tok}, 19);
        const int64_t n_past = n_kv - n_tok;
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t j = 0; j < n_kv; j++)
                static_cast<float*>(mask->data)[t * n_kv + j] = j <= n_past + t ? 0.0f : -INFINITY;
        tensor* kv = view_3d(h.ctx, kc, hd, n_head_kv, n_kv, hd * 2, kc->nb[1], 0);
        tensor* vv = view_3d(h.ctx, vc, hd, n_head_kv, n_kv, hd * 2, vc->nb[1], 0);
        const float sc = 1.0f / 8.0f;
        // sinks (gpt-oss): one logit per head in the softmax's denominator; heads 0 and 3 far above every score (the
        // accumulator is rescaled at the end), head 1 far below
        tensor* sinks = with_sinks ? h.leaf_f32({n_head}, 22, 2.0f) : nullptr;
        if (sinks) {
            static_cast<float*>(sinks->data)[0] = 30.0f;
            static_cast<float*>(sinks->data)[1] = -30.0f;
            static_cast<float*>(sinks->data)[3] = 12.0f;
        }
        auto r = h.run(attention(h.ctx, q, kv, vv, mask, sc, sinks));
        std::vector<float> e(r.size());
        for (int64_t t = 0; t < n_tok; t++)
            for (int64_t hh = 0; hh < n_head; hh++) {
                const int64_t hk = hh / (n_head / n_head_kv);
                std::vector<double> s(static_cast<size_t>(n_kv));
                double mx = -1e300;
                for (int64_t j = 0; j <= n_past + t; j++) {
                    double d = 0;
                    for (int64_t i = 0; i < hd; i++)
                        d += double(f32(q)[(t * n_head + hh) * hd + i]) *
                             fp16_to_fp32(k16[size_t(j * hd * n_head_kv + hk * hd + i)]);
                    s[size_t(j)] = d * sc;
                    mx = std::max(mx, s[size_t(j)]);
                }
                if (sinks) mx = std::max(mx, double(f32(sinks)[hh]));
                double sum = sinks ? std::exp(f32(sinks)[hh] - mx) : 0.0;
                for (int64_t j = 0; j <= n_past + t; j++) sum += std::exp(s[size_t(j)] - mx);
                for (int64_t i = 0; i < hd; i++) {
                    double o = 0;
                    for (int64_t j = 0; j <= n_past + t; j++)
                        o += std::exp(s[size_t(j)] - mx) / sum *
                             fp16_to_fp32(v16[size_t(j * hd * n_head_kv + hk * hd + i)]);
                    e[size_t((t * n_head + hh) * hd + i)] = float(o);
                }
            }
        // bound: f32 accumulation ~1e-7 relative -> NMSE 1e-12; f16 accumulator (11-bit mantissa) -> NMSE ~1e-7
        EXPECT_LT(nmse(r.data(), e.data(), e.size()), n_tok < 64 ? 2e-6 : 1e-10)
            << "n_tok " << n_tok << " sinks " << with_sinks;
    }
}

// The score op (score.h) against plain double-precision log-softmax code: NLL, the KL-divergence base record (codes
// decode to the log-probs within half a step), the KL divergence of other logits from that record, the argmax
// agreement (first index on ties); odd and even vocabularies, rows split over 3 threads, output poisoned. Bounds:
// NLL 4e-6 absolute (llama-perplexity's arithmetic: f32 logit - max and f32 exps, summed in double), KLD 1e-6.
TEST(ops, score_nll_encode_compare) {
    for (int64_t n_vocab : {int64_t(1001), int64_t(4100)}) {
        const int64_t n_rows = 7;
        harness h;
        tensor* logits = h.leaf_f32({n_vocab, n_rows}, 40, 3.0f);
        tensor* other = h.leaf_f32({n_vocab, n_rows}, 41, 3.0f);
        float* l = static_cast<float*>(logits->data);
        float* o = static_cast<float*>(other->data);
        for (int64_t i = 0; i < n_vocab * n_rows; i++) o[i] = 0.8f * l[i] + 0.6f * o[i]; // correlated, not equal
        // row 2: a tie for the maximum at indices 17 and 900 in both (the first wins)
        for (float* x : {l, o}) x[2 * n_vocab + 17] = x[2 * n_vocab + 900] = 20.0f;
        // row 4: logits spanning more than 16 (codes clamp at max - 16)
        l[4 * n_vocab + 5] = 40.0f;
        std::vector<int32_t> tv;
        for (int64_t r = 0; r < n_rows; r++) tv.push_back(int32_t((r * 389 + 11) % n_vocab));
        tensor* targets = h.leaf_i32(tv);

        auto nll_ref = [&](const float* x, int32_t t) {
            double mx = x[0], sum = 0;
            for (int64_t i = 1; i < n_vocab; i++) mx = std::max(mx, double(x[i]));
            for (int64_t i = 0; i < n_vocab; i++) sum += std::exp(double(x[i]) - mx);
            return -(double(x[t]) - mx - std::log(sum));
        };
        auto get_double = [](const int32_t* w) {
            double d;
            std::memcpy(&d, w, 8);
            return d;
        };

        const int64_t enc_words = score_row_words(score_mode::encode, n_vocab);
        const auto nll_bytes = h.run_bytes(score(h.ctx, logits, targets, nullptr, score_mode::nll));
        const auto enc_bytes = h.run_bytes(score(h.ctx, logits, targets, nullptr, score_mode::encode));
        ASSERT_EQ(enc_bytes.size(), size_t(enc_words * n_rows) * 4);
        // the base records, as the compare op reads them
        tensor* base = h.ctx.new_tensor(type::i32, {kld_record_size(n_vocab) / 2, n_rows});
        h.storage.emplace_back(size_t(base->n_bytes()));
        base->data = h.storage.back().data();
        for (int64_t r = 0; r < n_rows; r++)
            std::memcpy(static_cast<uint8_t*>(base->data) + r * base->nb[1],
                        enc_bytes.data() + size_t(r * enc_words + score_header_words) * 4, size_t(base->nb[1]));
        const auto cmp_bytes = h.run_bytes(score(h.ctx, other, targets, base, score_mode::compare));

        for (int64_t r = 0; r < n_rows; r++) {
            const float* x = l + r * n_vocab;
            const float* y = o + r * n_vocab;
            const int32_t t = tv[size_t(r)];
            const auto* wn = reinterpret_cast<const int32_t*>(nll_bytes.data()) + r * score_header_words;
            const auto* we = reinterpret_cast<const int32_t*>(enc_bytes.data()) + r * enc_words;
            const auto* wc = reinterpret_cast<const int32_t*>(cmp_bytes.data()) + r * score_header_words;
            const double want = nll_ref(x, t);
            EXPECT_NEAR(get_double(wn), want, 4e-6) << n_vocab << " row " << r;
            EXPECT_NEAR(get_double(we), want, 1e-5) << "encode's NLL (f32 log of the sum), row " << r;
            EXPECT_NEAR(get_double(wc), nll_ref(y, t), 4e-6) << "compare's NLL, row " << r;
            float nll_f;
            std::memcpy(&nll_f, wc + 4, 4);
            EXPECT_NEAR(nll_f, nll_ref(y, t), 1e-5);

            // the record: log-prob of code c is scale * c + min_log_prob; every log-prob above max - 16 within half a
            // step (plus the f32 rounding of the bounds)
            const auto* rec = reinterpret_cast<const uint16_t*>(we + score_header_words);
            float scale, min_lp;
            std::memcpy(&scale, rec, 4);
            std::memcpy(&min_lp, rec + 2, 4);
            double mx = x[0], sum = 0;
            for (int64_t i = 1; i < n_vocab; i++) mx = std::max(mx, double(x[i]));
            for (int64_t i = 0; i < n_vocab; i++) sum += std::exp(double(x[i]) - mx);
            const double lz = mx + std::log(sum);
            EXPECT_NEAR(min_lp, std::max(*std::min_element(x, x + n_vocab), float(mx - 16)) - lz, 1e-5);
            double worst = 0;
            for (int64_t i = 0; i < n_vocab; i++) {
                const double lp = double(x[i]) - lz;
                if (lp < min_lp) {
                    EXPECT_EQ(rec[4 + i], 0) << i;
                    continue;
                }
                worst = std::max(worst, std::abs(scale * double(rec[4 + i]) + min_lp - lp));
            }
            EXPECT_LT(worst, 0.5 * scale + 2e-5) << "row " << r;
            if (n_vocab % 2) {
                EXPECT_EQ(rec[4 + n_vocab], 0) << "padding";
            }

            // KLD of y from the decoded record, and argmax agreement
            double my = y[0], sy = 0;
            for (int64_t i = 1; i < n_vocab; i++) my = std::max(my, double(y[i]));
            for (int64_t i = 0; i < n_vocab; i++) sy += std::exp(double(y[i]) - my);
            const double lzy = my + std::log(sy);
            double kld = 0;
            int64_t top_b = 0, top_y = 0;
            for (int64_t i = 0; i < n_vocab; i++) {
                const double lpb = scale * double(rec[4 + i]) + min_lp;
                if (lpb > scale * double(rec[4 + top_b]) + min_lp) top_b = i;
                if (y[i] > y[top_y]) top_y = i;
                if (lpb > -16) kld += std::exp(lpb) * (lpb - (double(y[i]) - lzy));
            }
            EXPECT_NEAR(get_double(wc + 2), kld, 1e-6) << "row " << r;
            EXPECT_EQ(wc[5], int32_t(top_b == top_y)) << "row " << r;
            if (r == 2) {
                EXPECT_EQ(wc[5], 1) << "a tie: both first at index 17";
            }
        }
    }
}

// top_k: the k largest of each row (ties included), in ggml's order: descending but for the first two, swapped.
TEST(ops, top_k_largest_in_ggml_order) {
    for (int64_t n : {int64_t(8), int64_t(37), int64_t(128)})
        for (int64_t k : {int64_t(1), int64_t(2), int64_t(4), int64_t(8)}) {
            harness h;
            const int64_t rows = 5;
            tensor* a = h.leaf_f32({n, rows}, uint32_t(60 + n + k));
            float* x = static_cast<float*>(a->data);
            x[2 * n + 1] = x[2 * n + 3] = 9.0f; // row 2: a tie at the top
            const auto bytes = h.run_bytes(top_k(h.ctx, a, k));
            for (int64_t r = 0; r < rows; r++) {
                const float* xr = x + r * n;
                const auto* y = reinterpret_cast<const int32_t*>(bytes.data()) + r * k;
                std::vector<float> want(xr, xr + n), got;
                std::sort(want.begin(), want.end(), std::greater<float>());
                for (int64_t j = 0; j < k; j++) {
                    ASSERT_TRUE(y[j] >= 0 && y[j] < n);
                    got.push_back(xr[y[j]]);
                }
                std::vector<int32_t> distinct(y, y + k);
                std::sort(distinct.begin(), distinct.end());
                EXPECT_EQ(std::unique(distinct.begin(), distinct.end()), distinct.end()) << "an index twice";
                if (k > 1) std::swap(got[0], got[1]);
                for (int64_t j = 0; j < k; j++) EXPECT_EQ(got[size_t(j)], want[size_t(j)]) << n << " " << k << " " << r;
            }
        }
}

// mul_mat_id: each (slot, token) against its expert, equal to mul_mat on that expert's matrix bit for bit (the same
// row dot; f16 to rounding, mul_mat having its own f16 kernels), and to plain double arithmetic on the dequantized weights within the format's bound; tokens sharing and not
// sharing experts, an expert nobody chose, activations per slot and shared (n_b = 1), odd sizes, 3 threads.
TEST(ops, mul_mat_id_every_type) {
    for (type t : {type::f32, type::f16, type::q8_0, type::q4_0, type::mxfp4, type::q2_k, type::q3_k, type::iq4_nl,
                   type::iq4_xs, type::iq3_xxs, type::iq3_s})
        for (int64_t n_b : {int64_t(3), int64_t(1)}) {
            const int64_t k = std::max<int64_t>(96, block_size(t)), n = 24, n_expert = 6, n_used = 3, n_tok = 5;
            harness h;
            std::vector<float> deq;
            tensor* w2 = h.leaf_typed(t, k, n * n_expert, 70, deq);
            tensor* w = reshape_3d(h.ctx, w2, k, n, n_expert);
            tensor* b = h.leaf_f32({k, n_b, n_tok}, 71);
            // token 0 and 1 choose the same experts in another order, expert 5 is never chosen
            const std::vector<int32_t> idv = {2, 0, 4, 4, 2, 0, 1, 3, 0, 3, 4, 1, 2, 1, 3};
            tensor* ids = h.leaf_i32(idv);
            ids = reshape_2d(h.ctx, ids, n_used, n_tok);
            const auto got = h.run(mul_mat_id(h.ctx, w, b, ids));
            ASSERT_EQ(got.size(), size_t(n * n_used * n_tok));
            double num = 0, den = 0;
            for (int64_t tok = 0; tok < n_tok; tok++)
                for (int64_t i = 0; i < n_used; i++) {
                    const int64_t e = idv[size_t(tok * n_used + i)];
                    harness h2;
                    std::vector<float> d2;
                    tensor* we = h2.leaf_typed(t, k, n * n_expert, 70, d2);
                    we = view_2d(h2.ctx, we, k, n, we->nb[1], size_t(e * n) * we->nb[1]);
                    tensor* col = h2.leaf_f32({k, n_b, n_tok}, 71);
                    col = view_2d(h2.ctx, col, k, 1, col->nb[1], size_t(tok) * col->nb[2] + size_t(i % n_b) * col->nb[1]);
                    const auto one = h2.run(mul_mat(h2.ctx, we, col));
                    const float* bv = f32(b) + (tok * n_b + i % n_b) * k;
                    for (int64_t r = 0; r < n; r++) {
                        const float g = got[size_t((tok * n_used + i) * n + r)];
                        if (t == type::f16) // mul_mat has its own f16 kernels (float16.h): the same to rounding
                            EXPECT_NEAR(g, one[size_t(r)], 1e-5f * (1.0f + std::abs(g))) << "slot " << i << " row " << r;
                        else
                            EXPECT_EQ(g, one[size_t(r)]) << type_name(t) << " slot " << i << " token " << tok << " row " << r;
                        double ref = 0;
                        for (int64_t j = 0; j < k; j++) ref += double(deq[size_t((e * n + r) * k + j)]) * bv[j];
                        num += (g - ref) * (g - ref);
                        den += ref * ref;
                    }
                }
            // f32: summation order only; the others: the activations' q8_0 / f16 rounding
            EXPECT_LT(num / den, t == type::f32 ? 1e-10 : 1e-3) << type_name(t) << " n_b " << n_b;
        }
}

// mul_mat_id on experts repacked in 16-row groups (load_weights) gives the row kernels' bits: decode (one token) and
// prompt shapes (many pairs an expert, more than a kernel call's 16), shared and per-slot activations, an expert
// nobody chose, i2_s's tensor scale. The K formats keep llama.cpp's mul_mat_id orders (next test).
TEST(ops, mul_mat_id_repacked_experts_same_bits) {
    if (!cpu::cpu_has_avx2()) GTEST_SKIP() << "no AVX2 on this CPU: weights are not repacked";
    for (type t : {type::q4_0, type::q8_0, type::q4_1, type::q5_0, type::q5_1, type::nvfp4, type::i2_s, type::q4_k,
                   type::q5_k, type::q6_k, type::q3_k, type::q2_k, type::iq4_nl, type::iq4_xs})
        for (int64_t n_tok : {int64_t(1), int64_t(45)})
            for (int64_t n_b : {int64_t(1), int64_t(3)}) {
                const int64_t k = std::max<int64_t>(128, block_size(t)), n = 32, n_expert = 5, n_used = 3;
                std::vector<int32_t> idv;
                for (int64_t tok = 0; tok < n_tok; tok++) // expert 4 never chosen; tokens share experts
                    for (int64_t i = 0; i < n_used; i++) idv.push_back(int32_t((tok * 7 + i * 3 + tok / 5) % 4));
                for (int64_t tok = 0; tok < n_tok; tok++) // distinct within a token
                    if (idv[size_t(tok * 3)] == idv[size_t(tok * 3 + 1)] ||
                        idv[size_t(tok * 3 + 1)] == idv[size_t(tok * 3 + 2)] ||
                        idv[size_t(tok * 3)] == idv[size_t(tok * 3 + 2)])
                        idv[size_t(tok * 3)] = idv[size_t(tok * 3 + 1)] = -1;
                for (size_t i = 0; i < idv.size(); i += 3)
                    if (idv[i] < 0) idv[i] = 0, idv[i + 1] = 1, idv[i + 2] = 2;
                std::vector<float> out[2];
                for (int repack = 0; repack < 2; repack++) {
                    harness h(3);
                    std::vector<float> deq;
                    tensor* w2 = h.leaf_typed(t, k, n * n_expert, 73, deq);
                    tensor* w = h.ctx.new_tensor(t, {k, n, n_expert}); // the expert weight itself (not a view)
                    w->data = w2->data;
                    w->flags |= flag_param;
                    tensor* b = h.leaf_f32({k, n_b, n_tok}, 74);
                    tensor* ids = reshape_2d(h.ctx, h.leaf_i32(idv), n_used, n_tok);
                    tensor* y = mul_mat_id(h.ctx, w, b, ids);
                    if (repack) {
                        tensor* ws[] = {w};
                        h.be.load_weights(ws);
                        ASSERT_GT(h.be.repacked_bytes(), 0u) << type_name(t);
                    }
                    out[repack] = h.run(y);
                }
                ASSERT_EQ(out[0].size(), out[1].size());
                for (size_t i = 0; i < out[0].size(); i++)
                    ASSERT_EQ(out[0][i], out[1][i])
                        << type_name(t) << " n_tok " << n_tok << " n_b " << n_b << " at " << i;
            }
}

// llama.cpp's mul_mat_id per expert: chosen by 8 pairs or more, the K formats it does not repack (and iq4_xs, the
// IQ3s) sum in ggml's tiled order (vec_dot_batch8), else in vec_dot's (checked against libggml-cpu's mul_mat_id,
// sessions 58, 59);
// q4_K and iq4_nl with rows % 8 (repacked there) keep their repacked order at any batch. Both paths (row kernels,
// 16-row groups). Bound: same bits.
TEST(ops, mul_mat_id_k_formats_tiled_from_8_pairs) {
    if (!cpu::cpu_has_avx2()) GTEST_SKIP() << "no AVX2: the reference kernels are in use";
    for (type t : {type::q2_k, type::q3_k, type::q4_k, type::q5_k, type::q6_k, type::iq4_xs, type::iq4_nl,
                   type::iq3_xxs, type::iq3_s})
        for (int repack = 0; repack < 2; repack++) {
            const int64_t k = 512, n = 32, n_expert = 3, n_used = 2, n_tok = 12;
            std::vector<int32_t> idv; // expert 0: 12 pairs, 1: 3, 2: 9
            for (int64_t tok = 0; tok < n_tok; tok++) idv.push_back(0), idv.push_back(tok < 3 ? 1 : 2);
            harness h(3);
            std::vector<float> deq;
            tensor* w2 = h.leaf_typed(t, k, n * n_expert, 75, deq);
            tensor* w = h.ctx.new_tensor(t, {k, n, n_expert});
            w->data = w2->data;
            w->flags |= flag_param;
            tensor* b = h.leaf_f32({k, 1, n_tok}, 76);
            tensor* y = mul_mat_id(h.ctx, w, b, reshape_2d(h.ctx, h.leaf_i32(idv), n_used, n_tok));
            if (repack) {
                tensor* ws[] = {w};
                h.be.load_weights(ws);
            }
            const auto out = h.run(y);
            const cpu::cpu_type_ops* ops = cpu::find_cpu_ops(t);
            std::vector<uint8_t> a(row_size(ops->dot_type, k));
            const size_t wrow = row_size(t, k);
            for (int64_t tok = 0; tok < n_tok; tok++) {
                ops->act_from_float(f32(b) + tok * k, a.data(), k);
                for (int64_t i = 0; i < n_used; i++) {
                    const int32_t e = idv[size_t(tok * n_used + i)];
                    const bool rows8 = t == type::q4_k || t == type::iq4_nl, tiled = e != 1 && !rows8;
                    const auto dot = rows8 ? ops->vec_dot_rows8 : tiled ? ops->vec_dot_batch8 : ops->vec_dot;
                    for (int64_t r = 0; r < n; r++) {
                        const auto* wr = static_cast<const uint8_t*>(w->data) + (size_t(e) * n + size_t(r)) * wrow;
                        ASSERT_EQ(out[size_t((tok * n_used + i) * n + r)], dot(wr, a.data(), k))
                            << type_name(t) << " repack " << repack << " token " << tok << " expert " << e;
                    }
                }
            }
        }
}

// top_k in ggml_argsort_top_k's order (build_moe_ffn's): the k largest, descending.
TEST(ops, top_k_sorted_descending) {
    for (int64_t n : {int64_t(8), int64_t(37), int64_t(128)})
        for (int64_t k : {int64_t(1), int64_t(3), int64_t(8)}) {
            harness h;
            const int64_t rows = 4;
            tensor* a = h.leaf_f32({n, rows}, uint32_t(80 + n + k));
            const auto bytes = h.run_bytes(top_k(h.ctx, a, k, true));
            for (int64_t r = 0; r < rows; r++) {
                const float* xr = f32(a) + r * n;
                std::vector<int32_t> want(static_cast<size_t>(n));
                for (int64_t j = 0; j < n; j++) want[size_t(j)] = int32_t(j);
                std::stable_sort(want.begin(), want.end(), [xr](int32_t i, int32_t j) { return xr[i] > xr[j]; });
                const auto* y = reinterpret_cast<const int32_t*>(bytes.data()) + r * k;
                for (int64_t j = 0; j < k; j++) EXPECT_EQ(y[j], want[size_t(j)]) << n << " " << k << " " << r;
            }
        }
}

// The routing arithmetic of build_moe_ffn, op by op against plain code: the chosen probabilities gathered by a
// batched get_rows, their sum per token (sum_rows), clamped, divided (broadcast), and a per-expert bias by id (add_id).
// Exact: each is one f32 operation per element (sums in double, rounded once).
TEST(ops, moe_routing_ops) {
    harness h;
    const int64_t n_expert = 7, n_used = 3, n_tok = 5, n = 37;
    tensor* probs = h.leaf_f32({n_expert, n_tok}, 90);
    const std::vector<int32_t> idv = {6, 0, 3, 3, 2, 1, 0, 5, 4, 2, 2, 6, 1, 4, 0};
    tensor* ids = reshape_2d(h.ctx, h.leaf_i32(idv), n_used, n_tok);
    const auto w = h.run(get_rows(h.ctx, reshape_3d(h.ctx, probs, 1, n_expert, n_tok), ids));
    ASSERT_EQ(w.size(), size_t(n_used * n_tok));
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < n_used; i++)
            EXPECT_EQ(w[size_t(t * n_used + i)], f32(probs)[t * n_expert + idv[size_t(t * n_used + i)]]);

    tensor* x = h.leaf_f32({n_used, n_tok}, 91);
    static_cast<float*>(x->data)[3] = static_cast<float*>(x->data)[4] = static_cast<float*>(x->data)[5] = 1e-9f;
    tensor* sum = sum_rows(h.ctx, x);
    const auto rs = h.run(sum);
    const auto rc = h.run(clamp(h.ctx, sum, 6.103515625e-5f, INFINITY));
    const auto rd = h.run(div(h.ctx, x, clamp(h.ctx, sum, 6.103515625e-5f, INFINITY)));
    for (int64_t t = 0; t < n_tok; t++) {
        double s = 0;
        for (int64_t i = 0; i < n_used; i++) s += f32(x)[t * n_used + i];
        EXPECT_EQ(rs[size_t(t)], float(s));
        const float c = std::max(std::min(float(s), INFINITY), 6.103515625e-5f);
        EXPECT_EQ(rc[size_t(t)], c);
        for (int64_t i = 0; i < n_used; i++) EXPECT_EQ(rd[size_t(t * n_used + i)], f32(x)[t * n_used + i] / c);
    }
    EXPECT_EQ(rc[1], 6.103515625e-5f); // token 1's weights sum to ~3e-9: clamped

    tensor* a = h.leaf_f32({n, n_used, n_tok}, 92);
    tensor* b = h.leaf_f32({n, n_expert}, 93);
    const auto ra = h.run(add_id(h.ctx, a, b, ids));
    for (int64_t t = 0; t < n_tok; t++)
        for (int64_t i = 0; i < n_used; i++)
            for (int64_t j = 0; j < n; j++) {
                const size_t o = size_t((t * n_used + i) * n + j);
                EXPECT_EQ(ra[o], f32(a)[o] + f32(b)[idv[size_t(t * n_used + i)] * n + j]);
            }
}

// swiglu_oai (gpt-oss) against double arithmetic, inputs spread past the limit on both sides. bound: f32 expf and
// three f32 operations, ~1e-7 relative.
TEST(ops, swiglu_oai_clamped) {
    harness h;
    tensor* g = h.leaf_f32({131, 7}, 94, 6.0f);
    tensor* u = h.leaf_f32({131, 7}, 95, 6.0f);
    const float alpha = 1.702f, limit = 7.0f;
    const auto r = h.run(swiglu_oai(h.ctx, g, u, alpha, limit));
    std::vector<float> e(r.size());
    for (size_t i = 0; i < e.size(); i++) {
        const double x = std::min(double(f32(g)[i]), double(limit));
        const double y = std::clamp(double(f32(u)[i]), -double(limit), double(limit));
        e[i] = float(x / (1.0 + std::exp(-double(alpha) * x)) * (y + 1.0));
    }
    EXPECT_LT(nmse(r.data(), e.data(), e.size()), 1e-12);
}

// The planner must not hand a live tensor's memory to another: a long chain with a late reader.
TEST(alloc, reuse_respects_liveness) {
    harness h;
    tensor* a = h.leaf_f32({64}, 20);
    tensor* first = scale(h.ctx, a, 2.0f);
    tensor* cur = first;
    for (int i = 0; i < 20; i++) cur = scale(h.ctx, cur, 1.0f);
    tensor* out = add(h.ctx, cur, first); // `first` must survive the chain
    auto r = h.run(out);
    for (int64_t i = 0; i < 64; i++) EXPECT_FLOAT_EQ(r[size_t(i)], 4.0f * f32(a)[i]);
    graph g;
    g.expand(out);
    memory_plan plan = plan_memory(g);
    EXPECT_LT(plan.size, 22u * 256u); // and it does reuse: far less than one buffer per node
}

// With a lag of L nodes (a backend that runs up to L + 1 nodes as one kernel), no result of nodes i .. i + L lies over
// anything a node in that window reads; without one, the same chain does reuse at once. Every lag is still correct.
TEST(alloc, lag_keeps_inputs_of_a_window_apart) {
    harness h;
    tensor* a = h.leaf_f32({64}, 21);
    std::vector<tensor*> chain{scale(h.ctx, a, 2.0f)};
    for (int i = 0; i < 12; i++) chain.push_back(scale(h.ctx, chain.back(), 1.0f));
    tensor* out = add(h.ctx, chain.back(), chain[3]); // a late reader too
    graph g;
    g.expand(out);
    auto span = [&](const memory_plan& p, const tensor* t) {
        const size_t o = p.offset.at(t);
        return std::pair<size_t, size_t>{o, o + t->n_bytes()};
    };
    auto overlaps = [&](const memory_plan& p, const tensor* x, const tensor* y) {
        const auto [a0, a1] = span(p, x);
        const auto [b0, b1] = span(p, y);
        return a0 < b1 && b0 < a1;
    };
    const memory_plan none = plan_memory(g);
    EXPECT_TRUE(overlaps(none, g.nodes[0], g.nodes[2])); // x0 freed once x1 has read it: x2 takes its place
    for (size_t lag : {size_t(1), size_t(3), size_t(6)}) {
        for (tensor* n : g.nodes) n->data = nullptr; // the last round's binding
        const memory_plan p = plan_memory(g, lag);
        for (size_t i = 0; i < g.nodes.size(); i++)
            for (size_t j = i; j < g.nodes.size() && j <= i + lag; j++) // node j computed at node i
                for (size_t k = i; k <= j; k++)                         // what nodes i .. j read
                    for (const tensor* in : g.nodes[k]->src) {
                        if (in && p.offset.count(in) && in != g.nodes[j]) {
                            EXPECT_FALSE(overlaps(p, g.nodes[j], in)) << "lag " << lag << " node " << j << " input of " << k;
                        }
                    }
        EXPECT_LE(p.size, 64u * 4u * (lag + 3)); // still reused past the window
        std::vector<uint8_t> buf(p.size + 64);
        bind_memory(g, p, buf.data());
        h.be.compute(g);
        for (int64_t e = 0; e < 64; e++) EXPECT_FLOAT_EQ(f32(out)[e], 4.0f * f32(a)[e]) << "lag " << lag;
    }
}

// The prefill attention tile kernels, called directly: the AVX2 ones (8 lanes, vec_dot_avx2.cpp) and the AVX-512 ones
// (16 lanes, attention_avx512.cpp), each against the scalar references of float_kernels
namespace tessera::cpu::avx2 {
void kq_tile(const float* const* q, int nr, const float* kt, int64_t hd, float* s);
double softmax_tile(float* s, float m);
void pv_tile(float* const* acc, const float* const* p, int nr, const float* v, int64_t n, int64_t hd);
} // namespace tessera::cpu::avx2
namespace tessera::cpu::avx512 {
void kq_tile(const float* const* q, int nr, const float* kt, int64_t hd, float* s);
float score_tile(float* s, const float* mask, float scale, int64_t n);
double softmax_tile(float* s, float m);
void pv_tile(float* const* acc, const float* const* p, int nr, const float* v, int64_t n, int64_t hd);
} // namespace tessera::cpu::avx512

// Bound zero: every lane is its own FMA chain, so 16 lanes must give the 8-lane and scalar bits. Head sizes 64, 96
// and 128 (the 64 / 32-dimension passes) and 72 and 36 (a part vector), key tiles of 64 and shorter ones, 1 to 12
// query rows (the 6-row passes and every remainder); masks with -inf runs, scores far below the max (expf's slow
// range and its zeros), a row whose zero maximum must keep the first zero's sign.
TEST(float_kernels, attention_tiles_avx512_equal_avx2_and_reference) {
    if (!cpu::cpu_has_avx512vnni())
        GTEST_SKIP() << "no AVX-512 F/BW/VL/VNNI on this CPU: the 16-lane kernels are not used";
    const cpu::float_kernels& ref = cpu::find_float_kernels(true);
    auto same = [](const auto& a, const auto& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    for (int64_t hd : {64, 96, 128, 72, 36})
        for (int64_t n : {64, 63, 37, 17, 1})
            for (int nr = 1; nr <= 12; nr++) {
                const uint32_t seed = uint32_t(hd * 1000 + n * 20 + nr);
                const std::string what =
                    "hd " + std::to_string(hd) + " n " + std::to_string(n) + " rows " + std::to_string(nr);
                auto qv = random_normal(size_t(nr * hd), seed);
                auto kt = random_normal(size_t(hd * 64), seed + 1);
                std::vector<const float*> q(static_cast<size_t>(nr));
                for (int i = 0; i < nr; i++) q[size_t(i)] = qv.data() + i * hd;
                // S = Q K^T
                std::vector<float> s_ref(size_t(nr * 64)), s_avx2(s_ref.size()), s_avx512(s_ref.size());
                ref.kq_tile(q.data(), nr, kt.data(), hd, s_ref.data());
                cpu::avx2::kq_tile(q.data(), nr, kt.data(), hd, s_avx2.data());
                cpu::avx512::kq_tile(q.data(), nr, kt.data(), hd, s_avx512.data());
                EXPECT_TRUE(same(s_ref, s_avx2)) << "kq avx2 " << what;
                EXPECT_TRUE(same(s_ref, s_avx512)) << "kq avx512 " << what;
                // scale + mask + max, then P = expf(S - max) and its sum; row 0 without a mask
                auto mask = random_normal(size_t(64), seed + 2);
                for (int64_t j = 1; j < 64; j += 5) mask[size_t(j)] = -INFINITY;
                mask[3] = -100.0f; // expf's argument past the 8-lane fast range (a subnormal result)
                mask[4] = -400.0f; // and past 192 ln 2: exactly 0
                const std::vector<float> neg_zeros(64, -0.0f); // + -0 keeps a score's -0
                for (int i = 0; i < nr; i++) {
                    float* a = s_ref.data() + i * 64;
                    float* b = s_avx512.data() + i * 64;
                    if (i == 11) { // a zero maximum takes the sign of the first zero (key 8), not lane 0's (key 16)
                        std::fill(a, a + 64, -1.0f), std::fill(b, b + 64, -1.0f);
                        a[8] = b[8] = 0.0f, a[16] = b[16] = -0.0f;
                    }
                    const float* m = i == 0 ? nullptr : i == 11 ? neg_zeros.data() : mask.data();
                    const float sc = i == 11 ? 1.0f : 0.125f;
                    const float mx_ref = ref.score_tile(a, m, sc, n), mx = cpu::avx512::score_tile(b, m, sc, n);
                    EXPECT_EQ(std::memcmp(&mx_ref, &mx, 4), 0) << "score max " << what << " row " << i;
                    EXPECT_EQ(std::memcmp(a, b, 64 * 4), 0) << "score " << what << " row " << i;
                    std::vector<float> c(b, b + 64);
                    const double sum_ref = ref.softmax_tile(a, mx_ref),
                                 sum_avx2 = cpu::avx2::softmax_tile(c.data(), mx),
                                 sum = cpu::avx512::softmax_tile(b, mx);
                    EXPECT_EQ(sum_ref, sum_avx2) << "softmax sum avx2 " << what << " row " << i;
                    EXPECT_EQ(sum_ref, sum) << "softmax sum avx512 " << what << " row " << i;
                    EXPECT_EQ(std::memcmp(a, c.data(), 64 * 4), 0) << "softmax avx2 " << what << " row " << i;
                    EXPECT_EQ(std::memcmp(a, b, 64 * 4), 0) << "softmax avx512 " << what << " row " << i;
                }
                // O += P V over the tile's n keys (P from the rows above)
                auto v = random_normal(size_t(n * hd), seed + 3);
                auto acc0 = random_normal(size_t(nr * hd), seed + 4);
                std::vector<float> o_ref = acc0, o_avx2 = acc0, o_avx512 = acc0;
                std::vector<float*> a_ref, a_avx2, a_avx512;
                std::vector<const float*> p;
                for (int i = 0; i < nr; i++) {
                    a_ref.push_back(o_ref.data() + i * hd), a_avx2.push_back(o_avx2.data() + i * hd);
                    a_avx512.push_back(o_avx512.data() + i * hd), p.push_back(s_ref.data() + i * 64);
                }
                ref.pv_tile(a_ref.data(), p.data(), nr, v.data(), n, hd);
                cpu::avx2::pv_tile(a_avx2.data(), p.data(), nr, v.data(), n, hd);
                cpu::avx512::pv_tile(a_avx512.data(), p.data(), nr, v.data(), n, hd);
                EXPECT_TRUE(same(o_ref, o_avx2)) << "pv avx2 " << what;
                EXPECT_TRUE(same(o_ref, o_avx512)) << "pv avx512 " << what;
            }
}

// The float kernels that reproduce ggml's rounding: the SIMD versions must equal the scalar ones bit for bit (the
// bound is zero: any difference would make greedy output drift from llama.cpp's).
TEST(float_kernels, simd_equals_reference_exactly) {
    const cpu::float_kernels& ref = cpu::find_float_kernels(true);
    const cpu::float_kernels& fast = cpu::find_float_kernels(false);
    if (&ref == &fast) GTEST_SKIP() << "no AVX2 on this CPU: only the scalar kernels exist";
    for (int64_t n : {64, 128, 80, 7, 1536, 1543}) {
        auto x = random_normal(size_t(n), uint32_t(30 + n), 4.0f);
        auto y = random_normal(size_t(n), uint32_t(31 + n));
        x[0] = -100.0f; // exp argument past the fast range: the fallback path
        EXPECT_EQ(ref.dot(x.data(), y.data(), n), fast.dot(x.data(), y.data(), n)) << n;
        for (bool f16 : {false, true}) {
            auto a = y, b = y;
            ref.mad(a.data(), x.data(), 0.37f, n, f16);
            fast.mad(b.data(), x.data(), 0.37f, n, f16);
            ref.scale(a.data(), 0.91f, n, f16);
            fast.scale(b.data(), 0.91f, n, f16);
            EXPECT_EQ(std::memcmp(a.data(), b.data(), size_t(n) * 4), 0) << n << " f16=" << f16;
            // the f16-operand forms equal converting the operand first
            std::vector<uint16_t> h(static_cast<size_t>(n));
            std::vector<float> hf(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; i++) hf[size_t(i)] = fp16_to_fp32(h[size_t(i)] = fp32_to_fp16(x[size_t(i)]));
            EXPECT_EQ(fast.dot_f16(y.data(), h.data(), n), ref.dot(y.data(), hf.data(), n)) << n;
            EXPECT_EQ(ref.dot_f16(y.data(), h.data(), n), ref.dot(y.data(), hf.data(), n)) << n;
            auto c = y, d = y, e = y;
            ref.mad(c.data(), hf.data(), 0.37f, n, f16);
            ref.mad_f16(d.data(), h.data(), 0.37f, n, f16);
            fast.mad_f16(e.data(), h.data(), 0.37f, n, f16);
            EXPECT_EQ(std::memcmp(c.data(), d.data(), size_t(n) * 4), 0) << "mad_f16 ref " << n;
            EXPECT_EQ(std::memcmp(c.data(), e.data(), size_t(n) * 4), 0) << "mad_f16 simd " << n;
        }
        std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
        ref.swiglu(x.data(), y.data(), a.data(), n);
        fast.swiglu(x.data(), y.data(), b.data(), n);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), size_t(n) * 4), 0) << "swiglu " << n;
        ref.silu(x.data(), a.data(), n);
        fast.silu(x.data(), b.data(), n);
        EXPECT_EQ(std::memcmp(a.data(), b.data(), size_t(n) * 4), 0) << "silu " << n;
        // and ggml's expf stays within 2 ulp of libm's
        for (int64_t i = 0; i < n; i++) {
            const float e = cpu::expf_ggml(x[size_t(i)]), l = std::exp(x[size_t(i)]);
            EXPECT_NEAR(e, l, 2.5e-7f * l) << x[size_t(i)];
        }
    }
}
