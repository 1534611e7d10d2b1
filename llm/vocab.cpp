// vocab.cpp: the vocabulary read from GGUF (tokenizer.ggml.*), the special-token front end of tokenize(), and decoding
// (token_to_piece, detokenize), following llama.cpp's llama-vocab.cpp. The algorithms proper are in tokenizer_spm.cpp
// and tokenizer_bpe.cpp; UTF-8 and GPT-2 byte tables in unicode.cpp.
#include "vocab.h"
#include "tokenizer.h"
#include "unicode.h"

#include "ggml-like/error.h"
#include "ggml-like/gguf.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <set>

namespace tessera {

struct vocab::impl : vocab_data {};

namespace {

void warn(const std::string& msg) {
    std::fprintf(stderr, "warning: %s\n", msg.c_str());
}

void warn_once(const std::string& msg) {
    static std::mutex mu;
    static std::set<std::string> seen;
    std::lock_guard<std::mutex> lock(mu);
    if (seen.insert(msg).second) warn(msg);
}

uint32_t attr_from_type(int64_t type) {
    switch (type) {
    case 1:
        return attr_normal;
    case 2:
        return attr_unknown;
    case 3:
        return attr_control;
    case 4:
        return attr_user_defined;
    case 5:
        return attr_unused;
    case 6:
        return attr_byte;
    default:
        return attr_undefined;
    }
}

// ---------------------------------------------------------------------------------------------------------------------
// Loading, in the order llama.cpp's llama_vocab::impl::load does it (the order matters for the text-based detection
// of EOT/EOG tokens below).

void read_kind_and_defaults(vocab_data& v, const gguf_file& f) {
    const auto model = f.get_string("tokenizer.ggml.model");
    if (!model) throw error(f.path() + ": missing tokenizer.ggml.model (no vocabulary in this file)");
    v.model_name = *model;
    const std::string pre = f.get_string("tokenizer.ggml.pre").value_or("");
    if (v.model_name == "llama") {
        v.kind = vocab_kind::spm;
        v.bos = 1, v.eos = 2, v.unk = 0;
        v.add_space_prefix = true;
        v.add_bos = true;
        v.add_eos = false;
        v.clean_spaces = false;
    } else if (v.model_name == "gpt2" || v.model_name == "gemma4") {
        // gemma4: a SentencePiece-style BPE whose pre-tokenizer is always "gemma4", and no default special ids
        const bool gemma4 = v.model_name == "gemma4";
        v.kind = vocab_kind::bpe;
        v.pre_name = gemma4 ? "gemma4" : pre;
        if (gemma4)
            v.bos = v.eos = v.unk = -1;
        else
            v.bos = 11, v.eos = 11, v.unk = -1; // llama.cpp's BPE defaults, normally overridden by the file
        const bpe_pre_defaults d = bpe_pre_defaults_for(v.pre_name);
        v.spm_style_bpe = d.spm_style;
        if (v.pre_name.empty())
            warn_once(f.path() + ": missing tokenizer.ggml.pre, using the default pre-tokenizer; tokens will not "
                                 "match the model's own tokenizer");
        else if (!d.known)
            warn_once(f.path() + ": unknown pre-tokenizer '" + pre +
                      "', using the default one; tokens may not "
                      "match the model's own tokenizer");
        v.ignore_merges = d.ignore_merges;
        v.add_bos = d.add_bos;
        v.clean_spaces = d.clean_spaces;
        if (d.no_bos) v.bos = -1;
    } else if (v.model_name == "bert") {
        // WordPiece: [CLS] ... [SEP] around a tokenized text, BERT's ids unless the file names others
        v.kind = vocab_kind::wpm;
        v.pre_name = pre;
        v.bos = 101, v.eos = -1, v.unk = 100, v.sep = 102, v.pad = 0, v.mask = 103;
        v.add_bos = true;
        v.add_eos = false;
        v.add_space_prefix = false;
        v.clean_spaces = true;
        v.wpm_lowercase = f.get_bool("tokenizer.ggml.normalizer.lowercase").value_or(true);
        v.wpm_strip_accents = f.get_bool("tokenizer.ggml.normalizer.strip_accents").value_or(v.wpm_lowercase);
    } else {
        throw error(f.path() + ": tokenizer.ggml.model: expected 'llama' (SPM), 'gpt2' or 'gemma4' (BPE) or 'bert' " +
                    "(WordPiece), got '" + v.model_name + "'");
    }
    if (auto b = f.get_bool("tokenizer.ggml.add_space_prefix")) v.add_space_prefix = *b;
}

void read_tokens(vocab_data& v, const gguf_file& f) {
    auto tokens = f.get_strings("tokenizer.ggml.tokens");
    if (!tokens || tokens->empty()) throw error(f.path() + ": missing tokenizer.ggml.tokens");
    const size_t n = tokens->size();
    if (n > size_t(INT32_MAX)) throw error(f.path() + ": tokenizer.ggml.tokens: too many tokens");

    const auto scores = f.get_floats("tokenizer.ggml.scores");
    if (scores && scores->size() < n)
        throw error(f.path() + ": tokenizer.ggml.scores: expected " + std::to_string(n) + " values, got " +
                    std::to_string(scores->size()));
    const auto types = f.get_ints("tokenizer.ggml.token_type");
    if (types && types->size() < n)
        throw error(f.path() + ": tokenizer.ggml.token_type: expected " + std::to_string(n) + " values, got " +
                    std::to_string(types->size()));

    v.texts = std::move(*tokens);
    v.scores.assign(n, 0.0f);
    v.attrs.assign(n, attr_normal);
    for (size_t i = 0; i < n; i++) {
        if (v.texts[i].empty()) {
            warn(f.path() + ": empty token at index " + std::to_string(i));
            v.texts[i] = "[EMPTY_" + std::to_string(i) + "]";
        }
        if (scores) v.scores[i] = (*scores)[i];
        if (types) v.attrs[i] = attr_from_type((*types)[i]);
    }
    // Inserted one by one in id order and never reserved: the map then iterates in the same order as llama.cpp's.
    for (size_t i = 0; i < n; i++) v.text_to_id[v.texts[i]] = token(i);
    if (v.kind == vocab_kind::wpm)
        for (const std::string& t : v.texts) v.max_token_len = std::max(v.max_token_len, t.size());
    if (v.text_to_id.size() != n) warn(f.path() + ": the vocabulary has duplicate token texts; the last id wins");
}

void read_special_ids(vocab_data& v, const gguf_file& f) {
    const std::pair<const char*, token*> keys[] = {
        {"tokenizer.ggml.bos_token_id", &v.bos},         {"tokenizer.ggml.eos_token_id", &v.eos},
        {"tokenizer.ggml.eot_token_id", &v.eot},         {"tokenizer.ggml.eom_token_id", &v.eom},
        {"tokenizer.ggml.unknown_token_id", &v.unk},     {"tokenizer.ggml.seperator_token_id", &v.sep},
        {"tokenizer.ggml.padding_token_id", &v.pad},     {"tokenizer.ggml.mask_token_id", &v.mask},
        {"tokenizer.ggml.fim_pre_token_id", &v.fim_pre}, {"tokenizer.ggml.fim_suf_token_id", &v.fim_suf},
        {"tokenizer.ggml.fim_mid_token_id", &v.fim_mid}, {"tokenizer.ggml.fim_pad_token_id", &v.fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &v.fim_rep}, {"tokenizer.ggml.fim_sep_token_id", &v.fim_sep},
        {"tokenizer.ggml.prefix_token_id", &v.fim_pre},  {"tokenizer.ggml.suffix_token_id", &v.fim_suf},
        {"tokenizer.ggml.middle_token_id", &v.fim_mid},
    };
    for (auto [key, id] : keys) {
        if (*id >= v.n_tokens()) {
            warn(f.path() + ": default " + key + " = " + std::to_string(*id) + " is outside the vocabulary, disabled");
            *id = -1;
        }
        const auto value = f.get_int(key);
        if (!value) continue;
        if (*value < 0 || *value >= v.n_tokens())
            warn(f.path() + ": " + key + " = " + std::to_string(*value) + " is outside the vocabulary (" +
                 std::to_string(v.n_tokens()) + " tokens), keeping " + std::to_string(*id));
        else
            *id = token(*value);
    }
    if (auto b = f.get_bool("tokenizer.ggml.add_bos_token")) v.add_bos = *b;
    if (v.pre_name == "gemma4" || v.pre_name == "granite-embed-multi-311m") v.add_bos = true; // as llama.cpp forces
    if (auto b = f.get_bool("tokenizer.ggml.add_eos_token")) v.add_eos = *b;
}

bool is_one_of(std::string_view s, std::initializer_list<std::string_view> list) {
    return std::find(list.begin(), list.end(), s) != list.end();
}

// EOT, EOM and FIM tokens found by their text when the file does not name them, and the end-of-generation set.
// Tokens found this way are made control tokens.
void detect_special_by_text(vocab_data& v) {
    struct rule {
        token* id;
        std::initializer_list<std::string_view> texts;
    };
    const rule rules[] = {
        {&v.eot,
         {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
          "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"}},
        {&v.eom, {"<|eom_id|>"}},
        {&v.fim_pre,
         {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
          "<|prefix|>"}},
        {&v.fim_suf,
         {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
          "<|suffix|>"}},
        {&v.fim_mid,
         {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
          "<|middle|>"}},
        {&v.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
        {&v.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
        {&v.fim_sep, {"<|file_sep|>"}},
    };
    for (const auto& [text, id] : v.text_to_id) {
        for (const rule& r : rules) {
            if (*r.id != -1 || !is_one_of(text, r.texts)) continue;
            *r.id = id;
            v.attrs[id] |= attr_control;
        }
    }

    for (const auto& [text, id] : v.text_to_id)
        if ((v.attrs[id] & attr_control) && !(v.attrs[id] & attr_unused) && text.find("unused") != std::string::npos)
            v.attrs[id] |= attr_unused;

    v.eog.clear();
    for (token id : {v.fim_pad, v.fim_rep, v.fim_sep})
        if (id != -1) v.eog.insert(id);
    for (const auto& [text, id] : v.text_to_id) {
        if (!is_one_of(text, {"<|eot_id|>",
                              "<|im_end|>",
                              "<|end|>",
                              "<|return|>",
                              "<|call|>",
                              "<|flush|>",
                              "<|calls|>",
                              "<end_of_turn>",
                              "<|endoftext|>",
                              "</s>",
                              "<|eom_id|>",
                              "<EOT>",
                              "_<EOT>",
                              "[EOT]",
                              "[EOS]",
                              "<|end_of_text|>",
                              "<end_of_utterance>",
                              "<eos>",
                              "<turn|>",
                              "<|tool_response>",
                              "<｜end▁of▁sentence｜>",
                              "[e~["}))
            continue;
        v.eog.insert(id);
        v.attrs[id] |= attr_control;
    }
    // gpt-oss: these channel markers are always rendered
    for (const auto& [text, id] : v.text_to_id)
        if (is_one_of(text, {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}))
            v.attrs[id] = attr_user_defined;
    for (token id : {v.eos, v.eot, v.eom})
        if (id != -1) v.eog.insert(id);

    // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation, when these markers exist
    auto has = [&](std::string_view t) {
        return std::any_of(v.eog.begin(), v.eog.end(), [&](token id) { return v.texts[id] == t; });
    };
    const token end_id = v.find("<|end|>");
    const bool has_call = has("<|call|>") || has("<|calls|>");
    if (end_id >= 0 && v.eog.count(end_id) && has_call && (has("<|return|>") || has("<|flush|>"))) {
        v.eog.erase(end_id);
        v.attrs[end_id] = attr_user_defined;
    }
    // gemma4 / plamo: "</s>" is a normal token there
    const token s_id = v.find("</s>");
    if (s_id >= 0 && v.eog.count(s_id) && (has("<|tool_response>") || has("<|plamo:eos|>"))) {
        v.eog.erase(s_id);
        v.attrs[s_id] = attr_normal;
    }
}

// The bytes a byte token stands for: the two hex digits of "<0xXX>".
char byte_of_token_text(const std::string& text) {
    int value = 0;
    for (size_t i = 3; i < std::min<size_t>(text.size(), 5) && std::isxdigit(uint8_t(text[i])); i++)
        value = value * 16 + (std::isdigit(uint8_t(text[i])) ? text[i] - '0' : std::tolower(text[i]) - 'a' + 10);
    return char(value);
}

// BPE vocab text -> bytes: undo the GPT-2 mapping. A character outside the mapping is written as llama.cpp does.
std::string decode_gpt2_text(const std::string& text) {
    std::string out;
    for (size_t i = 0; i < text.size();) {
        const uint32_t cpt = utf8_decode(text, i);
        const int byte = gpt2_cpt_to_byte(cpt);
        if (byte >= 0) {
            out.push_back(char(byte));
            continue;
        }
        out += "[UNK_BYTE_0x";
        char hex[3];
        for (char c : utf8_encode(cpt)) {
            std::snprintf(hex, sizeof(hex), "%02x", unsigned(uint8_t(c)));
            out += hex;
        }
        out += text + "]";
    }
    return out;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    std::string out;
    for (size_t pos = 0;;) {
        const size_t hit = s.find(from, pos);
        out.append(s, pos, hit == std::string::npos ? std::string::npos : hit - pos);
        if (hit == std::string::npos) return out;
        out += to;
        pos = hit + from.size();
    }
}

constexpr std::string_view spm_space = "\xE2\x96\x81"; // U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space

// token_to_piece(id, special = true), computed once per token at load.
std::string piece_of(const vocab_data& v, token id) {
    const uint32_t a = v.attrs[id];
    const std::string& text = v.texts[id];
    if (a & (attr_unknown | attr_control | attr_user_defined)) return text;
    if (a & attr_normal)
        return v.kind != vocab_kind::bpe || v.spm_style_bpe ? replace_all(text, spm_space, " ")
                                                            : decode_gpt2_text(text);
    if (a & attr_byte) return std::string(1, byte_of_token_text(text));
    return "";
}

void build_caches(vocab_data& v) {
    for (token id = 0; id < v.n_tokens(); id++)
        if (v.attrs[id] & (attr_control | attr_user_defined | attr_unknown)) v.special_tokens.push_back(id);
    // llama.cpp sorts with std::sort too; equal lengths keep the same (unspecified but deterministic) order
    std::sort(v.special_tokens.begin(), v.special_tokens.end(),
              [&](token a, token b) { return v.texts[a].size() > v.texts[b].size(); });
    v.pieces.resize(v.texts.size());
    for (token id = 0; id < v.n_tokens(); id++) v.pieces[id] = piece_of(v, id);
}

// lstrip / rstrip are not stored in GGUF; llama.cpp sets them for a few models by name.
void set_strip_attrs_by_name(vocab_data& v, const gguf_file& f) {
    std::string name = f.get_string("general.name").value_or("");
    std::transform(name.begin(), name.end(), name.begin(), [](char c) { return char(std::tolower(uint8_t(c))); });
    const std::string pre = f.get_string("tokenizer.ggml.pre").value_or("");
    const std::string arch = f.get_string("general.architecture").value_or("");
    auto contains = [](const std::string& s, std::initializer_list<std::string_view> subs) {
        return std::any_of(subs.begin(), subs.end(), [&](std::string_view sub) { return s.find(sub) != s.npos; });
    };
    auto set = [&](std::string_view text, uint32_t bit, bool on) {
        const token id = v.find(text);
        if (id >= 0) v.attrs[id] = on ? v.attrs[id] | bit : v.attrs[id] & ~bit;
    };
    if (contains(pre, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
        contains(arch, {"nomic-bert-moe", "jina-bert-v3"})) {
        set("<mask>", attr_lstrip, true);
    } else if (contains(name, {"phi-3", "phi3"})) {
        for (token id : v.special_tokens) v.attrs[id] |= attr_rstrip;
        set("</s>", attr_rstrip, true);
        for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, attr_rstrip, false);
    } else if (contains(name, {"modern-bert"})) {
        set("[MASK]", attr_lstrip, true);
    }
}

// ---------------------------------------------------------------------------------------------------------------------
// Tokenizing: split around special tokens, then SPM or BPE on the raw text in between.

struct fragment {
    token id; // the special token, or -1 for raw text
    size_t start;
    size_t n;
};

bool is_ascii_space(char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

// Each special token (longest first) splits the raw fragments left by the previous ones at its every occurrence.
std::vector<fragment> split_special(const vocab_data& v, std::string_view text, bool parse_special) {
    std::vector<fragment> frags, next;
    if (!text.empty()) frags.push_back({-1, 0, text.size()});
    for (token special : v.special_tokens) {
        const uint32_t a = v.attrs[special];
        if (!parse_special && (a & (attr_control | attr_unknown))) continue; // user-defined ones always split
        const std::string& s = v.texts[special];
        next.clear();
        for (const fragment& fr : frags) {
            if (fr.id >= 0) {
                next.push_back(fr);
                continue;
            }
            size_t start = fr.start, n = fr.n;
            while (n > 0) {
                const size_t hit = text.substr(0, start + n).find(s, start);
                if (hit == std::string_view::npos) break;
                size_t left_n = hit - start;
                if (a & attr_lstrip)
                    while (left_n > 0 && is_ascii_space(text[start + left_n - 1])) left_n--;
                if (left_n > 0) next.push_back({-1, start, left_n});
                next.push_back({special, hit, s.size()});
                size_t right = hit + s.size(), right_n = start + n - right;
                if (a & attr_rstrip)
                    while (right_n > 0 && is_ascii_space(text[right])) right++, right_n--;
                start = right, n = right_n;
            }
            if (n > 0) next.push_back({-1, start, n});
        }
        frags.swap(next);
    }
    return frags;
}

} // namespace

// ---------------------------------------------------------------------------------------------------------------------

vocab vocab::from_gguf(const gguf_file& f) {
    vocab voc;
    voc.p_ = std::make_unique<impl>();
    vocab_data& v = *voc.p_;
    read_kind_and_defaults(v, f);
    read_tokens(v, f);
    if (v.kind == vocab_kind::bpe) {
        const auto merges = f.get_strings("tokenizer.ggml.merges");
        if (!merges) throw error(f.path() + ": missing tokenizer.ggml.merges (needed by the gpt2 tokenizer)");
        v.bpe = std::make_unique<bpe_tokenizer>(v, *merges, v.pre_name);
    }
    read_special_ids(v, f);
    detect_special_by_text(v);
    build_caches(v);
    set_strip_attrs_by_name(v, f);
    if (v.add_bos && v.bos < 0) {
        warn(f.path() + ": the tokenizer adds BOS but has no BOS token; not adding it");
        v.add_bos = false;
    }
    if (v.add_eos && v.eos < 0) {
        warn(f.path() + ": the tokenizer adds EOS but has no EOS token; not adding it");
        v.add_eos = false;
    }
    return voc;
}

vocab::vocab(vocab&&) noexcept = default;
vocab& vocab::operator=(vocab&&) noexcept = default;
vocab::~vocab() = default;

std::vector<token> vocab::tokenize(std::string_view text, bool add_special, bool parse_special) const {
    const vocab_data& v = *p_;
    // both algorithms keep 32-bit offsets and indices into the text
    if (text.size() > (size_t(1) << 30))
        throw error("tokenize: text of " + std::to_string(text.size()) +
                    " bytes is longer than the 1 GiB a call accepts");
    std::vector<token> out;
    // WordPiece: [CLS] first and [SEP] last whenever special tokens are added (llama.cpp ignores add_bos there)
    const bool wpm = v.kind == vocab_kind::wpm;
    if (add_special && (v.add_bos || wpm) && v.bos >= 0) out.push_back(v.bos);
    bool prev_special = true; // SPM: the first raw fragment gets the leading space
    std::string escaped;
    for (const fragment& fr : split_special(v, text, parse_special)) {
        if (fr.id >= 0) {
            out.push_back(fr.id);
            prev_special = true;
            continue;
        }
        const std::string_view raw = text.substr(fr.start, fr.n);
        if (v.kind == vocab_kind::spm) {
            escaped.clear();
            if (v.add_space_prefix && prev_special) escaped += spm_space;
            for (char c : raw) c == ' ' ? void(escaped += spm_space) : escaped.push_back(c);
            tokenize_spm(v, escaped, out);
        } else if (wpm) {
            tokenize_wpm(v, raw, out);
        } else if (v.spm_style_bpe) {
            escaped.clear();
            for (char c : raw) c == ' ' ? void(escaped += spm_space) : escaped.push_back(c);
            v.bpe->tokenize(v, escaped, out);
        } else {
            v.bpe->tokenize(v, raw, out);
        }
        prev_special = false;
    }
    if (add_special && v.add_eos) out.push_back(v.eos);
    if (add_special && wpm && v.sep >= 0) out.push_back(v.sep);
    return out;
}

static void check_id(const vocab_data& v, token id) {
    if (id < 0 || id >= v.n_tokens())
        throw error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(v.n_tokens()) +
                    " tokens)");
}

std::string vocab::token_to_piece(token id, bool special) const {
    const vocab_data& v = *p_;
    check_id(v, id);
    if (!special && (v.attrs[id] & (attr_unknown | attr_control))) return "";
    return v.pieces[id];
}

// llama.cpp's clean_up_tokenization_spaces, three passes over the joined text.
static void clean_up_spaces(std::string& s) {
    if (s.empty()) return;
    // 1. " ?", " !", " .", " ," -> drop the space
    std::string out(1, s[0]);
    for (size_t i = 1; i < s.size(); i++) {
        const char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out.pop_back();
        out.push_back(x);
    }
    // 2. " ' " -> "'" (a skipped space reads as '\0' for the next step, as in llama.cpp's in-place version)
    s = std::move(out);
    out.assign(1, s[0]);
    for (size_t i = 1; i < s.size(); i++) {
        const char x = s[i];
        if (x == '\'' && i + 1 < s.size() && s[i - 1] == ' ' && s[i + 1] == ' ') {
            out.pop_back();
            s[++i] = '\0';
        }
        out.push_back(x);
    }
    // 3. " 's", " 'm", " 're", " 've" -> drop the space (" 't", " 'd", " 'll" keep it)
    s = std::move(out);
    out.assign(1, s[0]);
    for (size_t i = 1; i < s.size(); i++) {
        const char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < s.size()) {
            const char x1 = s[i + 1];
            const char x2 = i + 2 < s.size() ? s[i + 2] : '\0';
            if (x1 == 's' || x1 == 'm')
                out.pop_back();
            else if (x1 != 't' && x1 != 'd' && i + 2 < s.size() &&
                     ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')))
                out.pop_back();
        }
        out.push_back(x);
    }
    s = std::move(out);
}

std::string vocab::detokenize(std::span<const token> ids, bool remove_special, bool unparse_special) const {
    const vocab_data& v = *p_;
    bool remove_space = v.add_space_prefix; // the leading space SPM added when tokenizing
    if (remove_special && v.add_bos && !ids.empty() && ids.front() == v.bos) {
        remove_space = false;
        ids = ids.subspan(1);
    }
    if (remove_special && v.add_eos && !ids.empty() && ids.back() == v.eos) ids = ids.first(ids.size() - 1);
    std::string text;
    for (token id : ids) {
        const std::string piece = token_to_piece(id, unparse_special);
        const bool strip = remove_space && !piece.empty() && piece[0] == ' ';
        text.append(piece, strip ? 1 : 0);
        remove_space = false;
    }
    if (v.clean_spaces) clean_up_spaces(text);
    return text;
}

int32_t vocab::n_tokens() const {
    return p_->n_tokens();
}

const std::string& vocab::text(token id) const {
    check_id(*p_, id);
    return p_->texts[id];
}

token_attr vocab::attr(token id) const {
    check_id(*p_, id);
    const uint32_t a = p_->attrs[id];
    if (a & attr_unknown) return token_attr::unknown;
    if (a & attr_control) return token_attr::control;
    if (a & attr_user_defined) return token_attr::user_defined;
    if (a & attr_byte) return token_attr::byte;
    if (a & attr_unused) return token_attr::unused;
    if (a & attr_normal) return token_attr::normal;
    return token_attr::undefined;
}

float vocab::score(token id) const {
    check_id(*p_, id);
    return p_->scores[id];
}

std::string vocab::model() const {
    return p_->model_name;
}
std::string vocab::pre() const {
    return p_->pre_name;
}
token vocab::bos() const {
    return p_->bos;
}
token vocab::eos() const {
    return p_->eos;
}
token vocab::eot() const {
    return p_->eot;
}
token vocab::eom() const {
    return p_->eom;
}
token vocab::unk() const {
    return p_->unk;
}
token vocab::pad() const {
    return p_->pad;
}
bool vocab::add_bos() const {
    return p_->add_bos;
}
bool vocab::add_eos() const {
    return p_->add_eos;
}
bool vocab::add_space_prefix() const {
    return p_->add_space_prefix;
}
bool vocab::clean_spaces() const {
    return p_->clean_spaces;
}
bool vocab::is_eog(token id) const {
    return id >= 0 && p_->eog.count(id) > 0;
}
bool vocab::is_control(token id) const {
    return id >= 0 && id < p_->n_tokens() && (p_->attrs[id] & attr_control);
}
token vocab::find(std::string_view text) const {
    return p_->find(text);
}

} // namespace tessera
