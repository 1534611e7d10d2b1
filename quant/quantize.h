// quantize.h: whole-model requantization for `tessera quantize` (host only): every 2-D weight is dequantized to f32
// with its format's to_float, optionally scaled (AWQ folding), and quantized to the target with the reference
// from_float; 1-D tensors (norms) become f32; metadata is copied with general.file_type and the tessera marker updated.
// The activation-aware search that produces AWQ scales needs the model and lives in llm/awq.h.
#pragma once

#include "ggml-like/gguf.h"
#include "ggml-like/types.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// Files holding any type that upstream ggml does not define (awq4, i2_s, ids >= 1024) carry this key (u32, the
// version of tessera's extensions, now 1). A loader refuses such tensors in a file without it: a file that claims to be
// a plain llama.cpp GGUF must not hold them.
inline constexpr const char* tessera_format_key = "tessera.format";
inline constexpr uint32_t tessera_format_version = 1;

// True when upstream ggml defines the type id with this layout (llama.cpp can load it).
bool is_ggml_type(type t);
// llama_ftype written as general.file_type for a file quantized "mostly" to t; nullopt when llama.cpp has none.
std::optional<uint32_t> llama_ftype_of(type t);
// llama-quantize's name of a general.file_type value ("Q4_K_M", "F16", ...; llama.h's llama_ftype); nullptr if none
const char* llama_ftype_name(uint32_t ftype);
// Types `tessera quantize` can produce: those with a from_float (find_row_ops), activation-only formats excluded.
std::vector<type> quantize_target_types();

// Multipliers applied to a weight in f32 before quantization: W'[r][c] = W[r][c] * row[r] * col[c] (either may be
// empty). For 1-D tensors (norm weights) only `col` is used. AWQ folds its scales this way.
struct tensor_scaling {
    std::vector<float> row; // (ne[1])
    std::vector<float> col; // (ne[0])
};

// llama-quantize's mixes of the K formats, IQ3 and IQ4 (its llama_tensor_get_type rules for them, without an
// importance matrix):
// TYPE's format for most tensors; attn_v (attn_qkv) and ffn_down get more bits in some layers (Q4_K_M / Q5_K_M: q6_K
// in the first and last eighth and every third layer between; Q4_K_S: q5_K in the first 4 attn_v and the first
// eighth of ffn_down; Q3_K_M: q5_K in the first 2 attn_v and sixteenth of ffn_down, q4_K in the rest and attn_output;
// Q3_K_L: q5_K for all three; Q2_K: q3_K ffn_down and attn_output, attn_v q3_K or with 4+ query heads a KV head
// q4_K; IQ4_NL / IQ4_XS: q5_K attn_v with 4+ query heads a KV head and the first eighth of ffn_down), the output (a
// tied embedding) q6_K, and 8-expert models q8_0 attn_k / attn_v, q5_K attn_output.
// IQ3_XS / IQ3_S / IQ3_M (mostly iq3_s) and IQ3_XXS (mostly iq3_xxs): attn_v q4_K with 4+ query heads a KV head
// (IQ3_M always; IQ3_XXS else iq3_s); IQ3_XS iq3_xxs attn_q / attn_k and ffn_gate / ffn_up between the first and last
// eighth; IQ3_M q4_K attn_output and the first eighth of ffn_down; IQ3_XXS iq3_s attn_output and token_embd, ffn_down
// q4_K in the first eighth and q3_K after, a q5_K output, and iq2_s attn_q / attn_k, which tessera cannot produce
// yet: those get iq3_xxs (a fallback). llama-quantize itself refuses IQ3_XXS and IQ3_XS without an importance matrix
// (it requires one for any iq3_xxs or iq2_s tensor); tessera makes them with ggml's search without one.
enum class quant_mix {
    none,
    q2_k,
    q3_k_s,
    q3_k_m,
    q3_k_l,
    q4_k_s,
    q4_k_m,
    q5_k_s,
    q5_k_m,
    iq3_xs,
    iq3_xxs,
    iq4_nl,
    iq3_s,
    iq3_m,
    iq4_xs
};
// every mix but none, in llama_ftype order
inline constexpr quant_mix all_quant_mixes[] = {
    quant_mix::q2_k,   quant_mix::q3_k_s,  quant_mix::q3_k_m, quant_mix::q3_k_l, quant_mix::q4_k_s,
    quant_mix::q4_k_m, quant_mix::q5_k_s,  quant_mix::q5_k_m, quant_mix::iq3_xs, quant_mix::iq3_xxs,
    quant_mix::iq4_nl, quant_mix::iq3_s,   quant_mix::iq3_m,  quant_mix::iq4_xs};
