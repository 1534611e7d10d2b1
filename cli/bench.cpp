// bench.cpp: `tessera bench`: llama-bench's tests on tessera's own decode path (session::decode, as run and chat use
// it): pp N = one prompt of N tokens, tg N = N tokens one at a time, optionally after filling the KV cache to a depth
// (-d). Reports mean ± standard deviation of tokens per second over -r repetitions after a warm-up, as a markdown
// table (default), CSV or JSON. --roofline adds, for generation tests, the bytes a token reads (decode_read_bytes)
// times tokens per second against the copy bandwidth the backend measures (backend::copy_gbs).
#include "commands.h"
#include "console.h"
#include "options.h"

#include "ggml-like/error.h"
#include "llm/model.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <sstream>
#include <unordered_map>

namespace tessera::cli {

namespace {

struct bench_options {
    model_options m;
    std::string n_prompt = "512", n_gen = "128", depths = "0", devices;
    int reps = 5;
    bool no_warmup = false;
    std::string output = "md";
    bool roofline = false;
};

std::vector<int64_t> parse_list(const std::string& s, const char* flag) {
    std::vector<int64_t> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
        try {
            size_t used = 0;
            const long long v = std::stoll(item, &used);
            if (used != item.size() || v < 0) throw std::invalid_argument("");
            out.push_back(v);
        } catch (const std::exception&) {
            throw error(fmt::format("{}: '{}' is not a list of non-negative integers", flag, s));
        }
    }
    return out;
}

struct result_row {
    std::string backend;
    int threads;
    std::string test;
    double mean, sd;
    std::vector<double> samples;
    double read_bytes = 0.0; // --roofline, generation tests: bytes a token reads on average
    double copy_gbs = 0.0;   // --roofline: the backend's copy bandwidth (0: unknown)
};

// The bytes a decode step reads at n_kv cache rows: every weight once (the token embeddings one row, unless the
// output layer is tied to them), of each layer's expert tensors the share its token chooses (n_expert_used /
// n_expert), and the f16 K and V rows of every layer (a sliding-window layer's window at most). The minimum: a
// backend may read more (padded cache rows, activations, re-reads from cache).
double decode_read_bytes(const model& m, double n_kv) {
    std::unordered_map<const tensor*, double> share;
    const hparams& hp = m.hp;
    for (size_t il = 0; il < m.layers.size(); il++) {
        const layer_weights& l = m.layers[il];
        const double f = hp.n_expert > 0 ? double(hp.n_expert_used_at(int64_t(il))) / double(hp.n_expert) : 1.0;
        for (const tensor* t : {l.ffn_gate_exps, l.ffn_up_exps, l.ffn_down_exps, l.ffn_gate_exps_b, l.ffn_up_exps_b,
                                l.ffn_down_exps_b})
            if (t) share[t] = f;
    }
    double total = 0.0;
    for (const tensor* p : m.params) {
        double b = double(p->n_bytes());
        if (p == m.tok_embd && m.output != m.tok_embd && p->ne[1] > 0) b /= double(p->ne[1]);
        if (const auto it = share.find(p); it != share.end()) b *= it->second;
        total += b;
    }
    for (int64_t il = 0; il < hp.n_layer; il++) {
        const double rows = hp.is_swa(il) ? std::min(n_kv, double(hp.n_swa)) : n_kv;
        total += rows * double(hp.n_embd_kv(il)) * 2.0 * 2.0; // K and V, f16
    }
    return total;
}

void bench_main(const bench_options& o) {
    if (o.reps < 1) throw error("-r must be at least 1");
    if (o.output != "md" && o.output != "csv" && o.output != "json")
        throw error(fmt::format("-o {}: expected md, csv or json", o.output));
    const auto pps = parse_list(o.n_prompt, "-p"), tgs = parse_list(o.n_gen, "-n"), depths = parse_list(o.depths, "-d");
    auto mdl = model::load(o.m.model);
    std::vector<std::string> devs;
    if (o.devices.empty()) {
        devs.push_back(choose_device(o.m, mdl.get()).device == device_type::cuda ? "cuda" : "cpu");
    } else {
        std::stringstream ss(o.devices);
        std::string d;
        while (std::getline(ss, d, ',')) devs.push_back(d);
    }
    const int64_t n_vocab = mdl->hp.n_vocab;
    std::mt19937 rng(1234);
    auto random_tokens = [&](int64_t n) {
        std::vector<token> t(static_cast<size_t>(n));
        for (auto& x : t) x = token(rng() % uint32_t(n_vocab));
        return t;
    };

    std::vector<result_row> rows;
    for (const std::string& dname : devs) {
        if (dname != "cpu" && dname != "cuda") throw error(fmt::format("--devices: unknown backend '{}'", dname));
        model_options mo = o.m;
        mo.device = dname;
        const device_choice dev = choose_device(mo, mdl.get());
        int64_t max_len = 1;
        for (int64_t d : depths)
            for (int64_t n : pps) max_len = std::max(max_len, d + n + 1);
        for (int64_t d : depths)
            for (int64_t n : tgs) max_len = std::max(max_len, d + n + 1);
        session_params sp = o.m.session;
        sp.device = dev.device;
        sp.n_ctx = std::max<int64_t>(sp.n_ctx, max_len);
        session s(*mdl, sp);
        const double copy_gbs = o.roofline ? s.be().copy_gbs() : 0.0;

        auto run_test = [&](int64_t depth, int64_t n, bool is_pp, bool timed) {
            s.clear();
            if (depth > 0) s.decode(random_tokens(depth));
            const auto toks = random_tokens(n);
            const auto t0 = std::chrono::steady_clock::now();
            if (is_pp) {
                s.decode(toks);
            } else {
                for (int64_t i = 0; i < n; i++) s.decode(std::span<const token>(&toks[size_t(i)], 1));
            }
            s.be().synchronize();
            const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            return timed ? double(n) / sec : 0.0;
        };
        for (int64_t d : depths)
            for (int pass = 0; pass < 2; pass++)
                for (int64_t n : pass == 0 ? pps : tgs) {
                    if (n == 0) continue;
                    result_row r{s.backend_label(), s.n_threads(), fmt::format("{}{}{}", pass == 0 ? "pp" : "tg", n,
                                                                           d > 0 ? fmt::format(" @ d{}", d) : ""),
                                 0, 0, {}};
                    // a warm-up of the test's own shape, as llama-bench does: a backend that captures a graph per
                    // batch shape (CUDA) does so here, outside the timed runs
                    if (!o.no_warmup) run_test(d, pass == 0 ? n : std::min<int64_t>(n, 2), pass == 0, false);
                    for (int rep = 0; rep < o.reps; rep++) r.samples.push_back(run_test(d, n, pass == 0, true));
                    double sum = 0, sum2 = 0;
                    for (double x : r.samples) sum += x;
                    r.mean = sum / double(r.samples.size());
                    for (double x : r.samples) sum2 += (x - r.mean) * (x - r.mean);
                    r.sd = r.samples.size() > 1 ? std::sqrt(sum2 / double(r.samples.size() - 1)) : 0.0;
                    if (o.roofline) {
                        r.copy_gbs = copy_gbs;
                        // token i of a generation test reads d + i + 1 cache rows: on average d + (n + 1) / 2
                        if (pass == 1) r.read_bytes = decode_read_bytes(*mdl, double(d) + double(n + 1) / 2.0);
                    }
                    rows.push_back(r);
                    if (o.m.verbose) fmt::print(stderr, "{} {}: {:.2f} ± {:.2f} t/s\n", r.backend, r.test, r.mean, r.sd);
                }
    }

    const std::string model_desc = fmt::format("{} {}", mdl->arch, mdl->type_summary());
    const std::string size = human_bytes(mdl->n_bytes);
    const std::string params = fmt::format("{:.2f} M", double(mdl->n_params) / 1e6);
    const auto read_gbs = [](const result_row& r) { return r.read_bytes * r.mean / 1e9; };
    if (o.output == "json") {
        nlohmann::json j = nlohmann::json::array();
        for (const auto& r : rows) {
            j.push_back({{"model", mdl->path},   {"model_type", model_desc}, {"model_size", mdl->n_bytes},
                         {"model_n_params", mdl->n_params}, {"backend", r.backend}, {"n_threads", r.threads},
                         {"test", r.test},       {"avg_ts", r.mean},         {"stddev_ts", r.sd},
                         {"samples_ts", r.samples}});
            if (o.roofline) {
                j.back()["copy_gbs"] = r.copy_gbs;
                if (r.read_bytes > 0.0) {
                    j.back()["read_bytes_per_token"] = r.read_bytes;
                    j.back()["read_gbs"] = read_gbs(r);
                }
            }
        }
        fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)); // metadata may be bad UTF-8
    } else if (o.output == "csv") {
        fmt::print("model,size,params,backend,threads,test,avg_ts,stddev_ts{}\n",
                   o.roofline ? ",read_bytes_per_token,read_gbs,copy_gbs" : "");
        for (const auto& r : rows)
            fmt::print("\"{}\",{},{},{},{},{},{:.3f},{:.3f}{}\n", model_desc, mdl->n_bytes, mdl->n_params, r.backend,
                       r.threads, r.test, r.mean, r.sd,
                       o.roofline ? fmt::format(",{:.0f},{:.3f},{:.3f}", r.read_bytes, read_gbs(r), r.copy_gbs) : "");
    } else {
        // --roofline: two more columns, the read bandwidth of a generation test and its share of the copy bandwidth
        const auto extra = [&](const std::string& a, const std::string& b) {
            return o.roofline ? fmt::format(" {:>10} | {:>9} |", a, b) : std::string();
        };
        fmt::print("| {:<24} | {:>10} | {:>10} | {:<7} | {:>7} | {:>14} | {:>20} |{}\n", "model", "size", "params",
                   "backend", "threads", "test", "t/s", extra("read GB/s", "% of copy"));
        fmt::print("| {:-<24} | {:->10} | {:->10} | {:-<7} | {:->7} | {:->14} | {:->20} |{}\n", "", "", "", "", "", "", "",
                   o.roofline ? fmt::format(" {:->10} | {:->9} |", "", "") : "");
        for (const auto& r : rows) {
            const bool gen = r.read_bytes > 0.0;
            fmt::print("| {:<24} | {:>10} | {:>10} | {:<7} | {:>7} | {:>14} | {:>20} |{}\n", model_desc, size, params,
                       r.backend, r.threads, r.test, fmt::format("{:.2f} ± {:.2f}", r.mean, r.sd),
                       extra(gen ? fmt::format("{:.1f}", read_gbs(r)) : "-",
                             gen && r.copy_gbs > 0.0 ? fmt::format("{:.1f}%", 100.0 * read_gbs(r) / r.copy_gbs) : "-"));
        }
        if (o.roofline) {
            std::string seen;
            for (const auto& r : rows)
                if (seen.find(r.backend + ";") == std::string::npos) {
                    seen += r.backend + ";";
                    fmt::print("copy bandwidth ({}): {}\n", r.backend,
                               r.copy_gbs > 0.0 ? fmt::format("{:.1f} GB/s (read + write)", r.copy_gbs)
                                                : std::string("unknown"));
                }
        }
    }
}

} // namespace

