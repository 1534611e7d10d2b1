#!/usr/bin/env bash
# device_build.sh: the project built on a device machine, from the repository root of the device copy with .ref
# (vocabularies, data/, llama.tar.xz) and .gl (pcre2.h) carried (NOTES.md, "Device and reference tools"). Resumable
# within one lease (/tmp survives while the machine stays warm):
#   - with LLAMA=1, first starts llama.cpp's CUDA llama-bench build in the background (/tmp/lr/llama.cpp/build,
#     ~6 min beside this build on 16 cores; /tmp/lb.rc holds its exit status when done: wait on that file with a
#     deadline);
#   - configures /tmp/bt (Release, sm_90a, the tests' data from .ref/data) and builds random_model, then the targets
#     given (default: tessera).
# Exit status: the build's. Logs in ${OUT:-/tmp}.
#   usage: tests/bench/device_build.sh [TARGET...]      env: LLAMA (unset), JOBS (16)
set -uo pipefail
cd "$(dirname "$0")/../.."
log=${OUT:-/tmp}
jobs=${JOBS:-16}
if [[ -n ${LLAMA:-} && ! -d /tmp/lr/llama.cpp ]]; then
    mkdir -p /tmp/lr && tar xJf .ref/llama.tar.xz -C /tmp/lr || exit 1
    (setsid nohup bash -c "cd /tmp/lr/llama.cpp && cmake -S . -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DCMAKE_BUILD_TYPE=Release > /tmp/lb_cfg.log 2>&1 &&
        cmake --build build -j$((jobs - 2)) --target llama-bench > /tmp/lb.log 2>&1; echo \$? > /tmp/lb.rc" \
        > /dev/null 2>&1 &)
fi
if [[ ! -f /tmp/bt/CMakeCache.txt ]]; then
    cmake -S . -B /tmp/bt -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real \
        -DPCRE2_INCLUDE_DIR="$PWD/.gl/include" -DTESSERA_TEST_DATA="$PWD/.ref/data" > "$log/configure.log" 2>&1 ||
        { tail -30 "$log/configure.log"; exit 1; }
fi
for targets in random_model "${*:-tessera}"; do
    # shellcheck disable=SC2086 # a list of targets
    cmake --build /tmp/bt -j"$jobs" --target $targets > "$log/build.log" 2>&1 ||
        { grep -B2 -A12 -m3 'error' "$log/build.log"; exit 1; }
done