// "Q4_K_M", "q5_k_s", ...; nullopt for any other name
std::optional<quant_mix> quant_mix_from_name(std::string_view name);
const char* quant_mix_name(quant_mix m); // "Q4_K_M"
type quant_mix_type(quant_mix m);        // its format for most tensors (q2_K .. q5_K, iq3_xxs, iq3_s, iq4_nl, iq4_xs)

struct quantize_params {
    type target = type::q8_0;
    quant_mix mix = quant_mix::none; // a llama-quantize mix (target is then its format)
    std::optional<type> output_type; // output.weight; also token_embd.weight when the embeddings are tied
    std::optional<type> embd_type;   // token_embd.weight (wins over output_type when tied, as in llama-quantize)
    int n_threads = 0;               // 0: one per hardware thread
    std::map<std::string, tensor_scaling> scaling; // by tensor name
    std::vector<gguf_kv> extra_kv;                 // added to the output's metadata (e.g. how AWQ was calibrated)
    // Called with (elements done, total elements) as tensors are converted; calls are serialized.
    std::function<void(int64_t, int64_t)> progress;
    // One-line notes for the user (fallbacks, ignored overrides), without a trailing newline.
    std::function<void(const std::string&)> note;
};

// What happens to one tensor.
struct tensor_plan {
    const gguf_tensor_info* in = nullptr;
    type to = type::f32;
    bool copy = false;         // bytes copied as they are (same type, nothing to apply)
    bool drop = false;         // a per-tensor `<name>.scale` / `.input_scale` folded into its converted weight
    float in_scale = 1.0f;     // the weight's `<name>.scale` value (NVFP4 global scale), multiplied in when converting
    bool output_scale = false; // gets a new `<name>.scale` (NVFP4's per-tensor scale: the two-level recipe)
    std::string fallback;      // why `to` differs from the requested type ("" when it does not)
};

// Chooses the output type of every tensor of `in` (same order); throws tessera::error when a tensor cannot be
// converted (a source type tessera cannot read).
std::vector<tensor_plan> plan_quantization(const gguf_file& in, const quantize_params& p);

struct quantize_result {
    uint64_t in_file_bytes = 0, out_file_bytes = 0;
    uint64_t in_tensor_bytes = 0, out_tensor_bytes = 0;
    uint64_t n_elements = 0; // of every tensor
    int n_tensors = 0;       // in the output
    int n_quantized = 0;     // tensors converted to a block format
    int n_fallback = 0;      // tensors that got another type than asked for
    double seconds = 0;
    double in_bpw() const { return n_elements ? 8.0 * double(in_tensor_bytes) / double(n_elements) : 0; }
    double out_bpw() const { return n_elements ? 8.0 * double(out_tensor_bytes) / double(n_elements) : 0; }
};

// Reads `in_path`, converts, writes `out_path` through gguf_writer::write (temp file + fsync + rename: on any failure
// nothing is left at out_path and an existing file there is untouched).
quantize_result quantize_model(const std::string& in_path, const std::string& out_path, const quantize_params& p);
// The same on an opened file, returning the writer's bytes (tests).
std::vector<uint8_t> quantize_to_bytes(const gguf_file& in, const quantize_params& p, quantize_result* r = nullptr);

// Converts n_rows rows of n_cols elements from `src` (type from) to `dst` (type to) over n_threads threads, applying
// `scaling` in f32 when given. `progress(rows)` is called (serialized) as rows finish.
void convert_rows(type from, const void* src, type to, void* dst, int64_t n_cols, int64_t n_rows, int n_threads,
                  const tensor_scaling* scaling = nullptr, float tensor_scale = 1.0f,
                  const std::function<void(int64_t)>& progress = {});

} // namespace tessera
