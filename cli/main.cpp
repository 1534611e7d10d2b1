// main.cpp: builds the tessera app, registers one subcommand per file, and turns errors into "error: ..." + exit 1.
#include "commands.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <cstdio>
#include <string>
#include <vector>
#include <exception>

int main(int argc, char** argv) {
    CLI::App app{"tessera: GGUF LLM inference on CPU and CUDA", "tessera"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Show help for every subcommand");
    tessera::cli::add_run(app);
    tessera::cli::add_info(app);
    tessera::cli::add_tokenize(app);
    tessera::cli::add_quantize(app);
    tessera::cli::add_perplexity(app);
    tessera::cli::add_chat(app);
    tessera::cli::add_bench(app);
    tessera::cli::add_compare(app);
    // llama.cpp spells some flags with one dash and several letters (-ngl, -sys); CLI11 takes one letter after a
    // single dash, so those are rewritten to their long forms first.
    std::vector<std::string> args(argv, argv + argc);
    for (auto& a : args) {
        if (a == "-ngl") a = "--n-gpu-layers";
        else if (a == "-sys") a = "--system-prompt";
        else if (a.rfind("-ngl=", 0) == 0) a = "--n-gpu-layers=" + a.substr(5);
    }
    std::vector<char*> argp;
    for (auto& a : args) argp.push_back(a.data());
    try {
        app.parse(int(argp.size()), argp.data());
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const tessera::error& e) {
        std::fflush(stdout);
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fflush(stdout);
        fmt::print(stderr, "error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fflush(stdout);
        fmt::print(stderr, "error: {}\n", e.what());
        return 1;
    }
    return 0;
}
