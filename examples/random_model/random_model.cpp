// random_model: writes a GGUF with random weights in the real shapes of well-known models of every supported family,
// or in a small shape of one's own, for speed work and for checking a family against llama.cpp on files both read.
//
//   random_model [--arch FAMILY] [--vocab VOCAB.gguf] [--seed N] [--yarn FACTOR] [--softcap CAP] [--experts N,K]
//                [--expert-type TYPE] [--output-type TYPE] SHAPE TYPE OUT.gguf
//
//   SHAPE  a preset (below; it implies its family) or E,L,H,KV,FF,VOCAB[,HEAD_DIM] for --arch (default llama)
//   TYPE   the matrices' type: f32, f16, q8_0, q4_0, q4_1, nvfp4, awq4, tq2_0, i2_s, ... (any type `tessera quantize`
//          writes); bitnet families keep f16 embeddings, as their released files do
//   --vocab  copy the tokenizer (every tokenizer.* key) of a GGUF, e.g. llama.cpp's models/ggml-vocab-qwen2.gguf;
//          the vocabulary's size then replaces the shape's. Without it: a synthetic SentencePiece vocabulary
//          (<unk>, <s>, </s>, 256 byte tokens, then "▁tNNN" pieces) of the shape's size.
//   --yarn   YaRN rope scaling with this factor (qwen2 and the other NEOX families)
//   --softcap  final_logit_softcapping (gemma3)
//   --experts  mixture-of-experts families: N experts, K used per token (own shapes: default 8,2; the shape's FF is
//          each expert's width); the router (ffn_gate_inp) is always f32, as llama.cpp's quantize leaves it
//   --expert-type  the experts' matrices' type (default TYPE)
//   --output-type  output.weight's type (token_embd.weight's where the two are tied), as llama-quantize's
//          --output-tensor-type: e.g. TYPE q4_K with q6_K here is the shape of a downloaded "Q4_K" file
//
// Presets (llama.cpp's names for the files these models ship as):
//   llama   1b (Llama-3.2-1B), 7b (Llama-2-7B), 8b (Llama-3.1-8B), 70b (Llama-3.1-70B), smol (SmolLM2-135M)
//   qwen3   qwen3-0.6b, qwen3-8b        qwen2   qwen2.5-7b        gemma3  gemma3-1b, gemma3-4b
//   phi3    phi4-mini                   bitnet-b1.58  bitnet-2b (BitNet-b1.58-2B-4T)
//   qwen3moe  qwen3-30b-a3b (Qwen3-30B-A3B: 128 experts, 8 used, 768 wide), qwen3moe-small (1024 wide, 8 layers,
//             64 experts, 8 used, 256 wide: a small MoE for CPU speed)
//   gpt-oss   gpt-oss-20b (24 layers, 2880 wide, 64 heads of 64, 8 KV heads, 32 experts, 4 used, 2880 wide each,
//             window 128 on alternate layers; experts MXFP4 unless --expert-type; no o200k vocabulary is at hand here:
//             pass one with --vocab, e.g. qwen2's), gpt-oss-small (1024 wide, 8 layers, 32 experts of 512, 4 used)
// A family's own parts come with every shape: gpt-oss's q/k/v/o biases, attention sinks, YaRN (factor 32), window of
// 8 tokens on even layers (small shapes), router and expert biases, MXFP4 experts; qwen2's q/k/v biases, qwen3's and gemma3's Q/K norms, gemma3's post-norms
// and sliding window (small shapes: a window of 8 tokens and a pattern of 3 when there are fewer than 6 layers, so
// that short prompts cross it), phi3's fused q/k/v and gate/up matrices, partial rotary dimensions and LongRoPE factors
// (small shapes: an original context of 32, so the long factors are in use), bitnet's sub-norms and per-tensor scales.
//
// Weights: a pool of 256 distinct rows per tensor, drawn from N(0, 1/sqrt(row length)) and quantized once with the
// reference quantizer, then repeated (row i is pool row hash(i)): every block is a real block of its type and a 7B
// file takes seconds. Norm weights are 1 + N(0, 0.1), biases N(0, 0.1), so that a norm or bias applied in the wrong
// place changes the results.
#include "ggml-like/error.h"
#include "ggml-like/gguf.h"
#include "quant/format.h"
#include "quant/quantize.h"

