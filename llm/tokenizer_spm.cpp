// tokenizer_spm.cpp: SentencePiece-style tokenization (tokenizer.ggml.model = "llama"), as llama.cpp's
// llm_tokenizer_spm. Start from one symbol per UTF-8 character; repeatedly merge the adjacent pair whose concatenation
// is a vocab token with the highest score (ties: leftmost); symbols that never became a token are written as byte
// tokens <0xXX>. The front end (special tokens, the leading space, "▁" escaping) is in vocab.cpp.
#include "tokenizer.h"
#include "unicode.h"

#include <queue>

namespace tessera {

namespace {

// A span of the text, linked to its neighbours; merged-away symbols keep n = 0.
struct spm_symbol {
    int32_t prev;
    int32_t next;
    uint32_t start; // byte offset into the text
    uint32_t n;     // bytes
};

struct spm_bigram {
    int32_t left;
    int32_t right;
    float score;
    uint32_t size; // bytes of left + right when queued; a mismatch later means a side has changed since
};

// Highest score first; on equal scores the leftmost pair.
struct spm_bigram_order {
    bool operator()(const spm_bigram& a, const spm_bigram& b) const {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
};

} // namespace

token vocab_data::byte_to_token(uint8_t ch) const {
    static constexpr char hex[] = "0123456789ABCDEF";
    const char name[6] = {'<', '0', 'x', hex[ch >> 4], hex[ch & 15], '>'};
    token id = find(std::string_view(name, 6));
    if (id < 0) id = find(std::string_view(reinterpret_cast<const char*>(&ch), 1));
    if (id < 0) id = unk;
    return id;
}

void tokenize_spm(const vocab_data& v, std::string_view text, std::vector<token>& out) {
    std::vector<spm_symbol> symbols;
    symbols.reserve(text.size());
    for (size_t offs = 0; offs < text.size();) {
        const uint32_t n = uint32_t(std::min(utf8_len(text[offs]), text.size() - offs));
        const int32_t index = int32_t(symbols.size());
        symbols.push_back({index - 1, offs + n == text.size() ? -1 : index + 1, uint32_t(offs), n});
        offs += n;
    }

    std::priority_queue<spm_bigram, std::vector<spm_bigram>, spm_bigram_order> queue;
    auto try_add_bigram = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const uint32_t size = symbols[left].n + symbols[right].n;
        const token id = v.find(text.substr(symbols[left].start, size)); // left and right are contiguous
        if (id < 0) return;
        queue.push({left, right, v.scores[id], size});
    };
    for (int32_t i = 1; i < int32_t(symbols.size()); i++) try_add_bigram(i - 1, i);

    while (!queue.empty()) {
        const spm_bigram b = queue.top();
        queue.pop();
        spm_symbol& left = symbols[b.left];
        spm_symbol& right = symbols[b.right];
        // symbols only grow, so a changed side shows as a different total size
        if (left.n == 0 || right.n == 0 || left.n + right.n != b.size) continue;
        left.n += right.n;
        right.n = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = b.left;
        try_add_bigram(left.prev, b.left);
        try_add_bigram(b.left, left.next);
    }

    // Every merged symbol is a vocab token by construction; only single characters can be missing. (llama.cpp also
    // keeps a merge history to re-split missing symbols, but a single character never has one.)
    for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
        const spm_symbol& s = symbols[i];
        const std::string_view piece = text.substr(s.start, s.n);
        const token id = v.find(piece);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        for (char c : piece) {
            const token byte_id = v.byte_to_token(uint8_t(c));
            if (byte_id >= 0) out.push_back(byte_id);
        }
    }
}

} // namespace tessera
