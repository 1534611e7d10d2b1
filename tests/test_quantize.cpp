// test_quantize.cpp: whole-model requantization (quant/quantize.h) and AWQ (llm/awq.h) on tiny models: every target
// type loads and runs, the type plan (norms, overrides, tied embeddings, fallbacks), metadata, failures that leave an
// existing output untouched, and AWQ's scale folding, which must not change an f32 model's logits.
#include "helpers.h"
#include "tiny_model.h"

#include "ggml-like/error.h"
#include "llm/awq.h"
#include "llm/model.h"
#include "quant/format.h"
#include "quant/quantize.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string tmp_path(const std::string& what) {
    return (fs::temp_directory_path() / ("tessera_test_quantize_" + std::to_string(::getpid()) + "_" + what)).string();
}

// A tiny f32 llama model (token_embd q8_0, as tiny_model.h writes it) with rows wide enough for every block size.
std::string wide_f32_model() {
    struct file { // removed when the process exits
        std::string path;
        ~file() { fs::remove(path); }
    };
    static const file f{[] {
        const std::string p = tmp_path("wide_f32.gguf");
        test::tiny_model_spec s;
        s.n_embd = 256;
        s.n_ff = 512;
        s.n_head = 4;
        s.n_head_kv = 2;
        s.weight_type = type::f32;
        test::write_tiny_model(p, s);
        return p;
    }()};
    return f.path;
}

std::vector<float> logits_of(const std::string& path, const std::vector<token>& ids) {
    auto m = model::load(path);
    session s(*m, session_params{.n_ctx = 64, .n_threads = 2});
    auto l = s.decode(ids, true);
    return {l.begin(), l.end()};
}

const std::vector<token> prompt_ids = {1, 17, 400, 1203, 5, 99, 2048, 31};

const tensor_plan& plan_of(const std::vector<tensor_plan>& plan, const std::string& name) {
    for (const auto& tp : plan)
        if (tp.in->name == name) return tp;
    throw error("no tensor " + name);
}

TEST(quantize, every_target_type_loads_and_runs) {
    const std::vector<float> ref = logits_of(wide_f32_model(), prompt_ids);
    for (type t : quantize_target_types()) {
        SCOPED_TRACE(type_name(t));
        quantize_params p;
        p.target = t;
        p.n_threads = 3;
        const std::string out = tmp_path(std::string("every_") + type_name(t) + ".gguf");
        quantize_result r = quantize_model(wide_f32_model(), out, p);
        EXPECT_EQ(r.n_fallback, 0);
        gguf_file f = gguf_file::open(out);
        for (const auto& ti : f.tensors())
            EXPECT_EQ(ti.type_id, uint32_t(ti.n_dims < 2 ? type::f32 : t)) << ti.name; // norms stay f32
        // nvfp4 is written in two levels: every matmul weight but the embedding gets its `.scale`
        EXPECT_EQ(f.find_tensor("blk.1.ffn_down.scale") != nullptr, t == type::nvfp4);
        EXPECT_EQ(f.find_tensor("token_embd.scale"), nullptr);
        EXPECT_EQ(f.get_int("general.quantization_version"), 2);
        EXPECT_EQ(f.get_int("general.file_type").has_value(), llama_ftype_of(t).has_value());
        EXPECT_EQ(f.find(tessera_format_key) != nullptr, !is_ggml_type(t));
        const std::vector<float> l = logits_of(out, prompt_ids);
        ASSERT_EQ(l.size(), ref.size());
        // the tiny model's weights are Gaussian and its logits small (|l| < 4): 8-bit and wider formats must follow the
        // f32 logits closely (measured 3e-5 .. 4e-4), the 4-bit ones roughly (0.06 .. 0.12); ternary ones (made for
        // ternary weights, 1.3 .. 2) only have to run and stay finite
        const double e = test::nmse(l.data(), ref.data(), l.size());
        const double bpw = 8.0 * double(type_size(t)) / double(block_size(t));
        std::printf("%-9s logits nmse vs f32 %.3g\n", type_name(t), e);
        if (bpw >= 8)
            EXPECT_LT(e, 1e-3);
        else if (bpw >= 4)
            EXPECT_LT(e, 0.25);
        else
            EXPECT_TRUE(std::isfinite(e));
        fs::remove(out);
    }
}

// A mixture-of-experts model (qwen3moe): the 3-D experts are quantized, the router (ffn_gate_inp) stays f32 as
// llama-quantize leaves it, and the result loads and runs close to the f32 model.
TEST(quantize, experts_quantized_router_kept) {
    const std::string in = tmp_path("moe_f32.gguf"), out = tmp_path("moe_q8_0.gguf");
    test::tiny_model_spec s;
    s.arch = "qwen3moe";
    s.n_expert = 4, s.n_expert_used = 2, s.n_ff = 64;
    s.weight_type = type::f32;
    test::write_tiny_model(in, s);
    quantize_params p;
    p.target = type::q8_0;
    quantize_model(in, out, p);
    gguf_file f = gguf_file::open(out);
    EXPECT_EQ(f.find_tensor("blk.0.ffn_gate_inp.weight")->type_id, uint32_t(type::f32));
    EXPECT_EQ(f.find_tensor("blk.1.ffn_down_exps.weight")->type_id, uint32_t(type::q8_0));
    EXPECT_EQ(f.find_tensor("blk.1.ffn_down_exps.weight")->n_dims, 3u);
    const std::vector<float> a = logits_of(in, prompt_ids), b = logits_of(out, prompt_ids);
    ASSERT_EQ(a.size(), b.size());
    // looser than the dense models' 1e-3: a token whose router scores are close may take another expert after the
    // 8-bit rounding (measured 2.2e-3)
    EXPECT_LT(test::nmse(b.data(), a.data(), a.size()), 2e-2);
    fs::remove(in);
    fs::remove(out);
}

