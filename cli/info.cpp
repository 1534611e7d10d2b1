// info.cpp: `tessera info MODEL`: the GGUF header, every metadata key and the tensor table, or one JSON object.
// Parsing and validation live in ggml-like/gguf.cpp; this file formats what the reader returns, then the model as the
// family reads it (llm/arch/: hyper-parameters, blocks) when tessera can run it.
#include "commands.h"
#include "console.h"

#include "ggml-like/error.h"
#include "ggml-like/gguf.h"
#include "ggml-like/types.h"
#include "ggml-like/ops.h"
#include "llm/model.h"
#include "quant/quantize.h"

#include <fmt/core.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>

namespace tessera::cli {

namespace {

struct info_options {
    std::string model;
    bool json = false;
    bool no_tensors = false;
};

constexpr size_t max_string_chars = 60; // strings longer than this (chat templates) are cut to one line
constexpr size_t max_array_chars = 70;  // array previews stop once this many characters are shown
constexpr uint64_t max_json_array = 16; // longer arrays become {"type", "count"} in --json

// One line: newlines, tabs, quotes and control bytes escaped; cut to `max` characters with "..." when longer.
std::string escape(std::string_view s, size_t max) {
    std::string out;
    for (size_t i = 0; i < s.size(); i++) {
        if (out.size() >= max) return out + "...";
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        default:
            if (c < 0x20 || c == 0x7f)
                out += fmt::format("\\x{:02x}", c);
            else
                out += char(c);
        }
    }
    return out;
}

// Element i of a value, as text: numbers as written, floats in their shortest form, strings quoted.
std::string element_text(const gguf_value& v, uint64_t i) {
    switch (v.scalar_type()) {
    case gguf_type::string:
        return "\"" + escape(v.strs[i], max_string_chars) + "\"";
    case gguf_type::boolean:
        return v.int_at(i) ? "true" : "false";
    case gguf_type::f32:
        return fmt::format("{}", float(v.float_at(i)));
    case gguf_type::f64:
        return fmt::format("{}", v.float_at(i));
    case gguf_type::u64: {
        uint64_t u;
        std::memcpy(&u, v.raw.data() + i * 8, 8);
        return fmt::format("{}", u);
    }
    default:
        return fmt::format("{}", v.int_at(i));
    }
}

std::string type_text(const gguf_value& v) {
    return v.is_array() ? fmt::format("arr[{}]", gguf_type_name(v.elem_type)) : gguf_type_name(v.type);
}

// A scalar in full (strings cut to one line); an array as "[N strings] "a", "b", ..." with the first few elements.
std::string value_text(const gguf_value& v) {
    if (!v.is_array()) return element_text(v, 0);
    std::string out = v.elem_type == gguf_type::string ? fmt::format("[{} string{}]", v.n, v.n == 1 ? "" : "s")
                                                       : fmt::format("[{} x {}]", v.n, gguf_type_name(v.elem_type));
    size_t start = out.size();
    for (uint64_t i = 0; i < v.n; i++) {
        if (out.size() - start > max_array_chars) return out + ", ...";
        out += (i == 0 ? " " : ", ") + element_text(v, i);
    }
    return out;
}

std::string human_count(uint64_t n) {
    if (n >= 1000000000) return fmt::format("{:.2f} B", double(n) / 1e9);
    if (n >= 1000000) return fmt::format("{:.2f} M", double(n) / 1e6);
    if (n >= 1000) return fmt::format("{:.2f} K", double(n) / 1e3);
    return fmt::format("{}", n);
}

std::string shape_text(const gguf_tensor_info& t) {
    std::string s = fmt::format("{}", t.ne[0]);
    for (uint32_t d = 1; d < t.n_dims; d++) s += fmt::format(" x {}", t.ne[d]);
    return s;
}

const char* tensor_type_name(uint32_t id) {
    const type_traits* tt = find_type(id);
    return tt ? tt->name : "?";
}

struct totals {
    uint64_t n_params = 0;
    uint64_t bytes = 0;
    std::map<uint32_t, std::pair<uint64_t, uint64_t>> by_type; // type id -> (tensors, bytes)

