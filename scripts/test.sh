#!/usr/bin/env bash
# test.sh: installs the dependencies, builds everything into build/ with warnings as errors, fetches the default model
# and runs the whole CTest suite. Exits with ctest's status. Used by .ci/run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/install-deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DTESSERA_WERROR=ON
cmake --build build -j"$(nproc)"
if ! bash scripts/fetch-model.sh; then
    echo "test.sh: no default model; the tests that need it will skip themselves" >&2
fi

status=0
ctest --test-dir build --output-on-failure -j2 </dev/null || status=$?
exit "$status"
