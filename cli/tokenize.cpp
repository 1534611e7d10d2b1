#include "commands.h"

namespace tessera::cli {
void add_tokenize(CLI::App& app) { (void)app; }
} // namespace tessera::cli
