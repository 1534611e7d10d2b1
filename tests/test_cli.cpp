// test_cli.cpp: runs the tessera binary (TESSERA_BINARY) through the shell and checks exit codes, stdout and stderr.
#include "helpers.h"
#include "tiny_model.h"

#include "ggml-like/gguf.h"
#include "llm/chat.h"
#include "llm/device.h"
#include "llm/model.h"
#include "llm/vocab.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <poll.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

namespace fs = std::filesystem;

struct cli_result {
    int rc = -1;
    std::string out; // stdout
    std::string err; // stderr
};

std::string shell_quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

// Runs `tessera ARGS` (ARGS already shell-quoted where needed); stderr goes to a temp file. `shell_prefix` runs in
// the same shell first (limits, traps), and the binary is exec'd so they apply to it.
cli_result run_tessera(const std::string& args, const std::string& shell_prefix = "") {
    static int n = 0;
    std::string err_path = (fs::temp_directory_path() /
                            ("tessera_test_cli_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + ".err"))
                               .string();
    std::string cmd = shell_prefix + "exec " + shell_quote(TESSERA_BINARY) + " " + args + " 2>" + shell_quote(err_path);
    cli_result r;
    std::FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return r;
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, got);
    int status = ::pclose(p);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.err = tessera::test::read_file(err_path);
    fs::remove(err_path);
    return r;
}

std::string vocab_path() {
    return tessera::test::data_dir() + "/vocab/ggml-vocab-llama-spm.gguf";
}

// A failure: non-zero exit, nothing on stdout, exactly one line on stderr starting with "error:".
void expect_one_line_error(const cli_result& r, const std::string& part) {
    EXPECT_NE(r.rc, 0);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    ASSERT_FALSE(r.err.empty());
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
    EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
}

} // namespace

TEST(cli_info, vocab_file_text) {
    if (!fs::exists(vocab_path())) GTEST_SKIP() << vocab_path() << " not found";
    cli_result r = run_tessera("info " + shell_quote(vocab_path()));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.err, "");
    EXPECT_NE(r.out.find("version    3"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("n_tensors  0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tokenizer.ggml.model"), std::string::npos);
    EXPECT_NE(r.out.find("[32000 strings] \"<unk>\", \"<s>\", \"</s>\""), std::string::npos) << r.out;

    EXPECT_NE(r.out.find("model      cannot run: "), std::string::npos) << r.out; // a vocabulary, no weights
    cli_result m = run_tessera("info -m " + shell_quote(vocab_path()));
    ASSERT_EQ(m.rc, 0) << m.err;
    EXPECT_EQ(m.out, r.out);
}

TEST(cli_info, vocab_file_json) {
    if (!fs::exists(vocab_path())) GTEST_SKIP() << vocab_path() << " not found";
    cli_result r = run_tessera("info --json " + shell_quote(vocab_path()));
    ASSERT_EQ(r.rc, 0) << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["version"], 3);
    EXPECT_EQ(j["n_tensors"], 0);
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.model"], "llama");
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.add_bos_token"], true);
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["count"], 32000);
    EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["type"], "str");
}

TEST(cli_info, model_tensors) {
    TS_REQUIRE_MODEL();
    cli_result r = run_tessera("info " + shell_quote(tessera::test::model_path()));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("token_embd.weight"), std::string::npos);
    EXPECT_NE(r.out.find("576 x 49152"), std::string::npos);
    EXPECT_NE(r.out.find("parameters "), std::string::npos);
    EXPECT_NE(r.out.find("bpw "), std::string::npos);

    cli_result n = run_tessera("info --no-tensors " + shell_quote(tessera::test::model_path()));
    ASSERT_EQ(n.rc, 0) << n.err;
    EXPECT_EQ(n.out.find("token_embd.weight"), std::string::npos);
    EXPECT_NE(n.out.find("general.architecture"), std::string::npos);

    cli_result j = run_tessera("info --json " + shell_quote(tessera::test::model_path()));
    ASSERT_EQ(j.rc, 0) << j.err;
    nlohmann::json o = nlohmann::json::parse(j.out);
    EXPECT_EQ(o["tensors"].size(), o["n_tensors"].get<size_t>());
    EXPECT_GT(o["totals"]["n_params"].get<uint64_t>(), 100000000u);
    // the model as the family reads it
    EXPECT_EQ(o["model"]["family"], "llama");
    EXPECT_EQ(o["model"]["layers"], "30");
    EXPECT_EQ(o["model"]["heads"], "9 query, 3 key/value, head size 64");
    EXPECT_NE(n.out.find("\nmodel\n  family      llama\n"), std::string::npos) << n.out;
    EXPECT_NE(n.out.find("  rope        normal, base 100000"), std::string::npos) << n.out;
}

TEST(cli_info, help_ends_with_example) {
    cli_result r = run_tessera("info --help");
    EXPECT_EQ(r.rc, 0);
    EXPECT_NE(r.out.find("Example:\n  tessera info "), std::string::npos) << r.out;
}

TEST(cli_info, missing_file_fails_with_one_line) {
    cli_result r = run_tessera("info /nonexistent/dir/model.gguf");
    expect_one_line_error(r, "/nonexistent/dir/model.gguf");
}

TEST(cli_info, no_model_fails_with_one_line) {
    expect_one_line_error(run_tessera("info"), "no model");
}

TEST(cli_info, truncated_file_fails_with_one_line) {
    if (!fs::exists(vocab_path())) GTEST_SKIP() << vocab_path() << " not found";
    std::string bytes = tessera::test::read_file(vocab_path());
    std::string cut_path =
        (fs::temp_directory_path() / ("tessera_test_cli_cut_" + std::to_string(::getpid()) + ".gguf")).string();
    for (size_t n : {size_t(0), size_t(10), size_t(1000), bytes.size() / 2}) {
        {
            std::FILE* f = std::fopen(cut_path.c_str(), "wb");
            ASSERT_NE(f, nullptr);
            std::fwrite(bytes.data(), 1, n, f);
            std::fclose(f);
        }
        cli_result r = run_tessera("info " + shell_quote(cut_path));
        expect_one_line_error(r, cut_path);
    }
    fs::remove(cut_path);
}

// ---- run ----

namespace {

// written once per process, removed when it exits
std::string tiny_model() {
    struct file {
        std::string path;
        ~file() { fs::remove(path); }
    };
    static const file f{[] {
        std::string p = (fs::temp_directory_path() / ("tessera_test_cli_tiny_" + std::to_string(::getpid()) + ".gguf"))
                            .string();
        tessera::test::write_tiny_model(p, {});
        return p;
    }()};
    return f.path;
}

} // namespace

