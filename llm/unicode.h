// unicode.h: the UTF-8 and byte-mapping helpers the tokenizers need: decoding as llama.cpp's unicode.cpp does (lenient:
// each bad byte becomes U+FFFD), encoding, GPT-2's bytes_to_unicode table with its inverse, and the Unicode 15.1
// facts WordPiece normalizes and splits by (tokenizer_unicode.cpp, tables from llm/tokenizer_unicode.py). Regex
// splitting lives in tokenizer_bpe.cpp; the vocabulary in vocab.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera {

// Length of the UTF-8 sequence that `lead` starts, from its high nibble alone: 1 for ASCII and stray continuation
// bytes, 2 for 0xC_/0xD_, 3 for 0xE_, 4 for 0xF_. Callers clamp it to the bytes that remain.
size_t utf8_len(char lead);

// Decodes the code point at s[i] and advances i. Lenient like llama.cpp: overlong forms and surrogates are accepted
// as written; a malformed or truncated sequence yields U+FFFD and advances i by one byte.
uint32_t utf8_decode(std::string_view s, size_t& i);
std::vector<uint32_t> utf8_decode_all(std::string_view s);

// Appends the UTF-8 form of cpt (cpt <= 0x10FFFF; larger values append U+FFFD).
void utf8_append(std::string& out, uint32_t cpt);
std::string utf8_encode(uint32_t cpt);

// GPT-2 bytes_to_unicode: bytes 0x21-0x7E, 0xA1-0xAC and 0xAE-0xFF stand for themselves, the other 68 bytes map to
// U+0100, U+0101, ... in byte order. The result is the UTF-8 form of the stand-in character.
const std::string& gpt2_byte_to_utf8(uint8_t byte);
// The inverse on code points: the byte that `cpt` stands for, or -1 when cpt is not one of the 256 stand-ins.
int gpt2_cpt_to_byte(uint32_t cpt);

// A code point's general category class (its first letter; Cn, unassigned, apart), Unicode 15.1 as llama.cpp's tables.
enum class cpt_class : uint8_t { unassigned, number, letter, separator, mark, punctuation, symbol, control };
cpt_class unicode_class(uint32_t cpt);
// The White_Space property (PropList.txt): U+0009-000D, U+0020, U+0085, U+00A0, U+1680, U+2000-200A, U+2028, U+2029,
// U+202F, U+205F, U+3000.
bool unicode_is_whitespace(uint32_t cpt);
// The simple (one code point) lowercase mapping of UnicodeData.txt; cpt itself when it has none.
uint32_t unicode_simple_lower(uint32_t cpt);
// The first code point of cpt's canonical decomposition (NFD), as llama.cpp's unicode_cpts_normalize_nfd keeps it: 'Ä'
// -> 'A'; the combining marks after it are dropped. cpt itself when it does not decompose.
uint32_t unicode_nfd_first(uint32_t cpt);

} // namespace tessera
