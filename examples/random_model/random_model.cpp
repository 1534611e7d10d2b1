// random_model: writes a llama-architecture GGUF with random weights in the real shapes of well-known models, for
// speed work on shapes larger than the default model (tests/bench/cuda_bench.sh generates them on the GPU machine).
//   random_model SHAPE TYPE OUT.gguf        SHAPE: 1b (Llama-3.2-1B), 7b (Llama-2-7B), 8b (Llama-3.1-8B), smol
//                                            (SmolLM2-135M), or E,L,H,KV,FF,VOCAB; TYPE: f16, q8_0, q4_0, q4_1, nvfp4,
//                                            awq4, tq2_0, i2_s, ... (any type `tessera quantize` writes)
// Weights: a pool of 256 distinct rows per tensor, quantized once with the reference quantizer from N(0, 0.02) and
// repeated (row i is pool row hash(i)): every block is a real block of its type, and a 7B file takes seconds, not the
// minutes quantizing 7 billion floats would. The tokenizer is synthetic (SentencePiece-style: <unk>, <s>, </s>, 256
// byte tokens, then "▁tNNN" pieces) so llama.cpp loads the file too. Norms are 1, so activations stay bounded.
#include "ggml-like/error.h"
#include "ggml-like/gguf.h"
#include "quant/format.h"
#include "quant/quantize.h"

#include <fmt/core.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace tessera;

