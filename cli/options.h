// options.h: option groups shared by subcommands (model/runtime, sampling, prompt), defined once so every command
// spells a flag the same way (llama.cpp's spelling where it has one).
#pragma once

#include "llm/model.h"
#include "llm/sampler.h"

#include <CLI/CLI.hpp>

#include <string>

namespace tessera::cli {

struct model_options {
    std::string model;          // -m
    session_params session;     // -c, -b, -t, -ngl (session.device: see choose_device)
    bool verbose = false;       // -v
    std::string device;         // --device cpu|cuda; empty: CUDA when a GPU is present
};

// Where a command runs, from --device, -ngl and the machine.
struct device_choice {
    device_type device = device_type::cpu;
    std::string note; // one line for stderr: CUDA chosen ("using CUDA: NVIDIA H100 ..."), or the CPU despite a GPU
};
// Throws tessera::error (one line) when CUDA is asked for and there is none, or the flags contradict each other.
// Given the model, a GPU is passed over when the CUDA backend cannot compute one of its weight types (an error if
// CUDA was asked for): call it after loading the model where possible.
device_choice choose_device(const model_options& o, const model* m = nullptr);

struct prompt_options {
    std::string prompt;         // -p
    std::string file;           // -f
    int n_predict = 128;        // -n; -1: until end of generation or a full context
};

// device_pair: --device takes compare's two sides (cpu, cuda, cuda:N, cuda:N+M[/layer]) instead of cpu|cuda
void add_model_options(CLI::App& cmd, model_options& o, bool model_required = true, bool device_pair = false);
void add_sampling_options(CLI::App& cmd, sampler_params& s);
void add_prompt_options(CLI::App& cmd, prompt_options& o);

// The prompt text from -p or -f (the file's bytes exactly); throws tessera::error when neither or both are given.
std::string read_prompt(const prompt_options& o);
// Reads a whole file; tessera::error naming the path on failure.
std::string read_text_file(const std::string& path);

} // namespace tessera::cli
