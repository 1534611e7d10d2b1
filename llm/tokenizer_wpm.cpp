// tokenizer_wpm.cpp: WordPiece (tokenizer.ggml.model = "bert"), as llama.cpp's llm_tokenizer_wpm. The text is cut into
// words, BERT's way: whitespace ends a word; control characters, U+0000 and U+FFFD are dropped; every punctuation
// character, ASCII symbol and CJK ideograph is a word of its own. With tokenizer.ggml.normalizer.strip_accents each
// character is first replaced by the first code point of its decomposition and combining marks are dropped ('Ä' ->
// 'A'); with .lowercase it is lowercased (both on unless the file says otherwise). Each word, prefixed with U+2581 (the
// vocabulary marks word starts that way instead of continuations with "##"), is covered greedily from the left by the
// longest vocabulary entries; a word that cannot be covered whole becomes the unknown token. The front end (special
// tokens, [CLS] / [SEP]) is in vocab.cpp.
#include "tokenizer.h"
#include "unicode.h"

#include "ggml-like/error.h"

namespace tessera {

namespace {

// CJK ideographs, the ranges BERT's (and llama.cpp's) _is_chinese_char lists: each one is a word of its own.
bool is_cjk_ideograph(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) ||
           (c >= 0x2B920 && c <= 0x2CEAF) || // 0x2B820 in Unicode; 0x2B920 in HF tokenizers, and so in llama.cpp
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::vector<std::string> wpm_words(const vocab_data& v, std::string_view text) {
    std::vector<std::string> words(1);
    for (size_t i = 0; i < text.size();) {
        uint32_t c = utf8_decode(text, i);
        if (v.wpm_strip_accents) c = unicode_nfd_first(c);
        if (unicode_is_whitespace(c)) {
            if (!words.back().empty()) words.emplace_back();
            continue;
        }
        const cpt_class k = unicode_class(c);
        if (c == 0 || c == 0xFFFD || k == cpt_class::control) continue;
        if (v.wpm_strip_accents && k == cpt_class::mark) continue;
        const uint32_t written = v.wpm_lowercase ? unicode_simple_lower(c) : c;
        if (k == cpt_class::punctuation || (c < 0x7F && k == cpt_class::symbol) || is_cjk_ideograph(c)) {
            if (!words.back().empty()) words.emplace_back();
            utf8_append(words.back(), written);
            words.emplace_back();
        } else {
            utf8_append(words.back(), written);
        }
    }
    if (words.back().empty()) words.pop_back();
    return words;
}

} // namespace

void tokenize_wpm(const vocab_data& v, std::string_view text, std::vector<token>& out) {
    std::string word;
    for (const std::string& w : wpm_words(v, text)) {
        word.assign("\xE2\x96\x81").append(w); // U+2581: a word's start
        const size_t n = word.size(), before = out.size();
        // byte by byte, as llama.cpp: a cut inside a character only finds no entry
        for (size_t i = 0; i < n;) {
            size_t j = std::min(n, i + v.max_token_len);
            token id = -1;
            for (; j > i; j--)
                if ((id = v.find(std::string_view(word).substr(i, j - i))) >= 0) break;
            if (id < 0) {
                out.resize(before);
                break;
            }
            out.push_back(id);
            i = j;
        }
        if (out.size() == before) {
            if (v.unk < 0) throw error("tokenize: the WordPiece vocabulary has no unknown token for '" + w + "'");
            out.push_back(v.unk);
        }
    }
}

} // namespace tessera
