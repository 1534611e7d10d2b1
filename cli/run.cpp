// run.cpp: `tessera run`: one prompt in, a stream of generated text out (stdout), timings on stderr.
#include "commands.h"
#include "options.h"

#include "ggml-like/error.h"
#include "llm/model.h"
#include "llm/sampler.h"

#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <memory>

namespace tessera::cli {

namespace {

struct run_options {
    model_options m;
    prompt_options p;
    sampler_params s;
    bool no_display_prompt = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void run_main(const run_options& o) {
    const std::string text = read_prompt(o.p);
    auto t_load = std::chrono::steady_clock::now();
    auto mdl = model::load(o.m.model);
    const device_choice dev = choose_device(o.m, mdl.get());
    if (o.m.verbose)
        fmt::print(stderr, "loaded {} ({}, {} layers, {:.1f} M params, {}) in {:.0f} ms\n", mdl->name, mdl->arch,
                   mdl->hp.n_layer, double(mdl->n_params) / 1e6, mdl->type_summary(), seconds_since(t_load) * 1e3);

    session_params sp = o.m.session;
    sp.device = dev.device;
    session sess(*mdl, sp);
    std::vector<token> prompt = mdl->voc.tokenize(text, /*add_special=*/true, /*parse_special=*/true);
    if (prompt.empty()) throw error("the prompt is empty after tokenization");
    if (int64_t(prompt.size()) >= sess.n_ctx())
        throw error(fmt::format("prompt is {} tokens, longer than the context of {} tokens (raise -c)",
                                prompt.size(), sess.n_ctx()));
    if (!dev.note.empty()) fmt::print(stderr, "{}\n", dev.note);
    sampler smp(o.s, int32_t(mdl->hp.n_vocab));
    if (o.m.verbose)
        fmt::print(stderr, "context {}, backend {}, {} threads, prompt {} tokens, seed {}\n", sess.n_ctx(),
                   sess.be().name(), sess.n_threads(), prompt.size(), smp.seed());

    if (!o.no_display_prompt) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
    }
    for (token t : prompt) smp.accept(t);

    auto t_pp = std::chrono::steady_clock::now();
    std::span<const float> logits = sess.decode(prompt);
    const double pp_s = seconds_since(t_pp);

    auto t_tg = std::chrono::steady_clock::now();
    int n_gen = 0;
    const int64_t budget = o.p.n_predict < 0 ? sess.n_ctx() - int64_t(prompt.size()) : o.p.n_predict;
    while (n_gen < budget) {
        const token t = smp.sample(logits);
        smp.accept(t);
        if (mdl->voc.is_eog(t)) break;
        const std::string piece = mdl->voc.token_to_piece(t, false);
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
        n_gen++;
        if (sess.n_past() >= sess.n_ctx()) {
            fmt::print(stderr, "\n[context full: {} tokens]\n", sess.n_ctx());
            break;
        }
        if (n_gen == budget) break; // no need to evaluate a token nobody will sample from
        const token one[1] = {t};
        logits = sess.decode(one);
    }
    const double tg_s = seconds_since(t_tg);
    std::fputc('\n', stdout);
    std::fflush(stdout);
    fmt::print(stderr, "prompt: {} tokens in {:.1f} ms ({:.1f} tok/s) | generation: {} tokens in {:.1f} ms ({:.1f} tok/s)\n",
               prompt.size(), pp_s * 1e3, double(prompt.size()) / pp_s, n_gen, tg_s * 1e3,
               n_gen > 0 ? double(n_gen) / tg_s : 0.0);
}

} // namespace

void add_run(CLI::App& app) {
    auto o = std::make_shared<run_options>();
    CLI::App* cmd = app.add_subcommand("run", "Generate text from a prompt");
    add_model_options(*cmd, o->m);
    add_prompt_options(*cmd, o->p);
    add_sampling_options(*cmd, o->s);
    cmd->add_flag("--no-display-prompt", o->no_display_prompt, "Print only the generated text, not the prompt");
    cmd->footer("Example:\n  tessera run -m models/SmolLM2-135M-Instruct.Q4_1.gguf -p \"The capital of France is\" "
                "-n 32 --temp 0");
    cmd->callback([o] { run_main(*o); });
}

} // namespace tessera::cli