TEST(quantize, threads_do_not_change_bytes) {
    gguf_file in = gguf_file::open(wide_f32_model());
    for (type t : {type::q4_1, type::awq4, type::i2_s}) {
        quantize_params p;
        p.target = t;
        p.n_threads = 1;
        const auto a = quantize_to_bytes(in, p);
        p.n_threads = 5;
        EXPECT_EQ(a, quantize_to_bytes(in, p)) << type_name(t);
    }
}

TEST(quantize, plan_norms_overrides_and_fallbacks) {
    const std::string path = tmp_path("plan.gguf");
    test::tiny_model_spec spec;
    spec.weight_type = type::f32; // n_embd 64: no 128-element block fits a row
    test::write_tiny_model(path, spec);
    gguf_file in = gguf_file::open(path);
    ASSERT_EQ(in.find_tensor("output.weight"), nullptr); // tied embeddings

    quantize_params p;
    p.target = type::q4_0;
    auto plan = plan_quantization(in, p);
    EXPECT_EQ(plan_of(plan, "blk.0.attn_norm.weight").to, type::f32);
    EXPECT_EQ(plan_of(plan, "blk.1.ffn_down.weight").to, type::q4_0);
    EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::q4_0); // the embedding follows TYPE by default

    // tied: token_embd is the output, so --output-type applies to it; --embd-type wins when both are given
    p.output_type = type::q8_0;
    EXPECT_EQ(plan_of(plan_quantization(in, p), "token_embd.weight").to, type::q8_0);
    p.embd_type = type::f16;
    std::vector<std::string> notes;
    p.note = [&](const std::string& s) { notes.push_back(s); };
    EXPECT_EQ(plan_of(plan_quantization(in, p), "token_embd.weight").to, type::f16);
    ASSERT_EQ(notes.size(), 1u);
    EXPECT_NE(notes[0].find("tied"), std::string::npos);

    // fallbacks: awq4 (group 128) -> awq4_g64 on 64-wide rows; i2_s (128) -> q4_0; a 257-wide row -> f16
    p = {};
    p.target = type::awq4;
    plan = plan_quantization(in, p);
    EXPECT_EQ(plan_of(plan, "blk.0.attn_q.weight").to, type::awq4_g64);
    EXPECT_NE(plan_of(plan, "blk.0.attn_q.weight").fallback.find("block of 128"), std::string::npos);
    EXPECT_EQ(plan_of(plan, "blk.0.ffn_down.weight").to, type::awq4); // 128 columns fit
    p.target = type::i2_s;
    EXPECT_EQ(plan_of(plan_quantization(in, p), "blk.0.attn_q.weight").to, type::q4_0);
    p.target = type::tq2_0;
    EXPECT_EQ(plan_of(plan_quantization(in, p), "blk.0.attn_q.weight").to, type::q4_0);
    // the K formats as llama-quantize falls back (its table): q4_K -> q5_0, q5_K -> q5_1, q6_K -> q8_0
    for (auto [want, got] : {std::pair{type::q4_k, type::q5_0}, {type::q5_k, type::q5_1}, {type::q6_k, type::q8_0}}) {
        p.target = want;
        EXPECT_EQ(plan_of(plan_quantization(in, p), "blk.0.attn_q.weight").to, got) << type_name(want);
    }

    // the fallback file loads and runs
    const std::string out = tmp_path("plan_out.gguf");
    p.target = type::awq4;
    std::vector<std::string> fallback_notes;
    p.note = [&](const std::string& s) { fallback_notes.push_back(s); };
    quantize_result r = quantize_model(path, out, p);
    EXPECT_EQ(r.n_fallback, 1 + 2 * 6);   // token_embd and q, k, v, o, gate, up of both layers
    ASSERT_EQ(fallback_notes.size(), 1u); // one note for all tensors of the same width
    EXPECT_NE(fallback_notes[0].find("using awq4_g64 for 13 tensors"), std::string::npos) << fallback_notes[0];
    EXPECT_EQ(logits_of(out, prompt_ids).size(),
              prompt_ids.size() * size_t(in.get_strings("tokenizer.ggml.tokens")->size()));
    fs::remove(out);
    fs::remove(path);
}

