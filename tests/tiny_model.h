// tiny_model.h: writes small llama (or qwen3moe) GGUF files with seeded random weights for tests (load errors, graph
// checks) and
// lets a test break them on purpose (drop or reshape a tensor, change a key). The tokenizer is the default model's
// when present, else the gpt-2 test vocabulary.
#pragma once

#include "helpers.h"

#include "ggml-like/gguf.h"
#include "llm/model.h"
#include "quant/format.h"
#include "quant/quantize.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tessera::test {

// A prompt of n_prompt tokens (every position's logits), then 6 single-token decode steps (the graph repeats from the
// second): all the logits, one row after another. The token ids are fixed, spread over the vocabulary.
inline std::vector<float> prompt_then_steps(session& s, int n_prompt) {
    const int64_t n_vocab = s.mdl().hp.n_vocab;
    std::vector<token> prompt;
    for (int i = 0; i < n_prompt; i++) prompt.push_back(token((i * 7919 + 13) % n_vocab));
    auto l = s.decode(prompt, true);
    std::vector<float> out(l.begin(), l.end());
    for (int i = 0; i < 6; i++) {
        const token t = token((i * 31 + 5) % n_vocab);
        auto d = s.decode(std::span<const token>(&t, 1));
        out.insert(out.end(), d.begin(), d.end());
    }
    return out;
}

struct tiny_model_spec {
    int64_t n_embd = 64, n_layer = 2, n_head = 4, n_head_kv = 2, n_ff = 128, n_ctx = 256;
    int64_t n_expert = 0, n_expert_used = 0; // > 0: a qwen3moe-style file (Q/K norms, the router, 3-D experts)
    type weight_type = type::q8_0;
    bool tied_output = true; // false: an output.weight of its own (else the output reads token_embd)
    std::string arch = "llama";
    std::vector<std::string> drop;                            // tensors to leave out
    std::map<std::string, std::vector<int64_t>> reshape;      // tensor -> wrong ne
    std::map<std::string, uint32_t> retype;                   // tensor -> another type id
    std::function<void(gguf_writer&)> edit;                   // last word on metadata
};

// Writes the model to `path`; returns the vocabulary size used.
inline int64_t write_tiny_model(const std::string& path, const tiny_model_spec& s) {
    const std::string vocab_src = std::filesystem::exists(model_path()) ? model_path()
                                                                         : data_dir() + "/vocab/ggml-vocab-gpt-2.gguf";
    gguf_file voc = gguf_file::open(vocab_src);
    gguf_writer w;
    w.set("general.architecture", gguf_value::of_string(s.arch));
    w.set("general.name", gguf_value::of_string("tiny test model"));
    const std::string a = s.arch;
    w.set(a + ".block_count", gguf_value::of_u32(uint32_t(s.n_layer)));
    w.set(a + ".context_length", gguf_value::of_u32(uint32_t(s.n_ctx)));
    w.set(a + ".embedding_length", gguf_value::of_u32(uint32_t(s.n_embd)));
    w.set(a + ".feed_forward_length", gguf_value::of_u32(uint32_t(s.n_ff)));
    w.set(a + ".attention.head_count", gguf_value::of_u32(uint32_t(s.n_head)));
    w.set(a + ".attention.head_count_kv", gguf_value::of_u32(uint32_t(s.n_head_kv)));
    w.set(a + ".attention.layer_norm_rms_epsilon", gguf_value::of_f32(1e-5f));
    w.set(a + ".rope.freq_base", gguf_value::of_f32(10000.0f));
    if (s.n_expert > 0) {
        w.set(a + ".expert_count", gguf_value::of_u32(uint32_t(s.n_expert)));
        w.set(a + ".expert_used_count", gguf_value::of_u32(uint32_t(s.n_expert_used)));
        w.set(a + ".expert_feed_forward_length", gguf_value::of_u32(uint32_t(s.n_ff)));
    }
    for (const auto& kv : voc.kvs())
        if (kv.key.rfind("tokenizer.", 0) == 0) w.set(kv.key, kv.value);
    const int64_t n_vocab = int64_t(voc.get_strings("tokenizer.ggml.tokens")->size());

    static std::vector<std::vector<uint8_t>> storage; // must outlive write()
    storage.clear();
    uint32_t seed = 1;
    auto add = [&](const std::string& name, std::vector<int64_t> ne, type t) {
        for (const auto& d : s.drop)
            if (d == name) return;
        if (auto it = s.reshape.find(name); it != s.reshape.end()) ne = it->second;
        int64_t n = 1;
        for (int64_t d : ne) n *= d;
        auto x = random_normal(size_t(n), seed++, 0.05f);
        if (ne.size() == 1) std::fill(x.begin(), x.end(), 1.0f); // norms
        type tt = t;
        if (auto it = s.retype.find(name); it != s.retype.end()) tt = type(it->second);
        const type_traits* info = find_type(uint32_t(tt));
        // whole tensor, tail included (i2_s: its scale after the rows)
        const size_t bytes = info ? size_t(n / info->block_size) * info->type_size + info->tail_bytes : size_t(n) * 4;
        storage.emplace_back(bytes);
        if (info && ne[0] > 0 && ne[0] % info->block_size == 0)
            quantize_tensor_ref(tt, x.data(), storage.back().data(), ne[0], n / ne[0]); // false (zeros) if no format
        w.add_tensor(name, uint32_t(tt), ne, storage.back().data());
    };
    const int64_t E = s.n_embd, D = s.n_embd / s.n_head;
    add("token_embd.weight", {E, n_vocab}, type::q8_0);
    add("output_norm.weight", {E}, type::f32);
    if (!s.tied_output) add("output.weight", {E, n_vocab}, s.weight_type);
    for (int64_t il = 0; il < s.n_layer; il++) {
        const std::string b = "blk." + std::to_string(il) + ".";
        add(b + "attn_norm.weight", {E}, type::f32);
        add(b + "attn_q.weight", {E, s.n_head * D}, s.weight_type);
        add(b + "attn_k.weight", {E, s.n_head_kv * D}, s.weight_type);
        add(b + "attn_v.weight", {E, s.n_head_kv * D}, s.weight_type);
        add(b + "attn_output.weight", {s.n_head * D, E}, s.weight_type);
        add(b + "ffn_norm.weight", {E}, type::f32);
        if (s.n_expert > 0) {
            const int64_t X = s.n_expert;
            add(b + "attn_q_norm.weight", {D}, type::f32);
            add(b + "attn_k_norm.weight", {D}, type::f32);
            add(b + "ffn_gate_inp.weight", {E, X}, type::f32);
            add(b + "ffn_gate_exps.weight", {E, s.n_ff, X}, s.weight_type);
            add(b + "ffn_up_exps.weight", {E, s.n_ff, X}, s.weight_type);
            add(b + "ffn_down_exps.weight", {s.n_ff, E, X}, s.weight_type);
            continue;
        }
        add(b + "ffn_gate.weight", {E, s.n_ff}, s.weight_type);
        add(b + "ffn_up.weight", {E, s.n_ff}, s.weight_type);
        add(b + "ffn_down.weight", {s.n_ff, E}, s.weight_type);
    }
    // tessera's own types (awq4, i2_s) are only accepted in a file that says it needs tessera
    if (!is_ggml_type(s.weight_type)) w.set(tessera_format_key, gguf_value::of_u32(tessera_format_version));
    if (s.edit) s.edit(w);
    w.write(path);
    return n_vocab;
}

} // namespace tessera::test