namespace {

struct shape {
    int64_t n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab;
    float rope_base = 10000.0f;
};

shape parse_shape(const std::string& s) {
    if (s == "1b") return {2048, 16, 32, 8, 8192, 128256, 500000.0f};
    if (s == "7b") return {4096, 32, 32, 32, 11008, 32000, 10000.0f};
    if (s == "8b") return {4096, 32, 32, 8, 14336, 128256, 500000.0f};
    if (s == "smol") return {576, 30, 9, 3, 1536, 49152, 100000.0f};
    shape r{};
    char c;
    std::istringstream in(s);
    if (in >> r.n_embd >> c >> r.n_layer >> c >> r.n_head >> c >> r.n_head_kv >> c >> r.n_ff >> c >> r.n_vocab && in.eof() &&
        r.n_embd > 0 && r.n_layer > 0 && r.n_head > 0 && r.n_head_kv > 0 && r.n_ff > 0 && r.n_vocab > 259 &&
        r.n_embd % r.n_head == 0 && r.n_head % r.n_head_kv == 0)
        return r;
    throw error("bad shape '" + s + "': use 1b, 7b, 8b, smol or E,L,H,KV,FF,VOCAB");
}

struct writer_state {
    gguf_writer w;
    std::vector<std::vector<uint8_t>> storage; // tensor bytes, alive until write()
    uint32_t seed = 1;
};

// A tensor of ne[1] rows of ne[0] elements in type t, rows drawn from a pool of quantized random rows.
void add_matrix(writer_state& st, const std::string& name, int64_t ne0, int64_t ne1, type t) {
    const type_traits* info = find_type(uint32_t(t));
    if (!info || ne0 % info->block_size != 0)
        throw error(fmt::format("{}: rows of {} elements do not fit type {}", name, ne0, type_name(t)));
    const int64_t pool = std::min<int64_t>(ne1, 256);
    std::mt19937 rng(st.seed++);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<float> x(size_t(ne0 * pool));
    for (float& v : x) v = nd(rng);
    const size_t row = row_size(t, ne0);
    std::vector<uint8_t> rows(tensor_bytes(t, ne0 * pool));
    if (!quantize_tensor_ref(t, x.data(), rows.data(), ne0, pool))
        throw error(fmt::format("{}: cannot quantize to {}", name, type_name(t)));
    auto& out = st.storage.emplace_back(tensor_bytes(t, ne0 * ne1));
    for (int64_t i = 0; i < ne1; i++) {
        const uint64_t h = (uint64_t(i) * 0x9E3779B97F4A7C15ull) >> 40;
        std::memcpy(out.data() + size_t(i) * row, rows.data() + size_t(h % uint64_t(pool)) * row, row);
    }
    // a per-tensor tail (i2_s: the scale after the rows) comes from the pool's quantization
    if (info->tail_bytes) std::memcpy(out.data() + size_t(ne1) * row, rows.data() + size_t(pool) * row, info->tail_bytes);
    const int64_t ne[2] = {ne0, ne1};
    st.w.add_tensor(name, uint32_t(t), ne, out.data());
}

void add_norm(writer_state& st, const std::string& name, int64_t n) {
    auto& out = st.storage.emplace_back(size_t(n) * 4);
    const float one = 1.0f;
    for (int64_t i = 0; i < n; i++) std::memcpy(out.data() + i * 4, &one, 4);
    const int64_t ne[1] = {n};
    st.w.add_tensor(name, uint32_t(type::f32), ne, out.data());
}

void set_tokenizer(gguf_writer& w, int64_t n_vocab) {
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

} // namespace

int main(int argc, char** argv) {
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s SHAPE TYPE OUT.gguf\n  SHAPE: 1b, 7b, 8b, smol or E,L,H,KV,FF,VOCAB\n", argv[0]);
        return 2;
    }
    try {
        const shape s = parse_shape(argv[1]);
        type t;
        if (!type_from_name(argv[2], t)) throw error(fmt::format("unknown type '{}'", argv[2]));
        writer_state st;
        gguf_writer& w = st.w;
        const std::string a = "llama";
        w.set("general.architecture", gguf_value::of_string(a));
        w.set("general.name", gguf_value::of_string(fmt::format("random {} {}", argv[1], argv[2])));
        w.set(a + ".block_count", gguf_value::of_u32(uint32_t(s.n_layer)));
        w.set(a + ".context_length", gguf_value::of_u32(4096));
        w.set(a + ".embedding_length", gguf_value::of_u32(uint32_t(s.n_embd)));
        w.set(a + ".feed_forward_length", gguf_value::of_u32(uint32_t(s.n_ff)));
        w.set(a + ".attention.head_count", gguf_value::of_u32(uint32_t(s.n_head)));
        w.set(a + ".attention.head_count_kv", gguf_value::of_u32(uint32_t(s.n_head_kv)));
        w.set(a + ".attention.layer_norm_rms_epsilon", gguf_value::of_f32(1e-5f));
        w.set(a + ".rope.freq_base", gguf_value::of_f32(s.rope_base));
        set_tokenizer(w, s.n_vocab);
        if (!is_ggml_type(t)) w.set(tessera_format_key, gguf_value::of_u32(tessera_format_version));

        const int64_t E = s.n_embd, Dh = s.n_embd / s.n_head, KV = s.n_head_kv * Dh;
        add_matrix(st, "token_embd.weight", E, s.n_vocab, t);
        add_norm(st, "output_norm.weight", E);
        add_matrix(st, "output.weight", E, s.n_vocab, t);
        for (int64_t il = 0; il < s.n_layer; il++) {
            const std::string b = fmt::format("blk.{}.", il);
            add_norm(st, b + "attn_norm.weight", E);
            add_matrix(st, b + "attn_q.weight", E, E, t);
            add_matrix(st, b + "attn_k.weight", E, KV, t);
            add_matrix(st, b + "attn_v.weight", E, KV, t);
            add_matrix(st, b + "attn_output.weight", E, E, t);
            add_norm(st, b + "ffn_norm.weight", E);
            add_matrix(st, b + "ffn_gate.weight", E, s.n_ff, t);
            add_matrix(st, b + "ffn_up.weight", E, s.n_ff, t);
            add_matrix(st, b + "ffn_down.weight", s.n_ff, E, t);
        }
        w.write(argv[3]);
        size_t bytes = 0;
        for (const auto& v : st.storage) bytes += v.size();
        std::fprintf(stderr, "random_model: wrote %s (%s, %s, %.2f GiB of tensors)\n", argv[3], argv[1], argv[2],
                     double(bytes) / double(1ull << 30));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "random_model: %s\n", e.what());
        return 1;
    }
    return 0;
}