// NVFP4's per-tensor scale lets the UE4M3 block scales use their whole range. Weights of sigma 0.01 (SmolLM2's are
// ~0.02..0.05) give block scales amax/6 near UE4M3's smallest normal value 2^-6, where ggml's one-level blocks lose
// mantissa bits; the two-level tensor must be closer to the f32 one.
TEST(quantize, nvfp4_two_level_scale) {
    const std::string path = tmp_path("nvfp4_in.gguf");
    const int64_t ne[2] = {256, 64}, n = ne[0] * ne[1];
    std::vector<float> x = test::random_normal(size_t(n), 21, 0.01f);
    {
        gguf_writer w;
        w.set("general.architecture", gguf_value::of_string("llama"));
        w.add_tensor("blk.0.ffn_gate.weight", uint32_t(type::f32), ne, x.data());
        w.write(path);
    }
    quantize_params p;
    p.target = type::nvfp4;
    gguf_file out = gguf_file::from_memory(quantize_to_bytes(gguf_file::open(path), p));
    const gguf_tensor_info* w = out.find_tensor("blk.0.ffn_gate.weight");
    const gguf_tensor_info* sc = out.find_tensor("blk.0.ffn_gate.scale");
    ASSERT_TRUE(w && sc);
    float g;
    std::memcpy(&g, sc->data, 4);
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    EXPECT_FLOAT_EQ(g, amax / (448.0f * 6.0f));
    std::vector<float> two(static_cast<size_t>(n)), one(static_cast<size_t>(n));
    find_row_ops(type::nvfp4)->to_float(w->data, two.data(), n);
    for (float& v : two) v *= g;
    std::vector<uint8_t> blocks(tensor_bytes(type::nvfp4, n));
    find_row_ops(type::nvfp4)->from_float(x.data(), blocks.data(), n);
    find_row_ops(type::nvfp4)->to_float(blocks.data(), one.data(), n);
    const double e2 = test::nmse(two.data(), x.data(), size_t(n)), e1 = test::nmse(one.data(), x.data(), size_t(n));
    std::printf("nvfp4 nmse: one level %.4g, two levels %.4g\n", e1, e2);
    EXPECT_LT(e2, e1);
    fs::remove(path);
}

TEST(quantize, odd_row_falls_back_to_f16) {
    const std::string path = tmp_path("odd.gguf");
    gguf_writer w;
    w.set("general.architecture", gguf_value::of_string("llama"));
    std::vector<float> x = test::random_normal(100 * 3, 5);
    const int64_t ne[2] = {100, 3};
    w.add_tensor("blk.0.attn_q.weight", uint32_t(type::f32), ne, x.data());
    w.write(path);
    gguf_file in = gguf_file::open(path);
    quantize_params p;
    p.target = type::q8_0;
    auto plan = plan_quantization(in, p);
    EXPECT_EQ(plan[0].to, type::f16);
    EXPECT_NE(plan[0].fallback.find("100 columns"), std::string::npos);
    fs::remove(path);
}

