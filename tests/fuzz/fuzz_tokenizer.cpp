// fuzz_tokenizer.cpp: libFuzzer target for text -> ids -> text with the SPM (TESSERA_FUZZ_BPE=0), byte-level BPE
// (TESSERA_FUZZ_BPE=1) or WordPiece (TESSERA_FUZZ_WPM=1) tokenizer. Input: one control byte (bit 0 add_special, bit 1
// parse_special, bit 2 render specials when decoding, the rest picks the BPE pre-tokenizer or the WordPiece
// normalizer), then the text (any bytes, invalid UTF-8 included).
// Checked: no crash, hang or sanitizer report; every id is in the vocabulary; the ids decode; arbitrary ids (the
// text's bytes read as ids, some out of range) decode or throw tessera::error.
#include "fuzz_vocab.h"

#include <cstdint>
#include <cstring>
#include <string_view>

using namespace tessera;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 1) return 0;
    const uint8_t ctl = data[0];
    const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
#if TESSERA_FUZZ_WPM
    const auto& all = fuzz::wpm_vocabs();
    const vocab& v = all[(ctl >> 3) % all.size()];
#elif TESSERA_FUZZ_BPE
    const auto& all = fuzz::bpe_vocabs();
    const vocab& v = all[(ctl >> 3) % all.size()];
#else
    const vocab& v = fuzz::spm_vocab();
#endif
    std::vector<token> ids;
    try {
        ids = v.tokenize(text, ctl & 1, ctl & 2);
    } catch (const error&) { // a regex engine limit is reported, not crashed on
        return 0;
    }
    for (token id : ids)
        if (id < 0 || id >= v.n_tokens()) __builtin_trap();
    const std::string back = v.detokenize(ids, ctl & 1, ctl & 4);
    for (token id : ids) (void)v.token_to_piece(id, ctl & 4);
    (void)back;

    // the bytes as ids: in range or not, decoding either works or says which id is wrong
    std::vector<token> raw(text.size() / 4);
    if (!raw.empty()) std::memcpy(raw.data(), text.data(), raw.size() * 4);
    for (token& id : raw)
        if (id >= 0) id %= v.n_tokens() + 2; // mostly valid ids, a few just past the end
    try {
        (void)v.detokenize(raw, ctl & 1, ctl & 4);
    } catch (const error&) {
    }
    return 0;
}
