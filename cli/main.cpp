// main.cpp: builds the tessera app, registers one subcommand per file, and turns errors into "error: ..." + exit 1.
#include "commands.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
    CLI::App app{"tessera: GGUF LLM inference on CPU and CUDA", "tessera"};
    app.require_subcommand(1);
    app.set_help_all_flag("--help-all", "Show help for every subcommand");
    tessera::cli::add_run(app);
    tessera::cli::add_info(app);
    tessera::cli::add_tokenize(app);
    try {
        app.parse(argc, argv);
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