// llama-quantize's K mixes (checked byte for byte against llama-quantize 0.3.36 on random 8-layer llama, 8-expert
// qwen3moe and SmolLM2 files, session 56): per layer of 8, "more bits" = layers 0, 3, 6, 7 (the first and last
// eighth, every third between); the tied output q6_K; rows that fit no 256 block fall back (q6_K -> q8_0).
TEST(quantize, llama_k_mixes) {
    const std::string path = tmp_path("mix.gguf");
    test::tiny_model_spec spec;
    spec.weight_type = type::f32;
    spec.n_embd = 256, spec.n_ff = 512, spec.n_layer = 8;
    test::write_tiny_model(path, spec);
    gguf_file in = gguf_file::open(path);
    const auto name = [](int l, const char* t) { return "blk." + std::to_string(l) + "." + t + ".weight"; };
    quantize_params p;
    ASSERT_EQ(quant_mix_from_name("q4_k_m"), quant_mix::q4_k_m);
    EXPECT_FALSE(quant_mix_from_name("q4_K").has_value());
    p.mix = quant_mix::q4_k_m;
    p.target = quant_mix_type(p.mix);
    auto plan = plan_quantization(in, p);
    for (int l = 0; l < 8; l++) {
        const type more = l == 0 || l == 3 || l == 6 || l == 7 ? type::q6_k : type::q4_k;
        EXPECT_EQ(plan_of(plan, name(l, "attn_v")).to, more) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_down")).to, more) << l;
        EXPECT_EQ(plan_of(plan, name(l, "attn_q")).to, type::q4_k) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_up")).to, type::q4_k) << l;
    }
    EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::q6_k); // tied: the output
    p.mix = quant_mix::q4_k_s;
    plan = plan_quantization(in, p);
    for (int l = 0; l < 8; l++) {
        EXPECT_EQ(plan_of(plan, name(l, "attn_v")).to, l < 4 ? type::q5_k : type::q4_k) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_down")).to, l < 1 ? type::q5_k : type::q4_k) << l;
    }
    p.mix = quant_mix::q5_k_m;
    p.target = type::q5_k;
    plan = plan_quantization(in, p);
    EXPECT_EQ(plan_of(plan, name(3, "attn_v")).to, type::q6_k);
    EXPECT_EQ(plan_of(plan, name(4, "attn_v")).to, type::q5_k);
    p.output_type = type::q8_0; // an override wins over the mix
    EXPECT_EQ(plan_of(plan_quantization(in, p), "token_embd.weight").to, type::q8_0);
    p.output_type.reset();
    p.target = type::q4_k; // a mix of q5_K asked for with another format
    EXPECT_THROW(plan_quantization(in, p), error);
    p.target = type::q5_k;
    gguf_file out = gguf_file::from_memory(quantize_to_bytes(in, p));
    EXPECT_EQ(out.get_int("general.file_type"), 17); // LLAMA_FTYPE_MOSTLY_Q5_K_M

    // the low-bit mixes (byte for byte against llama-quantize 0.3.36 on a 16-layer llama, session 58): Q3_K_M's first
    // two attn_v q5_K, the rest q4_K, attn_output and ffn_down q4_K (q5_K in the first sixteenth: none of 8 layers);
    // Q3_K_L q5_K for all three; Q2_K q3_K ffn_down / attn_output, attn_v q3_K below 4 query heads a KV head
    p.target = type::q3_k;
    p.mix = quant_mix::q3_k_m;
    plan = plan_quantization(in, p);
    for (int l = 0; l < 8; l++) {
        EXPECT_EQ(plan_of(plan, name(l, "attn_v")).to, l < 2 ? type::q5_k : type::q4_k) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_down")).to, type::q4_k) << l;
        EXPECT_EQ(plan_of(plan, name(l, "attn_output")).to, type::q4_k) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_gate")).to, type::q3_k) << l;
    }
    p.mix = quant_mix::q3_k_l;
    plan = plan_quantization(in, p);
    EXPECT_EQ(plan_of(plan, name(5, "attn_v")).to, type::q5_k);
    EXPECT_EQ(plan_of(plan, name(5, "ffn_down")).to, type::q5_k);
    EXPECT_EQ(plan_of(plan, name(5, "attn_output")).to, type::q5_k);
    EXPECT_EQ(plan_of(plan, name(5, "attn_q")).to, type::q3_k);
    ASSERT_EQ(quant_mix_from_name("Q2_K"), quant_mix::q2_k);
    p.mix = quant_mix::q2_k;
    p.target = type::q2_k;
    plan = plan_quantization(in, p);
    EXPECT_EQ(plan_of(plan, name(2, "attn_v")).to, type::q3_k); // 4 heads, 2 KV heads
    EXPECT_EQ(plan_of(plan, name(2, "ffn_down")).to, type::q3_k);
    EXPECT_EQ(plan_of(plan, name(2, "attn_output")).to, type::q3_k);
    EXPECT_EQ(plan_of(plan, name(2, "ffn_up")).to, type::q2_k);
    EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::q6_k);
    EXPECT_EQ(gguf_file::from_memory(quantize_to_bytes(in, p)).get_int("general.file_type"), 10); // MOSTLY_Q2_K
    // IQ4_XS / IQ4_NL: q5_K in the first eighth of ffn_down; attn_v too only with 4+ query heads a KV head (2 here)
    for (quant_mix m : {quant_mix::iq4_xs, quant_mix::iq4_nl}) {
        ASSERT_EQ(quant_mix_from_name(quant_mix_name(m)), m);
        p.mix = m;
        p.target = quant_mix_type(m);
        plan = plan_quantization(in, p);
        for (int l = 0; l < 8; l++) {
            EXPECT_EQ(plan_of(plan, name(l, "attn_v")).to, p.target) << l;
            EXPECT_EQ(plan_of(plan, name(l, "ffn_down")).to, l < 1 ? type::q5_k : p.target) << l;
            EXPECT_EQ(plan_of(plan, name(l, "attn_output")).to, p.target) << l;
        }
        EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::q6_k);
        EXPECT_EQ(gguf_file::from_memory(quantize_to_bytes(in, p)).get_int("general.file_type"),
                  m == quant_mix::iq4_xs ? 30 : 25);
    }

    // 64-wide rows (no 256 block): the mix's choices, then llama-quantize's fallbacks
    const std::string narrow = tmp_path("mix_narrow.gguf");
    spec = {};
    spec.weight_type = type::f32;
    test::write_tiny_model(narrow, spec);
    p = {};
    p.mix = quant_mix::q4_k_m;
    p.target = type::q4_k;
    gguf_file narrow_in = gguf_file::open(narrow); // the plan points into it
    plan = plan_quantization(narrow_in, p);
    EXPECT_EQ(plan_of(plan, name(1, "attn_v")).to, type::q8_0); // q6_K (the last eighth of 2 layers) -> q8_0
    EXPECT_EQ(plan_of(plan, name(0, "attn_v")).to, type::q5_0); // q4_K -> q5_0
    EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::q8_0); // the output's rule for rows % 256
    p.mix = quant_mix::iq4_xs;
    p.target = type::iq4_xs;
    plan = plan_quantization(narrow_in, p);
    EXPECT_EQ(plan_of(plan, name(1, "attn_q")).to, type::iq4_nl); // iq4_xs -> iq4_nl, as llama-quantize
    EXPECT_EQ(plan_of(plan, name(0, "ffn_down")).to, type::iq4_nl); // 2 layers: no first eighth
    fs::remove(narrow);
    fs::remove(path);
}

