// quantize.cpp: whole-model requantization (quantize.h): the per-tensor type plan (overrides, fallbacks), the row
// conversion over threads, and the output file's metadata. Formats are reached only through find_row_ops and the
// type table, so a format added to TS_BLOCK_FORMATS is a valid target without changes here.
#include "quant/quantize.h"

#include "ggml-like/error.h"
#include "quant/format.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <filesystem>
#include <mutex>
#include <thread>

namespace tessera {

bool is_ggml_type(type t) {
    const uint32_t id = uint32_t(t);
    // ggml.h: 4, 5 (q4_2, q4_3), 31..33 and 36..38 are retired; ids from 42 on differ between ggml trees
    return (id <= 30 && id != 4 && id != 5) || id == 34 || id == 35 || (id >= 39 && id <= 41);
}

std::optional<uint32_t> llama_ftype_of(type t) {
    // llama_ftype (llama.h; FORMATS.md §1.1): LLAMA_FTYPE_ALL_F32, MOSTLY_F16, ...
    switch (t) {
    case type::f32:
        return 0;
    case type::f16:
        return 1;
    case type::q4_0:
        return 2;
    case type::q4_1:
        return 3;
    case type::q8_0:
        return 7;
    case type::q5_0:
        return 8;
    case type::q5_1:
        return 9;
    case type::q2_k:
        return 10; // MOSTLY_Q2_K
    case type::q3_k:
        return 11; // MOSTLY_Q3_K_S: llama-quantize's all-q3_K mix but for the output
    case type::q4_k:
        return 14; // MOSTLY_Q4_K_S: llama-quantize's mix whose tensors are all q4_K but a few (a pure file here)
    case type::q5_k:
        return 16; // MOSTLY_Q5_K_S
    case type::q6_k:
        return 18;
    case type::iq3_xxs:
        return 23; // MOSTLY_IQ3_XXS
    case type::iq4_nl:
        return 25;
    case type::iq3_s:
        return 26; // MOSTLY_IQ3_S
    case type::iq4_xs:
        return 30;
    case type::bf16:
        return 32;
    case type::tq1_0:
        return 36;
    case type::tq2_0:
        return 37;
    case type::mxfp4:
        return 38; // llama.cpp's MOSTLY_MXFP4_MOE, the nearest label: llama-quantize writes MXFP4 for experts only
    case type::nvfp4:
        return 39;
    default:
        return std::nullopt;
    }
}

const char* llama_ftype_name(uint32_t ftype) {
    // llama.h's llama_ftype, by value (4-6 and 33-35 are retired)
    static constexpr const char* names[] = {
        "F32",    "F16",    "Q4_0",   "Q4_1",    nullptr,   nullptr, nullptr, "Q8_0",   "Q5_0",  "Q5_1",  "Q2_K",
        "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S",  "Q4_K_M",  "Q5_K_S", "Q5_K_M", "Q6_K", "IQ2_XXS", "IQ2_XS", "Q2_K_S",
        "IQ3_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL",  "IQ3_S",   "IQ3_M", "IQ2_S",  "IQ2_M",  "IQ4_XS", "IQ1_M", "BF16",
        nullptr,  nullptr,  nullptr,  "TQ1_0",   "TQ2_0",   "MXFP4_MOE", "NVFP4", "Q1_0", "Q2_0"};
    return ftype < std::size(names) ? names[ftype] : nullptr;
}

namespace {

// Formats that only exist as the activation side of a dot product: never weights.
bool is_activation_only(type t) {
    for (const char* n : {"q8_1", "q8_k", "i8_s"}) {
        type a;
        if (type_from_name(n, a) && a == t) return true;
    }
    return false;
}

// Formats whose tensors carry one scale for the whole tensor (i2_s): quantized as a whole, not row by row.
bool is_tensor_scaled(type t) {
    bool r = false;
    visit_format(t, [&]<class F>() { r = tensor_scaled<F>; });
    return r;
}

// Formats quantized in two levels, with a per-tensor f32 `<name>.scale` that multiplies the matmul output (NVFP4, as
// llama.cpp reads it: FORMATS.md §2). token_embd.weight is read by get_rows, which applies no such scale.
bool has_output_scale(type t) {
    return t == type::nvfp4;
}

bool is_float_type(type t) {
    return t == type::f32 || t == type::f16 || t == type::bf16;
}

double bits_per_weight(type t) {
    return 8.0 * double(type_size(t)) / double(block_size(t));
}

bool ends_with(const std::string& s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The type a tensor with rows of ne0 elements gets when `want` does not fit (ne0 not a multiple of its block), the
// way llama-quantize falls back: its table for ggml's formats (q2_K, q3_K, tq1_0, tq2_0 -> q4_0, q4_K -> q5_0, q5_K
// -> q5_1, q6_K -> q8_0, the 256-element IQ formats -> iq4_nl); for tessera's, the same format with smaller groups
// when there is one (a type named "<want>_g<N>", e.g. awq4 -> awq4_g64), then a 32-element format of similar size
// (q4_0 up to ~5.5 bits per weight, q8_0 above); f16 for a row that fits no block at all.
type fallback_type(type want, int64_t ne0) {
    if (ne0 % block_size(want) == 0) return want;
    const auto is_any = [want](std::initializer_list<type> ts) {
        return std::find(ts.begin(), ts.end(), want) != ts.end();
    };
    const type llama_fallback = want == type::q4_k                                           ? type::q5_0
                                : want == type::q5_k                                         ? type::q5_1
                                : want == type::q6_k                                         ? type::q8_0
                                : is_any({type::tq1_0, type::tq2_0, type::q2_k, type::q3_k}) ? type::q4_0
                                : is_any({type::iq1_s, type::iq1_m, type::iq2_xxs, type::iq2_xs, type::iq2_s,
                                          type::iq3_xxs, type::iq3_s, type::iq4_xs})
                                    ? type::iq4_nl
                                    : want;
    if (llama_fallback != want) return ne0 % block_size(llama_fallback) == 0 ? llama_fallback : type::f16;
    const std::string prefix = std::string(type_name(want)) + "_g";
    for (type t : quantize_target_types())
        if (std::string(type_name(t)).rfind(prefix, 0) == 0 && ne0 % block_size(t) == 0) return t;
    if (block_size(want) > 32) {
        const type t = bits_per_weight(want) <= 5.5 ? type::q4_0 : type::q8_0;
        if (ne0 % block_size(t) == 0) return t;
    }
    return type::f16;
}

void check_target(type t, const char* what) {
    if (!find_row_ops(t) || is_activation_only(t))
        throw error(fmt::format("{} {} cannot be produced by tessera quantize", what, type_name(t)));
}

} // namespace

std::optional<quant_mix> quant_mix_from_name(std::string_view name) {
    std::string n(name);
    for (char& c : n) c = char(std::toupper((unsigned char)c));
    for (quant_mix m : all_quant_mixes)
        if (n == quant_mix_name(m)) return m;
    return std::nullopt;
}

const char* quant_mix_name(quant_mix m) {
    switch (m) {
    case quant_mix::q2_k: return "Q2_K";
    case quant_mix::q3_k_s: return "Q3_K_S";
    case quant_mix::q3_k_m: return "Q3_K_M";
    case quant_mix::q3_k_l: return "Q3_K_L";
    case quant_mix::q4_k_s: return "Q4_K_S";
    case quant_mix::q4_k_m: return "Q4_K_M";
    case quant_mix::q5_k_s: return "Q5_K_S";
    case quant_mix::q5_k_m: return "Q5_K_M";
    case quant_mix::iq3_xs: return "IQ3_XS";
    case quant_mix::iq3_xxs: return "IQ3_XXS";
    case quant_mix::iq4_nl: return "IQ4_NL";
    case quant_mix::iq3_s: return "IQ3_S";
    case quant_mix::iq3_m: return "IQ3_M";
    case quant_mix::iq4_xs: return "IQ4_XS";
    case quant_mix::none: break;
    }
    return "none";
}

type quant_mix_type(quant_mix m) {
    switch (m) {
    case quant_mix::q2_k: return type::q2_k;
    case quant_mix::q3_k_s:
    case quant_mix::q3_k_m:
    case quant_mix::q3_k_l: return type::q3_k;
    case quant_mix::q5_k_s:
    case quant_mix::q5_k_m: return type::q5_k;
    case quant_mix::iq3_xxs: return type::iq3_xxs;
    case quant_mix::iq3_xs: // llama.cpp's IQ3_XS is mostly iq3_s
    case quant_mix::iq3_s:
    case quant_mix::iq3_m: return type::iq3_s;
    case quant_mix::iq4_nl: return type::iq4_nl;
    case quant_mix::iq4_xs: return type::iq4_xs;
    default: return type::q4_k;
    }
}

namespace {

// as llama-quantize: only matrices named *.weight, and never a mixture of experts' router (ffn_gate_inp), whose
// logits choose the experts
bool is_quantizable_matrix(const gguf_tensor_info& t) {
    return t.n_dims >= 2 && t.name.ends_with(".weight") && t.name.find("ffn_gate_inp.weight") == std::string::npos;
}

// llama_ftype of a mix (llama.h: MOSTLY_Q2_K 10, Q3_K_S 11, _M 12, _L 13, Q4_K_S 14, _M 15, Q5_K_S 16, _M 17,
// IQ3_XS 22, IQ3_XXS 23, IQ4_NL 25, IQ3_S 26, IQ3_M 27, IQ4_XS 30)
uint32_t mix_ftype(quant_mix m) {
    switch (m) {
    case quant_mix::q2_k: return 10;
    case quant_mix::q3_k_s: return 11;
    case quant_mix::q3_k_m: return 12;
    case quant_mix::q3_k_l: return 13;
    case quant_mix::q4_k_s: return 14;
    case quant_mix::q4_k_m: return 15;
    case quant_mix::q5_k_s: return 16;
    case quant_mix::iq3_xs: return 22;
    case quant_mix::iq3_xxs: return 23;
    case quant_mix::iq4_nl: return 25;
    case quant_mix::iq3_s: return 26;
    case quant_mix::iq3_m: return 27;
    case quant_mix::iq4_xs: return 30;
    default: return 17;
    }
}

// The type llama-quantize's rules give one matrix of a mix (before the fallback for rows a format does not fit),
// counting attn_v-like tensors, ffn_down, ffn_gate and ffn_up as it does (i_wv, i_down, i_gate, i_up: how many came
// before in its order; pick is called in that order, plan_quantization's). The tensor's kind is found as llama.cpp's
// tensor_get_category does (the first of attn_qkv, attn_kv_b, attn_v, attn_k, attn_q, attn_output, ffn_up, ffn_gate,
// ffn_down in the name). It may name a type tessera cannot produce (iq2_s): the caller substitutes.
struct mix_rules {
    quant_mix mix;
    type base;
    int64_t n_layer = 0, n_expert = 0, n_wv = 0, n_gqa = 1;
    bool tied = true, is_70b = false;
    int64_t i_wv = 0, i_down = 0, i_gate = 0, i_up = 0;