TEST(cli_run, generates_and_reports_timings) {
    auto r = run_tessera("run -m " + shell_quote(tiny_model()) + " -p 'Hello world' -n 8 --temp 0 -t 2");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out.rfind("Hello world", 0), 0u); // the prompt is echoed, then the continuation
    EXPECT_GT(r.out.size(), std::string("Hello world").size());
    EXPECT_NE(r.err.find("prompt: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("tok/s"), std::string::npos) << r.err;
    auto quiet = run_tessera("run -m " + shell_quote(tiny_model()) + " -p 'Hello world' -n 8 --temp 0 --no-display-prompt");
    ASSERT_EQ(quiet.rc, 0);
    EXPECT_EQ("Hello world" + quiet.out, r.out); // greedy is deterministic, with or without the prompt echoed
}

TEST(cli_run, same_seed_same_text) {
    const std::string cmd = "run -m " + shell_quote(tiny_model()) + " -p 'Once' -n 16 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed ";
    auto a = run_tessera(cmd + "42"), b = run_tessera(cmd + "42"), c = run_tessera(cmd + "7");
    ASSERT_EQ(a.rc, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out, c.out);
}

TEST(cli_run, prompt_from_file_is_read_exactly) {
    const std::string f = (fs::temp_directory_path() / ("tessera_test_cli_prompt_" + std::to_string(::getpid()))).string();
    { std::ofstream(f, std::ios::binary) << "line one\nline two"; }
    auto a = run_tessera("run -m " + shell_quote(tiny_model()) + " -f " + shell_quote(f) + " -n 4 --temp 0");
    auto b = run_tessera("run -m " + shell_quote(tiny_model()) + " -p \"$(printf 'line one\\nline two')\" -n 4 --temp 0");
    ASSERT_EQ(a.rc, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    fs::remove(f);
}

TEST(cli_run, bad_input_fails_with_one_line) {
    expect_one_line_error(run_tessera("run -m /nonexistent/model.gguf -p hi"), "no such file");
    expect_one_line_error(run_tessera("run -m " + shell_quote(tiny_model())), "no prompt");
    expect_one_line_error(run_tessera("run -m " + shell_quote(tiny_model()) + " -p a -f /nonexistent"), "not both");
    expect_one_line_error(run_tessera("run -m " + shell_quote(tiny_model()) + " -f /nonexistent/prompt.txt"),
                          "/nonexistent/prompt.txt");
    std::string long_prompt(4000, 'a');
    for (size_t i = 1; i < long_prompt.size(); i += 2) long_prompt[i] = ' ';
    expect_one_line_error(run_tessera("run -m " + shell_quote(tiny_model()) + " -c 64 -p '" + long_prompt + "'"),
                          "longer than the context");
    // a truncated model
    const std::string cut = (fs::temp_directory_path() / ("tessera_test_cli_cut_" + std::to_string(::getpid()))).string();
    {
        std::string bytes = tessera::test::read_file(tiny_model());
        std::ofstream(cut, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    }
    expect_one_line_error(run_tessera("run -m " + shell_quote(cut) + " -p hi"), cut);
    fs::remove(cut);
}

TEST(cli_run, bad_flags_fail_with_one_line) {
    const std::string m = "run -m " + shell_quote(tiny_model()) + " -p hi ";
    expect_one_line_error(run_tessera(m + "--no-such-flag"), "--no-such-flag");
    expect_one_line_error(run_tessera(m + "-n notanumber"), "--n-predict: 'notanumber' is not a whole number");
    expect_one_line_error(run_tessera(m + "-c 1.5"), "--ctx-size: '1.5' is not a whole number");
    expect_one_line_error(run_tessera(m + "-n -2"), "--n-predict: -2 is out of range (-1 to 16777216)");
    expect_one_line_error(run_tessera(m + "--temp abc"), "--temp: 'abc'");
    expect_one_line_error(run_tessera(m + "-t -3"), "--threads");
    expect_one_line_error(run_tessera(m + "--device tpu"), "--device");
    expect_one_line_error(run_tessera(m + "--temp 1 --temp 2"), "--temp: given more than once");
    expect_one_line_error(run_tessera(m + "-n"), "--n-predict: a value is missing");
    expect_one_line_error(run_tessera("run -p hi"), "--model: missing");
    expect_one_line_error(run_tessera("no-such-command"), "no-such-command: unknown subcommand");
    expect_one_line_error(run_tessera(""), "a subcommand is required");
    auto help = run_tessera("run --help");
    EXPECT_EQ(help.rc, 0);
    EXPECT_NE(help.out.find("--temp"), std::string::npos);
}

TEST(cli_bench, json_flag_is_output_json) {
    auto r = run_tessera("bench -m " + shell_quote(tiny_model()) + " -p 8 -n 4 -r 1 -t 1 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    ASSERT_TRUE(j.is_array());
    ASSERT_FALSE(j.empty());
    auto o = run_tessera("bench -m " + shell_quote(tiny_model()) + " -p 8 -n 4 -r 1 -t 1 -o json");
    ASSERT_EQ(o.rc, 0) << o.err;
    const nlohmann::json k = nlohmann::json::parse(o.out);
    ASSERT_EQ(j.size(), k.size());
    for (size_t i = 0; i < j.size(); i++) {
        EXPECT_EQ(j[i].size(), k[i].size()); // the same object (timings differ)
        for (auto& [key, value] : j[i].items()) EXPECT_TRUE(k[i].contains(key)) << key;
    }
}

// --roofline: a generation test reports the bytes a token reads (every weight but the untied embeddings' other rows,
// plus the K and V rows it attends to), that times t/s, and the copy bandwidth; a prompt test the bandwidth only
TEST(cli_bench, roofline_reports_bytes_a_token_reads) {
    auto r = run_tessera("bench -m " + shell_quote(tiny_model()) + " -p 8 -n 4 -d 0,16 -r 1 -t 1 --roofline --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j.size(), 4u); // pp8, tg4, pp8 @ d16, tg4 @ d16
    const auto m = tessera::model::load(tiny_model());
    double weights = 0.0, kv_row = 0.0;
    for (const tessera::tensor* t : m->params)
        weights += double(t->n_bytes()) / (t == m->tok_embd && m->output != m->tok_embd ? double(t->ne[1]) : 1.0);
    for (int64_t il = 0; il < m->hp.n_layer; il++) kv_row += double(m->hp.n_embd_kv(il)) * 4.0; // K and V in f16
    for (const auto& row : j) {
        EXPECT_GT(row.at("copy_gbs").get<double>(), 0.0);
        const std::string test = row.at("test");
        if (test.rfind("pp", 0) == 0) {
            EXPECT_FALSE(row.contains("read_bytes_per_token")) << test;
            continue;
        }
        // tg4: tokens read 1..4 cache rows (2.5 on average); after 16: 17..20
        const double rows = test == "tg4" ? 2.5 : 18.5;
        const double bytes = row.at("read_bytes_per_token").get<double>();
        EXPECT_NEAR(bytes, weights + rows * kv_row, 1e-6 * bytes) << test;
        EXPECT_NEAR(row.at("read_gbs").get<double>(), bytes * row.at("avg_ts").get<double>() / 1e9, 1e-9) << test;
    }
    auto md = run_tessera("bench -m " + shell_quote(tiny_model()) + " -p 0 -n 4 -r 1 -t 1 --roofline");
    ASSERT_EQ(md.rc, 0) << md.err;
    EXPECT_NE(md.out.find("% of copy"), std::string::npos) << md.out;
    EXPECT_NE(md.out.find("copy bandwidth (cpu): "), std::string::npos) << md.out;
}

TEST(cli_run, does_not_wait_on_stdin) {
    // with stdin left open and empty, run must finish on its own
    auto r = run_tessera("run -m " + shell_quote(tiny_model()) + " -p hi -n 2 --temp 0 < /dev/zero");
    EXPECT_EQ(r.rc, 0);
}

// ---- quantize ----

namespace {

std::string tmp_file(const std::string& what) {
    return (fs::temp_directory_path() / ("tessera_test_cli_q_" + std::to_string(::getpid()) + "_" + what)).string();
}

} // namespace

TEST(cli_quantize, writes_a_model_that_runs) {
    const std::string out = tmp_file("q4_0.gguf");
    auto r = run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) + " q4_0 -t 2");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.out.find("bits per weight"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("q4_0"), std::string::npos) << r.out;
    EXPECT_TRUE(tessera::test::temps_of(out).empty());
    auto run = run_tessera("run -m " + shell_quote(out) + " -p hi -n 2 --temp 0");
    EXPECT_EQ(run.rc, 0) << run.err;
    auto info = run_tessera("info --json " + shell_quote(out));
    ASSERT_EQ(info.rc, 0);
    nlohmann::json j = nlohmann::json::parse(info.out);
    EXPECT_EQ(j["metadata"]["general.file_type"], 2);
    for (const auto& t : j["tensors"])
        EXPECT_EQ(t["type"], t["shape"].size() == 1 ? "f32" : "q4_0") << t["name"];
    fs::remove(out);
}

TEST(cli_quantize, overrides_and_json) {
    const std::string out = tmp_file("override.gguf");
    auto r = run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) +
                         " Q8_0 --output-type f16 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    nlohmann::json s = nlohmann::json::parse(r.out);
    EXPECT_EQ(s["type"], "q8_0");
    EXPECT_GT(s["output_bpw"].get<double>(), 8.0);
    auto info = run_tessera("info --json " + shell_quote(out));
    nlohmann::json j = nlohmann::json::parse(info.out);
    for (const auto& t : j["tensors"])
        if (t["name"] == "token_embd.weight") {
            EXPECT_EQ(t["type"], "f16"); // tied: token_embd is the output
        }
    fs::remove(out);
}

// a llama-quantize mix by its name (any case): the summary names it, the file says its llama_ftype
TEST(cli_quantize, llama_mix_by_name) {
    const std::string out = tmp_file("mix.gguf");
    auto r = run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) + " q4_k_m --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["type"], "Q4_K_M");
    EXPECT_EQ(tessera::gguf_file::open(out).get_int("general.file_type"), 15); // LLAMA_FTYPE_MOSTLY_Q4_K_M
    fs::remove(out);
}

// Q2_K is llama-quantize's mix (q3_K ffn_down / attn_output, q6_K output); with --pure every matrix is q2_K
TEST(cli_quantize, q2_k_mix_and_pure) {
    const std::string out = tmp_file("q2k.gguf");
    tessera::test::tiny_model_spec spec;
    spec.weight_type = tessera::type::f32;
    spec.n_embd = 256, spec.n_ff = 512;
    const std::string in = tmp_file("q2k_in.gguf");
    tessera::test::write_tiny_model(in, spec);
    for (bool pure : {false, true}) {
        auto r = run_tessera("quantize " + shell_quote(in) + " " + shell_quote(out) + " Q2_K --json" +
                             (pure ? " --pure" : ""));
        ASSERT_EQ(r.rc, 0) << r.err;
        tessera::gguf_file f = tessera::gguf_file::open(out);
        EXPECT_EQ(f.get_int("general.file_type"), 10); // LLAMA_FTYPE_MOSTLY_Q2_K
        auto type_of = [&](const char* name) { return tessera::type(f.find_tensor(name)->type_id); };
        EXPECT_EQ(type_of("blk.0.ffn_up.weight"), tessera::type::q2_k);
        EXPECT_EQ(type_of("blk.0.ffn_down.weight"), pure ? tessera::type::q2_k : tessera::type::q3_k);
        EXPECT_EQ(type_of("token_embd.weight"), pure ? tessera::type::q2_k : tessera::type::q6_k);
        auto run = run_tessera("run -m " + shell_quote(out) + " -p hello -n 4 --temp 0 -t 2");
        EXPECT_EQ(run.rc, 0) << run.err;
    }
    fs::remove(out);
    fs::remove(in);
}

TEST(cli_quantize, bad_arguments_fail_with_one_line_and_write_nothing) {
    const std::string out = tmp_file("never.gguf");
    auto r = run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) + " iq2_s");
    expect_one_line_error(r, "unknown type 'iq2_s'");
    EXPECT_NE(r.err.find("q4_0"), std::string::npos) << r.err; // the valid ones are listed
    EXPECT_NE(r.err.find("awq4"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Q4_K_M"), std::string::npos) << r.err; // and the mixes
    expect_one_line_error(run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) +
                                      " q4_0 --output-type Q4_K_M"), // a mix is no tensor type
                          "--output-type");
    expect_one_line_error(run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) +
                                      " q4_0 --embd-type q8_1"),
                          "--embd-type");
    expect_one_line_error(run_tessera("quantize /nonexistent/in.gguf " + shell_quote(out) + " q4_0"),
                          "/nonexistent/in.gguf");
    expect_one_line_error(run_tessera("quantize " + shell_quote(tiny_model()) + " /nonexistent/dir/out.gguf q4_0"),
                          "/nonexistent/dir");
    expect_one_line_error(run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) +
                                      " q4_0 --calib /nonexistent/calib.txt"),
                          "/nonexistent/calib.txt");
    EXPECT_FALSE(fs::exists(out));
    EXPECT_TRUE(tessera::test::temps_of(out).empty());
    EXPECT_NE(run_tessera("quantize " + shell_quote(tiny_model())).rc, 0); // OUT and TYPE missing
}