// llama-quantize's IQ3 mixes without an importance matrix (llama_tensor_get_type; IQ3_S / IQ3_M byte for byte
// against llama-quantize on random 8- and 16-layer llama, 8-expert qwen3moe and SmolLM2 files; IQ3_XXS / IQ3_XS,
// which llama-quantize refuses without an importance matrix, against its --dry-run types and libggml's bytes for
// each tensor). 8 layers: the first eighth is layer 0, the last layer 7.
TEST(quantize, llama_iq3_mixes) {
    const std::string path = tmp_path("iq3_mix.gguf"), gqa4 = tmp_path("iq3_mix_gqa4.gguf");
    test::tiny_model_spec spec;
    spec.weight_type = type::f32;
    spec.n_embd = 256, spec.n_ff = 512, spec.n_layer = 8; // 4 heads, 2 KV heads; tied output
    test::write_tiny_model(path, spec);
    spec.n_head = 8; // 4 query heads a KV head, and an output of its own
    spec.tied_output = false;
    test::write_tiny_model(gqa4, spec);
    gguf_file in = gguf_file::open(path), in4 = gguf_file::open(gqa4);
    const auto name = [](int l, const char* t) { return "blk." + std::to_string(l) + "." + t + ".weight"; };
    auto plan_for = [](const gguf_file& f, quant_mix m, std::vector<std::string>* notes = nullptr) {
        quantize_params p;
        p.mix = m;
        p.target = quant_mix_type(m);
        if (notes) p.note = [notes](const std::string& s) { notes->push_back(s); };
        return plan_quantization(f, p);
    };

    // IQ3_S: iq3_s everywhere but the (tied) output; attn_v q4_K only with 4+ query heads a KV head
    auto plan = plan_for(in, quant_mix::iq3_s);
    for (int l = 0; l < 8; l++)
        for (const char* t : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"})
            EXPECT_EQ(plan_of(plan, name(l, t)).to, type::iq3_s) << l << " " << t;
    EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::q6_k);
    plan = plan_for(in4, quant_mix::iq3_s);
    EXPECT_EQ(plan_of(plan, name(4, "attn_v")).to, type::q4_k);
    EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::iq3_s);
    EXPECT_EQ(plan_of(plan, "output.weight").to, type::q6_k);

    // IQ3_M: q4_K attn_v (always), attn_output, the first eighth of ffn_down
    plan = plan_for(in, quant_mix::iq3_m);
    for (int l = 0; l < 8; l++) {
        EXPECT_EQ(plan_of(plan, name(l, "attn_v")).to, type::q4_k) << l;
        EXPECT_EQ(plan_of(plan, name(l, "attn_output")).to, type::q4_k) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_down")).to, l < 1 ? type::q4_k : type::iq3_s) << l;
        EXPECT_EQ(plan_of(plan, name(l, "attn_q")).to, type::iq3_s) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_up")).to, type::iq3_s) << l;
    }
    EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::q6_k);

    // IQ3_XS: iq3_s but iq3_xxs attn_q / attn_k, and ffn_gate / ffn_up between the first and last eighth
    std::vector<std::string> notes;
    plan = plan_for(in, quant_mix::iq3_xs, &notes);
    for (int l = 0; l < 8; l++) {
        const type mid = l >= 1 && l < 7 ? type::iq3_xxs : type::iq3_s;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_gate")).to, mid) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_up")).to, mid) << l;
        EXPECT_EQ(plan_of(plan, name(l, "attn_q")).to, type::iq3_xxs) << l;
        EXPECT_EQ(plan_of(plan, name(l, "attn_k")).to, type::iq3_xxs) << l;
        EXPECT_EQ(plan_of(plan, name(l, "attn_v")).to, type::iq3_s) << l;
        EXPECT_EQ(plan_of(plan, name(l, "attn_output")).to, type::iq3_s) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_down")).to, type::iq3_s) << l;
        EXPECT_EQ(plan_of(plan, name(l, "attn_q")).fallback, "") << l;
    }
    EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::q6_k);
    ASSERT_EQ(notes.size(), 1u); // llama-quantize would want an importance matrix for the iq3_xxs tensors
    EXPECT_NE(notes[0].find("importance matrix"), std::string::npos) << notes[0];
    EXPECT_EQ(plan_of(plan_for(in4, quant_mix::iq3_xs), name(0, "attn_v")).to, type::q4_k);

    // IQ3_XXS: iq3_xxs; attn_v / attn_output / token_embd iq3_s, ffn_down q4_K in the first eighth and q3_K after, a
    // q5_K output; attn_q / attn_k get llama-quantize's iq2_s, which tessera cannot produce: iq3_xxs, as a fallback
    plan = plan_for(in, quant_mix::iq3_xxs);
    for (int l = 0; l < 8; l++) {
        EXPECT_EQ(plan_of(plan, name(l, "attn_v")).to, type::iq3_s) << l;
        EXPECT_EQ(plan_of(plan, name(l, "attn_output")).to, type::iq3_s) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_down")).to, l < 1 ? type::q4_k : type::q3_k) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_gate")).to, type::iq3_xxs) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_up")).to, type::iq3_xxs) << l;
        for (const char* t : {"attn_q", "attn_k"}) {
            EXPECT_EQ(plan_of(plan, name(l, t)).to, type::iq3_xxs) << l << " " << t;
            EXPECT_NE(plan_of(plan, name(l, t)).fallback.find("iq2_s"), std::string::npos) << l << " " << t;
        }
    }
    EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::q5_k); // tied: the output's rule
    plan = plan_for(in4, quant_mix::iq3_xxs);
    EXPECT_EQ(plan_of(plan, name(0, "attn_v")).to, type::q4_k);
    EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::iq3_s);
    EXPECT_EQ(plan_of(plan, "output.weight").to, type::q5_k);

    // 8 experts: q8_0 attn_k / attn_v and q5_K attn_output in every IQ3 mix; IQ3_M's ffn_down q4_K in the "more
    // bits" layers (0, 3, 6, 7 of 8); IQ3_XS's experts' gate / up by the layer in their names
    const std::string moe = tmp_path("iq3_mix_moe.gguf");
    test::tiny_model_spec ms;
    ms.arch = "qwen3moe";
    ms.n_expert = 8, ms.n_expert_used = 2;
    ms.weight_type = type::f32;
    ms.n_embd = 256, ms.n_ff = 256, ms.n_layer = 8;
    test::write_tiny_model(moe, ms);
    gguf_file moe_in = gguf_file::open(moe);
    for (quant_mix m : {quant_mix::iq3_xxs, quant_mix::iq3_xs, quant_mix::iq3_s, quant_mix::iq3_m}) {
        plan = plan_for(moe_in, m);
        EXPECT_EQ(plan_of(plan, name(2, "attn_k")).to, type::q8_0) << quant_mix_name(m);
        EXPECT_EQ(plan_of(plan, name(2, "attn_v")).to, type::q8_0) << quant_mix_name(m);
        EXPECT_EQ(plan_of(plan, name(2, "attn_output")).to, type::q5_k) << quant_mix_name(m);
    }
    plan = plan_for(moe_in, quant_mix::iq3_m);
    for (int l = 0; l < 8; l++)
        EXPECT_EQ(plan_of(plan, name(l, "ffn_down_exps")).to,
                  l == 0 || l == 3 || l == 6 || l == 7 ? type::q4_k : type::iq3_s)
            << l;
    plan = plan_for(moe_in, quant_mix::iq3_xs);
    for (int l = 0; l < 8; l++) {
        const type mid = l >= 1 && l < 7 ? type::iq3_xxs : type::iq3_s;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_gate_exps")).to, mid) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_up_exps")).to, mid) << l;
        EXPECT_EQ(plan_of(plan, name(l, "ffn_gate_inp")).to, type::f32) << l; // the router is never quantized
    }

    // 64-wide rows (no 256 block): iq3_xxs / iq3_s (and iq2_s) fall back to iq4_nl, q3_K to q4_0, the output q8_0;
    // general.file_type is the mix's (these files are quick to write: nothing is left in a 256 block)
    const std::string narrow = tmp_path("iq3_mix_narrow.gguf");
    spec = {};
    spec.weight_type = type::f32;
    test::write_tiny_model(narrow, spec);
    gguf_file narrow_in = gguf_file::open(narrow);
    const std::pair<quant_mix, int64_t> ftypes[] = {
        {quant_mix::iq3_xs, 22}, {quant_mix::iq3_xxs, 23}, {quant_mix::iq3_s, 26}, {quant_mix::iq3_m, 27}};
    for (const auto& [m, ftype] : ftypes) {
        SCOPED_TRACE(quant_mix_name(m));
        plan = plan_for(narrow_in, m);
        EXPECT_EQ(plan_of(plan, name(0, "attn_q")).to, type::iq4_nl);
        EXPECT_EQ(plan_of(plan, name(1, "ffn_up")).to, type::iq4_nl);
        EXPECT_EQ(plan_of(plan, "token_embd.weight").to, type::q8_0);
        EXPECT_EQ(plan_of(plan, name(1, "ffn_down")).to, m == quant_mix::iq3_xxs ? type::q4_0 : type::iq4_nl);
        quantize_params p;
        p.mix = m;
        p.target = quant_mix_type(m);
        EXPECT_EQ(gguf_file::from_memory(quantize_to_bytes(narrow_in, p)).get_int("general.file_type"), ftype);
    }
    fs::remove(narrow);
    fs::remove(moe);
    fs::remove(gqa4);
    fs::remove(path);
}

