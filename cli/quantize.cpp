// quantize.cpp: `tessera quantize IN OUT TYPE`: converts every weight of a GGUF model to TYPE (progress on stderr,
// summary on stdout), optionally with activation-aware scales (--calib). The conversion is quant/quantize.h, the AWQ
// calibration and search llm/awq.h; this file parses flags, wires progress bars and prints the result.
#include "commands.h"
#include "console.h"
#include "options.h"

#include "ggml-like/atomic_file.h"
#include "ggml-like/error.h"
#include "llm/awq.h"
#include "quant/quantize.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <memory>
#include <unistd.h>

namespace tessera::cli {

namespace {

struct quantize_options {
    std::string in, out, type;
    int n_threads = 0;
    std::string output_type, embd_type;
    bool json = false, pure = false;
    std::string calib;
    int64_t calib_tokens = 4096;
    bool no_calib = false;
};

std::string valid_type_names(bool mixes = false) {
    std::string s;
    for (type t : quantize_target_types()) s += (s.empty() ? "" : ", ") + std::string(type_name(t));
    if (mixes)
        for (quant_mix m : all_quant_mixes) s += std::string(", ") + quant_mix_name(m);
    return s;
}

type parse_type(const std::string& name, const char* what, bool mixes = false) {
    type t;
    std::string lower = name;
    for (char& c : lower) c = char(std::tolower((unsigned char)c));
    if (type_from_name(lower, t))
        for (type v : quantize_target_types())
            if (v == t) return t;
    throw error(fmt::format("{}: unknown type '{}' (valid: {})", what, name, valid_type_names(mixes)));
}

type type_from_name_or_mix_error(const std::string& name) {
    return parse_type(name, "TYPE", true);
}

std::string millions(int64_t done, int64_t total) {
    return fmt::format("{:.1f}/{:.1f} M", double(done) / 1e6, double(total) / 1e6);
}

// Fails before any work when IN is missing or OUT cannot be created (not after minutes of quantization).
void check_paths(const quantize_options& o) {
    namespace fs = std::filesystem;
    if (!fs::exists(o.in)) throw error(fmt::format("{}: no such file", o.in));
    const fs::path dir = fs::path(o.out).has_parent_path() ? fs::path(o.out).parent_path() : fs::path(".");
    if (!fs::is_directory(dir)) throw error(fmt::format("{}: directory {} does not exist", o.out, dir.string()));
    if (::access(dir.c_str(), W_OK) != 0)
        throw error(fmt::format("{}: cannot write to directory {}: {}", o.out, dir.string(), std::strerror(errno)));
    if (fs::is_directory(o.out)) throw error(fmt::format("{}: is a directory", o.out));
}

struct awq_summary {
    int64_t n_tokens = 0;
    double err_rtn[awq_n_groups] = {}, err_best[awq_n_groups] = {}, alpha[awq_n_groups] = {};
    int n[awq_n_groups] = {};
};

// Calibrates on o.calib, searches the scales and puts the folded multipliers into qp.scaling.
awq_summary run_awq(const quantize_options& o, quantize_params& qp) {
    auto mdl = model::load(o.in);
    std::vector<token> tokens = mdl->voc.tokenize(read_text_file(o.calib), /*add_special=*/true, false);
    if (int64_t(tokens.size()) > o.calib_tokens) tokens.resize(size_t(o.calib_tokens));
    if (tokens.size() < 16)
        throw error(fmt::format("{}: {} tokens of calibration text, need at least 16", o.calib, tokens.size()));
    awq_params ap;
    ap.n_threads = o.n_threads;

    awq_stats st;
    {
        progress_bar bar("calibrate", int64_t(tokens.size()));
        st = awq_collect(*mdl, tokens, ap, [&](int64_t done, int64_t) { bar.update(done); });
        bar.finish();
    }
    // the search quantizes each weight to the type it will get in the file (fallbacks included)
    quantize_params quiet = qp;
    quiet.note = {};
    std::map<std::string, type> plan_types;
    for (const tensor_plan& tp : plan_quantization(mdl->file, quiet)) plan_types[tp.in->name] = tp.to;
    awq_result res;
    {
        std::unique_ptr<progress_bar> bar;
        res = awq_search(
            *mdl, st, [&](const std::string& name) { return plan_types.at(name); }, ap,
            [&](int64_t done, int64_t total) {
                if (!bar) bar = std::make_unique<progress_bar>("awq search", total);
                bar->update(done);
            });
        if (bar) bar->finish();
    }
    qp.scaling = awq_fold(*mdl, res.scales);
    qp.extra_kv.push_back({"tessera.awq.calib_tokens", gguf_value::of_u32(uint32_t(tokens.size()))});

    awq_summary sum;
    sum.n_tokens = int64_t(tokens.size());
    for (const awq_layer_report& r : res.reports) {
        const int g = int(r.group);
        sum.err_rtn[g] += r.err_rtn;
        sum.err_best[g] += r.err_best;
        sum.alpha[g] += r.alpha;
        sum.n[g]++;
    }
    std::string line = fmt::format("awq: {} calibration tokens; output error vs round-to-nearest:", sum.n_tokens);
    for (int g = 0; g < awq_n_groups; g++)
        if (sum.n[g] && sum.err_rtn[g] > 0)
            line += fmt::format(" {} {:+.1f}% (mean a {:.2f})", awq_group_name(awq_group(g)),
                                100.0 * (sum.err_best[g] / sum.err_rtn[g] - 1.0), sum.alpha[g] / sum.n[g]);
    fmt::print(stderr, "{}\n", line);
    return sum;
}

void run_quantize(const quantize_options& o) {
    quantize_params qp;
    if (const std::optional<quant_mix> m = quant_mix_from_name(o.type)) { // llama-quantize's mixes
        qp.mix = o.pure ? quant_mix::none : *m;
        qp.target = quant_mix_type(*m);
    } else {
        qp.target = type_from_name_or_mix_error(o.type);
    }
    if (!o.output_type.empty()) qp.output_type = parse_type(o.output_type, "--output-type");
    if (!o.embd_type.empty()) qp.embd_type = parse_type(o.embd_type, "--embd-type");
    qp.n_threads = o.n_threads;
    qp.note = [](const std::string& s) { fmt::print(stderr, "note: {}\n", s); };
    const bool use_awq = !o.calib.empty() && !o.no_calib;
    if (use_awq && !is_quantized(qp.target))
        throw error(fmt::format("--calib: AWQ scales need a quantized TYPE, got {}", type_name(qp.target)));
    if (use_awq && type_info(qp.target).tail_bytes > 0)
        throw error(fmt::format("--calib: AWQ scales do not apply to {}, whose tensors have one scale each",
                                type_name(qp.target)));
    if (use_awq && !std::filesystem::exists(o.calib)) throw error(fmt::format("{}: no such file", o.calib));
    check_paths(o);

    awq_summary awq;
    if (use_awq) awq = run_awq(o, qp);

    std::unique_ptr<progress_bar> bar;
    qp.progress = [&](int64_t done, int64_t total) {
        if (!bar) {
            bar = std::make_unique<progress_bar>("quantize", total);
            bar->set_count_format(millions);
        }
        bar->update(done);
        if (done == total) bar->finish(); // before the file is written (fsync of a large file takes seconds)
    };
    quantize_result r;
    {
        // an interrupted run leaves nothing behind: the temporary is nameless while written (O_TMPFILE) and, where
        // it has a name (the rename, or no O_TMPFILE), SIGINT/SIGTERM/SIGHUP remove it before the process ends
        temp_file_signal_guard guard;
        r = quantize_model(o.in, o.out, qp);
    }
    if (bar) bar->finish();

    if (o.json) {
        nlohmann::ordered_json j;
        j["input"] = o.in;
        j["output"] = o.out;
        j["type"] = qp.mix != quant_mix::none ? quant_mix_name(qp.mix) : type_name(qp.target);
        j["input_bytes"] = r.in_file_bytes;
        j["output_bytes"] = r.out_file_bytes;
        j["n_elements"] = r.n_elements;
        j["input_bpw"] = r.in_bpw();
        j["output_bpw"] = r.out_bpw();
        j["n_tensors"] = r.n_tensors;
        j["n_quantized"] = r.n_quantized;
        j["n_fallback"] = r.n_fallback;
        j["seconds"] = r.seconds;
        if (use_awq) j["awq"] = {{"calib_tokens", awq.n_tokens}};
        fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)); // metadata may be bad UTF-8
        return;
    }
    fmt::print("{}: {}, {} tensors, {} quantized{}\n", o.out,
               qp.mix != quant_mix::none ? quant_mix_name(qp.mix) : type_name(qp.target), r.n_tensors, r.n_quantized,
               r.n_fallback ? fmt::format(", {} with a fallback type", r.n_fallback) : "");
    fmt::print("size {} -> {} ({:.2f} -> {:.2f} bits per weight) in {}\n", human_bytes(r.in_file_bytes),
               human_bytes(r.out_file_bytes), r.in_bpw(), r.out_bpw(), human_seconds(r.seconds));
}

} // namespace

