#!/usr/bin/env bash
# quickstart.sh: from a fresh Debian 12 checkout to a first generation: installs the dependencies, builds Release into
# build/, fetches the default model into models/ and completes a prompt greedily with it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
bash scripts/fetch-model.sh
build/cli/tessera run -m models/SmolLM2-135M-Instruct.Q4_1.gguf -p "The capital of France is" -n 48 --temp 0
