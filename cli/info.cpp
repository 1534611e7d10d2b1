#include "commands.h"

namespace tessera::cli {
void add_info(CLI::App& app) { (void)app; }
} // namespace tessera::cli
