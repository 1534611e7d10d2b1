// test_tokenizer.cpp: golden tokenizer vectors (llama.cpp's ggml-vocab-*.gguf{,.inp,.out}, FORMATS.md §6) for every
// vocabulary found under data_dir()/vocab (plus the folders in TESSERA_VOCAB_DIRS, colon-separated), the special-token
// and end-of-generation rules on the default model, a whole-file speed and round-trip check, and `tessera tokenize`.
#include "helpers.h"

#include "ggml-like/error.h"
#include "ggml-like/gguf.h"
#include "llm/vocab.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;
using namespace tessera;

namespace {

vocab load_vocab(const std::string& path) {
    return vocab::from_gguf(gguf_file::open(path));
}

std::vector<std::string> vocab_files() {
    std::vector<std::string> dirs = {test::data_dir() + "/vocab"};
    if (const char* extra = std::getenv("TESSERA_VOCAB_DIRS")) {
        std::stringstream ss(extra);
        for (std::string d; std::getline(ss, d, ':');)
            if (!d.empty()) dirs.push_back(d);
    }
    std::vector<std::string> files;
    for (const auto& d : dirs) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(d, ec))
            if (e.path().extension() == ".gguf") files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    return files;
}

struct vocab_case {
    std::string input;
    std::vector<token> expected;
};

