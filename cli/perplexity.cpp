// perplexity.cpp: `tessera perplexity`: llama-perplexity's numbers and output ([1]x,[2]y,... then the final
// estimate), its KL-divergence mode and base-file format, a progress line on stderr, and --json.
#include "commands.h"
#include "options.h"

#include "ggml-like/atomic_file.h"
#include "ggml-like/error.h"
#include "llm/perplexity.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <unistd.h>

namespace tessera::cli {

namespace {

struct ppl_options {
    model_options m;
    std::string file;
    int64_t n_chunks = -1;
    std::string kld_base;
    bool kld = false;
    bool json = false;
    bool batch_given = false; // -b on the command line
};

std::pair<double, double> mean_and_error(double sum, double sum2, uint64_t n) {
    if (n < 1) return {0.0, 0.0};
    const double f = sum / double(n);
    double df = sum2 / double(n) - f * f;
    df = df > 0 && n > 10 ? std::sqrt(df / double(n - 1)) : 0.0;
    return {f, df};
}

double covariance(double a, double b, double ab, uint64_t n) {
    if (n < 10) return 0.0;
    return (ab / double(n) - (a / double(n)) * (b / double(n))) / double(n - 1);
}

float percentile(const std::vector<float>& v, float fraction) {
    if (fraction <= 0) return v.front();
    if (fraction >= 1) return v.back();
    float p = fraction * float(v.size() - 1);
    const size_t ip = size_t(p);
    p -= float(ip);
    return (1 - p) * v[ip] + p * v[std::min(ip + 1, v.size() - 1)];
}

struct kld_summary {
    double ppl, ppl_err, ppl_base, ppl_base_err, cor, log_ratio, log_ratio_err, ratio, ratio_err, diff, diff_err;
    double kld, kld_err, p_diff, p_diff_err, rms_dp, rms_dp_err, same_top, same_top_err;
};

kld_summary summarize(const kld_stats& k) {
    kld_summary s{};
    auto lp = mean_and_error(k.sum_nll, k.sum_nll2, k.count);
    auto lb = mean_and_error(k.sum_nll_base, k.sum_nll_base2, k.count);
    const double cov = covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count);
    s.ppl = std::exp(lp.first);
    s.ppl_err = s.ppl * lp.second;
    s.ppl_base = std::exp(lb.first);
    s.ppl_base_err = s.ppl_base * lb.second;
    s.cor = lp.second > 0 && lb.second > 0 ? cov / (lp.second * lb.second) : 0.0;
    s.log_ratio = lp.first - lb.first;
    s.log_ratio_err = std::sqrt(std::max(0.0, lp.second * lp.second + lb.second * lb.second - 2.0 * cov));
    s.ratio = std::exp(s.log_ratio);
    s.ratio_err = s.ratio * s.log_ratio_err;
    s.diff = s.ppl - s.ppl_base;
    s.diff_err = std::sqrt(std::max(0.0, s.ppl_err * s.ppl_err + s.ppl_base_err * s.ppl_base_err -
                                             2.0 * s.ppl * s.ppl_base * cov));
    auto kl = mean_and_error(k.sum_kld, k.sum_kld2, k.count);
    s.kld = kl.first;
    s.kld_err = kl.second;
    auto dp = mean_and_error(k.sum_p_diff, k.sum_p_diff2, k.count);
    s.p_diff = dp.first;
    s.p_diff_err = dp.second;
    auto mse = mean_and_error(k.sum_p_diff2, k.sum_p_diff4, k.count);
    s.rms_dp = std::sqrt(mse.first);
    s.rms_dp_err = s.rms_dp > 0 ? 0.5 / s.rms_dp * mse.second : 0.0;
    s.same_top = k.count ? double(k.n_same_top) / double(k.count) : 0.0;
    s.same_top_err = k.count > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / double(k.count - 1)) : 0.0;
    return s;
}