// general.file_type's names as llama.h spells them (tessera info prints them beside the number)
TEST(quantize, llama_ftype_names) {
    EXPECT_STREQ(llama_ftype_name(0), "F32");
    EXPECT_STREQ(llama_ftype_name(7), "Q8_0");
    EXPECT_STREQ(llama_ftype_name(10), "Q2_K");
    EXPECT_STREQ(llama_ftype_name(12), "Q3_K_M");
    EXPECT_STREQ(llama_ftype_name(15), "Q4_K_M");
    EXPECT_STREQ(llama_ftype_name(22), "IQ3_XS");
    EXPECT_STREQ(llama_ftype_name(23), "IQ3_XXS");
    EXPECT_STREQ(llama_ftype_name(25), "IQ4_NL");
    EXPECT_STREQ(llama_ftype_name(26), "IQ3_S");
    EXPECT_STREQ(llama_ftype_name(27), "IQ3_M");
    EXPECT_STREQ(llama_ftype_name(30), "IQ4_XS");
    EXPECT_STREQ(llama_ftype_name(32), "BF16");
    EXPECT_STREQ(llama_ftype_name(37), "TQ2_0");
    EXPECT_STREQ(llama_ftype_name(39), "NVFP4");
    EXPECT_EQ(llama_ftype_name(4), nullptr); // retired
    EXPECT_EQ(llama_ftype_name(34), nullptr);
    EXPECT_EQ(llama_ftype_name(1024), nullptr);
    for (quant_mix m : all_quant_mixes) EXPECT_EQ(quant_mix_from_name(quant_mix_name(m)), m);
    // the plain types' general.file_type: llama-quantize's IQ3_XXS and IQ3_S
    EXPECT_EQ(llama_ftype_of(type::iq3_xxs), 23u);
    EXPECT_EQ(llama_ftype_of(type::iq3_s), 26u);
    // the mixes' names and formats, in llama_ftype order (IQ3_XS 22, IQ3_XXS 23, IQ4_NL 25, IQ3_S 26, IQ3_M 27, ...)
    const std::pair<const char*, type> iq3[] = {
        {"IQ3_XS", type::iq3_s}, {"IQ3_XXS", type::iq3_xxs}, {"IQ3_S", type::iq3_s}, {"IQ3_M", type::iq3_s}};
    for (const auto& [n, t] : iq3) {
        const std::optional<quant_mix> m = quant_mix_from_name(n);
        ASSERT_TRUE(m.has_value()) << n;
        EXPECT_STREQ(quant_mix_name(*m), n);
        EXPECT_EQ(quant_mix_type(*m), t) << n;
    }
    const auto pos = [](quant_mix m) { return std::find(std::begin(all_quant_mixes), std::end(all_quant_mixes), m); };
    EXPECT_LT(pos(quant_mix::q5_k_m), pos(quant_mix::iq3_xs));
    EXPECT_LT(pos(quant_mix::iq3_xs), pos(quant_mix::iq3_xxs));
    EXPECT_LT(pos(quant_mix::iq3_xxs), pos(quant_mix::iq4_nl));
    EXPECT_LT(pos(quant_mix::iq4_nl), pos(quant_mix::iq3_s));
    EXPECT_LT(pos(quant_mix::iq3_s), pos(quant_mix::iq3_m));
    EXPECT_LT(pos(quant_mix::iq3_m), pos(quant_mix::iq4_xs));
}