// .inp: each test string followed by "\n__ggml_vocab_test__\n"; .out: one line of ids per test.
std::vector<vocab_case> read_cases(const std::string& gguf_path) {
    const std::string inp = test::read_file(gguf_path + ".inp");
    const std::string out = test::read_file(gguf_path + ".out");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> inputs;
    for (size_t pos = 0; pos < inp.size();) {
        const size_t next = inp.find(sep, pos);
        if (next == std::string::npos) {
            inputs.push_back(inp.substr(pos));
            break;
        }
        inputs.push_back(inp.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::vector<vocab_case> cases;
    std::stringstream lines(out);
    size_t i = 0;
    for (std::string line; std::getline(lines, line); i++) {
        vocab_case c;
        c.input = i < inputs.size() ? inputs[i] : "";
        std::stringstream ids(line);
        for (long id; ids >> id;) c.expected.push_back(token(id));
        cases.push_back(std::move(c));
    }
    EXPECT_EQ(inputs.size(), cases.size()) << gguf_path << ": .inp and .out hold different numbers of tests";
    return cases;
}

std::string escaped(const std::string& s) {
    std::string r;
    for (unsigned char c : s) {
        if (c == '\n')
            r += "\\n";
        else if (c == '\t')
            r += "\\t";
        else if (c == '\r')
            r += "\\r";
        else
            r += char(c);
    }
    return r;
}

std::string ids_str(const std::vector<token>& ids) {
    std::string s;
    for (token t : ids) s += (s.empty() ? "" : " ") + std::to_string(t);
    return s;
}

// Whether llama.cpp's detokenize(tokenize(s)) gives back s: with clean_spaces it drops the space in " ?", " !",
// " .", " ,", " ' " and before 's 'm 're 've; we only compare inputs without those. WordPiece never gives the text
// back (lowercased, accents and runs of whitespace gone, a space before every word).
bool round_trips(const vocab& v, const std::string& s) {
    if (v.model() == "bert") return false;
    if (!v.clean_spaces()) return true;
    for (const char* p : {" ?", " !", " .", " ,", " '"})
        if (s.find(p) != std::string::npos) return false;
    return true;
}

class vocab_file : public ::testing::TestWithParam<std::string> {};

TEST_P(vocab_file, matches_llama_cpp_vectors) {
    const std::string path = GetParam();
    if (!fs::exists(path + ".inp") || !fs::exists(path + ".out")) GTEST_SKIP() << path << ": no .inp/.out";
    std::unique_ptr<vocab> v;
    try {
        v = std::make_unique<vocab>(load_vocab(path));
    } catch (const error& e) {
        if (std::string(e.what()).find("tokenizer.ggml.model: expected") != std::string::npos) GTEST_SKIP() << e.what();
        throw;
    }
    const auto cases = read_cases(path);
    ASSERT_FALSE(cases.empty());
    for (const auto& c : cases) {
        const std::vector<token> got = v->tokenize(c.input, /*add_special=*/false, /*parse_special=*/false);
        EXPECT_EQ(ids_str(got), ids_str(c.expected))
            << fs::path(path).filename() << " input '" << escaped(c.input) << "'";
        // the reverse direction, as test-tokenizer-0 prints it: common_detokenize(ids) with specials rendered
        if (round_trips(*v, c.input)) {
            EXPECT_EQ(escaped(v->detokenize(got, /*remove_special=*/false, /*unparse_special=*/true)), escaped(c.input))
                << fs::path(path).filename() << ": detokenize(tokenize(s)) != s";
        }
    }
}

std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
    std::string n = fs::path(info.param).stem().string();
    if (n.rfind("ggml-vocab-", 0) == 0) n = n.substr(11);
    for (char& c : n)
        if (!std::isalnum(uint8_t(c))) c = '_';
    return n + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(vocab, vocab_file, ::testing::ValuesIn(vocab_files()), param_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(vocab_file);

// ---------------------------------------------------------------------------------------------------------------------
// Small vocabularies written in memory: defaults, special-token rules and errors on broken metadata.

// A byte-level BPE vocabulary: the 256 GPT-2 byte characters, "he" "ll" "hell" "hello" with their merges, a
// user-defined token and a control token.
gguf_writer tiny_bpe_writer() {
    std::vector<std::string> tokens;
    int n_moved = 0; // GPT-2: printable Latin-1 bytes stand for themselves, the others become U+0100, U+0101, ...
    for (int b = 0; b < 256; b++) {
        const bool itself = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        const uint32_t cpt = itself ? uint32_t(b) : uint32_t(256 + n_moved++);
        tokens.push_back(cpt < 0x80 ? std::string(1, char(cpt))
                                    : std::string{char(0xC0 | (cpt >> 6)), char(0x80 | (cpt & 0x3F))});
    }
    for (const char* t : {"he", "ll", "hell", "hello", "<|user|>", "<|ctl|>"}) tokens.push_back(t); // ids 256..261
    std::vector<int32_t> types(tokens.size(), 1);
    types[260] = 4; // user-defined
    types[261] = 3; // control
    gguf_writer w;
    w.set("general.architecture", gguf_value::of_string("llama"));
    w.set("tokenizer.ggml.model", gguf_value::of_string("gpt2"));
    w.set("tokenizer.ggml.pre", gguf_value::of_string("gpt-2"));
    w.set("tokenizer.ggml.tokens", gguf_value::of_strings(tokens));
    w.set("tokenizer.ggml.token_type", gguf_value::of_i32s(types));
    w.set("tokenizer.ggml.merges", gguf_value::of_strings({"h e", "l l", "he ll", "hell o"}));
    w.set("tokenizer.ggml.eos_token_id", gguf_value::of_u32(261));
    return w;
}

vocab vocab_of(const gguf_writer& w) {
    return vocab::from_gguf(gguf_file::from_memory(w.to_bytes(), "tiny.gguf"));
}

TEST(tokenizer_tiny, bpe_merges_specials_and_defaults) {
    const vocab v = vocab_of(tiny_bpe_writer());
    EXPECT_EQ(v.model(), "gpt2");
    EXPECT_FALSE(v.add_bos()); // BPE default, no add_bos_token key
    EXPECT_EQ(v.bos(), 11);    // llama.cpp's BPE default id when the file names none
    EXPECT_EQ(v.eos(), 261);
    EXPECT_TRUE(v.is_eog(261));
    EXPECT_EQ(v.find("hello"), 259);
    EXPECT_EQ(ids_str(v.tokenize("hello", false, false)), "259");
    EXPECT_EQ(ids_str(v.tokenize("hel", false, false)), "256 108");   // "he" + 'l'
    EXPECT_EQ(ids_str(v.tokenize(" hello", false, false)), "32 259"); // no "Ġh" merge: the space stays alone
    // user-defined tokens split the text even without parse_special; control tokens only with it
    EXPECT_EQ(ids_str(v.tokenize("hello<|user|>hello", false, false)), "259 260 259");
    EXPECT_EQ(ids_str(v.tokenize("<|ctl|>", false, false)), "60 124 99 116 108 124 62"); // < | c t l | >
    EXPECT_EQ(ids_str(v.tokenize("<|ctl|>", false, true)), "261");
    EXPECT_EQ(v.detokenize(v.tokenize("hello<|ctl|> world", false, true), false, true), "hello<|ctl|> world");
    EXPECT_EQ(v.detokenize(v.tokenize("hello<|ctl|> world", false, true), false, false), "hello world");
}

TEST(tokenizer_tiny, overrides_and_unknown_pre) {
    gguf_writer w = tiny_bpe_writer();
    w.set("tokenizer.ggml.pre", gguf_value::of_string("no-such-pre")); // a warning; the default regexes are used
    w.set("tokenizer.ggml.add_bos_token", gguf_value::of_bool(true));
    w.set("tokenizer.ggml.bos_token_id", gguf_value::of_u32(260));
    const vocab v = vocab_of(w);
    EXPECT_TRUE(v.add_bos());
    EXPECT_EQ(ids_str(v.tokenize("hello", true, false)), "260 259");
    EXPECT_EQ(v.detokenize(v.tokenize("hello", true, false), true, false), "hello");
}

// A WordPiece vocabulary (tokenizer.ggml.model = "bert") in the converter's spelling: word starts marked with U+2581.
gguf_writer tiny_wpm_writer() {
    const std::vector<std::string> tokens = {"[PAD]",  "[UNK]",  "[CLS]",  "[SEP]", "[MASK]",             // 0-4
                                             "▁hello", "▁world", "▁un",    "aff",   "able",               // 5-9
                                             "▁,",     "▁!",     "▁apfel", "▁中",   "▁文",                // 10-14
                                             "▁a",     "pf",     "el",     "▁$",    "▁hello€", "▁Hello"}; // 15-20
    std::vector<int32_t> types(tokens.size(), 1);
    for (int i = 0; i < 5; i++) types[i] = 3; // control
    gguf_writer w;
    w.set("general.architecture", gguf_value::of_string("bert"));
    w.set("tokenizer.ggml.model", gguf_value::of_string("bert"));
    w.set("tokenizer.ggml.tokens", gguf_value::of_strings(tokens));
    w.set("tokenizer.ggml.token_type", gguf_value::of_i32s(types));
    w.set("tokenizer.ggml.bos_token_id", gguf_value::of_u32(2));
    w.set("tokenizer.ggml.unknown_token_id", gguf_value::of_u32(1));
    w.set("tokenizer.ggml.seperator_token_id", gguf_value::of_u32(3));
    return w;
}

TEST(tokenizer_tiny, wordpiece_normalizes_splits_and_covers_words_greedily) {
    const vocab v = vocab_of(tiny_wpm_writer());
    EXPECT_EQ(v.model(), "bert");
    auto ids = [&](const std::string& text) { return ids_str(v.tokenize(text, false, false)); };
    EXPECT_EQ(ids("Hello, World!"), "5 10 6 11"); // lowercased; punctuation is a word of its own
    EXPECT_EQ(ids("  hello\t\n world  "), "5 6"); // whitespace runs end words
    EXPECT_EQ(ids("unaffable"), "7 8 9");         // the longest entry first, left to right
    EXPECT_EQ(ids("\xC3\x84pfel"), "12");  // 'Ä' -> 'A' (accent stripped) -> 'a'; "▁apfel" beats "▁a" "pf" "el"
    EXPECT_EQ(ids("A\xCC\x88pfel"), "12"); // the combining diaeresis is dropped too
    EXPECT_EQ(ids("apfelx"), "1");         // a word that cannot be covered whole is unknown, whole
    EXPECT_EQ(ids("\xE4\xB8\xAD\xE6\x96\x87"), "13 14");      // CJK ideographs are words of their own
    EXPECT_EQ(ids("hello$world"), "5 18 6");                  // so are ASCII symbols ...
    EXPECT_EQ(ids("hello\xE2\x82\xAC"), "19");                // ... but not others ('€' stays in the word)
    EXPECT_EQ(ids("\x01he\xE2\x80\x8Bllo\xEF\xBF\xBD"), "5"); // control / format characters and U+FFFD dropped
    EXPECT_EQ(ids("\xFFhello"), "5");                         // a bad byte reads as U+FFFD: dropped
    EXPECT_EQ(ids(""), "");
    EXPECT_EQ(ids(std::string(10000, 'a')), "1");
    // [CLS] and [SEP] around the text with add_special; control tokens split the text with parse_special
    EXPECT_EQ(ids_str(v.tokenize("hello", true, false)), "2 5 3");
    EXPECT_EQ(ids_str(v.tokenize("hello[SEP]world", false, true)), "5 3 6");
    EXPECT_EQ(ids("hello[SEP]world"),
              "5 1 1 1 6"); // without it "[SEP]" is text: "[", "sep", "]", none in the vocabulary
    // detokenize: U+2581 -> ' ', then llama.cpp's space clean-up; [CLS] dropped with remove_special
    EXPECT_EQ(v.detokenize(v.tokenize("Hello, World!", true, false), true, false), " hello, world!");
    EXPECT_EQ(v.token_to_piece(13, false), " \xE4\xB8\xAD");
    // tokenizer.ggml.normalizer.lowercase = false: no lowercasing and (by default then) no accent stripping
    gguf_writer cased = tiny_wpm_writer();
    cased.set("tokenizer.ggml.normalizer.lowercase", gguf_value::of_bool(false));
    const vocab c = vocab_of(cased);
    EXPECT_EQ(ids_str(c.tokenize("Hello hello", false, false)), "20 5");
    EXPECT_EQ(ids_str(c.tokenize("\xC3\x84pfel", false, false)), "1");
    cased.set("tokenizer.ggml.normalizer.strip_accents", gguf_value::of_bool(true));
    EXPECT_EQ(ids_str(vocab_of(cased).tokenize("A\xCC\x88pfel Apfel", false, false)), "1 1"); // 'A' kept upper
}

TEST(tokenizer_tiny, broken_metadata_is_an_error) {
    auto throws = [](gguf_writer w, const char* what) {
        try {
            vocab_of(w);
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
            return;
        }
        ADD_FAILURE() << "expected an error mentioning " << what;
    };
    gguf_writer w = tiny_bpe_writer();
    w.set("tokenizer.ggml.model", gguf_value::of_string("t5")); // Unigram: not implemented
    throws(w, "tokenizer.ggml.model");
    w = tiny_bpe_writer();
    w.set("tokenizer.ggml.token_type", gguf_value::of_i32s(std::vector<int32_t>{1, 1}));
    throws(w, "tokenizer.ggml.token_type");
    gguf_writer no_merges;
    const gguf_file full = gguf_file::from_memory(tiny_bpe_writer().to_bytes());
    for (const auto& kv : full.kvs())
        if (kv.key != "tokenizer.ggml.merges") no_merges.set(kv.key, kv.value);
    throws(no_merges, "tokenizer.ggml.merges");
    gguf_writer no_vocab;
    no_vocab.set("general.architecture", gguf_value::of_string("llama"));
    throws(no_vocab, "tokenizer.ggml.model");
}

// ---------------------------------------------------------------------------------------------------------------------
// The default model (SmolLM2-135M-Instruct: gpt2 BPE, pre "smollm", ChatML markers).

const vocab& default_vocab() {
    static const vocab v = load_vocab(test::model_path());
    return v;
}

TEST(tokenizer_default_model, metadata_and_end_of_generation) {
    TS_REQUIRE_MODEL();
    const vocab& v = default_vocab();
    EXPECT_EQ(v.model(), "gpt2");
    EXPECT_EQ(v.pre(), "smollm");
    EXPECT_EQ(v.n_tokens(), 49152);
    EXPECT_EQ(v.bos(), 1);
    EXPECT_EQ(v.eos(), 2);
    EXPECT_FALSE(v.add_bos());
    EXPECT_FALSE(v.add_eos());
    EXPECT_FALSE(v.clean_spaces());
    const token endoftext = v.find("<|endoftext|>"), im_start = v.find("<|im_start|>"), im_end = v.find("<|im_end|>");
    EXPECT_EQ(endoftext, 0);
    EXPECT_EQ(im_start, 1);
    EXPECT_EQ(im_end, 2);
    EXPECT_TRUE(v.is_eog(im_end));
    EXPECT_TRUE(v.is_eog(endoftext));
    EXPECT_FALSE(v.is_eog(im_start));
    EXPECT_TRUE(v.is_eog(v.eot()));
    EXPECT_FALSE(v.is_eog(v.find("Hello")));
    EXPECT_FALSE(v.is_eog(-1));
    EXPECT_TRUE(v.is_control(im_start));
    EXPECT_EQ(v.attr(im_start), token_attr::control);
    EXPECT_EQ(v.token_to_piece(im_start, false), "");
    EXPECT_EQ(v.token_to_piece(im_start, true), "<|im_start|>");
    EXPECT_EQ(v.token_to_piece(v.find("Ġworld"), false), " world");
}

TEST(tokenizer_default_model, chatml_markers_are_single_tokens_only_when_parsed) {
    TS_REQUIRE_MODEL();
    const vocab& v = default_vocab();
    const std::string text = "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n";
    const auto parsed = v.tokenize(text, false, true);
    ASSERT_GE(parsed.size(), 4u);
    EXPECT_EQ(parsed.front(), 1);
    EXPECT_EQ(std::count(parsed.begin(), parsed.end(), 1), 2);
    EXPECT_EQ(std::count(parsed.begin(), parsed.end(), 2), 1);
    EXPECT_EQ(v.detokenize(parsed, false, true), text);
    EXPECT_EQ(v.detokenize(parsed, false, false), "user\nHello!\nassistant\n");

    const auto plain = v.tokenize(text, false, false);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
    EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
    EXPECT_GT(plain.size(), parsed.size());
    EXPECT_EQ(v.detokenize(plain, false, false), text);

    // add_special follows the model: SmolLM2 adds neither BOS nor EOS
    EXPECT_EQ(v.tokenize("Hello", true, true), v.tokenize("Hello", false, true));
    EXPECT_TRUE(v.tokenize("", true, true).empty());
}

TEST(tokenizer_default_model, golden_ids) {
    TS_REQUIRE_MODEL();
    const vocab& v = default_vocab();
    // ids from llama.cpp's llama-tokenize (--ids --no-escape) on the same file
    EXPECT_EQ(ids_str(v.tokenize("Hello world", false, false)), "19556 905");
    // digits are split one by one (pre "smollm"), contractions and punctuation as GPT-2 does
    EXPECT_EQ(ids_str(v.tokenize("I'm 25 years old, it's 3.14159!", false, false)),
              "57 5248 216 34 37 929 1573 28 357 506 216 35 30 33 36 33 37 41 17");
    EXPECT_EQ(ids_str(v.tokenize("<|im_start|>user\nHi<|im_end|>", false, true)), "1 4093 198 26843 2");
    EXPECT_EQ(ids_str(v.tokenize("<|im_start|>user\nHi<|im_end|>", false, false)),
              "44 108 306 79 3738 108 46 4093 198 26843 44 108 306 79 486 108 46");
}

TEST(tokenizer_default_model, whole_wiki_text_is_fast_and_round_trips) {
    TS_REQUIRE_MODEL();
    const std::string path = test::data_dir() + "/wiki.test.raw";
    if (!fs::exists(path)) GTEST_SKIP() << path << " not found";
    const vocab& v = default_vocab();
    const std::string text = test::read_file(path);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ids = v.tokenize(text, false, false);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wiki.test.raw: %zu bytes -> %zu tokens in %.3f s (%.1f MB/s)\n", text.size(), ids.size(), s,
                text.size() / s / 1e6);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    EXPECT_LT(s, 3.0) << "tokenizing 1.3 MB should take well under a few seconds (0.15 s measured, 2-core VM)";
#endif
    EXPECT_GT(ids.size(), text.size() / 8);
    EXPECT_TRUE(v.detokenize(ids, false, false) == text) << "detokenize(tokenize(wiki)) differs from the file";
}

TEST(tokenizer_default_model, concurrent_calls_agree_with_serial_ones) {
    TS_REQUIRE_MODEL();
    const vocab& v = default_vocab();
    std::vector<std::string> texts;
    for (int i = 0; i < 8; i++)
        texts.push_back("<|im_start|>user\nChunk " + std::to_string(i) + ": naïve café, 1234 🦙 it's  fine\n" +
                        std::string(size_t(i) * 100, 'x') + "<|im_end|>");
    std::vector<std::vector<token>> serial, parallel(texts.size());
    for (const auto& t : texts) serial.push_back(v.tokenize(t, true, true));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < texts.size(); i++)
        threads.emplace_back([&, i] {
            for (int rep = 0; rep < 20; rep++) parallel[i] = v.tokenize(texts[i], true, true);
        });
    for (auto& t : threads) t.join();
    EXPECT_EQ(serial, parallel);
}

// ---------------------------------------------------------------------------------------------------------------------
// `tessera tokenize`, run through the shell.

struct run_result {
    int status;
    std::string out;
};

run_result run_cli(const std::string& args) {
    const std::string cmd = std::string(TESSERA_BINARY) + " tokenize " + args + " 2>/dev/null";
    run_result r{-1, ""};
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof(buf), p)) > 0;) r.out.append(buf, n);
    r.status = pclose(p);
    return r;
}