void print_kld_report(const kld_stats& k) {
    const kld_summary s = summarize(k);
    fmt::print("\n====== Perplexity statistics ======\n");
    fmt::print("Mean PPL(Q)                   : {:10.6f} ± {:10.6f}\n", s.ppl, s.ppl_err);
    fmt::print("Mean PPL(base)                : {:10.6f} ± {:10.6f}\n", s.ppl_base, s.ppl_base_err);
    fmt::print("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2f}%\n", 100.0 * s.cor);
    fmt::print("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} ± {:10.6f}\n", s.log_ratio, s.log_ratio_err);
    fmt::print("Mean PPL(Q)/PPL(base)         : {:10.6f} ± {:10.6f}\n", s.ratio, s.ratio_err);
    fmt::print("Mean PPL(Q)-PPL(base)         : {:10.6f} ± {:10.6f}\n", s.diff, s.diff_err);
    std::vector<float> kv = k.kld_values, dv = k.p_diff_values;
    std::sort(kv.begin(), kv.end());
    std::sort(dv.begin(), dv.end());
    auto median = [](const std::vector<float>& v) {
        return v.size() % 2 == 0 ? 0.5f * (v[v.size() / 2] + v[v.size() / 2 - 1]) : v[v.size() / 2];
    };
    fmt::print("\n====== KL divergence statistics ======\n");
    fmt::print("Mean    KLD: {:10.6f} ± {:10.6f}\n", s.kld, s.kld_err);
    fmt::print("Maximum KLD: {:10.6f}\n", kv.back());
    for (float f : {0.999f, 0.99f, 0.95f, 0.90f}) fmt::print("{:4.1f}%   KLD: {:10.6f}\n", 100 * f, percentile(kv, f));
    fmt::print("Median  KLD: {:10.6f}\n", median(kv));
    for (float f : {0.10f, 0.05f, 0.01f, 0.001f}) fmt::print("{:4.1f}%   KLD: {:10.6f}\n", 100 * f, percentile(kv, f));
    fmt::print("Minimum KLD: {:10.6f}\n", kv.front());
    fmt::print("\n====== Token probability statistics ======\n");
    fmt::print("Mean    Δp: {:6.3f} ± {:5.3f} %\n", 100.0 * s.p_diff, 100.0 * s.p_diff_err);
    fmt::print("Maximum Δp: {:6.3f}%\n", 100.0 * dv.back());
    for (float f : {0.999f, 0.99f, 0.95f, 0.90f, 0.75f}) fmt::print("{:4.1f}%   Δp: {:6.3f}%\n", 100 * f, 100.0 * percentile(dv, f));
    fmt::print("Median  Δp: {:6.3f}%\n", 100.0 * median(dv));
    for (float f : {0.25f, 0.10f, 0.05f, 0.01f, 0.001f}) fmt::print("{:4.1f}%   Δp: {:6.3f}%\n", 100 * f, 100.0 * percentile(dv, f));
    fmt::print("Minimum Δp: {:6.3f}%\n", 100.0 * dv.front());
    fmt::print("RMS Δp    : {:6.3f} ± {:5.3f} %\n", 100.0 * s.rms_dp, 100.0 * s.rms_dp_err);
    fmt::print("Same top p: {:6.3f} ± {:5.3f} %\n", 100.0 * s.same_top, 100.0 * s.same_top_err);
}

