// unicode.cpp: UTF-8 decode/encode as llama.cpp's tokenizers see text, and the GPT-2 byte <-> unicode tables.
#include "unicode.h"

#include <array>

namespace tessera {

size_t utf8_len(char lead) {
    static constexpr uint8_t len_of_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len_of_nibble[uint8_t(lead) >> 4];
}

static constexpr uint32_t replacement_char = 0xFFFD;

uint32_t utf8_decode(std::string_view s, size_t& i) {
    const uint8_t b0 = uint8_t(s[i]);
    if (b0 < 0x80) return s[i++];
    auto cont = [&](size_t k) { return i + k < s.size() && (uint8_t(s[i + k]) & 0xC0) == 0x80; };
    auto tail = [&](size_t k) { return uint32_t(uint8_t(s[i + k]) & 0x3F); };
    uint32_t cpt = replacement_char;
    size_t n = 1;
    if ((b0 & 0xE0) == 0xC0) { // 110xxxxx: 2 bytes (overlong C0/C1 accepted, as llama.cpp does)
        if (cont(1)) cpt = (uint32_t(b0 & 0x1F) << 6) | tail(1), n = 2;
    } else if ((b0 & 0xF0) == 0xE0) { // 1110xxxx: 3 bytes (surrogates accepted)
        if (cont(1) && cont(2)) cpt = (uint32_t(b0 & 0x0F) << 12) | (tail(1) << 6) | tail(2), n = 3;
    } else if ((b0 & 0xF8) == 0xF0) { // 11110xxx: 4 bytes
        if (cont(1) && cont(2) && cont(3)) {
            cpt = (uint32_t(b0 & 0x07) << 18) | (tail(1) << 12) | (tail(2) << 6) | tail(3), n = 4;
            // llama.cpp decodes these but then throws when re-encoding them; we treat them as malformed.
            if (cpt > 0x10FFFF) cpt = replacement_char, n = 1;
        }
    } // a stray continuation byte (10xxxxxx) or 0xF8-0xFF: malformed
    i += n;
    return cpt;
}

std::vector<uint32_t> utf8_decode_all(std::string_view s) {
    std::vector<uint32_t> cpts;
    cpts.reserve(s.size());
    for (size_t i = 0; i < s.size();) cpts.push_back(utf8_decode(s, i));
    return cpts;
}

void utf8_append(std::string& out, uint32_t cpt) {
    if (cpt < 0x80) {
        out.push_back(char(cpt));
    } else if (cpt < 0x800) {
        out.push_back(char(0xC0 | (cpt >> 6)));
        out.push_back(char(0x80 | (cpt & 0x3F)));
    } else if (cpt < 0x10000) {
        out.push_back(char(0xE0 | (cpt >> 12)));
        out.push_back(char(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cpt & 0x3F)));
    } else if (cpt <= 0x10FFFF) {
        out.push_back(char(0xF0 | (cpt >> 18)));
        out.push_back(char(0x80 | ((cpt >> 12) & 0x3F)));
        out.push_back(char(0x80 | ((cpt >> 6) & 0x3F)));
        out.push_back(char(0x80 | (cpt & 0x3F)));
    } else {
        utf8_append(out, replacement_char);
    }
}

std::string utf8_encode(uint32_t cpt) {
    std::string s;
    utf8_append(s, cpt);
    return s;
}

// GPT-2 keeps the printable Latin-1 bytes as themselves and moves the other 68 (controls, space, 0x7F-0xA0, 0xAD)
// to U+0100.. so that every byte is a visible character in vocab files.
static bool gpt2_byte_is_itself(int b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

namespace {
struct gpt2_tables {
    std::array<std::string, 256> utf8;  // byte -> UTF-8 of its stand-in
    std::array<int16_t, 0x144> byte_of; // stand-in code point (< U+0144) -> byte, or -1
    gpt2_tables() {
        byte_of.fill(-1);
        int n_moved = 0;
        for (int b = 0; b < 256; b++) {
            const uint32_t cpt = gpt2_byte_is_itself(b) ? uint32_t(b) : uint32_t(256 + n_moved++);
            utf8[b] = utf8_encode(cpt);
            byte_of[cpt] = int16_t(b);
        }
    }
};
const gpt2_tables& gpt2() {
    static const gpt2_tables t;
    return t;
}
} // namespace

const std::string& gpt2_byte_to_utf8(uint8_t byte) {
    return gpt2().utf8[byte];
}

int gpt2_cpt_to_byte(uint32_t cpt) {
    return cpt < gpt2().byte_of.size() ? gpt2().byte_of[cpt] : -1;
}

} // namespace tessera