TEST(cli_quantize, failure_leaves_existing_output_untouched) {
    const std::string bad = tmp_file("bad_in.gguf"), out = tmp_file("existing.gguf");
    tessera::test::tiny_model_spec s;
    s.n_embd = 256, s.n_ff = 512; // whole iq2_s blocks
    s.retype["blk.0.attn_k.weight"] = uint32_t(tessera::type::iq2_s); // listed, but tessera cannot read it
    tessera::test::write_tiny_model(bad, s);
    { std::ofstream(out, std::ios::binary) << "old contents"; }
    auto r = run_tessera("quantize " + shell_quote(bad) + " " + shell_quote(out) + " q8_0");
    expect_one_line_error(r, "iq2_s");
    EXPECT_EQ(tessera::test::read_file(out), "old contents");
    EXPECT_TRUE(tessera::test::temps_of(out).empty());
    fs::remove(out);
    fs::remove(bad);
}

TEST(cli_quantize, progress_does_not_spam_a_file) {
    const std::string out = tmp_file("progress.gguf");
    auto r = run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) + " q4_1");
    ASSERT_EQ(r.rc, 0) << r.err;
    // stderr is a file here: one line per 10% at most, no carriage returns
    size_t lines = 0;
    for (char c : r.err) lines += c == '\n';
    EXPECT_LE(lines, 12u) << r.err;
    EXPECT_EQ(r.err.find('\r'), std::string::npos);
    EXPECT_NE(r.err.find("quantize 100%"), std::string::npos) << r.err;
    fs::remove(out);
}

