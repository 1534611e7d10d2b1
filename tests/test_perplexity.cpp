// test_perplexity.cpp: the perplexity method and the KL-divergence base file: scoring math on known logits, the
// same result whatever the batch size, a model compared with itself (KLD 0, same top 100%), base files that are
// truncated or do not fit the model rejected with a clear error.
#include "helpers.h"
#include "tiny_model.h"

#include "ggml-like/error.h"
#include "llm/perplexity.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace tessera;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
    return (fs::temp_directory_path() / ("tessera_test_ppl_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Text long enough for a few chunks of 64 tokens with any vocabulary.
std::string sample_text() {
    std::string t = test::read_file(test::data_dir() + "/wiki.test.raw");
    if (t.size() > 40000) t.resize(40000);
    if (t.empty())
        for (int i = 0; i < 2000; i++) t += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
    return t;
}

} // namespace

TEST(perplexity_math, token_nll_is_log_softmax) {
    const float logits[4] = {1.0f, 2.0f, 3.0f, 0.5f};
    double z = 0;
    for (float l : logits) z += std::exp(double(l));
    EXPECT_NEAR(token_nll(logits, 4, 1), -(2.0 - std::log(z)), 1e-6);
}

TEST(perplexity_math, base_record_round_trips_log_probs) {
    auto l = test::random_normal(101, 3, 4.0f); // odd vocabulary: the record is padded
    std::vector<uint16_t> rec(static_cast<size_t>(kld_record_size(101)));
    const double nll = encode_log_probs(l.data(), 101, 7, rec.data());
    EXPECT_NEAR(nll, token_nll(l.data(), 101, 7), 1e-5);
    kld_stats k;
    auto [kld, dp] = compare_log_probs(l.data(), 101, rec.data(), 7, k);
    // the same logits against their own 16-bit encoding: KLD and Δp are the quantization error only
    EXPECT_LT(std::fabs(kld), 1e-5);
    EXPECT_LT(std::fabs(dp), 1e-4f);
    EXPECT_EQ(k.n_same_top, 1u);
}

TEST(perplexity_run, batch_size_does_not_change_the_result) {
    const std::string path = temp_path("model.gguf");
    test::write_tiny_model(path, {});
    auto m = model::load(path);
    const std::string text = sample_text();
    perplexity_params pp;
    pp.n_ctx = 128;
    pp.n_chunks = 3;
    std::vector<double> got;
    for (int64_t nb : {128, 64, 2048}) {
        session s(*m, session_params{.n_ctx = 128, .n_batch = std::min<int64_t>(nb, 128), .n_threads = 2});
        auto r = run_perplexity(s, text, pp);
        EXPECT_EQ(r.n_chunks, 3);
        EXPECT_EQ(r.count, 3 * (128 - 1 - 64));
        got.push_back(r.ppl());
    }
    EXPECT_EQ(got[0], got[1]); // bit-identical: every batch holds >= 64 queries, one attention path
    EXPECT_EQ(got[0], got[2]);
    fs::remove(path);
}

// Several chunks in one batch (llama-perplexity's -b = k * -c): each chunk attends to itself only, at positions from 0,
// so the scores equal one chunk a batch exactly on the CPU (the masked keys add exact zeros), in all three modes, also
// when the last batch holds fewer chunks (5 chunks, 2 a batch).
TEST(perplexity_run, packed_chunks_give_the_same_scores) {
    const std::string path = temp_path("model_packed.gguf"), b1 = temp_path("one.kld"), b2 = temp_path("packed.kld");
    test::write_tiny_model(path, {});
    auto m = model::load(path);
    const std::string text = sample_text();
    auto run = [&](int64_t n_seq, const std::string& out, const std::string& in) {
        session s(*m, session_params{.n_ctx = 64 * n_seq, .n_batch = 64 * n_seq, .n_threads = 2});
        perplexity_params pp;
        pp.n_ctx = 64;
        pp.n_chunks = 5;
        pp.n_seq = n_seq;
        pp.kld_base_out = out;
        pp.kld_base_in = in;
        return run_perplexity(s, in.empty() ? text : "", pp);
    };
    const perplexity_result one = run(1, b1, ""), packed = run(2, b2, "");
    EXPECT_EQ(one.count, 5 * (64 - 1 - 32));
    EXPECT_EQ(one.count, packed.count);
    EXPECT_EQ(one.nll, packed.nll);
    EXPECT_EQ(one.running_ppl, packed.running_ppl);
    EXPECT_EQ(test::read_file(b1), test::read_file(b2)) << "the base files differ";
    const perplexity_result c1 = run(1, "", b1), c2 = run(2, "", b1), c3 = run(4, "", b1);
    for (const perplexity_result* c : {&c2, &c3}) {
        EXPECT_EQ(c1.kld.count, c->kld.count);
        EXPECT_EQ(c1.kld.sum_kld, c->kld.sum_kld);
        EXPECT_EQ(c1.kld.n_same_top, c->kld.n_same_top);
        EXPECT_EQ(c1.nll, c->nll);
    }
    fs::remove(b1);
    fs::remove(b2);
    fs::remove(path);
}

TEST(perplexity_run, kld_of_a_model_against_itself_is_zero) {
    const std::string path = temp_path("model2.gguf"), base = temp_path("base.kld");
    test::write_tiny_model(path, {});
    auto m = model::load(path);
    session s(*m, session_params{.n_ctx = 128, .n_threads = 2});
    perplexity_params pp;
    pp.n_ctx = 128;
    pp.n_chunks = 2;
    pp.kld_base_out = base;
    auto r1 = run_perplexity(s, sample_text(), pp);
    ASSERT_TRUE(fs::exists(base));
    EXPECT_TRUE(test::temps_of(base).empty());
    // file size: header + tokens + records, exactly llama.cpp's layout
    const int64_t nv = kld_record_size(m->hp.n_vocab);
    EXPECT_EQ(int64_t(fs::file_size(base)), 20 + 2 * 128 * 4 + 2 * (128 - 1 - 64) * nv * 2);
    perplexity_params cmp;
    cmp.kld_base_in = base;
    auto r2 = run_perplexity(s, "", cmp);
    ASSERT_TRUE(r2.has_kld);
    EXPECT_EQ(r2.kld.count, uint64_t(r1.count));
    EXPECT_LT(r2.kld.sum_kld / double(r2.kld.count), 1e-5); // only the 16-bit encoding of the base differs
    EXPECT_EQ(r2.kld.n_same_top, r2.kld.count);
    // writing the base uses llama.cpp's f32 log-sum (as it does), scoring uses f64: equal to ~1e-7
    EXPECT_NEAR(r2.ppl(), r1.ppl(), 1e-6 * r1.ppl());

    // broken base files: truncated, wrong magic, another vocabulary
    const std::string bytes = test::read_file(base);
    auto expect_error = [&](const std::string& content, const char* what) {
        const std::string bad = temp_path("bad.kld");
        std::ofstream(bad, std::ios::binary) << content;
        perplexity_params p;
        p.kld_base_in = bad;
        try {
            run_perplexity(s, "", p);
            ADD_FAILURE() << what << ": accepted";
        } catch (const error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
        fs::remove(bad);
    };
    expect_error(bytes.substr(0, bytes.size() - 100), "truncated");
    expect_error(bytes.substr(0, 10), "truncated");
    expect_error("_logitz_" + bytes.substr(8), "not a KL-divergence base file");
    std::string other = bytes;
    const int32_t vocab = 1234;
    std::memcpy(other.data() + 12, &vocab, 4);
    expect_error(other, "vocabulary");
    fs::remove(base);
    fs::remove(path);
}

TEST(perplexity_run, too_little_text_is_an_error) {
    const std::string path = temp_path("model3.gguf");
    test::write_tiny_model(path, {});
    auto m = model::load(path);
    session s(*m, session_params{.n_ctx = 128});
    perplexity_params pp;
    pp.n_ctx = 128;
    EXPECT_THROW(run_perplexity(s, "too short", pp), error);
    fs::remove(path);
}

// ---------------------------------------------------------------------------------------------------------------------
// The base-file reader on hand-made files (hardening, #6; tests/fuzz/fuzz_kld_base.cpp fuzzes the same reader).

namespace {

// A base file for a vocabulary of n_vocab: header, tokens (i % n_vocab) and `n_chunk` chunks of constant records.
std::string kld_file(int32_t n_ctx, int32_t n_vocab, int32_t n_chunk) {
    std::string s = "_logits_";
    const int32_t hdr[3] = {n_ctx, n_vocab, n_chunk};
    s.append(reinterpret_cast<const char*>(hdr), 12);
    for (int32_t i = 0; i < n_ctx * n_chunk; i++) {
        const int32_t t = i % n_vocab;
        s.append(reinterpret_cast<const char*>(&t), 4);
    }
    s.append(size_t(n_chunk * (n_ctx - 1 - n_ctx / 2) * kld_record_size(n_vocab) * 2), '\x01');
    return s;
}

// Reads the whole file as run_perplexity does; returns the error message, or "" when it was accepted.
std::string kld_read_error(const std::string& bytes, int64_t model_vocab) {
    std::istringstream in(bytes);
    try {
        kld_base_reader r(in, bytes.size(), "t.kld", model_vocab);
        std::vector<uint16_t> rec;
        for (int32_t c = 0; c < r.n_chunk; c++) r.read_chunk(rec);
        return "";
    } catch (const error& e) {
        EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
        EXPECT_EQ(std::string(e.what()).rfind("t.kld: ", 0), 0u) << e.what();
        return e.what();
    }
}

} // namespace

TEST(perplexity_base_file, every_cut_and_bad_header_is_a_clear_error) {
    const std::string good = kld_file(8, 7, 3);
    EXPECT_EQ(kld_read_error(good, 7), "");
    for (size_t n = 0; n < good.size(); n++)
        EXPECT_NE(kld_read_error(good.substr(0, n), 7), "") << "cut at " << n;
    auto with_header = [&](int32_t n_ctx, int32_t n_vocab, int32_t n_chunk) {
        std::string s = good;
        const int32_t hdr[3] = {n_ctx, n_vocab, n_chunk};
        std::memcpy(s.data() + 8, hdr, 12);
        return s;
    };
    EXPECT_NE(kld_read_error(with_header(3, 7, 3), 7).find("implausible header: n_ctx 3"), std::string::npos);
    EXPECT_NE(kld_read_error(with_header(8, 0, 3), 7).find("implausible header"), std::string::npos);
    EXPECT_NE(kld_read_error(with_header(8, 7, -1), 7).find("implausible header"), std::string::npos);
    EXPECT_NE(kld_read_error(with_header(8, 7, 4), 7).find("file is truncated: 4 chunks of 8 tokens"),
              std::string::npos);
    EXPECT_NE(kld_read_error(good, 9).find("base vocabulary has 7 tokens, the model 9"), std::string::npos);
    std::string bad_token = good;
    const int32_t seven = 7;
    std::memcpy(bad_token.data() + 20 + 4 * 5, &seven, 4);
    EXPECT_NE(kld_read_error(bad_token, 7).find("token id 7 out of range, expected 0..6"), std::string::npos);
}

// The largest header the limits allow (2^24 tokens of context and vocabulary, 2^31 - 1 chunks) needs more than 2^64
// bytes: the size check used to overflow and let a 32-byte file through to a 2^55-element allocation.
TEST(perplexity_base_file, size_arithmetic_does_not_overflow) {
    std::string s = "_logits_";
    const int32_t hdr[3] = {1 << 24, 1 << 24, 0x7FFFFFFF};
    s.append(reinterpret_cast<const char*>(hdr), 12);
    s.append(64, '\0');
    EXPECT_NE(kld_read_error(s, 1 << 24).find("need more than 2^64 bytes"), std::string::npos)
        << kld_read_error(s, 1 << 24);
}
