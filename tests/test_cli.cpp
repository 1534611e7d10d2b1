// test_cli.cpp: runs the tessera binary (TESSERA_BINARY) through the shell and checks exit codes, stdout and stderr.
#include "helpers.h"
#include "tiny_model.h"

#include "llm/device.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
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

std::string tiny_model() {
    static const std::string path = [] {
        std::string p = (fs::temp_directory_path() / ("tessera_test_cli_tiny_" + std::to_string(::getpid()) + ".gguf"))
                            .string();
        tessera::test::write_tiny_model(p, {});
        return p;
    }();
    return path;
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

TEST(cli_run, bad_flags_exit_non_zero) {
    EXPECT_NE(run_tessera("run -m " + shell_quote(tiny_model()) + " -p hi --no-such-flag").rc, 0);
    EXPECT_NE(run_tessera("run -m " + shell_quote(tiny_model()) + " -p hi -n notanumber").rc, 0);
    EXPECT_NE(run_tessera("run -m " + shell_quote(tiny_model()) + " -p hi -t -3").rc, 0);
    EXPECT_NE(run_tessera("").rc, 0); // a subcommand is required
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
    EXPECT_FALSE(fs::exists(out + ".tmp"));
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

TEST(cli_quantize, bad_arguments_fail_with_one_line_and_write_nothing) {
    const std::string out = tmp_file("never.gguf");
    auto r = run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) + " q5_k");
    expect_one_line_error(r, "unknown type 'q5_k'");
    EXPECT_NE(r.err.find("q4_0"), std::string::npos) << r.err; // the valid ones are listed
    EXPECT_NE(r.err.find("awq4"), std::string::npos) << r.err;
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
    EXPECT_FALSE(fs::exists(out + ".tmp"));
    EXPECT_NE(run_tessera("quantize " + shell_quote(tiny_model())).rc, 0); // OUT and TYPE missing
}

TEST(cli_quantize, failure_leaves_existing_output_untouched) {
    const std::string bad = tmp_file("bad_in.gguf"), out = tmp_file("existing.gguf");
    tessera::test::tiny_model_spec s;
    s.retype["blk.0.attn_k.weight"] = uint32_t(tessera::type::q5_0); // listed, but tessera cannot read it
    tessera::test::write_tiny_model(bad, s);
    { std::ofstream(out, std::ios::binary) << "old contents"; }
    auto r = run_tessera("quantize " + shell_quote(bad) + " " + shell_quote(out) + " q8_0");
    expect_one_line_error(r, "q5_0");
    EXPECT_EQ(tessera::test::read_file(out), "old contents");
    EXPECT_FALSE(fs::exists(out + ".tmp"));
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

// ---- hardening (#6): full disks, interrupts, bad bytes, odd contexts ----

// A full disk while quantize writes (RLIMIT_FSIZE of 32 KiB, SIGXFSZ ignored so write() fails with EFBIG as it
// would with ENOSPC): one line naming OUT, the old OUT untouched, no OUT.tmp.
TEST(cli_quantize, disk_full_leaves_existing_output_untouched) {
    const std::string out = tmp_file("full_disk.gguf");
    { std::ofstream(out, std::ios::binary) << "old contents"; }
    auto r = run_tessera("quantize " + shell_quote(tiny_model()) + " " + shell_quote(out) + " q8_0",
                         "trap '' XFSZ; ulimit -f 64; ");
    EXPECT_NE(r.rc, 0);
    EXPECT_EQ(r.out, "");
    // after the progress lines, the error is the last line
    const std::string last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
    EXPECT_EQ(last, "error: " + out + ": write failed: File too large (" + out + ".tmp removed; " + out +
                        " left as it was)\n");
    EXPECT_EQ(tessera::test::read_file(out), "old contents");
    EXPECT_FALSE(fs::exists(out + ".tmp"));
    fs::remove(out);
}

// SIGINT while quantize is writing OUT.tmp. OUT.tmp is made a FIFO beforehand, so the write blocks after the first
// 64 KiB until this test reads them: the signal then arrives mid-write, deterministically. The handler removes OUT.tmp
// and the process dies of SIGINT; the old OUT stays as it was.
TEST(cli_quantize, sigint_while_writing_leaves_old_output_and_no_temp) {
    const std::string out = tmp_file("sigint.gguf"), tmp = out + ".tmp", err = tmp_file("sigint.err");
    { std::ofstream(out, std::ios::binary) << "old contents"; }
    fs::remove(tmp);
    ASSERT_EQ(::mkfifo(tmp.c_str(), 0600), 0);
    const int fifo = ::open(tmp.c_str(), O_RDONLY | O_NONBLOCK); // a reader, so the writer's open does not block
    ASSERT_GE(fifo, 0);
    const std::string model = tiny_model();
    const pid_t pid = ::fork();
    if (pid == 0) {
        const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ::dup2(e, STDERR_FILENO);
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, STDOUT_FILENO);
        ::execl(TESSERA_BINARY, TESSERA_BINARY, "quantize", model.c_str(), out.c_str(), "q8_0", (char*)nullptr);
        ::_exit(127);
    }
    // wait for the first bytes of the model (quantization done, writing started)
    size_t got = 0;
    char buf[4096];
    for (int waited_ms = 0; got < 4096 && waited_ms < 120000;) {
        pollfd p{fifo, POLLIN, 0};
        if (::poll(&p, 1, 100) > 0) {
            const ssize_t n = ::read(fifo, buf, sizeof(buf));
            if (n > 0) got += size_t(n);
            if (n == 0 && got > 0) break; // the writer closed: it finished (or failed)
        } else {
            waited_ms += 100;
        }
    }
    EXPECT_GE(got, 4096u) << "quantize never wrote: " << tessera::test::read_file(err);
    ::kill(pid, SIGINT);
    int st = 0;
    ::waitpid(pid, &st, 0);
    ::close(fifo);
    EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGINT) << "status " << st << tessera::test::read_file(err);
    EXPECT_EQ(tessera::test::read_file(out), "old contents");
    EXPECT_FALSE(fs::exists(tmp)) << "the temp file was left behind";
    fs::remove(tmp);
    fs::remove(out);
    fs::remove(err);
}

// The KL-divergence base file goes through BASE.tmp too: a full disk leaves the old base and no temp file.
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
    EXPECT_NE(r.err.find("error: " + base + ": write failed (disk full?)"), std::string::npos) << r.err;
    EXPECT_EQ(tessera::test::read_file(base), "old base");
    EXPECT_FALSE(fs::exists(base + ".tmp"));
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
    EXPECT_NE(big.err.find("--ctx-size: Value 100000000 not in range 0 to 16777216"), std::string::npos) << big.err;
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