TEST(quantize, metadata_marks_tessera_only_files) {
    gguf_file in = gguf_file::open(wide_f32_model());
    quantize_params p;
    p.target = type::awq4;
    gguf_file a = gguf_file::from_memory(quantize_to_bytes(in, p));
    EXPECT_EQ(a.get_int(tessera_format_key), int64_t(tessera_format_version));
    EXPECT_FALSE(a.get_int("general.file_type").has_value()); // llama.cpp has no ftype for awq4
    EXPECT_EQ(a.get_string("tokenizer.ggml.model"), in.get_string("tokenizer.ggml.model"));

    // back to a ggml type: the marker goes away
    const std::string awq_path = tmp_path("meta_awq4.gguf");
    quantize_model(wide_f32_model(), awq_path, p);
    p.target = type::q8_0;
    gguf_file b = gguf_file::from_memory(quantize_to_bytes(gguf_file::open(awq_path), p));
    EXPECT_EQ(b.find(tessera_format_key), nullptr);
    EXPECT_EQ(b.get_int("general.file_type"), 7);
    fs::remove(awq_path);
}

TEST(quantize, loader_refuses_tessera_types_without_the_marker) {
    const std::string path = tmp_path("marker.gguf");
    quantize_params p;
    p.target = type::awq4;
    quantize_model(wide_f32_model(), path, p);
    EXPECT_NO_THROW(model::load(path));

    // the same tensors in a file that claims to be a plain llama.cpp GGUF
    gguf_file f = gguf_file::open(path);
    gguf_writer w;
    for (const auto& kv : f.kvs())
        if (kv.key != tessera_format_key) w.set(kv.key, kv.value);
    for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type_id, std::span<const int64_t>(t.ne, t.n_dims), t.data);
    const std::string plain = tmp_path("marker_plain.gguf");
    w.write(plain);
    try {
        model::load(plain);
        ADD_FAILURE() << "loaded an awq4 file without " << tessera_format_key;
    } catch (const error& e) {
        EXPECT_NE(std::string(e.what()).find("awq4"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find(tessera_format_key), std::string::npos) << e.what();
    }
    fs::remove(path);
    fs::remove(plain);
}

TEST(quantize, failure_leaves_existing_output_untouched) {
    const std::string bad = tmp_path("bad_in.gguf");
    test::tiny_model_spec s;
    s.n_embd = 256, s.n_ff = 512; // whole iq2_s blocks
    s.retype["blk.1.ffn_up.weight"] = uint32_t(type::iq2_s); // a type tessera cannot read
    test::write_tiny_model(bad, s);
    const std::string out = tmp_path("existing_out.gguf");
    { std::ofstream(out, std::ios::binary) << "precious"; }
    quantize_params p;
    p.target = type::q4_0;
    EXPECT_THROW(quantize_model(bad, out, p), error);
    EXPECT_EQ(test::read_file(out), "precious");
    EXPECT_TRUE(test::temps_of(out).empty());
    EXPECT_THROW(quantize_model(bad, "/nonexistent/dir/out.gguf", p), error);
    fs::remove(out);
    fs::remove(bad);
}