void add_bench(CLI::App& app) {
    auto o = std::make_shared<bench_options>();
    CLI::App* cmd = app.add_subcommand("bench", "Prompt-processing and generation speed (llama-bench's tests)");
    add_model_options(*cmd, o->m);
    cmd->add_option("-p,--n-prompt", o->n_prompt, "Prompt lengths to test, comma-separated (0 skips)")->capture_default_str();
    cmd->add_option("-n,--n-gen", o->n_gen, "Generation lengths to test, comma-separated (0 skips)")->capture_default_str();
    cmd->add_option("-d,--n-depth", o->depths, "KV cache depths to test at, comma-separated")->capture_default_str();
    cmd->add_option("-r,--repetitions", o->reps, "Repetitions of each test")->capture_default_str();
    cmd->add_option("--devices", o->devices, "Backends to compare, comma-separated (cpu,cuda)");
    cmd->add_flag("--no-warmup", o->no_warmup, "Skip the warm-up run");
    cmd->add_option("-o,--output", o->output, "md, csv or json")->capture_default_str();
    cmd->add_flag_callback("--json", [o] { o->output = "json"; }, "Same as -o json");
    cmd->add_flag("--roofline", o->roofline,
                  "Generation tests: the bytes a token reads x t/s, against the backend's measured copy bandwidth");
    cmd->footer("Example:\n  tessera bench -m models/SmolLM2-135M-Instruct.Q4_1.gguf -p 512 -n 128 -t 2 -r 5");
    cmd->callback([o] { bench_main(*o); });
}

} // namespace tessera::cli
