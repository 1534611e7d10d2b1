// compare.cpp: `tessera compare`: the same tokens on two sides (the CPU and CUDA by default; --device A,B: one GPU
// against two split by rows, say), side by side: prompt and generation speed on each and the speedup (medians over -r repetitions after an untimed warm-up, as bench measures), and how far
// the two agree: max |Δlogit|, top-1 agreement and mean KL divergence of the next-token distributions (teacher-forced
// over the text), and with --layers the first layer whose hidden state (l_out-N) differs beyond a bound. The text is
// cut to one context (-c, default 512 tokens): a whole file would need its logits for every token in memory.
#include "commands.h"
#include "console.h"
#include "options.h"

#include "ggml-like/error.h"
#include "ggml-like/median.h"
#include "llm/device.h"
#include "llm/model.h"

#include <fmt/core.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

namespace tessera::cli {

namespace {

struct compare_options {
    model_options m;
    prompt_options p;
    bool layers = false;
    int nodes = -1; // --nodes IL: every node of layer IL, one by one
    bool json = false;
    int reps = 3;
    bool no_warmup = false;
    double layer_bound = 1e-3;
};

const char* default_text =
    "The history of the city begins in the Roman period, when a small settlement grew up around a bridge over the "
    "river. Over the following centuries it became a market town, then a regional capital, and finally one of the "
    "largest cities in the country. Its museums, parks and old streets attract visitors from all over the world.";

struct run_result {
    std::vector<float> pp_logits;  // (n_tok, n_vocab): all positions of the prompt in one batch
    std::vector<float> tg_logits;  // (n_gen, n_vocab): token by token
    double pp_tps = 0, tg_tps = 0;
    std::map<int, std::vector<float>> layer_out; // il -> l_out-il of the prompt batch
    struct node_out {
        std::string name, op;
        std::vector<float> v; // an i32 node's values as floats
        bool ints = false;
    };
    std::vector<node_out> nodes; // --nodes IL: the f32 and i32 nodes of layer IL of the prompt batch, in evaluation order
    std::string backend;
};

// One side of the comparison: its label (the spec as given) and the session it runs.
struct side {
    std::string label;
    session_params sp;
    bool cuda = false;
};

// cpu | cuda | cuda:N | cuda:N+M[+...][/layer|/row] on top of the command's session flags
side parse_side(const std::string& spec, const session_params& base) {
    side d{spec, base, false};
    auto bad = [&] {
        return error(fmt::format("--device: '{}' is not cpu, cuda, cuda:N or cuda:N+M[/layer] (compare's two sides "
                                 "are given as A,B)",
                                 spec));
    };
    if (spec == "cpu") {
        d.sp.device = device_type::cpu;
        return d;
    }
    if (spec.rfind("cuda", 0) != 0) throw bad();
    d.cuda = true;
    d.sp.device = device_type::cuda;
    if (spec == "cuda") return d;
    if (spec[4] != ':') throw bad();
    std::string rest = spec.substr(5);
    using sm = session_params::split_mode;
    sm mode = sm::row;
    const bool how_given = rest.find('/') != std::string::npos;
    if (const size_t slash = rest.find('/'); slash != std::string::npos) {
        const std::string how = rest.substr(slash + 1);
        if (how != "layer" && how != "row") throw bad();
        mode = how == "layer" ? sm::layer : sm::row;
        rest.resize(slash);
    }
    std::vector<int> gpus;
    for (size_t i = 0; i <= rest.size();) {
        const size_t plus = std::min(rest.find('+', i), rest.size());
        const std::string num = rest.substr(i, plus - i);
        if (num.empty() || num.size() > 4 || num.find_first_not_of("0123456789") != std::string::npos) throw bad();
        gpus.push_back(std::stoi(num));
        i = plus + 1;
    }
    std::vector<int> sorted = gpus;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end())
        throw error(fmt::format("--device: '{}' names a GPU twice", spec));
    if (gpus.size() == 1) { // one GPU of several
        if (how_given) throw bad();
        d.sp.split = sm::none;
        d.sp.main_gpu = gpus[0];
        return d;
    }
    d.sp.split = mode;
    d.sp.tensor_split.assign(size_t(sorted.back()) + 1, 0.0f); // the named GPUs, equal shares; the others left out
    for (int g : gpus) d.sp.tensor_split[size_t(g)] = 1.0f;
    d.sp.main_gpu = 0;
    return d;
}

// Agreement first (the prompt as one batch with every position's logits, then the same tokens again one at a time,
// teacher-forced), then the timings: a warm-up of both tests unless told not to, and `reps` timed runs of each.
run_result evaluate(const model& mdl, const compare_options& o, const side& d, const std::vector<token>& toks,
                    int64_t n_gen) {
    run_result r;
    session_params sp = d.sp;
    sp.n_ctx = std::max<int64_t>(sp.n_ctx, int64_t(toks.size()) + 1);
    session s(mdl, sp);
    r.backend = d.label;
    const int warm = o.no_warmup ? 0 : 1;
    progress_bar bar(fmt::format("{:<5}", r.backend), (1 + warm + o.reps) * (1 + n_gen));
    // the layer a node belongs to: its name's "-N" suffix; unnamed nodes belong to the layer being evaluated
    int cur_layer = 0;
    const bool layers = o.layers;
    const int node_layer = o.nodes;
    if (layers || node_layer >= 0)
        s.set_eval_callback([&, layers, node_layer](backend& be, const tensor& t) {
            int il = -1;
            const char* dash = std::strrchr(t.name, '-');
            if (dash && std::sscanf(dash + 1, "%d", &il) == 1) cur_layer = il;
            if (layers && std::strncmp(t.name, "l_out-", 6) == 0 && il >= 0) {
                std::vector<float> v(size_t(t.n_elements()));
                be.get(t, v.data(), 0, v.size() * sizeof(float));
                r.layer_out[il] = std::move(v);
            }
            if (cur_layer == node_layer && (t.t == type::f32 || t.t == type::i32) && t.is_contiguous()) {
                run_result::node_out n{t.name, op_name(t.o), std::vector<float>(size_t(t.n_elements()))};
                be.get(t, n.v.data(), 0, n.v.size() * sizeof(float));
                n.ints = t.t == type::i32; // indices (top_k's expert ids): compared value by value
                if (n.ints)
                    for (float& x : n.v) x = float(std::bit_cast<int32_t>(x));
                r.nodes.push_back(std::move(n));
            }
            if (std::strncmp(t.name, "l_out-", 6) == 0) cur_layer = il + 1; // what follows is the next layer's
        });
    auto l = s.decode(toks, true);
    r.pp_logits.assign(l.begin(), l.end());
    s.set_eval_callback({});
    bar.add(1);
    s.clear();
    for (int64_t i = 0; i < n_gen; i++) {
        auto li = s.decode(std::span<const token>(&toks[size_t(i)], 1));
        r.tg_logits.insert(r.tg_logits.end(), li.begin(), li.end());
        bar.add(1);
    }

    using clock = std::chrono::steady_clock;
    auto pp = [&] {
        s.clear();
        const auto t0 = clock::now();
        s.decode(toks);
        s.be().synchronize();
        bar.add(1);
        return double(toks.size()) / std::chrono::duration<double>(clock::now() - t0).count();
    };
    auto tg = [&] {
        s.clear();
        const auto t0 = clock::now();
        for (int64_t i = 0; i < n_gen; i++) {
            s.decode(std::span<const token>(&toks[size_t(i)], 1));
            bar.add(1);
        }
        s.be().synchronize();
        return double(n_gen) / std::chrono::duration<double>(clock::now() - t0).count();
    };
    if (warm) {
        pp();
        tg();
    }
    std::vector<double> pps, tgs;
    for (int i = 0; i < o.reps; i++) {
        pps.push_back(pp());
        tgs.push_back(tg());
    }
    bar.finish();
    r.pp_tps = median(pps);
    r.tg_tps = median(tgs);
    return r;
}

struct agreement {
    double max_dlogit = 0, mean_kld = 0, top1 = 0;
    int64_t n = 0;
};

agreement agree(const std::vector<float>& a, const std::vector<float>& b, int64_t n_vocab) {
    agreement g;
    g.n = int64_t(a.size()) / n_vocab;
    int64_t same = 0;
    double kld_sum = 0;
    for (int64_t t = 0; t < g.n; t++) {
        const float* x = a.data() + t * n_vocab;
        const float* y = b.data() + t * n_vocab;
        int64_t ax = 0, ay = 0;
        float mx = x[0], my = y[0];
        for (int64_t i = 0; i < n_vocab; i++) {
            g.max_dlogit = std::max(g.max_dlogit, double(std::fabs(x[i] - y[i])));
            if (x[i] > mx) mx = x[i], ax = i;
            if (y[i] > my) my = y[i], ay = i;
        }
        same += ax == ay;
        double zx = 0, zy = 0;
        for (int64_t i = 0; i < n_vocab; i++) {
            zx += std::exp(double(x[i]) - mx);
            zy += std::exp(double(y[i]) - my);
        }
        double kld = 0; // KL(CPU || CUDA)
        for (int64_t i = 0; i < n_vocab; i++) {
            const double lp = double(x[i]) - mx - std::log(zx), lq = double(y[i]) - my - std::log(zy);
            kld += std::exp(lp) * (lp - lq);
        }
        kld_sum += kld;
    }
    g.top1 = g.n ? double(same) / double(g.n) : 0;
    g.mean_kld = g.n ? kld_sum / double(g.n) : 0;
    return g;
}

void compare_main(const compare_options& o) {
    const std::string text = o.p.prompt.empty() && o.p.file.empty() ? default_text : read_prompt(o.p);
    // the two sides: --device A,B (default cpu,cuda)
    std::vector<side> sides;
    {
        const std::string list = o.m.device.empty() ? "cpu,cuda" : o.m.device;
        const size_t comma = list.find(',');
        if (comma == std::string::npos || list.find(',', comma + 1) != std::string::npos)
            throw error(fmt::format("--device: compare takes two sides as A,B (e.g. cpu,cuda or cuda:0,cuda:0+1), not "
                                    "'{}'",
                                    list));
        for (const std::string& spec : {list.substr(0, comma), list.substr(comma + 1)})
            sides.push_back(parse_side(spec, o.m.session));
        if (sides[1].label == sides[0].label) sides[1].label += " (2)";
    }
    auto mdl = model::load(o.m.model);
    for (const side& d : sides) {
        if (!d.cuda) continue;
        std::string why;
        if (!find_gpu(&why))
            throw error(fmt::format("compare: {} needs a CUDA device ({}); --device cpu,cpu compares the CPU with "
                                    "itself",
                                    d.label, why));
        for (tensor* w : mdl->params)
            if (!device_supports_weights(device_type::cuda, w->t))
                throw error(fmt::format("the CUDA backend cannot run {} weights yet ({})", type_name(w->t), w->name));
        break;
    }
    if (o.reps < 1) throw error("-r must be at least 1");
    std::vector<token> toks = mdl->voc.tokenize(text, true, true);
    if (toks.size() < 2) throw error("the text is too short to compare (fewer than 2 tokens)");
    const int64_t n_ctx = o.m.session.n_ctx > 0 ? o.m.session.n_ctx : 512;
    if (n_ctx < 2) throw error("-c must be at least 2 to compare");
    if (int64_t(toks.size()) > n_ctx) {
        fmt::print(stderr, "note: comparing the first {} of the text's {} tokens (-c to change)\n", n_ctx, toks.size());
        toks.resize(size_t(n_ctx));
    }
    const int64_t n_gen = std::min<int64_t>(o.p.n_predict < 0 ? 64 : o.p.n_predict, int64_t(toks.size()));
    const run_result cpu = evaluate(*mdl, o, sides[0], toks, n_gen); // side A ("cpu" by default)
    const run_result gpu = evaluate(*mdl, o, sides[1], toks, n_gen); // side B ("cuda")
    const int64_t nv = mdl->hp.n_vocab;
    const auto nmse = [](const std::vector<float>& a, const std::vector<float>& b) {
        double num = 0, den = 0;
        for (size_t i = 0; i < a.size(); i++) {
            num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
            den += double(a[i]) * a[i];
        }
        return den > 0 ? num / den : num;
    };
    // --nodes: the two backends' nodes pair up by position (the same graph); a size or name mismatch ends the list
    nlohmann::json node_rows = nlohmann::json::array();
    for (size_t i = 0; i < std::min(cpu.nodes.size(), gpu.nodes.size()); i++) {
        const auto &a = cpu.nodes[i], &b = gpu.nodes[i];
        if (a.name != b.name || a.v.size() != b.v.size()) break;
        double mx = 0;
        size_t differ = 0;
        for (size_t e = 0; e < a.v.size(); e++) {
            mx = std::max(mx, double(std::fabs(a.v[e] - b.v[e])));
            differ += a.v[e] != b.v[e];
        }
        nlohmann::json row = {{"node", a.name.empty() ? "(" + a.op + ")" : a.name}, {"op", a.op}};
        if (a.ints) // indices: how many differ (an NMSE of indices means nothing)
            row["differing"] = differ, row["count"] = a.v.size();
        else
            row["nmse"] = nmse(a.v, b.v), row["max_abs_diff"] = mx;
        node_rows.push_back(std::move(row));
    }
    const agreement pp = agree(cpu.pp_logits, gpu.pp_logits, nv), tg = agree(cpu.tg_logits, gpu.tg_logits, nv);
    int first_bad = -1;
    std::vector<double> layer_nmse;
    if (o.layers)
        for (const auto& [il, a] : cpu.layer_out) {
            const auto it = gpu.layer_out.find(il);
            if (it == gpu.layer_out.end()) continue;
            double num = 0, den = 0;
            for (size_t i = 0; i < a.size(); i++) {
                num += (double(a[i]) - it->second[i]) * (double(a[i]) - it->second[i]);
                den += double(a[i]) * a[i];
            }
            layer_nmse.push_back(den > 0 ? num / den : num);
            if (first_bad < 0 && layer_nmse.back() > o.layer_bound) first_bad = il;
        }

    if (o.json) {
        nlohmann::json j = {
            {"model", mdl->path},
            {"n_tokens", toks.size()},
            {"n_gen", n_gen},
            {"repetitions", o.reps},
            {"sides", {sides[0].label, sides[1].label}},
            {sides[0].label, {{"pp_tps", cpu.pp_tps}, {"tg_tps", cpu.tg_tps}}},
            {sides[1].label, {{"pp_tps", gpu.pp_tps}, {"tg_tps", gpu.tg_tps}}},
            {"speedup", {{"pp", gpu.pp_tps / cpu.pp_tps}, {"tg", gpu.tg_tps / cpu.tg_tps}}},
            {"prompt", {{"max_abs_dlogit", pp.max_dlogit}, {"top1_agreement", pp.top1}, {"mean_kld", pp.mean_kld}}},
            {"decode", {{"max_abs_dlogit", tg.max_dlogit}, {"top1_agreement", tg.top1}, {"mean_kld", tg.mean_kld}}}};
        if (o.nodes >= 0) j["nodes"] = node_rows;
        if (o.layers) {
            j["layer_nmse"] = layer_nmse;
            j["first_divergent_layer"] = first_bad;
            j["layer_bound"] = o.layer_bound;
        }
        fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)); // metadata may be bad UTF-8
        return;
    }
    fmt::print("{} — {} tokens, {} decode steps; speeds: medians of {} runs{}\n\n", mdl->name, toks.size(), n_gen,
               o.reps, o.no_warmup ? "" : " after a warm-up");
    const size_t w = std::max<size_t>({10, sides[0].label.size(), sides[1].label.size()});
    fmt::print("| {:<{}} | {:>14} | {:>14} |\n", "", w, "pp t/s", "tg t/s");
    fmt::print("| {:-<{}} | {:->14} | {:->14} |\n", "", w, "", "");
    fmt::print("| {:<{}} | {:>14.1f} | {:>14.1f} |\n", sides[0].label, w, cpu.pp_tps, cpu.tg_tps);
    fmt::print("| {:<{}} | {:>14.1f} | {:>14.1f} |\n", sides[1].label, w, gpu.pp_tps, gpu.tg_tps);
    fmt::print("| {:<{}} | {:>13.2f}x | {:>13.2f}x |\n\n", "speedup", w, gpu.pp_tps / cpu.pp_tps,
               gpu.tg_tps / cpu.tg_tps);
    fmt::print("| {:<8} | {:>12} | {:>14} | {:>12} |\n", "logits", "max |Δ|", "top-1 agree", "mean KLD");
    fmt::print("| {:-<8} | {:->12} | {:->14} | {:->12} |\n", "", "", "", "");
    fmt::print("| {:<8} | {:>12.4f} | {:>13.2f}% | {:>12.3g} |\n", "prompt", pp.max_dlogit, 100 * pp.top1, pp.mean_kld);
    fmt::print("| {:<8} | {:>12.4f} | {:>13.2f}% | {:>12.3g} |\n", "decode", tg.max_dlogit, 100 * tg.top1, tg.mean_kld);
    if (o.nodes >= 0) {
        fmt::print("\nlayer {} of the prompt batch, node by node ({} vs {}):\n\n", o.nodes, sides[0].label,
                   sides[1].label);
        size_t nw = 20;
        for (const auto& row : node_rows) nw = std::max(nw, row["node"].get<std::string>().size());
        fmt::print("| {:<{}} | {:<10} | {:>10} | {:>12} |\n", "node", nw, "op", "NMSE", "max |Δ|");
        fmt::print("| {:-<{}} | {:-<10} | {:->10} | {:->12} |\n", "", nw, "", "", "");
        for (const auto& row : node_rows)
            if (row.contains("differing")) // indices: "k of n" differ in the NMSE column
                fmt::print("| {:<{}} | {:<10} | {:>10} | {:>12} |\n", row["node"].get<std::string>(), nw,
                           row["op"].get<std::string>(),
                           fmt::format("{} of {}", row["differing"].get<size_t>(), row["count"].get<size_t>()),
                           "differ");
            else
                fmt::print("| {:<{}} | {:<10} | {:>10.3g} | {:>12.4g} |\n", row["node"].get<std::string>(), nw,
                           row["op"].get<std::string>(), row["nmse"].get<double>(),
                           row["max_abs_diff"].get<double>());
    }
    if (o.layers) {
        if (first_bad < 0)
            fmt::print("\nevery layer's hidden state agrees within NMSE {:g}\n", o.layer_bound);
        else
            fmt::print("\nfirst layer beyond NMSE {:g}: {} (NMSE {:.3g})\n", o.layer_bound, first_bad,
                       layer_nmse[size_t(first_bad)]);
    }
}

} // namespace