#include <fmt/core.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace tessera;

namespace {

struct shape {
    std::string arch = "llama";
    int64_t n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, n_ff = 0, n_vocab = 0;
    int64_t head_dim = 0; // 0: n_embd / n_head
    float rope_base = 10000.0f;
    bool tied = false;
    int64_t n_ctx = 4096;
    int64_t n_swa = 0;      // gemma3
    int64_t swa_pattern = 0; // written when != 0
    int64_t n_ctx_orig = 0; // phi3's LongRoPE
    int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0; // mixture of experts (qwen3moe)
    bool preset = false;
};

bool is_moe(const std::string& arch) { return arch == "qwen3moe" || arch == "gpt-oss"; }

shape preset(const std::string& s) {
    shape r;
    r.preset = true;
    auto set = [&](const char* arch, int64_t e, int64_t l, int64_t h, int64_t kv, int64_t d, int64_t ff, int64_t v,
                   float base, bool tied, int64_t ctx) {
        r.arch = arch;
        r.n_embd = e, r.n_layer = l, r.n_head = h, r.n_head_kv = kv, r.head_dim = d, r.n_ff = ff, r.n_vocab = v;
        r.rope_base = base, r.tied = tied, r.n_ctx = ctx;
    };
    if (s == "1b") set("llama", 2048, 16, 32, 8, 0, 8192, 128256, 500000.0f, false, 4096);
    else if (s == "7b") set("llama", 4096, 32, 32, 32, 0, 11008, 32000, 10000.0f, false, 4096);
    else if (s == "8b") set("llama", 4096, 32, 32, 8, 0, 14336, 128256, 500000.0f, false, 4096);
    else if (s == "70b") set("llama", 8192, 80, 64, 8, 0, 28672, 128256, 500000.0f, false, 4096);
    else if (s == "smol") set("llama", 576, 30, 9, 3, 0, 1536, 49152, 100000.0f, true, 8192);
    else if (s == "qwen3-0.6b") set("qwen3", 1024, 28, 16, 8, 128, 3072, 151936, 1000000.0f, true, 40960);
    else if (s == "qwen3-8b") set("qwen3", 4096, 36, 32, 8, 128, 12288, 151936, 1000000.0f, false, 40960);
    else if (s == "qwen2.5-7b") set("qwen2", 3584, 28, 28, 4, 128, 18944, 152064, 1000000.0f, false, 32768);
    else if (s == "gemma3-1b") {
        set("gemma3", 1152, 26, 4, 1, 256, 6912, 262144, 1000000.0f, true, 32768);
        r.n_swa = 512;
    } else if (s == "gemma3-4b") {
        set("gemma3", 2560, 34, 8, 4, 256, 10240, 262208, 1000000.0f, true, 131072);
        r.n_swa = 1024;
    } else if (s == "phi4-mini") {
        set("phi3", 3072, 32, 24, 8, 128, 8192, 200064, 10000.0f, true, 131072);
        r.n_ctx_orig = 4096;
    } else if (s == "bitnet-2b") set("bitnet-b1.58", 2560, 30, 20, 5, 128, 6912, 128256, 500000.0f, true, 4096);
    else if (s == "qwen3-30b-a3b") {
        set("qwen3moe", 2048, 48, 32, 4, 128, 6144, 151936, 1000000.0f, false, 40960);
        r.n_expert = 128, r.n_expert_used = 8, r.n_ff_exp = 768;
    } else if (s == "qwen3moe-small") { // a small shape with many experts, for CPU speed against llama.cpp
        set("qwen3moe", 1024, 8, 16, 4, 64, 1536, 151936, 1000000.0f, false, 40960);
        r.n_expert = 64, r.n_expert_used = 8, r.n_ff_exp = 256;
    } else if (s == "gpt-oss-small") { // a small gpt-oss for CPU speed: 32 experts of 512, 4 used
        set("gpt-oss", 1024, 8, 16, 4, 64, 512, 201088, 150000.0f, false, 131072);
        r.n_expert = 32, r.n_expert_used = 4, r.n_ff_exp = 512, r.n_swa = 128;
    } else if (s == "gpt-oss-20b") {
        set("gpt-oss", 2880, 24, 64, 8, 64, 2880, 201088, 150000.0f, false, 131072);
        r.n_expert = 32, r.n_expert_used = 4, r.n_ff_exp = 2880, r.n_swa = 128;
    }
    else r.preset = false;
    return r;
}

shape parse_shape(const std::string& s, const std::string& arch) {
    shape r = preset(s);
    if (r.preset) {
        if (!arch.empty() && arch != r.arch)
            throw error(fmt::format("shape '{}' is a {} model, not {}", s, r.arch, arch));
        return r;
    }
    r = shape{};
    r.arch = arch.empty() ? "llama" : arch;
    std::vector<int64_t> v;
    std::istringstream in(s);
    std::string part;
    while (std::getline(in, part, ',')) {
        char* end = nullptr;
        const long long x = std::strtoll(part.c_str(), &end, 10);
        if (part.empty() || *end != '\0' || x <= 0) throw error(fmt::format("bad shape '{}'", s));
        v.push_back(x);
    }
    if (v.size() != 6 && v.size() != 7)
        throw error(fmt::format("bad shape '{}': use a preset or E,L,H,KV,FF,VOCAB[,HEAD_DIM]", s));
    r.n_embd = v[0], r.n_layer = v[1], r.n_head = v[2], r.n_head_kv = v[3], r.n_ff = v[4], r.n_vocab = v[5];
    r.head_dim = v.size() == 7 ? v[6] : 0;
    if (r.n_vocab < 260 || r.n_head % r.n_head_kv != 0 || (r.head_dim == 0 && r.n_embd % r.n_head != 0))
        throw error(fmt::format("bad shape '{}': heads must divide the width, KV heads the heads, and the "
                                "vocabulary needs 260 tokens",
                                s));
    if (r.arch == "gemma3") {
        r.n_swa = 8;
        r.swa_pattern = r.n_layer < 6 ? 3 : 0;
        r.tied = true;
    }
    if (r.arch == "phi3") r.n_ctx_orig = 32;
    if (is_moe(r.arch)) { // --experts sets the counts; the shape's FF is each expert's width
        r.n_expert = 8, r.n_expert_used = 2, r.n_ff_exp = r.n_ff;
    }
    if (r.arch == "gpt-oss") r.n_swa = 8; // short prompts cross the window
    if (r.arch == "bitnet" || r.arch == "bitnet-b1.58") r.tied = true;
    return r;
}

struct writer_state {
    gguf_writer w;
    std::vector<std::vector<uint8_t>> storage; // tensor bytes, alive until write()
    uint32_t seed = 1;
    size_t bytes = 0;
};

// A tensor of ne[1] rows of ne[0] elements in type t (ne2 of them: experts), rows drawn from a pool of quantized
// random rows.
void add_matrix(writer_state& st, const std::string& name, int64_t ne0, int64_t ne1, type t, int64_t ne2 = 1) {
    const type_traits* info = find_type(uint32_t(t));
    if (!info || ne0 % info->block_size != 0)
        throw error(fmt::format("{}: rows of {} elements do not fit type {}", name, ne0, type_name(t)));
    const int64_t n_rows = ne1 * ne2;
    const int64_t pool = std::min<int64_t>(n_rows, 256);
    std::mt19937 rng(st.seed++);
    std::normal_distribution<float> nd(0.0f, 1.0f / std::sqrt(float(ne0)));
    std::vector<float> x(size_t(ne0 * pool));
    for (float& v : x) v = nd(rng);
    const size_t row = row_size(t, ne0);
    std::vector<uint8_t> rows(tensor_bytes(t, ne0 * pool));
    if (!quantize_tensor_ref(t, x.data(), rows.data(), ne0, pool))
        throw error(fmt::format("{}: cannot quantize to {}", name, type_name(t)));
    auto& out = st.storage.emplace_back(tensor_bytes(t, ne0 * n_rows));
    for (int64_t i = 0; i < n_rows; i++) {
        const uint64_t h = (uint64_t(i) * 0x9E3779B97F4A7C15ull) >> 40;
        std::memcpy(out.data() + size_t(i) * row, rows.data() + size_t(h % uint64_t(pool)) * row, row);
    }
    // a per-tensor tail (i2_s: the scale after the rows) comes from the pool's quantization
    if (info->tail_bytes)
        std::memcpy(out.data() + size_t(n_rows) * row, rows.data() + size_t(pool) * row, info->tail_bytes);
    const int64_t ne[3] = {ne0, ne1, ne2};
    st.w.add_tensor(name, uint32_t(t), std::span<const int64_t>(ne, ne2 > 1 ? 3 : 2), out.data());
    st.bytes += out.size();
}

// An f32 vector of n values mean + N(0, sd).
void add_vector(writer_state& st, const std::string& name, int64_t n, float mean, float sd) {
    auto& out = st.storage.emplace_back(size_t(n) * 4);
    std::mt19937 rng(st.seed++);
    std::normal_distribution<float> nd(mean, sd);
    for (int64_t i = 0; i < n; i++) {
        const float v = nd(rng);
        std::memcpy(out.data() + i * 4, &v, 4);
    }
    const int64_t ne[1] = {n};
    st.w.add_tensor(name, uint32_t(type::f32), ne, out.data());
    st.bytes += out.size();
}

// An f32 matrix (ne0, ne1) of mean + N(0, sd): per-expert biases.
void add_vector2(writer_state& st, const std::string& name, int64_t ne0, int64_t ne1, float mean, float sd) {
    auto& out = st.storage.emplace_back(size_t(ne0 * ne1) * 4);
    std::mt19937 rng(st.seed++);
    std::normal_distribution<float> nd(mean, sd);
    for (int64_t i = 0; i < ne0 * ne1; i++) {
        const float v = nd(rng);
        std::memcpy(out.data() + i * 4, &v, 4);
    }
    const int64_t ne[2] = {ne0, ne1};
    st.w.add_tensor(name, uint32_t(type::f32), ne, out.data());
    st.bytes += out.size();
}

void add_norm(writer_state& st, const std::string& name, int64_t n) {
    add_vector(st, name, n, 1.0f, 0.1f);
}

void set_synthetic_tokenizer(gguf_writer& w, int64_t n_vocab) {
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<int32_t> types;
    tokens.reserve(size_t(n_vocab));
    auto add = [&](std::string s, float score, int32_t tt) {
        tokens.push_back(std::move(s));
        scores.push_back(score);
        types.push_back(tt);
    };
    add("<unk>", 0.0f, 2); // unknown
    add("<s>", 0.0f, 3);   // control
    add("</s>", 0.0f, 3);
    for (int b = 0; b < 256; b++) add(fmt::format("<0x{:02X}>", b), 0.0f, 6); // byte
    for (int64_t i = int64_t(tokens.size()); i < n_vocab; i++) add(fmt::format("\xe2\x96\x81t{}", i), -float(i), 1);
    w.set("tokenizer.ggml.model", gguf_value::of_string("llama"));
    w.set("tokenizer.ggml.tokens", gguf_value::of_strings(tokens));
    w.set("tokenizer.ggml.scores", gguf_value::of_f32s(scores));
    w.set("tokenizer.ggml.token_type", gguf_value::of_i32s(types));
    w.set("tokenizer.ggml.unknown_token_id", gguf_value::of_u32(0));
    w.set("tokenizer.ggml.bos_token_id", gguf_value::of_u32(1));
    w.set("tokenizer.ggml.eos_token_id", gguf_value::of_u32(2));
}

// Copies every tokenizer.* key of a GGUF; returns the vocabulary's size.
int64_t copy_tokenizer(gguf_writer& w, const std::string& path) {
    const gguf_file f = gguf_file::open(path);
    const gguf_value* tokens = f.find("tokenizer.ggml.tokens");
    if (!tokens || !tokens->is_array()) throw error(fmt::format("{}: no tokenizer.ggml.tokens", path));
    for (const gguf_kv& kv : f.kvs())
        if (kv.key.starts_with("tokenizer.")) w.set(kv.key, kv.value);
    return int64_t(tokens->n);
}

struct options {
    std::string arch, vocab, shape_s, type_s, out;
    std::string expert_type; // the experts' matrices' type (default: TYPE)
    std::string output_type; // output.weight's (tied: token_embd.weight's) type (default: TYPE)
    int64_t n_expert = 0, n_expert_used = 0; // --experts N,K
    uint32_t seed = 1;
    float yarn = 0.0f, softcap = 0.0f;
};

options parse_args(int argc, char** argv) {
    options o;
    std::vector<std::string> pos;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw error(fmt::format("{} needs a value", a));
            return argv[++i];
        };
        auto number = [&](const std::string& v) {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            if (v.empty() || *end != '\0' || !(x > 0.0) || !std::isfinite(x))
                throw error(fmt::format("{}: '{}' is not a positive number", a, v));
            return x;
        };
        if (a == "--arch") o.arch = value();
        else if (a == "--vocab") o.vocab = value();
        else if (a == "--seed") o.seed = uint32_t(number(value()));
        else if (a == "--yarn") o.yarn = float(number(value()));
        else if (a == "--softcap") o.softcap = float(number(value()));
        else if (a == "--expert-type") o.expert_type = value();
        else if (a == "--output-type") o.output_type = value();
        else if (a == "--experts") {
            const std::string v = value();
            char* end = nullptr;
            o.n_expert = std::strtoll(v.c_str(), &end, 10);
            if (*end != ',' || o.n_expert <= 0) throw error(fmt::format("--experts: '{}' is not N,K", v));
            const char* k = end + 1;
            o.n_expert_used = std::strtoll(k, &end, 10);
            if (*k == '\0' || *end != '\0' || o.n_expert_used <= 0 || o.n_expert_used > o.n_expert)
                throw error(fmt::format("--experts: '{}' is not N,K with 1 <= K <= N", v));
        }
        else if (a.starts_with("--")) throw error(fmt::format("unknown flag {}", a));
        else pos.push_back(a);
    }
    if (pos.size() != 3) throw error("expected SHAPE TYPE OUT.gguf");
    o.shape_s = pos[0], o.type_s = pos[1], o.out = pos[2];
    return o;
}

