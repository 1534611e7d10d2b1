#include "commands.h"

namespace tessera::cli {
void add_run(CLI::App& app) { (void)app; }
} // namespace tessera::cli