void perplexity_main(const ppl_options& o) {
    if (o.kld && o.kld_base.empty()) throw error("--kl-divergence needs --kl-divergence-base FILE");
    if (!o.kld && o.file.empty()) throw error("no text: give -f FILE");
    const std::string text = o.kld ? std::string() : read_text_file(o.file);
    auto mdl = model::load(o.m.model);

    perplexity_params pp;
    pp.n_ctx = o.m.session.n_ctx;
    pp.n_chunks = o.n_chunks;
    (o.kld ? pp.kld_base_in : pp.kld_base_out) = o.kld_base;
    session_params sp = o.m.session;
    const device_choice dev = choose_device(o.m, mdl.get());
    if (!dev.note.empty()) fmt::print(stderr, "{}\n", dev.note);
    sp.device = dev.device;
    int64_t chunk = pp.n_ctx;
    if (o.kld) {
        // the base file decides the chunk size; the context is sized after the whole file has been checked (a
        // corrupt header must not size a KV cache)
        std::ifstream f(o.kld_base, std::ios::binary | std::ios::ate);
        if (!f) throw error(fmt::format("{}: cannot open the KL-divergence base file", o.kld_base));
        const uint64_t size = uint64_t(f.tellg());
        f.seekg(0);
        const kld_base_reader base(f, size, o.kld_base, mdl->hp.n_vocab);
        chunk = base.n_ctx;
    }
    // as llama-perplexity: a batch of several whole chunks when -b is a multiple of the chunk, else one chunk in
    // batches of -b
    // One chunk a batch unless -b asks otherwise on the CPU (its attention reads every key of the batch, masked or
    // not: packed chunks cost it more than they save) and when comparing (the base records of the rows not scored
    // would travel too; measured on the H100, 8B q4_0: 9.3k tok/s one chunk a batch, 6.7k four)
    const bool packed_default = sp.device != device_type::cpu && !o.kld;
    const int64_t n_batch = !packed_default && !o.batch_given ? chunk : o.m.session.n_batch;
    if (chunk > 0 && n_batch > chunk && n_batch % chunk != 0)
        throw error(fmt::format("-b {} must be a multiple of the chunk size {} or at most it", n_batch, chunk));
    pp.n_seq = chunk > 0 ? std::max<int64_t>(1, n_batch / chunk) : 1;
    sp.n_ctx = chunk * pp.n_seq;
    sp.n_batch = std::min(n_batch, sp.n_ctx);
    session s(*mdl, sp);

    const bool tty = ::isatty(STDERR_FILENO);
    const auto t0 = std::chrono::steady_clock::now();
    auto progress = [&](int64_t done, int64_t total, const perplexity_result& r) {
        if (!o.json) {
            if (!o.kld) {
                fmt::print("[{}]{:.4f},", done, r.running_ppl.back());
            } else {
                const kld_summary k = summarize(r.kld);
                if (done == 1)
                    fmt::print("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence   "
                               "           Δp RMS            Same top p\n");
                fmt::print("{:4}    {:9.4f} ± {:9.4f}    {:10.5f} ± {:10.5f}    {:10.5f} ± {:10.5f}    {:6.3f} ± {:6.3f} %"
                           "    {:6.3f} ± {:6.3f} %\n",
                           done, k.ppl, k.ppl_err, k.log_ratio, k.log_ratio_err, k.kld, k.kld_err, 100 * k.rms_dp,
                           100 * k.rms_dp_err, 100 * k.same_top, 100 * k.same_top_err);
            }
            std::fflush(stdout);
        }
        const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double eta = el / double(done) * double(total - done);
        if (tty) {
            const int width = 30, fill = int(width * done / total);
            fmt::print(stderr, "\r\033[K[{}{}] {}/{} chunks, {:.0f}s, ETA {:.0f}s", std::string(size_t(fill), '#'),
                       std::string(size_t(width - fill), '.'), done, total, el, eta);
            if (done == total) fmt::print(stderr, "\n");
        } else if (o.m.verbose) {
            fmt::print(stderr, "perplexity: {}/{} chunks, {:.1f}s, ETA {:.0f}s\n", done, total, el, eta);
        }
    };
    if (o.m.verbose)
        fmt::print(stderr, "perplexity: {} on {} threads, chunks of {} tokens, {} a batch\n", mdl->name, s.n_threads(),
                   chunk, pp.n_seq);
    std::optional<temp_file_signal_guard> guard; // an interrupted run leaves no temporary of the base file
    if (!pp.kld_base_out.empty()) guard.emplace();
    const perplexity_result r = run_perplexity(s, text, pp, progress);
    guard.reset();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    if (o.json) {
        nlohmann::json j = {{"model", mdl->path},
                            {"n_ctx", chunk},
                            {"n_seq", pp.n_seq},
                            {"n_chunks", r.n_chunks},
                            {"n_tokens", r.n_tokens},
                            {"scored_tokens", r.count},
                            {"ppl", r.ppl()},
                            {"ppl_error", r.ppl_error()},
                            {"running_ppl", r.running_ppl},
                            {"seconds", seconds},
                            {"tokens_per_second", double(r.n_chunks * chunk) / seconds}};
        if (r.has_kld) {
            const kld_summary k = summarize(r.kld);
            j["kld"] = {{"mean", k.kld},           {"error", k.kld_err},          {"ppl_base", k.ppl_base},
                        {"ppl_ratio", k.ratio},    {"ppl_ratio_error", k.ratio_err}, {"rms_dp", k.rms_dp},
                        {"same_top_p", k.same_top}, {"mean_dp", k.p_diff}};
        }
        fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)); // metadata may be bad UTF-8
        return;
    }
    if (!o.kld) {
        fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", r.ppl(), r.ppl_error());
    } else if (r.kld.count >= 100) {
        print_kld_report(r.kld);
    }
    fmt::print(stderr, "perplexity: {} chunks x {} tokens in {:.1f} s ({:.1f} tok/s)\n", r.n_chunks, chunk, seconds,
               double(r.n_chunks * chunk) / seconds);
}

} // namespace

void add_perplexity(CLI::App& app) {
    auto o = std::make_shared<ppl_options>();
    o->m.session.n_ctx = 512;
    o->m.session.n_batch = 2048; // llama-perplexity's default: 4 chunks of 512 a batch
    CLI::App* cmd = app.add_subcommand("perplexity", "Perplexity of a text (llama-perplexity's method), or KL-divergence "
                                                     "against a base model's saved log-probabilities");
    add_model_options(*cmd, o->m);
    cmd->get_option("--ctx-size")->description("Tokens per chunk")->capture_default_str();
    cmd->get_option("--batch-size")
        ->description("Tokens per batch: a multiple of -c evaluates that many chunks at once (llama-perplexity's way; "
                      "default on the CPU and with --kl-divergence: -c)")
        ->capture_default_str();
    cmd->add_option("-f,--file", o->file, "Text to evaluate (e.g. wiki.test.raw)");
    cmd->add_option("--chunks", o->n_chunks, "Evaluate only the first N chunks (default: all)");
    cmd->add_option("--kl-divergence-base,--save-all-logits", o->kld_base,
                    "Write the base log-probabilities here; with --kl-divergence, read them from here");
    cmd->add_flag("--kl-divergence", o->kld, "Compare with the base file's log-probabilities (KLD, Δp, same top)");
    cmd->add_flag("--json", o->json, "Print one JSON summary on stdout");
    cmd->footer("Examples:\n  tessera perplexity -m models/SmolLM2-135M-Instruct.Q4_1.gguf -f wiki.test.raw --chunks 40\n"
                "  tessera perplexity -m base.gguf -f wiki.test.raw --kl-divergence-base base.kld\n"
                "  tessera perplexity -m quant.gguf --kl-divergence-base base.kld --kl-divergence");
    cmd->callback([o, cmd] {
        o->batch_given = cmd->get_option("--batch-size")->count() > 0;
        perplexity_main(*o);
    });
}

} // namespace tessera::cli