TEST(cli_quantize, help_ends_with_example) {
    cli_result r = run_tessera("quantize --help");
    EXPECT_EQ(r.rc, 0);
    EXPECT_NE(r.out.find("Example:\n  tessera quantize "), std::string::npos) << r.out;
}

TEST(cli_quantize, awq_with_calibration_text) {
    const std::string calib = tmp_file("calib.txt"), out = tmp_file("awq.gguf");
    {
        std::ofstream f(calib, std::ios::binary);
        for (int i = 0; i < 40; i++) f << "The quick brown fox jumps over the lazy dog, again and again. ";
    }
    auto r = run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) + " awq4_g64 --calib " +
                         shell_quote(calib) + " --calib-tokens 200 -t 2");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("awq: "), std::string::npos) << r.err;
    auto run = run_tessera("run -m " + shell_quote(out) + " -p hi -n 2 --temp 0");
    EXPECT_EQ(run.rc, 0) << run.err;
    fs::remove(out);
    fs::remove(calib);
}

// ---- compare ----

TEST(cli_compare, without_a_gpu_says_so_and_with_one_prints_both_backends) {
    std::string why;
    const bool gpu = tessera::find_gpu(&why).has_value();
    auto r = run_tessera("compare -m " + shell_quote(tiny_model()) + " -n 4 --layers --json");
    if (!gpu) {
        expect_one_line_error(r, "CUDA");
        return;
    }
    ASSERT_EQ(r.rc, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_GT(j["cpu"]["pp_tps"].get<double>(), 0);
    EXPECT_GT(j["cuda"]["tg_tps"].get<double>(), 0);
    EXPECT_GE(j["prompt"]["top1_agreement"].get<double>(), 0.9); // a random tiny model: agreement, not speed
    EXPECT_EQ(j["layer_nmse"].size(), 2u);
}

// --device A,B: any two sides; the CPU against itself needs no GPU and agrees exactly (same threads, same kernels)
TEST(cli_compare, two_sides_of_the_users_choice) {
    auto r = run_tessera("compare -m " + shell_quote(tiny_model()) + " --device cpu,cpu -n 3 -r 1 -c 32 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["sides"], nlohmann::json({"cpu", "cpu (2)"}));
    EXPECT_GT(j["cpu"]["pp_tps"].get<double>(), 0);
    EXPECT_GT(j["cpu (2)"]["tg_tps"].get<double>(), 0);
    EXPECT_EQ(j["prompt"]["max_abs_dlogit"].get<double>(), 0.0);
    EXPECT_EQ(j["decode"]["top1_agreement"].get<double>(), 1.0);
    // a side that is not one, one side, three, a GPU named twice: one line each, before the model loads
    for (const char* bad : {"cpu", "cpu,cuda,cpu", "gpu,cpu", "cuda:x,cpu", "cuda:0+0,cpu", "cuda:0/layer,cpu",
                            "cuda:0+1/column,cpu"}) {
        auto e = run_tessera("compare -m " + shell_quote(tiny_model()) + " --device " + bad);
        expect_one_line_error(e, "--device");
    }
}

// --nodes IL: every f32 and i32 node of a layer, paired by position; the CPU against itself agrees node for node. On
// a mixture the router's top_k ids are listed as a count of differing indices (no NMSE), the rest with NMSE and
// max |d|, in the table and in --json.
TEST(cli_compare, nodes_lists_a_layer_with_the_experts_ids) {
    const std::string path = tmp_file("compare_nodes_moe.gguf");
    tessera::test::tiny_model_spec spec;
    spec.n_expert = 8;
    spec.n_expert_used = 2;
    spec.arch = "qwen3moe";
    tessera::test::write_tiny_model(path, spec);
    auto r = run_tessera("compare -m " + shell_quote(path) + " --device cpu,cpu --nodes 1 -n 2 -r 1 -c 32 --json");
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    size_t ids = 0, floats = 0;
    for (const auto& row : j["nodes"]) {
        if (row.contains("differing")) {
            ids++;
            EXPECT_EQ(row["op"], "top_k");
            EXPECT_EQ(row["differing"].get<size_t>(), 0u);
            EXPECT_GT(row["count"].get<size_t>(), 0u);
        } else {
            floats++;
            EXPECT_EQ(row["nmse"].get<double>(), 0.0) << row["node"];
            EXPECT_EQ(row["max_abs_diff"].get<double>(), 0.0) << row["node"];
        }
    }
    EXPECT_EQ(ids, 1u); // layer 1's router
    EXPECT_GT(floats, 10u);
    auto t = run_tessera("compare -m " + shell_quote(path) + " --device cpu,cpu --nodes 1 -n 2 -r 1 -c 32");
    ASSERT_EQ(t.rc, 0) << t.err;
    EXPECT_NE(t.out.find("ffn_moe_topk-1"), std::string::npos) << t.out;
    EXPECT_NE(t.out.find(" of "), std::string::npos) << t.out;
    fs::remove(path);
}

// ---- hardening (#6): full disks, interrupts, bad bytes, odd contexts ----

// A full disk while quantize writes (RLIMIT_FSIZE of 32 KiB, SIGXFSZ ignored so write() fails with EFBIG as it
// would with ENOSPC): one line naming OUT, the old OUT untouched, no temporary.
TEST(cli_quantize, disk_full_leaves_existing_output_untouched) {
    const std::string out = tmp_file("full_disk.gguf");
    { std::ofstream(out, std::ios::binary) << "old contents"; }
    auto r = run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) + " q8_0",
                         "trap '' XFSZ; ulimit -f 64; ");
    EXPECT_NE(r.rc, 0);
    EXPECT_EQ(r.out, "");
    // after the progress lines, the error is the last line
    const std::string last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
    EXPECT_EQ(last, "error: " + out + ": write failed: File too large (temporary file removed; " + out +
                        " left as it was)\n");
    EXPECT_EQ(tessera::test::read_file(out), "old contents");
    EXPECT_TRUE(tessera::test::temps_of(out).empty());
    fs::remove(out);
}