void add_compare(CLI::App& app) {
    auto o = std::make_shared<compare_options>();
    CLI::App* cmd = app.add_subcommand(
        "compare", "Run the same tokens on the CPU and on CUDA (or any two sides, --device A,B): speed and agreement");
    add_model_options(*cmd, o->m, true, true);
    cmd->add_option("-p,--prompt", o->p.prompt, "Text to evaluate (default: a built-in paragraph)");
    cmd->add_option("-f,--file", o->p.file, "Read the text from a file");
    cmd->add_option("-n,--n-predict", o->p.n_predict, "Decode steps to time and compare (default 64)");
    o->p.n_predict = -1;
    cmd->add_flag("--layers", o->layers, "Also compare every layer's output and name the first that diverges");
    cmd->add_option("--nodes", o->nodes, "Also compare every node of layer IL of the prompt batch, in order")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--layer-bound", o->layer_bound, "NMSE above which a layer counts as diverged")->capture_default_str();
    cmd->add_option("-r,--repetitions", o->reps, "Timed runs of each test (the speeds are their medians)")
        ->capture_default_str();
    cmd->add_flag("--no-warmup", o->no_warmup, "Skip the untimed warm-up run");
    cmd->add_flag("--json", o->json, "Print one JSON object");
    cmd->footer("The text is cut to the first -c tokens (default 512 here).\n\nExample:\n"
                "  tessera compare -m models/SmolLM2-135M-Instruct.Q4_1.gguf -f wiki.test.raw --layers\n"
                "  tessera compare -m model.gguf --device cuda:0,cuda:0+1     (one GPU against two, split by rows)");
    cmd->callback([o] { compare_main(*o); });
}

} // namespace tessera::cli
