// tokenizer_bpe.cpp: byte-level BPE (tokenizer.ggml.model = "gpt2"), as llama.cpp's llm_tokenizer_bpe:
//   1. pre-tokenize: the regex list named by tokenizer.ggml.pre splits the text; each regex further splits the pieces
//      left by the previous one, keeping both the matches and the text between them;
//   2. map every byte of a piece to its GPT-2 stand-in character;
//   3. merge adjacent symbols by lowest merge rank (ties: leftmost) until no pair is in tokenizer.ggml.merges.
// The special-token front end and decoding are in vocab.cpp.
#include "tokenizer.h"
#include "unicode.h"

#include "ggml-like/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <iterator>
#include <queue>

namespace tessera {

// ---------------------------------------------------------------------------------------------------------------------
// Pre-tokenizer regexes. These are the patterns of the models' tokenizer.json files, in the form llama.cpp uses
// (case-insensitive contractions spelled out as character classes).

namespace re {
constexpr const char* gpt2 = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
#define TS_CONTRACTIONS R"re((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))re"
constexpr const char* llama3 =
    TS_CONTRACTIONS R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* qwen2 =
    TS_CONTRACTIONS R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* qwen35 = TS_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* seed_coder =
    TS_CONTRACTIONS R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* exaone_moe = TS_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)re";
constexpr const char* minicpm5 =
    TS_CONTRACTIONS R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* jais2 = TS_CONTRACTIONS
    R"re(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})re";
constexpr const char* bailingmoe =
    R"re('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)re";
constexpr const char* ufakzeka =
    R"re([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
// Upper/lower-case runs written with lookaheads, as llama.cpp does: ((?=[\p{L}])([^a-z])) is a letter that is not a-z.
constexpr const char* tekken =
    R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr const char* gpt4o = R"re([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)re" TS_CONTRACTIONS
                              R"re(?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)re" TS_CONTRACTIONS
                              R"re(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
#undef TS_CONTRACTIONS
constexpr const char* poro = R"re( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+)re";
constexpr const char* deepseek_llm_letters = // \s? then the letters of the Latin, Greek, Cyrillic, ... scripts
    R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-)re"
    R"re(\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-)re"
    R"re(\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-)re"
    R"re(\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77})re"
    R"re(\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-)re"
    R"re(\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-)re"
    R"re(\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4})re"
    R"re(\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128})re"
    R"re(\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184})re"
    R"re(\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-)re"
    R"re(\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06})re"
    R"re(\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-)re"
    R"re(\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re";
constexpr const char* deepseek_llm_punct =
    R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re";
constexpr const char* cjk_hangul = R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";
constexpr const char* cjk_kana = R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re";
constexpr const char* deepseek3_words =
    R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
} // namespace re

