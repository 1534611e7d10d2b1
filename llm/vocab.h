// vocab.h: the tokenizer of a model, read from GGUF metadata (tokenizer.ggml.*): SPM and byte-level BPE with the
// pre-tokenizer named by tokenizer.ggml.pre, special tokens, and detokenization. Behaviour follows llama.cpp's
// llama-vocab (../shared/docs/FORMATS.md §6). The SPM and BPE algorithms live in tokenizer_spm.cpp / tokenizer_bpe.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

class gguf_file;

using token = int32_t;

enum class token_attr : int32_t { undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

class vocab {
  public:
    // Reads tokenizer.ggml.* from the file; throws tessera::error on a missing or inconsistent vocabulary.
    static vocab from_gguf(const gguf_file& f);

    vocab(vocab&&) noexcept;
    vocab& operator=(vocab&&) noexcept;
    ~vocab();

    // Text -> ids. add_special: BOS/EOS as the model's add_bos/add_eos say. parse_special: control tokens written in
    // the text ("<|im_start|>") become their id; otherwise they are tokenized as plain text.
    std::vector<token> tokenize(std::string_view text, bool add_special, bool parse_special) const;

    // The bytes of one token (byte tokens decoded, "▁" -> " " for SPM, GPT-2 byte mapping undone for BPE).
    // Control tokens give "" unless `special` is true.
    std::string token_to_piece(token id, bool special) const;
    // Ids -> text as llama.cpp's detokenize: remove_special drops a leading BOS / trailing EOS when the model adds
    // them; unparse_special renders control tokens as their text.
    std::string detokenize(std::span<const token> ids, bool remove_special, bool unparse_special) const;

    int32_t n_tokens() const;
    const std::string& text(token id) const; // raw vocabulary text (as stored in GGUF)
    token_attr attr(token id) const;
    float score(token id) const;

    std::string model() const;   // "llama" (SPM) or "gpt2" (BPE)
    std::string pre() const;     // pre-tokenizer name ("smollm", "llama-bpe", ...) or "" for SPM
    token bos() const;           // -1 when the model has none
    token eos() const;
    token eot() const;
    token eom() const;           // end of message (Llama 3.1 <|eom_id|>), -1 when none
    token unk() const;
    token pad() const;
    bool add_bos() const;
    bool add_eos() const;
    bool add_space_prefix() const; // SPM: a space is put before the text (and after each special token)
    bool clean_spaces() const;     // detokenize drops the space before ?!., and 's 'm 're 've (BPE, most pre names)
    bool is_eog(token id) const; // end of generation: EOS, EOT, EOM and tokens like <|im_end|>, <|eot_id|>
    bool is_control(token id) const;
    token find(std::string_view text) const; // the id whose raw text is exactly `text`, or -1

  private:
    struct impl;
    vocab() = default;
    std::unique_ptr<impl> p_;
};

} // namespace tessera
