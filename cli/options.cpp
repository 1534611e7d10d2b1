// options.cpp: shared flag definitions and prompt input.
#include "options.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>

namespace tessera::cli {

void add_model_options(CLI::App& cmd, model_options& o, bool model_required, bool device_pair) {
    auto* m = cmd.add_option("-m,--model", o.model, "Model file (GGUF)");
    if (model_required) m->required();
    cmd.add_option("-c,--ctx-size", o.session.n_ctx, "Context size in tokens (0: the model's, at most 4096)")
        ->check(CLI::Range(int64_t(0), int64_t(1) << 24));
    cmd.add_option("-b,--batch-size", o.session.n_batch, "Tokens evaluated per graph during prompt processing")
        ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
    cmd.add_option("-t,--threads", o.session.n_threads, "CPU threads (0: one per core, at most 8)")
        ->check(CLI::Range(0, 512));
    cmd.add_flag("-v,--verbose", o.verbose, "More log output on stderr");
    if (device_pair)
        cmd.add_option("--device", o.device,
                       "The two sides to compare, as A,B: cpu, cuda (the main GPU), cuda:N (GPU N), cuda:N+M (those "
                       "GPUs split by rows; cuda:N+M/layer: by layers) (default: cpu,cuda)");
    else
        cmd.add_option("--device", o.device, "Run on cpu or cuda (default: cuda when a GPU is present)")
            ->check(CLI::IsMember({"cpu", "cuda"}));
    cmd.add_flag("--exact", o.session.exact,
                 "CUDA: reproduce the CPU's results bit for bit (quantized mul_mat, norms, rope, attention); "
                 "slower, for checking one backend against the other");
    cmd.add_option("--n-gpu-layers,--ngl", o.session.n_gpu_layers,
                   "Layers on the GPU, counted as llama.cpp counts them: the last N layers, the output layer "
                   "counting as one (N >= layers + 1: all); the rest run on the CPU; 0: every layer on the CPU "
                   "(default: all when a GPU is present)")
        ->check(CLI::Range(0, 1 << 20));
    cmd.add_flag("--op-offload,!--no-op-offload", o.session.op_offload,
                 "With layers on the CPU (-ngl, --n-cpu-moe) and a GPU: their matmuls over a batch of 32 tokens or "
                 "more (a prompt) run on the GPU, the weights copied there each time, as llama.cpp does (default: on; "
                 "--no-op-offload with -ngl 0 leaves the GPU unused)");
    cmd.add_option("--n-cpu-moe,--ncmoe", o.session.n_cpu_moe,
                   "Mixture-of-experts models: keep the experts of the first N layers on the CPU (with the GPU)")
        ->check(CLI::Range(0, 1 << 20));
    cmd.add_option_function<std::string>(
           "--split-mode,--sm",
           [&o](const std::string& v) {
               using sm = session_params::split_mode;
               o.session.split = v == "row" ? sm::row : v == "layer" ? sm::layer : sm::none;
           },
           "Several GPUs: none (the main GPU alone, the default), layer (consecutive layers on consecutive GPUs), "
           "row (every layer divided over the GPUs: tensor parallelism through NCCL)")
        ->check(CLI::IsMember({"none", "layer", "row"}));
    cmd.add_option_function<std::string>(
        "--tensor-split,--ts",
        [&o](const std::string& v) {
            o.session.tensor_split.clear();
            std::string part;
            for (size_t i = 0; i <= v.size(); i++) {
                if (i < v.size() && v[i] != ',' && v[i] != '/') {
                    part += v[i];
                    continue;
                }
                char* end = nullptr;
                const float x = std::strtof(part.c_str(), &end);
                if (part.empty() || *end != '\0' || !std::isfinite(x) || x < 0.0f)
                    throw CLI::ValidationError("--tensor-split", "'" + v + "' is not a list of shares such as 3,1");
                o.session.tensor_split.push_back(x);
                part.clear();
            }
        },
        "Shares of the GPUs in device order, as 3,1 or 3/1 (default: equal; 0 leaves a GPU out)");
    cmd.add_option("--main-gpu,--mg", o.session.main_gpu,
                   "The GPU for --split-mode none, and the one computing the output layer with row")
        ->check(CLI::Range(0, 1023));
}

device_choice choose_device(const model_options& o, const model* m) {
    // -ngl 0: every layer on the CPU; the GPU (when there is one) still takes a prompt's matmuls, unless
    // --no-op-offload
    const bool cpu_only = o.session.n_gpu_layers == 0 && !o.session.op_offload;
    if (o.device == "cpu" || (o.device.empty() && cpu_only)) {
        if (o.session.split != session_params::split_mode::none || !o.session.tensor_split.empty())
            throw error("--split-mode / --tensor-split place layers on GPUs, and this run is on the CPU");
        return {};
    }
    if (o.device == "cuda" && cpu_only)
        throw error("--device cuda with -ngl 0 and --no-op-offload leaves the GPU nothing to do");
    const bool split = o.session.split != session_params::split_mode::none || !o.session.tensor_split.empty();
    const bool asked = o.device == "cuda" || o.session.n_gpu_layers > 0 || split || o.session.main_gpu != 0;
    const char* flag = o.device == "cuda"               ? "--device cuda"
                       : o.session.n_gpu_layers > 0     ? "-ngl"
                       : split                          ? "--split-mode / --tensor-split"
                                                        : "--main-gpu";
    std::string why;
    const std::optional<gpu_info> gpu = find_gpu(&why);
    if (!gpu) {
        if (asked) throw error(fmt::format("{}: no CUDA device ({})", flag, why));
        return {};
    }
    // a model with weights the CUDA backend cannot compute yet runs on the CPU unless CUDA was asked for
    if (m)
        for (const tensor* w : m->params)
            if (!device_supports_weights(device_type::cuda, w->t)) {
                if (asked)
                    throw error(fmt::format("{}: the CUDA backend cannot compute {} weights yet ({}); use --device cpu",
                                            flag, type_name(w->t), w->name));
                return {device_type::cpu, fmt::format("running on the CPU: the CUDA backend cannot compute {} weights "
                                                      "yet",
                                                      type_name(w->t))};
            }
    if (o.session.split != session_params::split_mode::none) {
        const int n = gpu_count();
        return {device_type::cuda,
                fmt::format("using CUDA: {} GPU{} ({}), split by {}; --device cpu runs on the CPU", n, n == 1 ? "" : "s",
                            gpu->name, o.session.split == session_params::split_mode::row ? "rows" : "layers")};
    }
    const int n_gpus = gpu_count();
    return {device_type::cuda,
            fmt::format("using CUDA: {} ({:.1f} GiB free); {}--device cpu runs on the CPU", gpu->name,
                        double(gpu->free_bytes) / double(1u << 30),
                        n_gpus > 1 ? fmt::format("{} GPUs here: --split-mode row runs on all of them; ", n_gpus) : "")};
}

void add_sampling_options(CLI::App& cmd, sampler_params& s) {
    cmd.add_option("--temp", s.temp, "Temperature; 0 = greedy")->capture_default_str();
    cmd.add_option("--top-k", s.top_k, "Top-k sampling; 0 = off")->capture_default_str();
    cmd.add_option("--top-p", s.top_p, "Top-p (nucleus) sampling; 1 = off")->capture_default_str();
    cmd.add_option("--min-p", s.min_p, "Min-p sampling; 0 = off")->capture_default_str();
    cmd.add_option("--repeat-penalty", s.repeat_penalty, "Penalty for repeated tokens; 1 = off")
        ->capture_default_str();
    cmd.add_option("--repeat-last-n", s.repeat_last_n, "Tokens the repeat penalty looks back; -1 = all")
        ->capture_default_str();
    cmd.add_option("-s,--seed", s.seed, "Random seed (default: random)");
}

void add_prompt_options(CLI::App& cmd, prompt_options& o) {
    cmd.add_option("-p,--prompt", o.prompt, "Prompt text");
    cmd.add_option("-f,--file", o.file, "Read the prompt from a file (its bytes exactly)");
    cmd.add_option("-n,--n-predict", o.n_predict, "Tokens to generate; -1 = until end of generation")
        ->capture_default_str()
        ->check(CLI::Range(-1, 1 << 24));
}

std::string read_text_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (f.bad()) throw error(fmt::format("{}: read error", path));
    return s;
}

std::string read_prompt(const prompt_options& o) {
    const bool has_p = !o.prompt.empty(), has_f = !o.file.empty();
    if (has_p && has_f) throw error("give either -p/--prompt or -f/--file, not both");
    if (!has_p && !has_f) throw error("no prompt: give -p TEXT or -f FILE");
    return has_p ? o.prompt : read_text_file(o.file);
}

} // namespace tessera::cli
