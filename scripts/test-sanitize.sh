#!/usr/bin/env bash
# test-sanitize.sh: builds the CPU tree with AddressSanitizer + UndefinedBehaviorSanitizer into build-asan/ (warnings
# as errors, CUDA off) and runs the CTest suite there. Any sanitizer report fails the test that triggered it (UBSan
# does not recover). Assumes the dependencies and the model that scripts/test.sh installs and fetches. Used by .ci/run.
#   scripts/test-sanitize.sh [extra ctest arguments, e.g. -R gguf]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_CUDA=OFF -DTESSERA_SANITIZE=address,undefined \
    -DTESSERA_WERROR=ON
cmake --build build-asan -j"$(nproc)"

# detect_leaks: a leak fails the test too; print_stacktrace: UBSan reports say where
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:strict_string_checks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
ctest --test-dir build-asan --output-on-failure -j2 "$@" </dev/null