// ---- interrupted and racing writers ----
//
// quantize is stopped at an exact point of writing OUT with ptrace: its main thread (the one that writes the file)
// runs under PTRACE_SYSCALL, and at the exit of the chosen system call the test looks at the directory and sends the
// signal. (This replaced a FIFO at the fixed name OUT.tmp; the temporary now has no name, or a random one.)

namespace {

// A directory of its own, so that "nothing but OUT is there" can be checked.
struct scratch_dir {
    fs::path path;
    scratch_dir() {
        std::string t = (fs::temp_directory_path() / "tessera_test_cli_dir_XXXXXX").string();
        if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
        path = t;
    }
    ~scratch_dir() { fs::remove_all(path); }
    scratch_dir(const scratch_dir&) = delete;
    scratch_dir& operator=(const scratch_dir&) = delete;
    std::vector<std::string> names() const {
        std::vector<std::string> v;
        for (const auto& e : fs::directory_iterator(path)) v.push_back(e.path().filename().string());
        std::sort(v.begin(), v.end());
        return v;
    }
    bool has_o_tmpfile() const {
        const int fd = ::open(path.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
        if (fd >= 0) ::close(fd);
        return fd >= 0;
    }
};

struct traced_run {
    bool ptrace_ok = true; // false: ptrace (or PTRACE_GET_SYSCALL_INFO) is not available here; the test skips
    bool stopped = false;  // the stop point was reached
    int status = -1;       // waitpid status at the end
    std::string err;       // stderr
    std::vector<std::string> at_stop; // the directory at the stop
};

enum class stop_at {
    data_write, // the exit of the third write() into the temporary: metadata and some tensors written
    link,       // the exit of linkat(): the temporary has just got its name, the rename comes next
};

// `tessera quantize IN OUT q8_0` (TESSERA_O_TMPFILE=0 when `named`), stopped at `where`; there `sig` goes to its
// main thread (SIGKILL: to the process) and it is let go.
traced_run quantize_interrupted(const std::string& in, const scratch_dir& dir, const std::string& out, stop_at where,
                                int sig, bool named) {
    traced_run r;
    const std::string err = tmp_file("traced.err");
    const pid_t pid = ::fork();
    if (pid == 0) {
        const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(e, STDERR_FILENO);
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, STDOUT_FILENO);
        if (named)
            ::setenv("TESSERA_O_TMPFILE", "0", 1);
        else
            ::unsetenv("TESSERA_O_TMPFILE");
        if (::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr) != 0) ::_exit(99);
        ::raise(SIGSTOP);
        ::execl(TESSERA_BINARY, TESSERA_BINARY, "quantize", in.c_str(), out.c_str(), "q8_0", (char*)nullptr);
        ::_exit(127);
    }
    int st = 0;
    ::waitpid(pid, &st, 0);
    if (WIFEXITED(st)) {
        r.ptrace_ok = WEXITSTATUS(st) != 99;
        r.status = st;
        fs::remove(err);
        return r;
    }
    ::ptrace(PTRACE_SETOPTIONS, pid, nullptr, PTRACE_O_TRACESYSGOOD | PTRACE_O_EXITKILL | PTRACE_O_TRACEEXEC);
    const std::string prefix = dir.path.string() + "/";
    uint64_t nr = 0, arg0 = 0;
    int writes = 0, inject = 0;
    for (;;) {
        if (::ptrace(PTRACE_SYSCALL, pid, nullptr, inject) != 0) break;
        inject = 0;
        if (::waitpid(pid, &st, 0) != pid || WIFEXITED(st) || WIFSIGNALED(st)) break;
        const int s = WSTOPSIG(st);
        if (s == (SIGTRAP | 0x80)) {
            __ptrace_syscall_info info{};
            if (::ptrace(PTRACE_GET_SYSCALL_INFO, pid, sizeof(info), &info) <= 0) {
                r.ptrace_ok = false;
                ::kill(pid, SIGKILL);
                ::waitpid(pid, &st, 0);
                break;
            }
            if (info.op == PTRACE_SYSCALL_INFO_ENTRY) {
                nr = info.entry.nr;
                arg0 = info.entry.args[0];
                continue;
            }
            if (info.op != PTRACE_SYSCALL_INFO_EXIT || info.exit.is_error) continue;
            bool hit = false;
            if (where == stop_at::link) {
                hit = nr == SYS_linkat;
            } else if (nr == SYS_write) {
                char link[4096];
                const std::string fd_path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(arg0);
                const ssize_t n = ::readlink(fd_path.c_str(), link, sizeof(link) - 1);
                const std::string target = n > 0 ? std::string(link, size_t(n)) : std::string();
                const bool temp = target.rfind(prefix, 0) == 0 &&
                                  (named ? target.find(".tmp.") != std::string::npos
                                         : target.find(" (deleted)") != std::string::npos);
                hit = temp && ++writes == 3;
            }
            if (!hit) continue;
            r.stopped = true;
            r.at_stop = dir.names();
            if (sig == SIGKILL) {
                ::kill(pid, SIGKILL);
            } else {
                ::syscall(SYS_tgkill, pid, pid, sig); // pending while stopped: taken as soon as it runs again
                ::ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
            }
            while (::waitpid(pid, &st, 0) == pid && !WIFEXITED(st) && !WIFSIGNALED(st)) {
            }
            break;
        }
        if ((st >> 8) == (SIGTRAP | (PTRACE_EVENT_EXEC << 8))) continue;
        inject = s; // a signal for the program itself
    }
    r.status = st;
    r.err = tessera::test::read_file(err);
    fs::remove(err);
    return r;
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
    return s;
}