namespace {

struct pre_entry {
    std::vector<std::string_view> names;
    std::vector<const char*> regexes;
    bpe_pre_defaults defaults;
};

// The defaults a name carries (bpe_pre_defaults fields in declaration order: known, ignore_merges, add_bos,
// clean_spaces, no_bos).
constexpr bpe_pre_defaults cleans{};                                            // detokenize cleans spaces
constexpr bpe_pre_defaults keeps{.clean_spaces = false};                        // ... or keeps them
constexpr bpe_pre_defaults llama3_like{.ignore_merges = true, .add_bos = true}; // whole-word tokens, BOS added

// Pre-tokenizer names (tokenizer.ggml.pre) -> regex list and defaults, as in llama.cpp's llama-vocab.cpp.
const std::vector<pre_entry>& pre_table() {
    static const std::vector<pre_entry> table = {
        {{"default"}, {}, cleans}, // regexes: default_regexes()
        {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"},
         {re::llama3},
         llama3_like},
        {{"dbrx", "smaug-bpe"}, {re::llama3}, cleans},
        {{"chatglm-bpe"}, {re::llama3}, {.no_bos = true}},
        {{"glm4", "glm5"}, {re::llama3}, {.ignore_merges = true, .no_bos = true}},
        {{"jais-2"}, {re::jais2}, cleans},
        {{"deepseek-llm"},
         {R"re([\r\n])re", re::deepseek_llm_letters, re::deepseek_llm_punct, R"re(\s+$)re", re::cjk_hangul,
          R"re(\p{N}+)re"},
         keeps},
        {{"deepseek-coder"},
         {R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", re::cjk_hangul, R"re(\p{N})re"},
         keeps},
        {{"deepseek-v3", "hunyuan-dense", "hy_v4", "joyai-llm"},
         {R"re(\p{N}{1,3})re", re::cjk_kana, re::deepseek3_words},
         keeps},
        {{"falcon"}, {R"re([\p{P}\$\+<=>\^~\|`]+)re", re::gpt2, R"re([0-9][0-9][0-9])re"}, cleans},
        {{"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"}, {R"re(\p{N})re", re::gpt2}, cleans},
        {{"command-r", "smollm"}, {R"re(\p{N})re", re::gpt2}, keeps},
        {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
          "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "exaone4"},
         {re::gpt2},
         cleans},
        {{"trillion", "granite-docling"}, {re::gpt2}, keeps},
        {{"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2"}, {re::qwen2}, keeps},
        {{"stablelm2", "megrez"}, {re::qwen2}, cleans},
        {{"qwen35"}, {re::qwen35}, keeps},
        {{"poro-chat"}, {re::poro}, keeps},
        {{"bloom", "gpt3-finnish"}, {re::poro}, cleans},
        {{"viking"}, {re::poro, R"re(\p{N})re"}, keeps},
        {{"tekken"}, {re::tekken}, {.ignore_merges = true, .add_bos = true, .clean_spaces = false}},
        {{"chameleon"},
         {R"re(<sentinel:[0-9]+>)re", R"re((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)re", R"re(([\t\n]|    |  ))re",
          R"re(\p{N})re", R"re([\p{P}!-/:-@\[-`{-~])re", re::gpt2},
         {.add_bos = true, .clean_spaces = false}},
        {{"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}, {re::gpt4o}, keeps},
        {{"bailingmoe", "bailingmoe2", "llada-moe"}, {re::bailingmoe}, keeps},
        {{"seed-coder"}, {re::seed_coder}, keeps},
        {{"exaone-moe"}, {re::exaone_moe}, cleans},
        {{"minicpm5"}, {R"re(\p{N}{1,3})re", re::minicpm5}, {.ignore_merges = true}},
        {{"ufakzeka"}, {re::ufakzeka}, keeps},
        {{"laguna"}, {R"re([^\n]+|[\n]+)re", re::qwen2}, keeps},
        {{"gemma4", "granite-embed-multi-311m"}, {R"re([^\n]+|[\n]+)re"}, {.spm_style = true, .newline_runs = true}},
        {{"sarvam-moe"}, {R"re([^\n]+|[\n]+)re"}, {.clean_spaces = false, .spm_style = true}},
    };
    return table;
}

// The list llama.cpp falls back to when tokenizer.ggml.pre is missing or "default".
const std::vector<const char*>& default_regexes() {
    static const std::vector<const char*> r = {R"re([\p{P}\$\+<=>\^~\|]+)re", re::gpt2, R"re(\p{N}+)re",
                                               R"re([0-9][0-9][0-9])re"};
    return r;
}

const pre_entry* find_pre(std::string_view pre) {
    for (const auto& e : pre_table())
        for (auto n : e.names)
            if (n == pre) return &e;
    return nullptr;
}

} // namespace

bpe_pre_defaults bpe_pre_defaults_for(std::string_view pre) {
    if (pre.empty()) return cleans;
    if (const pre_entry* e = find_pre(pre)) return e->defaults;
    return {.known = false};
}

// ---------------------------------------------------------------------------------------------------------------------
// Regex splitting with PCRE2.

namespace {

struct regex_deleter {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
using regex_ptr = std::unique_ptr<pcre2_code, regex_deleter>;

regex_ptr compile_regex(const char* pattern) {
    int err = 0;
    PCRE2_SIZE err_offset = 0;
    // DOLLAR_ENDONLY: `$` means the end of the piece, as in std::regex (not "before a final newline").
    const uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, options, &err,
                                     &err_offset, nullptr);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        throw error(std::string("pre-tokenizer regex '") + pattern + "': " + reinterpret_cast<const char*>(msg) +
                    " at offset " + std::to_string(err_offset));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); // no JIT on this platform: pcre2_match interprets instead
    return regex_ptr(code);
}

// A byte range of the text.
struct span {
    uint32_t start;
    uint32_t n;
};

// The text as the regexes see it, and as the tokens are cut from it. `clean` is the input decoded the lenient
// llama.cpp way and re-encoded (each bad byte -> U+FFFD). `match` is what PCRE2 runs on: like `clean`, but with the
// code points where PCRE2's Unicode tables (v14) disagree with llama.cpp's (v15.1 categories, the White_Space list)
// replaced by stand-ins llama.cpp would treat the same way:
//   - non-ASCII whitespace -> U+000B, as llama.cpp does before its std::regex paths (so it matches \s, never a range);
//   - U+180E (format character, PCRE2 counts it as \s) -> U+200B (format character, not \s);
//   - surrogates (llama.cpp decodes them; PCRE2 rejects them) -> U+E000 (both "other", \p{C});
//   - characters new in Unicode 15.0/15.1 -> an older one of the same category (see unicode_15_stand_ins).
// clean_at[i] is the offset in `clean` of the character that starts at match[i].
struct split_text {
    std::string clean;
    std::string match;
    std::vector<uint32_t> clean_at; // (match.size() + 1)
};

// Code points assigned in Unicode 15.0 and 15.1, which PCRE2 10.42 (Unicode 14) sees as unassigned, each range with
// a stand-in that Unicode 14 already has in the same general category (L, M, N, P, S, C). BMP stand-ins stay inside
// the same literal regex ranges (U+0800-U+4E00 of deepseek's patterns); the others are outside every literal range,
// as the new characters are. Made by comparing the categories of Unicode 14 and 15.1 (UnicodeData.txt).
struct stand_in_range {
    uint32_t first, last, stand_in;
};
constexpr stand_in_range unicode_15_stand_ins[] = {
    {0x00CF3, 0x00CF3, 0x00CBC}, {0x00ECE, 0x00ECE, 0x00CBC}, {0x02FFC, 0x02FFF, 0x02FF0}, {0x031EF, 0x031EF, 0x02FF0},
    {0x10EFD, 0x10EFF, 0x1D167}, {0x1123F, 0x11240, 0x20000}, {0x11241, 0x11241, 0x1D167}, {0x11B00, 0x11B09, 0x10100},
    {0x11F00, 0x11F01, 0x1D167}, {0x11F02, 0x11F02, 0x20000}, {0x11F03, 0x11F03, 0x1D167}, {0x11F04, 0x11F10, 0x20000},
    {0x11F12, 0x11F33, 0x20000}, {0x11F34, 0x11F3A, 0x1D167}, {0x11F3E, 0x11F42, 0x1D167}, {0x11F43, 0x11F4F, 0x10100},
    {0x11F50, 0x11F59, 0x10107}, {0x1342F, 0x1342F, 0x20000}, {0x13439, 0x1343F, 0x13430}, {0x13440, 0x13440, 0x1D167},
    {0x13441, 0x13446, 0x20000}, {0x13447, 0x13455, 0x1D167}, {0x1B132, 0x1B132, 0x20000}, {0x1B155, 0x1B155, 0x20000},
    {0x1D2C0, 0x1D2D3, 0x10107}, {0x1DF25, 0x1DF2A, 0x20000}, {0x1E030, 0x1E06D, 0x20000}, {0x1E08F, 0x1E08F, 0x1D167},
    {0x1E4D0, 0x1E4EB, 0x20000}, {0x1E4EC, 0x1E4EF, 0x1D167}, {0x1E4F0, 0x1E4F9, 0x10107}, {0x1F6DC, 0x1F6DC, 0x1F600},
    {0x1F774, 0x1F776, 0x1F600}, {0x1F77B, 0x1F77F, 0x1F600}, {0x1F7D9, 0x1F7D9, 0x1F600}, {0x1FA75, 0x1FA77, 0x1F600},
    {0x1FA87, 0x1FA88, 0x1F600}, {0x1FAAD, 0x1FAAF, 0x1F600}, {0x1FABB, 0x1FABD, 0x1F600}, {0x1FABF, 0x1FABF, 0x1F600},
    {0x1FACE, 0x1FACF, 0x1F600}, {0x1FADA, 0x1FADB, 0x1F600}, {0x1FAE8, 0x1FAE8, 0x1F600}, {0x1FAF7, 0x1FAF8, 0x1F600},
    {0x2B739, 0x2B739, 0x20000}, {0x2EBF0, 0x2EE5D, 0x20000}, {0x31350, 0x323AF, 0x20000}};

uint32_t stand_in_for(uint32_t cpt) {
    if (cpt == 0x85 || cpt == 0xA0 || cpt == 0x1680 || (cpt >= 0x2000 && cpt <= 0x200A) || cpt == 0x2028 ||
        cpt == 0x2029 || cpt == 0x202F || cpt == 0x205F || cpt == 0x3000)
        return 0x0B; // White_Space
    if (cpt == 0x180E) return 0x200B;
    if (cpt >= 0xD800 && cpt <= 0xDFFF) return 0xE000;
    if (cpt < unicode_15_stand_ins[0].first) return cpt;
    const auto* r = std::upper_bound(std::begin(unicode_15_stand_ins), std::end(unicode_15_stand_ins), cpt,
                                     [](uint32_t c, const stand_in_range& x) { return c < x.first; });
    return r != std::begin(unicode_15_stand_ins) && cpt <= (r - 1)->last ? (r - 1)->stand_in : cpt;
}

split_text prepare(std::string_view text) {
    // offsets are 32-bit and a bad byte grows to 3 (U+FFFD)
    if (text.size() > (size_t(1) << 30))
        throw error("tokenize: text of " + std::to_string(text.size()) +
                    " bytes is longer than the 1 GiB a call accepts");
    split_text t;
    t.clean.reserve(text.size());
    t.match.reserve(text.size());
    t.clean_at.reserve(text.size() + 1);
    for (size_t i = 0; i < text.size();) {
        const uint32_t cpt = utf8_decode(text, i);
        const uint32_t stand_in = cpt < 0x80 ? cpt : stand_in_for(cpt);
        const size_t match_before = t.match.size();
        utf8_append(t.match, stand_in);
        t.clean_at.insert(t.clean_at.end(), t.match.size() - match_before, uint32_t(t.clean.size()));
        utf8_append(t.clean, cpt);
    }
    t.clean_at.push_back(uint32_t(t.clean.size()));
    return t;
}

// PCRE2's mutable matching state (match data and a JIT stack), one per thread, so one tokenizer can serve several.
struct match_state {
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    pcre2_match_context* ctx = pcre2_match_context_create(nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    match_state() {
        if (!md || !ctx || !stack) throw std::bad_alloc();
        pcre2_jit_stack_assign(ctx, nullptr, stack);
    }
    ~match_state() {
        pcre2_jit_stack_free(stack);
        pcre2_match_context_free(ctx);
        pcre2_match_data_free(md);
    }
    match_state(const match_state&) = delete;
    match_state& operator=(const match_state&) = delete;
};

// Splits each piece of `in` by the matches of `code` inside it (the piece is the whole subject, so lookarounds and
// anchors do not see past it). Matches and the gaps between them are both kept; empty matches only separate.
void split_by_regex(const pcre2_code* code, std::string_view text, const std::vector<span>& in, std::vector<span>& out,
                    match_state& st) {
    out.clear();
    for (const span& piece : in) {
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + piece.start);
        const size_t len = piece.n;
        size_t pos = 0, gap = 0;
        uint32_t options = 0;
        while (pos <= len) {
            const int rc = pcre2_match(code, subject, len, pos, options | PCRE2_NO_UTF_CHECK, st.md, st.ctx);
            if (rc == PCRE2_ERROR_NOMATCH) {
                if (options == 0 || pos >= len) break;
                pos += std::min(utf8_len(text[piece.start + pos]), len - pos); // after an empty match: step one char
                options = 0;
                continue;
            }
            if (rc < 0) {
                PCRE2_UCHAR msg[256];
                pcre2_get_error_message(rc, msg, sizeof(msg));
                throw error(std::string("pre-tokenizer regex: ") + reinterpret_cast<const char*>(msg));
            }
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
            const size_t begin = ov[0], end = ov[1];
            if (begin > gap) out.push_back({uint32_t(piece.start + gap), uint32_t(begin - gap)});
            if (end > begin) out.push_back({uint32_t(piece.start + begin), uint32_t(end - begin)});
            gap = end;
            pos = end;
            options = end == begin ? PCRE2_NOTEMPTY_ATSTART | PCRE2_ANCHORED : 0;
        }
        if (gap < len) out.push_back({uint32_t(piece.start + gap), uint32_t(len - gap)});
    }
}

// ---------------------------------------------------------------------------------------------------------------------
// Merging.

struct bpe_merge {
    int32_t rank;   // index in tokenizer.ggml.merges: lower merges first
    int32_t result; // piece id of left + right
};

struct bpe_symbol {
    int32_t piece; // piece id of the text: a token id, an id >= n_tokens for strings only seen in merges, or -1
    int32_t prev;
    int32_t next;
    uint32_t start; // offset of the first byte in the word
    uint32_t n;     // bytes; 0 once merged into its left neighbour
};

struct bpe_bigram {
    int32_t rank;
    int32_t left;
    int32_t right;
    uint32_t size; // bytes of left + right when queued; symbols only grow, so a mismatch means it is stale
};

// Lowest rank first; on equal ranks the leftmost pair.
struct bpe_bigram_order {
    bool operator()(const bpe_bigram& a, const bpe_bigram& b) const {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
};

uint64_t pair_key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
}

} // namespace

struct bpe_tokenizer::impl {
    std::vector<regex_ptr> regexes;
    bool ignore_merges = false;
    bool spm_style = false;    // raw UTF-8 symbols, "<0xXX>" fallback (bpe_pre_defaults::spm_style)
    bool newline_runs = false; // a newline-only pre-token is looked up whole first
    int32_t n_tokens = 0;
    text_map extra_pieces;                          // strings of merges that are not tokens -> id >= n_tokens
    std::unordered_map<uint64_t, bpe_merge> merges; // (left piece, right piece) -> rank, result
    std::array<int32_t, 256> byte_piece{};          // piece id of each byte's GPT-2 character, or -1

    int32_t piece_of(const vocab_data& v, std::string_view s) const {
        const token id = v.find(s);
        if (id >= 0) return id;
        auto it = extra_pieces.find(s);
        return it == extra_pieces.end() ? -1 : it->second;
    }
    int32_t intern(const vocab_data& v, std::string_view s) {
        const int32_t id = piece_of(v, s);
        if (id >= 0) return id;
        const int32_t next = n_tokens + int32_t(extra_pieces.size());
        extra_pieces.emplace(std::string(s), next);
        return next;
    }

    void merge_word(const vocab_data& v, std::string_view word, std::vector<token>& out,
                    std::vector<bpe_symbol>& symbols) const;
};

bpe_tokenizer::bpe_tokenizer(const vocab_data& v, const std::vector<std::string>& merges, std::string_view pre)
    : p_(std::make_unique<impl>()) {
    const pre_entry* entry = pre.empty() ? nullptr : find_pre(pre);
    const auto& patterns = entry && !entry->regexes.empty() ? entry->regexes : default_regexes();
    for (const char* pattern : patterns) p_->regexes.push_back(compile_regex(pattern));
    p_->ignore_merges = v.ignore_merges;
    if (entry) {
        p_->spm_style = entry->defaults.spm_style;
        p_->newline_runs = entry->defaults.newline_runs;
    }
    p_->n_tokens = v.n_tokens();

    p_->merges.reserve(merges.size());
    for (size_t i = 0; i < merges.size(); i++) {
        const std::string& m = merges[i];
        const size_t space = m.find(' ', 1); // "left right"; a leading space would belong to left
        if (space == std::string::npos) continue;
        const std::string_view left = std::string_view(m).substr(0, space);
        const std::string_view right = std::string_view(m).substr(space + 1);
        const int32_t l = p_->intern(v, left), r = p_->intern(v, right);
        const int32_t result = p_->intern(v, std::string(left) + std::string(right));
        p_->merges.emplace(pair_key(l, r), bpe_merge{int32_t(i), result}); // the first of duplicate merges wins
    }
    for (int b = 0; b < 256; b++) p_->byte_piece[b] = p_->piece_of(v, gpt2_byte_to_utf8(uint8_t(b)));
}

bpe_tokenizer::~bpe_tokenizer() = default;

// BPE on one pre-token. `word` holds the original bytes; symbol texts are their GPT-2 characters.
void bpe_tokenizer::impl::merge_word(const vocab_data& v, std::string_view word, std::vector<token>& out,
                                     std::vector<bpe_symbol>& symbols) const {
    const bool whole = ignore_merges || (newline_runs && word.find_first_not_of('\n') == std::string_view::npos);
    if (whole) {
        std::string mapped;
        if (spm_style)
            mapped = word;
        else
            for (char c : word) mapped += gpt2_byte_to_utf8(uint8_t(c));
        const token id = v.find(mapped);
        if (id >= 0) {
            out.push_back(id);
            return;
        }
    }

    // One symbol per byte (its GPT-2 character), or per UTF-8 character for SentencePiece-style BPE.
    symbols.clear();
    for (uint32_t i = 0; i < word.size();) {
        const uint32_t n = spm_style ? uint32_t(std::min(utf8_len(word[i]), word.size() - i)) : 1;
        const int32_t piece = spm_style ? piece_of(v, word.substr(i, n)) : byte_piece[uint8_t(word[i])];
        const int32_t index = int32_t(symbols.size());
        symbols.push_back({piece, index - 1, i + n == word.size() ? -1 : index + 1, i, n});
        i += n;
    }

    std::priority_queue<bpe_bigram, std::vector<bpe_bigram>, bpe_bigram_order> queue;
    auto try_add_bigram = [&](int32_t left, int32_t right) {
        if (left < 0 || right < 0) return;
        const int32_t a = symbols[left].piece, b = symbols[right].piece;
        if (a < 0 || b < 0) return;
        auto it = merges.find(pair_key(a, b));
        if (it == merges.end()) return;
        queue.push({it->second.rank, left, right, symbols[left].n + symbols[right].n});
    };
    for (int32_t i = 1; i < int32_t(symbols.size()); i++) try_add_bigram(i - 1, i);

    while (!queue.empty()) {
        const bpe_bigram bg = queue.top();
        queue.pop();
        bpe_symbol& left = symbols[bg.left];
        bpe_symbol& right = symbols[bg.right];
        if (left.n == 0 || right.n == 0 || left.n + right.n != bg.size) continue;
        left.piece = merges.at(pair_key(left.piece, right.piece)).result;
        left.n += right.n;
        right.n = 0;
        left.next = right.next;
        if (right.next >= 0) symbols[right.next].prev = bg.left;
        try_add_bigram(left.prev, bg.left);
        try_add_bigram(bg.left, left.next);
    }

    for (int32_t i = symbols.empty() ? -1 : 0; i != -1; i = symbols[i].next) {
        const bpe_symbol& s = symbols[i];
        if (s.piece >= 0 && s.piece < n_tokens) {
            out.push_back(s.piece);
            continue;
        }
        // Not a token: llama.cpp looks up each byte of the symbol's GPT-2 text as a 1-character token and drops
        // the bytes that are none (only printable ASCII usually is); SentencePiece-style BPE takes "<0xXX>".
        if (spm_style) {
            for (char c : word.substr(s.start, s.n)) {
                static constexpr char hex[] = "0123456789ABCDEF";
                const char text[6] = {'<', '0', 'x', hex[uint8_t(c) >> 4], hex[uint8_t(c) & 15], '>'};
                const token id = v.find(std::string_view(text, 6));
                if (id >= 0) out.push_back(id);
            }
            continue;
        }
        for (char c : word.substr(s.start, s.n))
            for (char m : gpt2_byte_to_utf8(uint8_t(c))) {
                const token id = v.find(std::string_view(&m, 1));
                if (id >= 0) out.push_back(id);
            }
    }
}

static std::vector<span> split_spans(const std::vector<regex_ptr>& regexes, const split_text& t) {
    std::vector<span> pieces, next;
    if (!t.match.empty()) pieces.push_back({0, uint32_t(t.match.size())});
    thread_local match_state st; // one per thread: tokenize() runs once per raw fragment, often on short text
    for (const auto& r : regexes) {
        split_by_regex(r.get(), t.match, pieces, next, st);
        pieces.swap(next);
    }
    return pieces;
}

void bpe_tokenizer::tokenize(const vocab_data& v, std::string_view text, std::vector<token>& out) const {
    const split_text t = prepare(text);
    std::vector<bpe_symbol> symbols;
    for (const span& s : split_spans(p_->regexes, t)) {
        const uint32_t begin = t.clean_at[s.start], end = t.clean_at[s.start + s.n];
        p_->merge_word(v, std::string_view(t.clean).substr(begin, end - begin), out, symbols);
    }
}

std::vector<std::string> bpe_tokenizer::split(std::string_view text) const {
    const split_text t = prepare(text);
    std::vector<std::string> words;
    for (const span& s : split_spans(p_->regexes, t)) {
        const uint32_t begin = t.clean_at[s.start], end = t.clean_at[s.start + s.n];
        words.push_back(t.clean.substr(begin, end - begin));
    }
    return words;
}

} // namespace tessera