// AWQ: W diag(s) with 1/s folded into the producer (norm weight, v rows, up rows) is the same function in exact
// arithmetic; in f32 the logits move by rounding only. Checked one group at a time, then all together, with scales
// spread over ~e^-2 .. e^2 (wider than AWQ's).
TEST(awq, folding_keeps_f32_logits) {
    auto m = model::load(wide_f32_model());
    const hparams& hp = m->hp;
    // the reference is the model converted to f32 without scales: the input's token_embd is q8_0, and a q8_0 output
    // matmul quantizes its activations, which an f32 one does not
    const std::string plain = tmp_path("unfolded.gguf");
    quantize_params unscaled;
    unscaled.target = type::f32;
    quantize_model(wide_f32_model(), plain, unscaled);
    const auto ref = logits_of(plain, prompt_ids);
    fs::remove(plain);
    const int64_t n[awq_n_groups] = {hp.n_embd, hp.n_embd_kv(), hp.n_embd, hp.n_ff};
    for (int only = -1; only < awq_n_groups; only++) {
        SCOPED_TRACE(only < 0 ? "all groups" : awq_group_name(awq_group(only)));
        std::vector<awq_layer_scales> scales(size_t(hp.n_layer));
        uint32_t seed = 100;
        for (auto& l : scales)
            for (int g = 0; g < awq_n_groups; g++) {
                auto r = test::random_normal(size_t(n[g]), seed++, 0.7f);
                for (float& x : r) x = std::exp(x); // scales spread over ~e^-2 .. e^2
                if (only < 0 || only == g) l.s[size_t(g)] = r;
            }
        quantize_params p;
        p.target = type::f32;
        p.scaling = awq_fold(*m, scales);
        const std::string out = tmp_path("folded.gguf");
        quantize_model(wide_f32_model(), out, p);
        const auto got = logits_of(out, prompt_ids);
        double max_diff = 0, max_ref = 0;
        for (size_t i = 0; i < ref.size(); i++) {
            max_diff = std::max(max_diff, double(std::fabs(got[i] - ref[i])));
            max_ref = std::max(max_ref, double(std::fabs(ref[i])));
        }
        const double e = test::nmse(got.data(), ref.data(), ref.size());
        std::printf("fold %-10s nmse %.3g  max |diff| %.3g  (max |logit| %.3g)\n",
                    only < 0 ? "all" : awq_group_name(awq_group(only)), e, max_diff, max_ref);
        // bounds (measured x ~5): only f32 rounding for gate_up / down (1e-9); the attention rounds Q to f16 (qkv:
        // 2e-8) and keeps V in f16, which now holds v / s (o and all: 6e-7)
        const double bound = only == int(awq_group::gate_up) || only == int(awq_group::down) ? 1e-8
                             : only == int(awq_group::qkv)                                   ? 1e-7
                                                                                             : 3e-6;
        EXPECT_LT(e, bound);
        fs::remove(out);
    }

    std::vector<awq_layer_scales> bad(size_t(hp.n_layer));
    bad[0].s[0].assign(size_t(hp.n_embd - 1), 1.0f); // a wrong shape is an error, not a silent misfold
    EXPECT_THROW(awq_fold(*m, bad), error);
    bad[0].s[0].assign(size_t(hp.n_embd), 0.0f);
    EXPECT_THROW(awq_fold(*m, bad), error);
}

TEST(awq, search_never_does_worse_than_round_to_nearest) {
    auto m = model::load(wide_f32_model());
    std::vector<token> tokens;
    for (int i = 0; i < 300; i++) tokens.push_back(token((i * 7919) % 5000 + 10));
    awq_params ap;
    ap.n_ctx = 64;
    ap.n_sample = 64;
    ap.n_grid = 10;
    ap.n_threads = 2;
    awq_stats st = awq_collect(*m, tokens, ap);
    EXPECT_EQ(st.n_tokens, 300);
    const auto& e = st.layers[1][size_t(awq_group::down)];
    EXPECT_EQ(e.n_in, m->hp.n_ff);
    EXPECT_EQ(e.n_sample, 64); // stride 300 / 64 = 4 -> tokens 0, 4, ..., 252 (the first 64 of 75)
    for (float x : st.mean_abs(1, awq_group::down)) EXPECT_GT(x, 0.0f);

    int64_t n_steps = 0;
    awq_result res = awq_search(
        *m, st, [](const std::string&) { return type::awq4_g64; }, ap, [&](int64_t, int64_t) { n_steps++; });
    EXPECT_GT(n_steps, 0);
    ASSERT_EQ(res.reports.size(), size_t(m->hp.n_layer * awq_n_groups));
    bool any_better = false;
    for (const auto& r : res.reports) {
        EXPECT_LE(r.err_best, r.err_rtn);
        EXPECT_GT(r.err_rtn, 0.0);
        any_better |= r.err_best < r.err_rtn;
    }
    EXPECT_TRUE(any_better);

    quantize_params p;
    p.target = type::awq4_g64;
    p.scaling = awq_fold(*m, res.scales);
    const std::string out = tmp_path("awq.gguf");
    quantize_model(wide_f32_model(), out, p);
    const auto l = logits_of(out, prompt_ids);
    for (float x : l) ASSERT_TRUE(std::isfinite(x));
    fs::remove(out);
}

TEST(quantize, convert_rows_applies_scaling) {
    const int64_t n_cols = 64, n_rows = 3;
    std::vector<float> x = test::random_normal(size_t(n_cols * n_rows), 9), y(x.size());
    tensor_scaling sc;
    sc.row = {1.0f, 2.0f, 0.5f};
    for (int64_t i = 0; i < n_cols; i++) sc.col.push_back(float(i + 1));
    convert_rows(type::f32, x.data(), type::f32, y.data(), n_cols, n_rows, 2, &sc, 3.0f);
    for (int64_t r = 0; r < n_rows; r++)
        for (int64_t c = 0; c < n_cols; c++)
            EXPECT_FLOAT_EQ(y[size_t(r * n_cols + c)],
                            x[size_t(r * n_cols + c)] * 3.0f * float(c + 1) * sc.row[size_t(r)]);
}

} // namespace
} // namespace tessera
