// tokenizer.h (private to llm/): the vocabulary tables shared by vocab.cpp (loading, special tokens, decoding) and the
// three algorithms, tokenizer_spm.cpp (SentencePiece-style score merges), tokenizer_bpe.cpp (byte-level BPE with
// regex pre-tokenizers) and tokenizer_wpm.cpp (BERT's WordPiece). Nothing outside llm/ includes this file; the public
// API is vocab.h.
#pragma once

#include "vocab.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tessera {

// Token attribute bits, as llama.cpp keeps them (a token can be e.g. normal and, by text detection, also control).
enum attr_bits : uint32_t {
    attr_undefined = 0,
    attr_unknown = 1u << 0,
    attr_unused = 1u << 1,
    attr_normal = 1u << 2,
    attr_control = 1u << 3,
    attr_user_defined = 1u << 4,
    attr_byte = 1u << 5,
    attr_lstrip = 1u << 7, // a special token eats whitespace to its left
    attr_rstrip = 1u << 8, // ... and to its right
};

// Hash that lets an unordered_map<std::string, ...> be searched with a string_view (same hash values as
// std::hash<std::string>, so the map iterates in the same order as llama.cpp's token_to_id).
struct text_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using text_map = std::unordered_map<std::string, token, text_hash, std::equal_to<>>;

class bpe_tokenizer;

enum class vocab_kind { spm, bpe, wpm };

struct vocab_data {
    vocab_kind kind = vocab_kind::spm;
    std::string model_name; // tokenizer.ggml.model
    std::string pre_name;   // tokenizer.ggml.pre ("" for SPM)

    std::vector<std::string> texts; // (n_tokens) raw GGUF text
    std::vector<float> scores;      // (n_tokens) SPM merge priority; 0 when absent
    std::vector<uint32_t> attrs;    // (n_tokens) attr_bits
    text_map text_to_id;            // text -> id (the last id wins on duplicates, as in llama.cpp)

    token bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, sep = -1, pad = -1, mask = -1;
    token fim_pre = -1, fim_suf = -1, fim_mid = -1, fim_pad = -1, fim_rep = -1, fim_sep = -1;

    bool add_bos = false;
    bool add_eos = false;
    bool add_space_prefix = false; // SPM: prefix the first raw fragment (and fragments after specials) with ' '
    bool clean_spaces = false;     // detokenize: drop the space before ?!., and some contractions
    bool ignore_merges = false;    // BPE: a pre-token that is already a vocab token is kept whole
    bool spm_style_bpe = false;    // BPE on raw UTF-8 with spaces escaped to U+2581 and <0xXX> byte tokens (gemma4)
    bool wpm_lowercase = true;     // WordPiece: tokenizer.ggml.normalizer.lowercase
    bool wpm_strip_accents = true; // ... .strip_accents (default: as lowercase)
    size_t max_token_len = 0;      // WordPiece: the longest token text, in bytes

    std::vector<token> special_tokens; // control / user-defined / unknown ids, longest text first
    std::set<token> eog;               // end-of-generation ids
    std::vector<std::string> pieces;   // (n_tokens) token_to_piece(id, special = true)

    std::unique_ptr<bpe_tokenizer> bpe; // set for kind == bpe

    int32_t n_tokens() const { return int32_t(texts.size()); }
    token find(std::string_view text) const {
        auto it = text_to_id.find(text);
        return it == text_to_id.end() ? -1 : it->second;
    }
    // The SPM byte token for `ch`: "<0xXX>", else the 1-byte text, else UNK (llama.cpp throws there), else -1.
    token byte_to_token(uint8_t ch) const;
};

// SPM on one raw fragment whose spaces are already escaped to U+2581; appends ids to out.
void tokenize_spm(const vocab_data& v, std::string_view text, std::vector<token>& out);
// WordPiece on one raw fragment (normalized and split into words there); appends ids to out.
void tokenize_wpm(const vocab_data& v, std::string_view text, std::vector<token>& out);

// What a BPE pre-tokenizer name implies besides its regexes (llama.cpp's per-name defaults).
struct bpe_pre_defaults {
    bool known = true; // false: the name is not recognised, the default regex list is used
    bool ignore_merges = false;
    bool add_bos = false;
    bool clean_spaces = true;
    bool no_bos = false; // the model has no BOS token by default (chatglm, glm4)
    // SentencePiece-style BPE (gemma4, sarvam-moe): the text's spaces become U+2581 before the merges, which run on
    // the raw UTF-8 characters (no GPT-2 byte mapping); a character left unmerged falls back to "<0xXX>" tokens.
    bool spm_style = false;
    bool newline_runs = false; // gemma4: a pre-token of newlines only is looked up whole first
};
bpe_pre_defaults bpe_pre_defaults_for(std::string_view pre);

// Byte-level BPE: merges ranked by their index in tokenizer.ggml.merges, and the pre-tokenizer regexes (PCRE2,
// compiled once here). tokenize() is const and safe to call from several threads at once.
class bpe_tokenizer {
  public:
    bpe_tokenizer(const vocab_data& v, const std::vector<std::string>& merges, std::string_view pre);
    ~bpe_tokenizer();
    bpe_tokenizer(const bpe_tokenizer&) = delete;
    bpe_tokenizer& operator=(const bpe_tokenizer&) = delete;

    // One raw fragment (no special tokens in it) -> ids appended to out.
    void tokenize(const vocab_data& v, std::string_view text, std::vector<token>& out) const;
    // The pre-tokenizer alone: the pieces of `text` (after UTF-8 cleanup), before byte mapping. For tests.
    std::vector<std::string> split(std::string_view text) const;

  private:
    struct impl;
    std::unique_ptr<impl> p_;
};

} // namespace tessera