void add_quantize(CLI::App& app) {
    auto o = std::make_shared<quantize_options>();
    CLI::App* sub = app.add_subcommand("quantize", "Convert a GGUF model's weights to another type");
    sub->add_option("IN", o->in, "Input model (GGUF)")->required();
    sub->add_option("OUT", o->out, "Output file (a temporary renamed over OUT when done: a failed run leaves none)")
        ->required();
    sub->add_option("TYPE", o->type,
                    "Weight type: " + valid_type_names(true) +
                        " (the upper-case names from Q2_K on: llama-quantize's mixes, attn_v / ffn_down of some layers "
                        "and the output with more bits; Q2_K / IQ3_S / IQ4_XS are the mixes, q2_K / iq3_s / iq4_xs "
                        "with --pure every matrix; IQ3_XXS and IQ3_XS, which llama-quantize makes only with an "
                        "importance matrix, are made without one)")
        ->required();
    sub->add_option("-t,--threads", o->n_threads, "Threads (0: one per hardware thread)")->check(CLI::Range(0, 512));
    sub->add_option("--output-type", o->output_type,
                    "Type of output.weight (and of token_embd.weight when the embeddings are tied)");
    sub->add_option("--embd-type", o->embd_type, "Type of token_embd.weight (default: TYPE)");
    sub->add_flag("--json", o->json, "Print the summary as one JSON object");
    sub->add_flag("--pure", o->pure,
                  "A mix's format for every matrix, the output too (llama-quantize's --pure; unless --output-type)");
    sub->add_option("--calib", o->calib,
                    "Activation-aware scales (AWQ): calibrate on this text file (default: plain round-to-nearest)");
    sub->add_option("--calib-tokens", o->calib_tokens, "Calibration tokens read from --calib")
        ->capture_default_str()
        ->check(CLI::Range(int64_t(16), int64_t(1) << 24));
    sub->add_flag("--no-calib", o->no_calib, "Plain round-to-nearest even when --calib is given");
    sub->footer("Example:\n  tessera quantize model-f32.gguf model-q4_0.gguf q4_0 -t 2 --output-type q8_0");
    sub->callback([o]() { run_quantize(*o); });
}

} // namespace tessera::cli