// At the stop the directory held OUT and OUT's named temporary ("out.gguf.tmp.<pid>.<hex>"), nothing else (use
// inside ASSERT_NO_FATAL_FAILURE: a wrong count ends the test).
void expect_named_temp_at_stop(const traced_run& r) {
    ASSERT_EQ(r.at_stop.size(), 2u) << join(r.at_stop);
    EXPECT_EQ(r.at_stop[1].rfind("out.gguf.tmp.", 0), 0u) << join(r.at_stop);
}

} // namespace

// SIGINT while quantize writes OUT (after its metadata and a few tensors): the process dies of SIGINT, the old OUT is
// as it was and nothing else is in the directory. With O_TMPFILE the temporary has no name to remove; with a named
// temporary (TESSERA_O_TMPFILE=0, filesystems without O_TMPFILE) the signal handler removes it.
TEST(cli_quantize, sigint_while_writing_leaves_old_output_and_no_temp) {
    for (bool named : {false, true}) {
        SCOPED_TRACE(named ? "named temporary" : "O_TMPFILE");
        scratch_dir dir;
        if (!named && !dir.has_o_tmpfile()) continue;
        const std::string out = (dir.path / "out.gguf").string();
        { std::ofstream(out, std::ios::binary) << "old contents"; }
        const traced_run r = quantize_interrupted(tiny_model(), dir, out, stop_at::data_write, SIGINT, named);
        if (!r.ptrace_ok) GTEST_SKIP() << "ptrace is not available here";
        ASSERT_TRUE(r.stopped) << "quantize never wrote its output: " << r.err;
        if (named) {
            ASSERT_NO_FATAL_FAILURE(expect_named_temp_at_stop(r));
        } else {
            EXPECT_EQ(join(r.at_stop), "out.gguf"); // written, but without a name
        }
        EXPECT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGINT) << "status " << r.status << r.err;
        EXPECT_EQ(tessera::test::read_file(out), "old contents");
        EXPECT_EQ(join(dir.names()), "out.gguf");
    }
}

// SIGTERM in the two-system-call window where the finished temporary has its name (after linkat, before the
// rename): the handler knows the current name and removes it.
TEST(cli_quantize, sigterm_between_link_and_rename_removes_the_named_temp) {
    scratch_dir dir;
    if (!dir.has_o_tmpfile()) GTEST_SKIP() << "no O_TMPFILE in " << dir.path;
    const std::string out = (dir.path / "out.gguf").string();
    { std::ofstream(out, std::ios::binary) << "old contents"; }
    const traced_run r = quantize_interrupted(tiny_model(), dir, out, stop_at::link, SIGTERM, false);
    if (!r.ptrace_ok) GTEST_SKIP() << "ptrace is not available here";
    ASSERT_TRUE(r.stopped) << "quantize never linked its output: " << r.err;
    ASSERT_NO_FATAL_FAILURE(expect_named_temp_at_stop(r));
    EXPECT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGTERM) << "status " << r.status << r.err;
    EXPECT_EQ(tessera::test::read_file(out), "old contents");
    EXPECT_EQ(join(dir.names()), "out.gguf");
}

// SIGKILL while writing: no handler can run, and still the old OUT is intact. With O_TMPFILE no temporary is left (it
// has no name until the rename); a named temporary (TESSERA_O_TMPFILE=0) is left behind, and the next quantize to
// the same OUT removes it (its writer's flock died with it) and writes OUT whole.
TEST(cli_quantize, sigkill_while_writing_leaves_old_output_and_no_temp) {
    const std::string ref = tmp_file("sigkill_ref.gguf");
    ASSERT_EQ(run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(ref) + " q8_0").rc, 0);
    const std::string want = tessera::test::read_file(ref);
    fs::remove(ref);
    for (bool named : {false, true}) {
        SCOPED_TRACE(named ? "named temporary" : "O_TMPFILE");
        scratch_dir dir;
        if (!named && !dir.has_o_tmpfile()) continue;
        const std::string out = (dir.path / "out.gguf").string();
        { std::ofstream(out, std::ios::binary) << "old contents"; }
        const traced_run r = quantize_interrupted(tiny_model(), dir, out, stop_at::data_write, SIGKILL, named);
        if (!r.ptrace_ok) GTEST_SKIP() << "ptrace is not available here";
        ASSERT_TRUE(r.stopped) << "quantize never wrote its output: " << r.err;
        EXPECT_TRUE(WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL) << "status " << r.status;
        EXPECT_EQ(tessera::test::read_file(out), "old contents");
        if (named) {
            ASSERT_NO_FATAL_FAILURE(expect_named_temp_at_stop(r));
            EXPECT_EQ(dir.names(), r.at_stop); // the dead writer's temporary stays
        } else {
            EXPECT_EQ(join(r.at_stop), "out.gguf");
            EXPECT_EQ(join(dir.names()), "out.gguf");
        }
        // the next write to OUT, in the same mode
        const cli_result q = run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) + " q8_0",
                                         named ? "export TESSERA_O_TMPFILE=0; " : "unset TESSERA_O_TMPFILE; ");
        EXPECT_EQ(q.rc, 0) << q.err;
        EXPECT_EQ(join(dir.names()), "out.gguf");
        EXPECT_TRUE(tessera::test::read_file(out) == want) << "OUT is not the complete quantized file";
    }
}