#define TS_REQUIRE_BINARY()                                                                                            \
    do {                                                                                                               \
        if (!fs::exists(TESSERA_BINARY)) GTEST_SKIP() << TESSERA_BINARY << " not built";                               \
    } while (0)

TEST(tokenize_cli, ids_pieces_file_and_json) {
    TS_REQUIRE_MODEL();
    TS_REQUIRE_BINARY();
    const std::string m = "-m '" + test::model_path() + "'";

    auto r = run_cli(m + " -p 'Hello world' --ids");
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, "[19556, 905]\n");

    r = run_cli(m + " -p 'Hello world'");
    EXPECT_EQ(r.status, 0);
    EXPECT_EQ(r.out, " 19556 -> 'Hello'\n   905 -> ' world'\n");

    // special tokens are parsed by default, as in llama-tokenize
    r = run_cli(m + " -p '<|im_start|>user' --ids");
    EXPECT_EQ(r.out.rfind("[1, ", 0), 0u) << r.out;
    r = run_cli(m + " -p '<|im_start|>user' --ids --no-parse-special");
    EXPECT_NE(r.out.rfind("[1, ", 0), 0u) << r.out;

    // -f: the file's bytes exactly, the trailing newline included
    const std::string file = (fs::temp_directory_path() / "tessera_tokenize_test.txt").string();
    {
        std::FILE* f = std::fopen(file.c_str(), "wb");
        ASSERT_NE(f, nullptr);
        std::fputs("Hello world\n", f);
        std::fclose(f);
    }
    const auto expected = default_vocab().tokenize("Hello world\n", false, true);
    r = run_cli(m + " -f '" + file + "' --ids");
    EXPECT_EQ(
        r.out, "[" + [&] {
            std::string s;
            for (token t : expected) s += (s.empty() ? "" : ", ") + std::to_string(t);
            return s;
        }() + "]\n");
    fs::remove(file);

    r = run_cli(m + " -p 'Hello world' --json");
    EXPECT_EQ(r.status, 0);
    EXPECT_NE(r.out.find("\"ids\":[19556,905]"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"pieces\":[\"Hello\",\" world\"]"), std::string::npos) << r.out;
}

TEST(tokenize_cli, needs_exactly_one_text_source) {
    TS_REQUIRE_MODEL();
    TS_REQUIRE_BINARY();
    const std::string m = "-m '" + test::model_path() + "'";
    EXPECT_NE(run_cli(m).status, 0);
    EXPECT_NE(run_cli(m + " -p a -f /etc/hostname").status, 0);
    EXPECT_NE(run_cli("-m /nonexistent.gguf -p a").status, 0);
    const auto help = run_cli("--help");
    EXPECT_NE(help.out.find("Example:"), std::string::npos);
}

} // namespace