    explicit totals(const gguf_file& f) {
        for (const auto& t : f.tensors()) {
            n_params += uint64_t(t.n_elements());
            bytes += t.size;
            by_type[t.type_id].first++;
            by_type[t.type_id].second += t.size;
        }
    }
    double bpw() const { return n_params ? double(bytes) * 8 / double(n_params) : 0.0; }
};

// The model as tessera reads it (llm/arch/): the family's hyper-parameters, one (label, text) pair per line.
std::vector<std::pair<std::string, std::string>> describe(const model& m) {
    const hparams& hp = m.hp;
    std::vector<std::pair<std::string, std::string>> d;
    auto per_layer = [&](const std::vector<int64_t>& v, int64_t scalar) {
        for (int64_t x : v)
            if (x != scalar) return fmt::format("{} (per layer: {})", scalar, fmt::join(v, " "));
        return fmt::format("{}", scalar);
    };
    d.emplace_back("family", m.arch);
    d.emplace_back("layers", fmt::format("{}", hp.n_layer));
    d.emplace_back("width", fmt::format("{} (feed-forward {})", hp.n_embd, per_layer(hp.ff_l, hp.n_ff)));
    if (hp.n_expert > 0) {
        d.emplace_back("experts", fmt::format("{}, {} used per token, feed-forward {} each; gating {}{}", hp.n_expert,
                                              per_layer(hp.expert_used_l, hp.expert_used_l[0]),
                                              per_layer(hp.ff_exp_l, hp.ff_exp_l[0]),
                                              hp.expert_gating == hparams::gating::softmax
                                                  ? "softmax, top k"
                                                  : "top k of the logits, softmax over them",
                                              hp.expert_weights_norm ? ", chosen weights renormalized" : ""));
    }
    d.emplace_back("heads", fmt::format("{} query, {} key/value, head size {}", per_layer(hp.head_l, hp.n_head),
                                        per_layer(hp.head_kv_l, hp.n_head_kv), hp.head_dim));
    d.emplace_back("vocabulary", fmt::format("{} tokens", hp.n_vocab));
    d.emplace_back("context", fmt::format("{} (trained)", hp.n_ctx_train));
    std::string rope = fmt::format("{}, base {}, scale {}, {} of {} dimensions",
                                   hp.rope_mode == int32_t(rope_mode::neox) ? "neox" : "normal", hp.rope_freq_base,
                                   hp.rope_freq_scale, hp.n_rot, hp.head_dim);
    if (hp.rope_ext_factor != 0.0f)
        rope += fmt::format("; YaRN (original context {}, magnitude {:.6g})", hp.rope_n_ctx_orig, hp.rope_attn_factor);
    else if (hp.rope_attn_factor != 1.0f)
        rope += fmt::format("; magnitude {:.6g}", hp.rope_attn_factor);
    if (m.rope_long) rope += fmt::format("; LongRoPE factors (long past {} tokens)", hp.rope_n_ctx_orig);
    if (m.rope_freqs) rope += "; frequency factors";
    d.emplace_back("rope", rope);
    if (hp.any_swa()) {
        std::vector<int64_t> full;
        for (int64_t il = 0; il < hp.n_layer; il++)
            if (!hp.is_swa(il)) full.push_back(il);
        d.emplace_back("window", fmt::format("{} tokens, rope base {}; full attention on layers {}", hp.n_swa,
                                             hp.rope_freq_base_swa, full.empty() ? "none" : fmt::format("{}", fmt::join(full, " "))));
    }
    const layer_weights& l = m.layers.front();
    std::vector<std::string> blocks;
    if (l.bq) blocks.push_back("q/k/v biases");
    if (l.q_norm) blocks.push_back("Q/K norms");
    if (l.attn_sinks) blocks.push_back("attention sinks");
    if (l.ffn_up_exps_b) blocks.push_back("router and expert biases");
    if (l.attn_post_norm) blocks.push_back("post-norms");
    if (l.attn_sub_norm) blocks.push_back("sub-norms");
    if (!m.out_scale.empty()) blocks.push_back("per-tensor scales");
    if (hp.attn_scale != 0.0f) blocks.push_back(fmt::format("query scale {:.6g}", hp.attn_scale));
    if (hp.embd_scale != 0.0f) blocks.push_back(fmt::format("embeddings x {:.6g}", hp.embd_scale));
    if (hp.final_softcap != 0.0f) blocks.push_back(fmt::format("logit soft-cap {}", hp.final_softcap));
    if (m.output_b) blocks.push_back("output bias");
    blocks.push_back(m.output == m.tok_embd ? "tied output" : "own output matrix");
    d.emplace_back("blocks", fmt::format("RMSNorm eps {}, {}", hp.rms_eps, fmt::join(blocks, ", ")));
    return d;
}

void print_text(const gguf_file& f, const info_options& o) {
    fmt::print("file       {}\n", f.path());
    fmt::print("version    {}\n", f.version());
    fmt::print("size       {} bytes ({})\n", f.file_size(), human_bytes(f.file_size()));
    fmt::print("alignment  {}\n", f.alignment());
    fmt::print("n_kv       {}\n", f.kvs().size());
    fmt::print("n_tensors  {}\n", f.tensors().size());
    fmt::print("data       at byte {}\n", f.data_offset());

    size_t key_w = 3, type_w = 4;
    for (const auto& kv : f.kvs()) {
        key_w = std::max(key_w, kv.key.size());
        type_w = std::max(type_w, type_text(kv.value).size());
    }
    fmt::print("\n{:<{}}  {:<{}}  {}\n", "key", key_w, "type", type_w, "value");
    for (const auto& kv : f.kvs()) {
        std::string v = value_text(kv.value);
        if (kv.key == "general.file_type" && !kv.value.is_array())
            if (const char* n = llama_ftype_name(uint32_t(kv.value.int_at(0)))) v += fmt::format(" ({})", n);
        fmt::print("{:<{}}  {:<{}}  {}\n", kv.key, key_w, type_text(kv.value), type_w, v);
    }

    const totals tot(f);
    if (!o.no_tensors && !f.tensors().empty()) {
        size_t name_w = 4, shape_w = 5;
        for (const auto& t : f.tensors()) {
            name_w = std::max(name_w, t.name.size());
            shape_w = std::max(shape_w, shape_text(t).size());
        }
        fmt::print("\n{:>5}  {:<{}}  {:<7}  {:<{}}  {:>10}\n", "#", "name", name_w, "type", "shape", shape_w, "bytes");
        size_t i = 0;
        for (const auto& t : f.tensors())
            fmt::print("{:>5}  {:<{}}  {:<7}  {:<{}}  {:>10}\n", i++, t.name, name_w, tensor_type_name(t.type_id),
                       shape_text(t), shape_w, human_bytes(t.size));
    }
    if (f.tensors().empty()) return;
    fmt::print("\nparameters {} ({})\n", tot.n_params, human_count(tot.n_params));
    fmt::print("bytes      {} ({})\n", tot.bytes, human_bytes(tot.bytes));
    fmt::print("bpw        {:.3f}\n", tot.bpw());
    for (const auto& [id, cb] : tot.by_type)
        fmt::print("  {:<8} {:>5} tensors  {:>10}\n", tensor_type_name(id), cb.first, human_bytes(cb.second));
}

using ojson = nlohmann::ordered_json;

ojson element_json(const gguf_value& v, uint64_t i) {
    switch (v.scalar_type()) {
    case gguf_type::string:
        return v.strs[i];
    case gguf_type::boolean:
        return v.int_at(i) != 0;
    // an f32 goes through its shortest decimal form so that 1e-5f prints as 1e-05, not 9.99999974737875e-06
    case gguf_type::f32:
        return std::stod(fmt::format("{}", float(v.float_at(i))));
    case gguf_type::f64:
        return v.float_at(i);
    case gguf_type::u64: {
        uint64_t u;
        std::memcpy(&u, v.raw.data() + i * 8, 8);
        return u;
    }
    default:
        return v.int_at(i);
    }
}

ojson value_json(const gguf_value& v) {
    if (!v.is_array()) return element_json(v, 0);
    if (v.n > max_json_array) return ojson{{"type", gguf_type_name(v.elem_type)}, {"count", v.n}};
    ojson a = ojson::array();
    for (uint64_t i = 0; i < v.n; i++) a.push_back(element_json(v, i));
    return a;
}

void print_json(const gguf_file& f, const info_options& o,
                const std::vector<std::pair<std::string, std::string>>& model_lines, const std::string& model_error) {
    ojson j;
    j["path"] = f.path();
    j["version"] = f.version();
    j["file_size"] = f.file_size();
    j["alignment"] = f.alignment();
    j["data_offset"] = f.data_offset();
    j["n_kv"] = f.kvs().size();
    j["n_tensors"] = f.tensors().size();
    ojson md = ojson::object();
    for (const auto& kv : f.kvs()) md[kv.key] = value_json(kv.value);
    j["metadata"] = std::move(md);
    if (const auto ft = f.get_int("general.file_type"))
        if (const char* n = llama_ftype_name(uint32_t(*ft))) j["file_type_name"] = n;
    if (!o.no_tensors) {
        ojson ts = ojson::array();
        for (const auto& t : f.tensors())
            ts.push_back({{"name", t.name},
                          {"type", tensor_type_name(t.type_id)},
                          {"shape", std::vector<int64_t>(t.ne, t.ne + t.n_dims)},
                          {"offset", t.offset},
                          {"bytes", t.size}});
        j["tensors"] = std::move(ts);
    }
    const totals tot(f);
    ojson by_type = ojson::object();
    for (const auto& [id, cb] : tot.by_type)
        by_type[tensor_type_name(id)] = {{"tensors", cb.first}, {"bytes", cb.second}};
    j["totals"] = {{"n_params", tot.n_params}, {"bytes", tot.bytes}, {"bpw", tot.bpw()}, {"types", by_type}};
    if (!model_lines.empty()) {
        ojson mj = ojson::object();
        for (const auto& [k, v] : model_lines) mj[k] = v;
        j["model"] = std::move(mj);
    } else if (!model_error.empty()) {
        j["model_error"] = model_error;
    }
    // metadata strings are not always valid UTF-8 (byte tokens): replace what cannot be encoded instead of failing
    fmt::print("{}\n", j.dump(2, ' ', false, ojson::error_handler_t::replace));
}

void run_info(const info_options& o) {
    if (o.model.empty()) throw error("info: no model given, expected MODEL or -m/--model PATH");
    gguf_file f = gguf_file::open(o.model);
    // the model as tessera would run it, when it can (a vocabulary-only file or an unsupported family cannot be)
    std::vector<std::pair<std::string, std::string>> model_lines;
    std::string model_error;
    if (f.find("general.architecture")) {
        try {
            model_lines = describe(*model::load(o.model));
        } catch (const error& e) {
            model_error = e.what();
        }
    }
    if (o.json) {
        print_json(f, o, model_lines, model_error);
        return;
    }
    print_text(f, o);
    if (!model_lines.empty()) {
        fmt::print("\nmodel\n");
        for (const auto& [k, v] : model_lines) fmt::print("  {:<11} {}\n", k, v);
    } else if (!model_error.empty()) {
        fmt::print("\nmodel      cannot run: {}\n", model_error);
    }
}

} // namespace

void add_info(CLI::App& app) {
    auto o = std::make_shared<info_options>();
    CLI::App* sub = app.add_subcommand("info", "Print a GGUF file's header, metadata and tensors");
    sub->add_option("MODEL", o->model, "GGUF file to inspect");
    sub->add_option("-m,--model", o->model, "GGUF file to inspect (same as MODEL)");
    sub->add_flag("--json", o->json, "Print one JSON object instead of text (arrays longer than 16 are summarized)");
    sub->add_flag("--no-tensors", o->no_tensors, "Skip the tensor table");
    sub->footer("Example:\n  tessera info models/SmolLM2-135M-Instruct.Q4_1.gguf --no-tensors");
    sub->callback([o]() { run_info(*o); });
}

} // namespace tessera::cli