// Two quantize runs writing the same OUT at once (different types), many times: both succeed and OUT is always one
// of the two complete files, never a mix; no temporary is left. Both ways of making the temporary.
TEST(cli_quantize, concurrent_runs_leave_one_complete_output) {
    scratch_dir dir;
    const std::string in = shell_quote(tiny_model()), out = (dir.path / "out.gguf").string();
    const std::string ref_a = (dir.path / "a.gguf").string(), ref_b = (dir.path / "b.gguf").string();
    ASSERT_EQ(run_tessera("quantize " + in + " " + shell_quote(ref_a) + " q8_0").rc, 0);
    ASSERT_EQ(run_tessera("quantize " + in + " " + shell_quote(ref_b) + " q4_0").rc, 0);
    const std::string a = tessera::test::read_file(ref_a), b = tessera::test::read_file(ref_b);
    ASSERT_NE(a, b);
    const std::string bin = shell_quote(TESSERA_BINARY), o = shell_quote(out);
    for (const char* env : {"", "TESSERA_O_TMPFILE=0 "}) {
        for (int round = 0; round < 15; round++) {
            const std::string cmd = env + bin + " quantize " + in + " " + o + " q8_0 >/dev/null 2>&1 & p=$!; " + env +
                                    bin + " quantize " + in + " " + o +
                                    " q4_0 >/dev/null 2>&1; rb=$?; wait $p; ra=$?; exit $((ra | rb))";
            ASSERT_EQ(std::system(cmd.c_str()), 0) << env << "round " << round;
            const std::string got = tessera::test::read_file(out);
            ASSERT_TRUE(got == a || got == b) << env << "round " << round << ": " << got.size() << " bytes, a mix";
            ASSERT_EQ(join(dir.names()), "a.gguf b.gguf out.gguf") << env << "round " << round;
        }
    }
}

// The KL-divergence base file goes through atomic_file too: a full disk leaves the old base and no temp file.
TEST(cli_perplexity, disk_full_while_writing_the_base_file) {
    const std::string base = tmp_file("full.kld"), text = tmp_file("ppl.txt");
    {
        std::ofstream t(text);
        for (int i = 0; i < 400; i++) t << "the quick brown fox jumps over the lazy dog " << i << "\n";
    }
    { std::ofstream(base, std::ios::binary) << "old base"; }
    auto r = run_tessera("perplexity -m " + shell_quote(tiny_model()) + " -f " + shell_quote(text) +
                             " -c 64 --chunks 2 --kl-divergence-base " + shell_quote(base),
                         "trap '' XFSZ; ulimit -f 64; ");
    EXPECT_NE(r.rc, 0);
    EXPECT_NE(r.err.find("error: " + base + ": write failed: File too large (temporary file removed; " + base +
                         " left as it was)\n"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(tessera::test::read_file(base), "old base");
    EXPECT_TRUE(tessera::test::temps_of(base).empty());
    fs::remove(base);
    fs::remove(text);
}

// Prompts that are not UTF-8 (stray continuation bytes, truncated sequences, surrogates, > U+10FFFF) tokenize and run.
TEST(cli_run, bad_utf8_prompt_runs) {
    const std::string bad = "caf\xc3 \xff\xfe \xed\xa0\x80 \xf4\x90\x80\x80 \xe2\x82";
    const std::string f = tmp_file("bad_utf8.txt");
    { std::ofstream(f, std::ios::binary) << bad; }
    auto r = run_tessera("run -m " + shell_quote(tiny_model()) + " -f " + shell_quote(f) + " -n 4 --temp 0");
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out.rfind(bad, 0), 0u); // echoed byte for byte
    auto t = run_tessera("tokenize -m " + shell_quote(tiny_model()) + " -f " + shell_quote(f) + " --json");
    EXPECT_EQ(t.rc, 0) << t.err;
    EXPECT_TRUE(nlohmann::json::accept(t.out)) << t.out;
    fs::remove(f);
}

// Metadata that is not UTF-8 (a model name, a key) prints as text and as valid JSON (U+FFFD in place of bad bytes).
TEST(cli_info, bad_utf8_metadata_prints) {
    const std::string path = tmp_file("bad_meta.gguf");
    tessera::test::tiny_model_spec s;
    s.edit = [](tessera::gguf_writer& w) {
        w.set("general.name", tessera::gguf_value::of_string("name \xff\xfe end"));
        w.set("x.\xc3", tessera::gguf_value::of_u32(1));
    };
    tessera::test::write_tiny_model(path, s);
    auto text = run_tessera("info " + shell_quote(path));
    EXPECT_EQ(text.rc, 0) << text.err;
    auto json = run_tessera("info --json " + shell_quote(path));
    EXPECT_EQ(json.rc, 0) << json.err;
    EXPECT_TRUE(nlohmann::json::accept(json.out)) << json.out;
    auto run = run_tessera("run -m " + shell_quote(path) + " -p hi -n 2 --temp 0 -v");
    EXPECT_EQ(run.rc, 0) << run.err;
    fs::remove(path);
}

// A context larger than the model was trained on works, with a warning; one too large for any model is refused.
TEST(cli_run, context_larger_than_the_model_warns) {
    auto r = run_tessera("run -m " + shell_quote(tiny_model()) + " -c 1024 -p hi -n 2 --temp 0");
    EXPECT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("warning: context 1024 is larger than the 256 tokens"), std::string::npos) << r.err;
    auto big = run_tessera("run -m " + shell_quote(tiny_model()) + " -c 100000000 -p hi");
    EXPECT_NE(big.rc, 0);
    // CLI11's wording differs between versions ("range 0 to N", "range [0 - N]"): the flag, the value and the bound
    for (const char* part : {"--ctx-size", "100000000", "16777216"}) {
        EXPECT_NE(big.err.find(part), std::string::npos) << part << " missing from: " << big.err;
    }
}

// Tensor type ids no GGUF defines, and shapes that do not fit the architecture: one line each.
TEST(cli_run, unknown_type_and_wrong_shape_fail_with_one_line) {
    const std::string path = tmp_file("bad_type.gguf");
    tessera::test::write_tiny_model(path, {});
    {
        // the writer refuses unknown ids, so patch the file: the type id follows the name, n_dims and two ne
        std::string bytes = tessera::test::read_file(path);
        const std::string name = "blk.0.attn_q.weight";
        const size_t at = bytes.find(name);
        ASSERT_NE(at, std::string::npos);
        const uint32_t id = 99;
        std::memcpy(bytes.data() + at + name.size() + 4 + 16, &id, 4);
        std::ofstream(path, std::ios::binary) << bytes;
    }
    expect_one_line_error(run_tessera("run -m " + shell_quote(path) + " -p hi"), "tensor blk.0.attn_q.weight: unknown type id 99");
    tessera::test::tiny_model_spec w;
    w.reshape["blk.1.ffn_down.weight"] = {64, 128};
    tessera::test::write_tiny_model(path, w);
    expect_one_line_error(run_tessera("run -m " + shell_quote(path) + " -p hi"),
                          "blk.1.ffn_down.weight: expected shape 128 x 64, got 64 x 128");
    fs::remove(path);
}

