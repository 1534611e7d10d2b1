// commands.h: one add_<name>(CLI::App&) per subcommand, each defined in its own file (run.cpp, info.cpp, ...).
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

void add_run(CLI::App& app);
void add_info(CLI::App& app);
void add_tokenize(CLI::App& app);
void add_quantize(CLI::App& app);
void add_perplexity(CLI::App& app);
void add_chat(CLI::App& app);
void add_bench(CLI::App& app);
void add_compare(CLI::App& app);
void add_template(CLI::App& app);

} // namespace tessera::cli