void write_model(const options& o) {
    shape s = parse_shape(o.shape_s, o.arch);
    const std::string& a = s.arch;
    const bool bitnet = a == "bitnet" || a == "bitnet-b1.58";
    if (a != "llama" && a != "qwen2" && a != "qwen3" && a != "gemma3" && a != "phi3" && !bitnet && !is_moe(a))
        throw error(fmt::format("unknown family '{}' (llama, qwen2, qwen3, qwen3moe, gemma3, phi3, gpt-oss, bitnet, "
                                "bitnet-b1.58)",
                                a));
    type t;
    if (!type_from_name(o.type_s, t)) throw error(fmt::format("unknown type '{}'", o.type_s));
    type t_exp = a == "gpt-oss" ? type::mxfp4 : t; // gpt-oss's released files keep the experts in MXFP4
    if (!o.expert_type.empty() && !type_from_name(o.expert_type, t_exp))
        throw error(fmt::format("unknown type '{}'", o.expert_type));
    if (o.n_expert > 0) {
        if (!is_moe(a)) throw error(fmt::format("--experts: {} has no experts", a));
        s.n_expert = o.n_expert, s.n_expert_used = o.n_expert_used;
    }
    type t_out = t;
    if (!o.output_type.empty() && !type_from_name(o.output_type, t_out))
        throw error(fmt::format("unknown type '{}'", o.output_type));
    const type t_embd = bitnet ? type::f16 : s.tied ? t_out : t;

    writer_state st;
    st.seed = o.seed;
    gguf_writer& w = st.w;
    w.set("general.architecture", gguf_value::of_string(a));
    // (not the family: llama.cpp keys per-token attributes on a "phi3" in the name, for phi-3 vocabularies only)
    w.set("general.name", gguf_value::of_string(fmt::format("random {} {}", o.shape_s, o.type_s)));
    if (!o.vocab.empty()) {
        const int64_t n = copy_tokenizer(w, o.vocab);
        s.n_vocab = n;
    } else {
        set_synthetic_tokenizer(w, s.n_vocab);
    }
    const int64_t E = s.n_embd, D = s.head_dim ? s.head_dim : s.n_embd / s.n_head;
    const int64_t H = s.n_head, KV = s.n_head_kv, F = s.n_ff;
    const std::string p = a + ".";
    w.set(p + "block_count", gguf_value::of_u32(uint32_t(s.n_layer)));
    w.set(p + "context_length", gguf_value::of_u32(uint32_t(s.n_ctx)));
    w.set(p + "embedding_length", gguf_value::of_u32(uint32_t(E)));
    w.set(p + "feed_forward_length", gguf_value::of_u32(uint32_t(F)));
    w.set(p + "attention.head_count", gguf_value::of_u32(uint32_t(H)));
    w.set(p + "attention.head_count_kv", gguf_value::of_u32(uint32_t(KV)));
    if (s.head_dim) {
        w.set(p + "attention.key_length", gguf_value::of_u32(uint32_t(D)));
        w.set(p + "attention.value_length", gguf_value::of_u32(uint32_t(D)));
    }
    w.set(p + "attention.layer_norm_rms_epsilon", gguf_value::of_f32(a == "gemma3" ? 1e-6f : 1e-5f));
    w.set(p + "rope.freq_base", gguf_value::of_f32(s.rope_base));
    const int64_t n_rot = a == "phi3" ? (D * 3 / 4) & ~int64_t(1) : D; // Phi-4-mini: partial_rotary_factor 0.75
    w.set(p + "rope.dimension_count", gguf_value::of_u32(uint32_t(n_rot)));
    if (s.n_swa) {
        w.set(p + "attention.sliding_window", gguf_value::of_u32(uint32_t(s.n_swa)));
        if (s.swa_pattern) w.set(p + "attention.sliding_window_pattern", gguf_value::of_u32(uint32_t(s.swa_pattern)));
        if (a == "gemma3") w.set(p + "rope.freq_base_swa", gguf_value::of_f32(10000.0f));
    }
    if (o.softcap > 0.0f) w.set(p + "final_logit_softcapping", gguf_value::of_f32(o.softcap));
    if (s.n_expert) {
        w.set(p + "expert_count", gguf_value::of_u32(uint32_t(s.n_expert)));
        w.set(p + "expert_used_count", gguf_value::of_u32(uint32_t(s.n_expert_used)));
        w.set(p + "expert_feed_forward_length", gguf_value::of_u32(uint32_t(s.n_ff_exp)));
    }
    if (a == "gpt-oss" && o.yarn == 0.0f) { // the released models' YaRN: factor 32 over an original 4096 context
        w.set(p + "rope.scaling.type", gguf_value::of_string("yarn"));
        w.set(p + "rope.scaling.factor", gguf_value::of_f32(32.0f));
        w.set(p + "rope.scaling.original_context_length", gguf_value::of_u32(4096));
        w.set(p + "context_length", gguf_value::of_u32(131072));
    }
    if (o.yarn > 0.0f) {
        w.set(p + "rope.scaling.type", gguf_value::of_string("yarn"));
        w.set(p + "rope.scaling.factor", gguf_value::of_f32(o.yarn));
        w.set(p + "rope.scaling.original_context_length", gguf_value::of_u32(uint32_t(s.n_ctx)));
        w.set(p + "context_length", gguf_value::of_u32(uint32_t(float(s.n_ctx) * o.yarn)));
    }
    if (s.n_ctx_orig) { // LongRoPE: the magnitude factor phi3's converter writes
        const float scale = float(s.n_ctx) / float(s.n_ctx_orig);
        w.set(p + "rope.scaling.original_context_length", gguf_value::of_u32(uint32_t(s.n_ctx_orig)));
        w.set(p + "rope.scaling.attn_factor",
              gguf_value::of_f32(std::sqrt(1.0f + std::log(scale) / std::log(float(s.n_ctx_orig)))));
    }
    if (!is_ggml_type(t) || !is_ggml_type(t_out) || !is_ggml_type(t_exp))
        w.set(tessera_format_key, gguf_value::of_u32(tessera_format_version));

    add_matrix(st, "token_embd.weight", E, s.n_vocab, t_embd);
    add_norm(st, "output_norm.weight", E);
    if (!s.tied) add_matrix(st, "output.weight", E, s.n_vocab, t_out);
    if (s.n_ctx_orig) {
        add_vector(st, "rope_factors_long.weight", n_rot / 2, 4.0f, 1.0f);
        add_vector(st, "rope_factors_short.weight", n_rot / 2, 1.5f, 0.25f);
    }
    // bitnet (llama.cpp's converter): a scale per matrix, multiplying its output
    auto scale_of = [&](const std::string& base) {
        if (a == "bitnet") add_vector(st, base + ".scale", 1, 1.0f, 0.2f);
    };
    for (int64_t il = 0; il < s.n_layer; il++) {
        const std::string b = fmt::format("blk.{}.", il);
        add_norm(st, b + "attn_norm.weight", E);
        if (a == "phi3") {
            add_matrix(st, b + "attn_qkv.weight", E, (H + 2 * KV) * D, t);
        } else {
            add_matrix(st, b + "attn_q.weight", E, H * D, t);
            scale_of(b + "attn_q");
            add_matrix(st, b + "attn_k.weight", E, KV * D, t);
            scale_of(b + "attn_k");
            add_matrix(st, b + "attn_v.weight", E, KV * D, t);
            scale_of(b + "attn_v");
        }
        if (a == "qwen2" || a == "gpt-oss") {
            add_vector(st, b + "attn_q.bias", H * D, 0.0f, 0.1f);
            add_vector(st, b + "attn_k.bias", KV * D, 0.0f, 0.1f);
            add_vector(st, b + "attn_v.bias", KV * D, 0.0f, 0.1f);
        }
        if (a == "qwen3" || a == "qwen3moe" || a == "gemma3") {
            add_norm(st, b + "attn_q_norm.weight", D);
            add_norm(st, b + "attn_k_norm.weight", D);
        }
        if (bitnet) add_norm(st, b + "attn_sub_norm.weight", H * D);
        add_matrix(st, b + "attn_output.weight", H * D, E, t);
        scale_of(b + "attn_output");
        if (a == "gpt-oss") {
            add_vector(st, b + "attn_output.bias", E, 0.0f, 0.1f);
            add_vector(st, b + "attn_sinks.weight", H, 0.0f, 1.0f);
        }
        if (a == "gemma3" || a == "gpt-oss") add_norm(st, b + "post_attention_norm.weight", E);
        if (a != "gpt-oss") add_norm(st, b + "ffn_norm.weight", E); // gpt-oss: post_attention_norm is the FFN's norm
        if (s.n_expert) { // the router stays f32 (llama.cpp's quantize leaves ffn_gate_inp alone)
            const int64_t X = s.n_expert, FX = s.n_ff_exp;
            add_matrix(st, b + "ffn_gate_inp.weight", E, X, type::f32);
            add_matrix(st, b + "ffn_gate_exps.weight", E, FX, t_exp, X);
            add_matrix(st, b + "ffn_up_exps.weight", E, FX, t_exp, X);
            add_matrix(st, b + "ffn_down_exps.weight", FX, E, t_exp, X);
            if (a == "gpt-oss") { // router and expert biases
                add_vector(st, b + "ffn_gate_inp.bias", X, 0.0f, 0.1f);
                add_vector2(st, b + "ffn_gate_exps.bias", FX, X, 0.0f, 0.1f);
                add_vector2(st, b + "ffn_up_exps.bias", FX, X, 0.0f, 0.1f);
                add_vector2(st, b + "ffn_down_exps.bias", E, X, 0.0f, 0.1f);
            }
            continue;
        }
        if (a == "phi3") {
            add_matrix(st, b + "ffn_up.weight", E, 2 * F, t);
        } else {
            add_matrix(st, b + "ffn_gate.weight", E, F, t);
            scale_of(b + "ffn_gate");
            add_matrix(st, b + "ffn_up.weight", E, F, t);
            scale_of(b + "ffn_up");
        }
        if (bitnet) add_norm(st, b + "ffn_sub_norm.weight", F);
        add_matrix(st, b + "ffn_down.weight", F, E, t);
        scale_of(b + "ffn_down");
        if (a == "gemma3") add_norm(st, b + "post_ffw_norm.weight", E);
    }
    w.write(o.out);
    std::fprintf(stderr, "random_model: wrote %s (%s %s, %s, %lld tokens, %.2f GiB of tensors)\n", o.out.c_str(),
                 a.c_str(), o.shape_s.c_str(), o.type_s.c_str(), static_cast<long long>(s.n_vocab),
                 double(st.bytes) / double(1ull << 30));
}

} // namespace

int main(int argc, char** argv) {
    try {
        write_model(parse_args(argc, argv));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "random_model: %s\nusage: random_model [--arch FAMILY] [--vocab VOCAB.gguf] [--seed N] "
                             "[--yarn FACTOR] [--softcap CAP] [--experts N,K] [--expert-type TYPE] SHAPE TYPE "
                             "OUT.gguf\n",
                     e.what());
        return 1;
    }
    return 0;
}