// ---- template ----

namespace {

// A test template using what transformers passes (expected strings below rendered by python's jinja2 with
// bos_token "<B>" and eos_token "<E>", which the test swaps for the vocabulary's texts).
const char* const test_template =
    "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content if m.content is string else m.content | tojson }}"
    "</{{ m.role }}>{% endfor %}{% if tools %}[tools:{{ tools | map(attribute='function.name') | join(',') }}]"
    "{% endif %}{% if enable_thinking is defined %}[think={{ enable_thinking }}]{% endif %}{% if add_generation_prompt "
    "%}<assistant>{% else %}{{ eos_token }}{% endif %}";

// a tiny model whose tokenizer.chat_template is test_template; written once per process, removed at exit
std::string template_model() {
    struct file {
        std::string path;
        ~file() { fs::remove(path); }
    };
    static const file f{[] {
        const std::string p = tmp_file("template.gguf");
        tessera::test::tiny_model_spec s;
        s.edit = [](tessera::gguf_writer& w) {
            w.set("tokenizer.chat_template", tessera::gguf_value::of_string(test_template));
        };
        tessera::test::write_tiny_model(p, s);
        return p;
    }()};
    return f.path;
}

// python's output with the model's own BOS / EOS texts in place of <B> / <E>
std::string with_specials(std::string s) {
    const tessera::vocab voc = tessera::vocab::from_gguf(tessera::gguf_file::open(template_model()));
    for (auto [from, to] : {std::pair{std::string("<B>"), tessera::special_token_text(voc, voc.bos())},
                            std::pair{std::string("<E>"), tessera::special_token_text(voc, voc.eos())}}) {
        const size_t at = s.find(from);
        if (at != std::string::npos) s.replace(at, from.size(), to);
    }
    return s;
}

struct temp_text {
    std::string path;
    temp_text(const std::string& name, const std::string& text) : path(tmp_file(name)) {
        std::ofstream(path, std::ios::binary) << text;
    }
    ~temp_text() { fs::remove(path); }
};

} // namespace

TEST(cli_template, renders_the_models_template_exactly) {
    const cli_result r = run_tessera("template -m " + shell_quote(template_model()) + " -sys 'Be brief.' -p Hi");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, with_specials("<B><system>Be brief.</system><user>Hi</user><assistant>")); // no newline added
    EXPECT_EQ(r.err, "");
}

TEST(cli_template, messages_tools_kwargs_and_no_generation_prompt) {
    const temp_text msgs("msgs.json", R"([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": null,
        "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"x": "2+2"}}}]},
        {"role": "tool", "content": "4"}])");
    const temp_text tools("tools.json", R"([{"type": "function", "function": {"name": "calc", "parameters": {}}}])");
    const cli_result r = run_tessera("template -m " + shell_quote(template_model()) + " --messages " +
                                     shell_quote(msgs.path) + " --tools " + shell_quote(tools.path) +
                                     " --chat-template-kwargs '{\"enable_thinking\":false}' --no-add-generation-prompt");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, with_specials("<B><user>2+2?</user><assistant>null</assistant><tool>4</tool>[tools:calc]"
                                   "[think=False]<E>"));
}

TEST(cli_template, json_counts_the_tokens_chat_would_evaluate) {
    const cli_result r = run_tessera("template --json -m " + shell_quote(template_model()) + " -p 'Hello there'");
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    const std::string text = with_specials("<B><user>Hello there</user><assistant>");
    EXPECT_EQ(j["text"], text);
    const tessera::vocab voc = tessera::vocab::from_gguf(tessera::gguf_file::open(template_model()));
    EXPECT_EQ(j["tokens"], tessera::tokenize_chat_prompt(voc, text).size());
    EXPECT_GT(j["tokens"].get<size_t>(), 3u);
}

TEST(cli_template, chat_template_file_replaces_the_models) {
    const temp_text t("t.jinja", "{% for m in messages %}{{ m.role | upper }}: {{ m.content }}\n{% endfor %}");
    const cli_result r = run_tessera("template -m " + shell_quote(template_model()) + " --chat-template-file " +
                                     shell_quote(t.path) + " -p 'a b'");
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out, "USER: a b\n");
}

TEST(cli_template, errors_are_one_line) {
    const std::string m = " -m " + shell_quote(template_model());
    if (fs::exists(vocab_path())) // a vocabulary file with no chat template
        expect_one_line_error(run_tessera("template -m " + shell_quote(vocab_path()) + " -p hi"),
                              "has no tokenizer.chat_template (give --chat-template-file)");
    const temp_text bad("bad.json", "[{\"role\": \"user\", \"content\": \"x\"");
    expect_one_line_error(run_tessera("template" + m + " --messages " + shell_quote(bad.path)), "not valid JSON");
    const temp_text obj("obj.json", "{\"role\": \"user\"}");
    expect_one_line_error(run_tessera("template" + m + " --messages " + shell_quote(obj.path)),
                          "expected a JSON array of messages");
    const temp_text norole("norole.json", "[{\"content\": \"x\"}]");
    expect_one_line_error(run_tessera("template" + m + " --messages " + shell_quote(norole.path)),
                          "message 0 is not an object with a string \"role\"");
    expect_one_line_error(run_tessera("template" + m + " -p hi --tools " + shell_quote(bad.path)), "not valid JSON");
    expect_one_line_error(run_tessera("template" + m + " -p hi --chat-template-kwargs '{enable_thinking: false}'"),
                          "--chat-template-kwargs: not valid JSON");
    expect_one_line_error(run_tessera("template" + m + " -p hi --chat-template-kwargs '[1]'"),
                          "--chat-template-kwargs: expected a JSON object");
    expect_one_line_error(run_tessera("template" + m + " --messages /nonexistent/m.json"), "/nonexistent/m.json");
    expect_one_line_error(run_tessera("template" + m), "no conversation");
    const temp_text raise("raise.jinja", "{% for m in messages %}\n{% if m.role == 'user' %}\n"
                                         "{{ raise_exception('Only system messages are supported!') }}\n"
                                         "{% endif %}{% endfor %}");
    expect_one_line_error(run_tessera("template" + m + " --chat-template-file " + shell_quote(raise.path) + " -p x"),
                          "chat template: line 3: Only system messages are supported!");
    const temp_text broken("broken.jinja", "ok\n{% for m in messages %}{{ m.content }");
    expect_one_line_error(run_tessera("template" + m + " --chat-template-file " + shell_quote(broken.path) + " -p x"),
                          "chat template: line 2: ");
}