    static bool more_bits(int64_t i, int64_t n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }
    static bool has(const std::string& name, const char* part) { return name.find(part) != std::string::npos; }
    static bool attn_v_like(const std::string& n) {
        return has(n, "attn_qkv.weight") || has(n, "attn_kv_b.weight") || has(n, "attn_v.weight");
    }

    // the layer of a ffn tensor: its count so far, or with experts (not always in layer order) from its name
    int64_t ffn_layer(const std::string& name, int64_t count) const {
        if (n_expert <= 1) return count;
        int il = -1;
        if (std::sscanf(name.c_str(), "blk.%d.", &il) != 1 || il < 0 || il >= n_layer)
            throw error(fmt::format("tensor {}: no layer in [0, {}) in its name", name, n_layer));
        return il;
    }

    type pick(const std::string& name, int64_t ne0) {
        const bool m_mix = mix == quant_mix::q4_k_m || mix == quant_mix::q5_k_m;
        const bool iq4 = mix == quant_mix::iq4_nl || mix == quant_mix::iq4_xs;
        const bool xxs = mix == quant_mix::iq3_xxs, xs = mix == quant_mix::iq3_xs, iq3_m = mix == quant_mix::iq3_m;
        if (name == "output.weight" || (tied && name == "token_embd.weight"))
            return ne0 % block_size(base) != 0 ? type::q8_0 : xxs ? type::q5_k : type::q6_k;
        if (name == "token_embd.weight") return xxs ? type::iq3_s : base;
        type t = base;
        if (attn_v_like(name)) {
            if (mix == quant_mix::q2_k) t = n_gqa >= 4 ? type::q4_k : type::q3_k;
            else if (xxs) t = n_gqa >= 4 ? type::q4_k : type::iq3_s;
            else if ((xs || mix == quant_mix::iq3_s) && n_gqa >= 4) t = type::q4_k;
            else if (iq3_m) t = type::q4_k;
            else if (mix == quant_mix::q3_k_m) t = i_wv < 2 ? type::q5_k : type::q4_k;
            else if (mix == quant_mix::q3_k_l) t = type::q5_k;
            else if (iq4 && n_gqa >= 4) t = type::q5_k;
            else if (m_mix && more_bits(i_wv, n_wv)) t = type::q6_k;
            else if (mix == quant_mix::q4_k_s && i_wv < 4) t = type::q5_k;
            if (is_70b && (t == type::q3_k || t == type::q4_k)) t = type::q5_k;
            if (n_expert == 8) t = type::q8_0;
            i_wv++;
        } else if (has(name, "attn_k.weight")) {
            if (n_expert == 8) t = type::q8_0;
            else if (xs) t = type::iq3_xxs;
            else if (xxs) t = type::iq2_s;
        } else if (has(name, "attn_q.weight")) {
            if (xs) t = type::iq3_xxs;
            else if (xxs) t = type::iq2_s;
        } else if (has(name, "attn_output.weight")) {
            if (n_expert == 8) {
                if (mix != quant_mix::q3_k_l && mix != quant_mix::q5_k_s && mix != quant_mix::q5_k_m) t = type::q5_k;
            } else if (mix == quant_mix::q2_k) {
                t = type::q3_k;
            } else if (xxs) {
                t = type::iq3_s;
            } else if (mix == quant_mix::q3_k_m || iq3_m) {
                t = type::q4_k;
            } else if (mix == quant_mix::q3_k_l) {
                t = type::q5_k;
            }
        } else if (has(name, "ffn_up") || has(name, "ffn_gate")) {
            // IQ3_XS: iq3_xxs between the first and the last eighth
            int64_t& count = has(name, "ffn_up") ? i_up : i_gate;
            const int64_t i_layer = ffn_layer(name, count);
            if (xs && i_layer >= n_layer / 8 && i_layer < 7 * n_layer / 8) t = type::iq3_xxs;
            count++;
        } else if (has(name, "ffn_down")) {
            const int64_t i_layer = ffn_layer(name, i_down);
            if (mix == quant_mix::q2_k) t = type::q3_k;
            else if (xxs) t = i_layer < n_layer / 8 ? type::q4_k : type::q3_k;
            else if (mix == quant_mix::q3_k_m) t = i_layer < n_layer / 16 ? type::q5_k : type::q4_k;
            else if (iq3_m && (i_layer < n_layer / 8 || (n_expert == 8 && more_bits(i_layer, n_layer))))
                t = type::q4_k;
            else if (mix == quant_mix::q3_k_l) t = type::q5_k;
            else if (m_mix && more_bits(i_layer, n_layer)) t = type::q6_k;
            else if (iq4 && i_layer < n_layer / 8) t = type::q5_k;
            else if (mix == quant_mix::q4_k_s && i_layer < n_layer / 8) t = type::q5_k;
            i_down++;
        }
        return t;
    }
};

} // namespace

std::vector<type> quantize_target_types() {
    std::vector<type> out;
    for (uint32_t id = 0; id < 4096; id++) {
        const type_traits* tt = find_type(id);
        if (!tt || !find_row_ops(type(id)) || is_activation_only(type(id))) continue;
        if (id == uint32_t(type::i32)) continue; // an index type, not a weight format
        out.push_back(type(id));
    }
    return out;
}

std::vector<tensor_plan> plan_quantization(const gguf_file& in, const quantize_params& p) {
    check_target(p.target, "type");
    if (p.output_type) check_target(*p.output_type, "--output-type");
    if (p.embd_type) check_target(*p.embd_type, "--embd-type");
    const auto& infos = in.tensors();
    const bool tied = in.find_tensor("output.weight") == nullptr;
    if (tied && p.output_type && p.embd_type && *p.output_type != *p.embd_type && p.note)
        p.note(fmt::format("token_embd.weight is also the output (tied embeddings): it gets --embd-type {}, not "
                           "--output-type {}",
                           type_name(*p.embd_type), type_name(*p.output_type)));

    // a weight's per-tensor scale (NVFP4 `<name>.scale`, F32 [1]) is multiplied into the weight when it is converted
    auto scale_owner = [&](const std::string& name) -> const gguf_tensor_info* {
        for (std::string_view suffix : {".input_scale", ".scale"})
            if (ends_with(name, suffix)) {
                const gguf_tensor_info* w = in.find_tensor(name.substr(0, name.size() - suffix.size()) + ".weight");
                if (w && w->n_dims >= 2) return w;
            }
        return nullptr;
    };
    std::map<const gguf_tensor_info*, float> weight_scale;
    for (const auto& t : infos)
        if (ends_with(t.name, ".scale") && !ends_with(t.name, ".input_scale"))
            if (const gguf_tensor_info* w = scale_owner(t.name)) {
                if (t.type_id != uint32_t(type::f32) || t.n_elements() != 1)
                    throw error(fmt::format("{}: tensor {}: expected a single f32 scale, got {} elements of {}",
                                            in.path(), t.name, t.n_elements(),
                                            find_type(t.type_id) ? find_type(t.type_id)->name : "an unknown type"));
                float v;
                std::memcpy(&v, t.data, 4);
                weight_scale[w] = v;
            }

    std::optional<mix_rules> mix;
    if (p.mix != quant_mix::none) {
        if (p.target != quant_mix_type(p.mix))
            throw error(fmt::format("{} is a mix of {}, not of {}", quant_mix_name(p.mix),
                                    type_name(quant_mix_type(p.mix)), type_name(p.target)));
        mix = mix_rules{p.mix, p.target};
        const std::string arch = in.get_string("general.architecture").value_or("");
        auto u = [&](const std::string& key) { return in.get_int(arch + "." + key).value_or(0); };
        mix->n_layer = u("block_count");
        mix->n_expert = u("expert_count");
        // llama.cpp's n_gqa(): query heads per KV head (layer 0's; 0 KV heads counts as 1)
        const int64_t n_head = u("attention.head_count"), n_head_kv = u("attention.head_count_kv");
        mix->n_gqa = n_head_kv > 0 ? n_head / n_head_kv : 1;
        mix->tied = tied;
        // llama.cpp's LLM_TYPE_70B (its 70B attn_v gets q5_K for q4_K): 80-layer llama with grouped KV heads, qwen2
        mix->is_70b = mix->n_layer == 80 &&
                      ((arch == "llama" && u("attention.head_count") != u("attention.head_count_kv")) || arch == "qwen2");
        for (const auto& t : infos) mix->n_wv += mix_rules::attn_v_like(t.name);
    }
    // a mix's types, counted in llama-quantize's order (its weights map: by layer, blk.N's number, then by name)
    std::map<const gguf_tensor_info*, type> mix_type;
    if (mix) {
        auto layer = [](const std::string& n) {
            int l = -1;
            return std::sscanf(n.c_str(), "blk.%d.", &l) == 1 ? l : -1;
        };
        std::vector<const gguf_tensor_info*> order;
        for (const auto& t : infos) order.push_back(&t);
        std::stable_sort(order.begin(), order.end(), [&](const gguf_tensor_info* a, const gguf_tensor_info* b) {
            const int la = layer(a->name), lb = layer(b->name);
            return la != lb ? la < lb : a->name < b->name;
        });
        for (const gguf_tensor_info* t : order)
            if (is_quantizable_matrix(*t)) mix_type[t] = mix->pick(t->name, t->ne[0]);
    }

    std::vector<tensor_plan> plan(infos.size());
    std::map<const gguf_tensor_info*, const tensor_plan*> by_info;
    for (size_t i = 0; i < infos.size(); i++) {
        const gguf_tensor_info& t = infos[i];
        tensor_plan& tp = plan[i];
        tp.in = &t;
        by_info[&t] = &tp;
        if (!find_type(t.type_id))
            throw error(fmt::format("{}: tensor {} has unknown type id {}", in.path(), t.name, t.type_id));
        const type from = t.t();
        const auto sc = p.scaling.find(t.name);
        const bool scaled = sc != p.scaling.end();
        // norms, other vectors and 2-D biases (gpt-oss's per-expert ones) stay f32
        const bool matrix = is_quantizable_matrix(t);
        if (!matrix) {
            // norms and other vectors: kept in f32 (integer vectors as they are)
            tp.to = is_float_type(from) ? type::f32 : from;
            tp.copy = tp.to == from && !scaled;
        } else {
            type want = p.target;
            if (t.name == "token_embd.weight" && p.embd_type)
                want = *p.embd_type;
            else if ((t.name == "output.weight" || (tied && t.name == "token_embd.weight")) && p.output_type)
                want = *p.output_type;
            else if (mix) {
                want = mix_type.at(&t);
                if (!find_row_ops(want) && t.ne[0] % block_size(want) == 0) {
                    // llama-quantize's choice, which tessera cannot make yet (IQ3_XXS's iq2_s): the mix's format
                    tp.fallback = fmt::format("{} cannot be produced by tessera quantize yet", type_name(want));
                    want = mix->base;
                }
            }
            tp.to = fallback_type(want, t.ne[0]);
            if (tp.to != want)
                tp.fallback = fmt::format("{} columns are not a multiple of {}'s block of {}", t.ne[0], type_name(want),
                                          block_size(want));
            if (auto it = weight_scale.find(&t); it != weight_scale.end()) tp.in_scale = it->second;
            tp.copy = tp.to == from && !scaled && tp.in_scale == 1.0f;
            tp.output_scale =
                !tp.copy && has_output_scale(tp.to) && ends_with(t.name, ".weight") && t.name != "token_embd.weight";
        }
        if (scaled && t.n_dims >= 2 && !sc->second.row.empty() && int64_t(sc->second.row.size()) != t.ne[1])
            throw error(fmt::format("tensor {}: {} row scales for {} rows", t.name, sc->second.row.size(), t.ne[1]));
        if (scaled && !sc->second.col.empty() && int64_t(sc->second.col.size()) != t.ne[0])
            throw error(
                fmt::format("tensor {}: {} column scales for {} columns", t.name, sc->second.col.size(), t.ne[0]));
        if (scaled && t.n_dims < 2 && !is_float_type(from))
            throw error(fmt::format("tensor {}: cannot scale a {} vector", t.name, type_name(from)));
        if (!tp.copy && !find_row_ops(from))
            throw error(fmt::format("{}: tensor {} has type {}, which tessera cannot convert yet", in.path(), t.name,
                                    type_name(from)));
    }
    // a weight's scale tensors go away with the scale once the weight is converted (its values now hold it)
    for (tensor_plan& tp : plan)
        if (const gguf_tensor_info* w = scale_owner(tp.in->name)) tp.drop = !by_info[w]->copy;
    // llama-quantize wants an importance matrix for an iq3_xxs (or iq2_s) tensor other than the embedding and the
    // output: it refuses such a file without one (IQ3_XXS and IQ3_XS unless every such tensor fell back)
    const auto needs_imatrix = [](const tensor_plan& tp) {
        return !tp.copy && tp.to == type::iq3_xxs && tp.in->name != "token_embd.weight" &&
               tp.in->name != "output.weight";
    };
    if (p.note && std::any_of(plan.begin(), plan.end(), needs_imatrix))
        p.note("llama-quantize makes iq3_xxs tensors only with an importance matrix; these are made without one "
               "(ggml's search with weights x^2)");
    return plan;
}

void convert_rows(type from, const void* src, type to, void* dst, int64_t n_cols, int64_t n_rows, int n_threads,
                  const tensor_scaling* scaling, float tensor_scale, const std::function<void(int64_t)>& progress) {
    const row_ops* in_ops = find_row_ops(from);
    const row_ops* out_ops = find_row_ops(to);
    TS_ASSERT(in_ops && out_ops && n_cols % block_size(from) == 0 && n_cols % block_size(to) == 0);
    const size_t in_row = row_size(from, n_cols), out_row = row_size(to, n_cols);
    // rows are handed out in chunks of ~64K elements: small enough to balance threads and report progress often
    const int64_t chunk = std::max<int64_t>(1, 65536 / n_cols);
    const int64_t n_chunks = (n_rows + chunk - 1) / chunk;
    std::atomic<int64_t> next{0};
    std::mutex mu;
    auto work = [&]() {
        std::vector<float> buf(static_cast<size_t>(n_cols));
        for (int64_t c; (c = next.fetch_add(1)) < n_chunks;) {
            const int64_t r0 = c * chunk, r1 = std::min(n_rows, r0 + chunk);
            for (int64_t r = r0; r < r1; r++) {
                in_ops->to_float(static_cast<const uint8_t*>(src) + size_t(r) * in_row, buf.data(), n_cols);
                if (tensor_scale != 1.0f)
                    for (float& x : buf) x *= tensor_scale;
                if (scaling && !scaling->col.empty())
                    for (int64_t i = 0; i < n_cols; i++) buf[size_t(i)] *= scaling->col[size_t(i)];
                if (scaling && !scaling->row.empty()) {
                    const float s = scaling->row[size_t(r)];
                    for (float& x : buf) x *= s;
                }
                out_ops->from_float(buf.data(), static_cast<uint8_t*>(dst) + size_t(r) * out_row, n_cols);
            }
            if (progress) {
                std::lock_guard lock(mu);
                progress(r1 - r0);
            }
        }
    };
    const int n = int(std::clamp<int64_t>(n_threads, 1, n_chunks));
    std::vector<std::thread> pool;
    for (int i = 1; i < n; i++) pool.emplace_back(work);
    work();
    for (auto& th : pool) th.join();
}

namespace {

// Builds the output writer. Copied tensors point into `in`'s mapping; converted ones are made when the writer comes to
// them (gguf_writer's fill), one at a time, so memory holds one tensor's output however large the model.
gguf_writer build_output(const gguf_file& in, const quantize_params& p, quantize_result& r) {
    const std::vector<tensor_plan> plan = plan_quantization(in, p);
    const int n_threads = p.n_threads > 0 ? p.n_threads : int(std::max(1u, std::thread::hardware_concurrency()));

    // elements converted or copied so far, of `total` (the progress callback's); shared by the fills
    struct counter {
        int64_t done = 0, total = 0;
    };
    auto count = std::make_shared<counter>();
    for (const tensor_plan& tp : plan)
        if (!tp.drop) count->total += tp.in->n_elements();
    if (p.progress) p.progress(0, count->total);

    gguf_writer w;
    w.set_alignment(in.alignment());
    bool needs_tessera = false;
    std::map<std::pair<std::string, type>, std::vector<std::string>> fallbacks; // (why, type) -> tensors
    for (const tensor_plan& tp : plan) {
        const gguf_tensor_info& t = *tp.in;
        r.in_tensor_bytes += t.size;
        if (tp.drop) continue;
        r.n_tensors++;
        if (tp.fallback != "") fallbacks[{tp.fallback, tp.to}].push_back(t.name);
        r.n_fallback += tp.fallback != "";
        needs_tessera |= !is_ggml_type(tp.to);
        const std::span<const int64_t> ne(t.ne, t.n_dims);
        r.n_elements += uint64_t(t.n_elements());
        if (tp.copy) {
            w.add_tensor(t.name, t.type_id, ne, t.data); // written from the mapping: counted as done now
            r.out_tensor_bytes += t.size;
            count->done += t.n_elements();
            if (p.progress) p.progress(count->done, count->total);
            continue;
        }
        const tensor_scaling* sc = p.scaling.count(t.name) ? &p.scaling.at(t.name) : nullptr;
        auto scale = std::make_shared<float>(1.0f); // the new `<name>.scale` (output_scale), set by the tensor's fill
        w.add_tensor(t.name, uint32_t(tp.to), ne, [&t, &p, tp, sc, n_threads, count, scale](std::span<uint8_t> out) {
            const int64_t n_cols = t.ne[0], n_rows = t.n_elements() / t.ne[0];
            // the source's per-tensor scales (a `.scale` tensor, an i2_s tail) are multiplied into the f32 values
            const float in_scale = tp.in_scale * read_tensor_scale(t.t(), t.data, t.n_elements());
            auto on_rows = [&](int64_t rows) {
                count->done += rows * n_cols;
                if (p.progress) p.progress(count->done, count->total);
            };
            const int nt = t.n_dims < 2 ? 1 : n_threads;
            if (is_tensor_scaled(tp.to)) {
                // one scale for the whole tensor (i2_s): all of it in f32 first, then the format's whole-tensor
                // quantizer
                std::vector<float> x(static_cast<size_t>(t.n_elements()));
                convert_rows(t.t(), t.data, type::f32, x.data(), n_cols, n_rows, nt, sc, in_scale, on_rows);
                quantize_tensor_ref(tp.to, x.data(), out.data(), n_cols, n_rows);
            } else if (tp.output_scale) {
                // two levels (NVFP4): g = amax / (448 * 6) puts the largest block scale at UE4M3's largest finite
                // value, so the sub-scales use the format's whole range; the blocks hold W / g and `<name>.scale` = g
                std::vector<float> x(static_cast<size_t>(t.n_elements()));
                convert_rows(t.t(), t.data, type::f32, x.data(), n_cols, n_rows, nt, sc, in_scale, on_rows);
                float amax = 0.0f;
                for (float v : x) amax = std::max(amax, std::fabs(v));
                const float g = amax > 0.0f && std::isfinite(amax) ? amax / (448.0f * 6.0f) : 1.0f;
                convert_rows(type::f32, x.data(), tp.to, out.data(), n_cols, n_rows, nt, nullptr, 1.0f / g);
                *scale = g;
            } else {
                convert_rows(t.t(), t.data, tp.to, out.data(), n_cols, n_rows, nt, sc, in_scale, on_rows);
            }
        });
        r.out_tensor_bytes += tensor_bytes(tp.to, t.n_elements());
        r.n_quantized += is_quantized(tp.to);
        if (tp.output_scale) {
            const int64_t one[1] = {1};
            // written right after its tensor, whose fill has set it
            w.add_tensor(t.name.substr(0, t.name.size() - 7) + ".scale", uint32_t(type::f32), one,
                         [scale](std::span<uint8_t> out) { std::memcpy(out.data(), scale.get(), sizeof(float)); });
            r.n_tensors++;
            r.n_elements += 1;
            r.out_tensor_bytes += 4;
        }
    }

    // one note per kind of fallback (a model has dozens of tensors of the same width)
    for (const auto& [key, names] : fallbacks)
        if (p.note) {
            std::string list;
            for (size_t i = 0; i < std::min<size_t>(names.size(), 3); i++) list += (i ? ", " : "") + names[i];
            p.note(fmt::format("{}, using {} for {} tensor{} ({}{})", key.first, type_name(key.second), names.size(),
                               names.size() == 1 ? "" : "s", list, names.size() > 3 ? ", ..." : ""));
        }

    // metadata: the input's, in order, with the file type, quantization version and tessera marker brought up to date
    // (a tessera-only target has no llama_ftype: general.file_type is left out, as llama.cpp does for unknown mixes,
    // and tessera.format says what the file needs)
    const std::optional<uint32_t> ftype = p.mix != quant_mix::none ? mix_ftype(p.mix) : llama_ftype_of(p.target);
    for (const gguf_kv& kv : in.kvs()) {
        if (kv.key == tessera_format_key) continue;
        if (kv.key == "general.file_type") {
            if (ftype) w.set(kv.key, gguf_value::of_u32(*ftype));
            continue;
        }
        w.set(kv.key, kv.value);
    }
    if (ftype) w.set("general.file_type", gguf_value::of_u32(*ftype));
    w.set("general.quantization_version", gguf_value::of_u32(2));
    if (needs_tessera) w.set(tessera_format_key, gguf_value::of_u32(tessera_format_version));
    for (const gguf_kv& kv : p.extra_kv) w.set(kv.key, kv.value);
    return w;
}

} // namespace

std::vector<uint8_t> quantize_to_bytes(const gguf_file& in, const quantize_params& p, quantize_result* r) {
    const auto t0 = std::chrono::steady_clock::now();
    quantize_result res;
    std::vector<uint8_t> bytes = build_output(in, p, res).to_bytes();
    res.in_file_bytes = in.file_size();
    res.out_file_bytes = bytes.size();
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r) *r = res;
    return bytes;
}

quantize_result quantize_model(const std::string& in_path, const std::string& out_path, const quantize_params& p) {
    const auto t0 = std::chrono::steady_clock::now();
    gguf_file in = gguf_file::open(in_path);
    quantize_result r;
    build_output(in, p, r).write(out_path);
    r.in_file_bytes = in.file_size();
    r.out_file_bytes = std::filesystem::file_size(out_path);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

} // namespace tessera
