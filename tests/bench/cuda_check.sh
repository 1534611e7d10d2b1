#!/usr/bin/env bash
# cuda_check.sh: the CUDA backend on a GPU machine, in one go: build Release with CUDA into $BUILD (/tmp/build), run
# test_backend_ops (every op vs the CPU, the default model's top-1 agreement), the other test suites, `tessera run` on
# the default model on CUDA and on the CPU, the GEMV benchmark, and compute-sanitizer memcheck on test_backend_ops.
# Logs go to $OUT (or /tmp/cuda_check); a summary is printed last.
#   usage: tests/bench/cuda_check.sh [all|build|test]
#   env:   BUILD, OUT, TESSERA_MODEL (default models/SmolLM2-135M-Instruct.Q4_1.gguf), PCRE2_INCLUDE_DIR (a machine
#          with the PCRE2 runtime but no headers: a directory holding a copy of pcre2.h), JOBS (16)
set -u
cd "$(dirname "$0")/../.."
stage=${1:-all}
BUILD=${BUILD:-/tmp/build}
OUT=${OUT:-/tmp/cuda_check}
JOBS=${JOBS:-16}
MODEL=${TESSERA_MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p "$OUT"
[[ $stage == test && ! -f $BUILD/CMakeCache.txt ]] && stage=all # a fresh machine: build first
summary=()
note() { summary+=("$*"); echo "== $*"; }

if [[ $stage == all || $stage == build ]]; then
    gen=()
    command -v ninja > /dev/null && gen=(-G Ninja)
    t0=$(date +%s)
    cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
        ${PCRE2_INCLUDE_DIR:+-DPCRE2_INCLUDE_DIR=$PCRE2_INCLUDE_DIR} > "$OUT/configure.log" 2>&1 ||
        { tail -30 "$OUT/configure.log"; exit 1; }
    t1=$(date +%s)
    cmake --build "$BUILD" -j "$JOBS" > "$OUT/build.log" 2>&1 || { grep -B2 -A12 -m3 'error' "$OUT/build.log"; exit 1; }
    t2=$(date +%s)
    # the CUDA sources alone, recompiled: the compile-time cost of the backend
    touch backends/cuda/*.cu backends/cuda/ops/*.cu
    t3=$(date +%s)
    cmake --build "$BUILD" -j "$JOBS" --target tessera_cuda >> "$OUT/build.log" 2>&1
    t4=$(date +%s)
    note "build: configure $((t1 - t0)) s, everything $((t2 - t1)) s with -j$JOBS; tessera_cuda alone $((t4 - t3)) s"
fi

if [[ $stage == all || $stage == test ]]; then
    cmake --build "$BUILD" -j "$JOBS" >> "$OUT/build.log" 2>&1 || { grep -B2 -A12 -m3 'error' "$OUT/build.log"; exit 1; }
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm --format=csv \
        | tee "$OUT/gpu.txt"
    [[ -f $MODEL ]] && note "model: $MODEL ($(stat -c %s "$MODEL") bytes)" || note "model: MISSING ($MODEL)"
    export TESSERA_MODEL=$MODEL

    "$BUILD/tests/test_backend_ops" > "$OUT/test_backend_ops.log" 2>&1
    rc=$?
    grep -E '^\[  FAILED  \]|Failure|NMSE|agreement' "$OUT/test_backend_ops.log" | head -40
    note "test_backend_ops: rc $rc, $(grep -c '^\[       OK \]' "$OUT/test_backend_ops.log") ok, \
$(grep -c '^\[  SKIPPED \]' "$OUT/test_backend_ops.log") skipped, $(grep -c '^\[  FAILED  \]' "$OUT/test_backend_ops.log") failed"
    note "$(grep -m1 'top-1 agreement' "$OUT/test_backend_ops.log")"

    (cd "$BUILD" && ctest -j 12 --timeout 600 -E 'backend_ops' --output-on-failure) > "$OUT/ctest.log" 2>&1
    note "ctest (other suites): $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"
    grep -E '^\s+[0-9]+ - .*\(Failed|Timeout|SEGFAULT|Exception\)' "$OUT/ctest.log" | head -20

    if [[ -f $MODEL ]]; then
        for dev in cuda cpu; do
            "$BUILD/cli/tessera" run -m "$MODEL" -p "The capital of France is" -n 128 --temp 0 --device $dev \
                > "$OUT/run_$dev.txt" 2> "$OUT/run_$dev.err"
            note "tessera run --device $dev (rc $?): $(tail -1 "$OUT/run_$dev.err")"
            head -c 300 "$OUT/run_$dev.txt"
            echo
        done
        cmp -s "$OUT/run_cuda.txt" "$OUT/run_cpu.txt" && note "run: CUDA text == CPU text (128 greedy tokens)" ||
            note "run: CUDA text differs from CPU text"
        "$BUILD/cli/tessera" run -m "$MODEL" -p "Hi" -n 4 --temp 0 2>&1 > /dev/null | head -2 | sed 's/^/default device: /'
    fi

    "$BUILD/tests/bench_mmv" 20 2>&1 | tee "$OUT/bench_mmv.txt"

    if command -v compute-sanitizer > /dev/null; then
        timeout 240 compute-sanitizer --tool memcheck --error-exitcode 1 "$BUILD/tests/test_backend_ops" \
            --gtest_filter='cuda/*:backend_ops_cuda*' > "$OUT/memcheck.log" 2>&1
        rc=$?
        note "compute-sanitizer memcheck on test_backend_ops (ops): rc $rc, $(grep -m1 'ERROR SUMMARY' "$OUT/memcheck.log")"
        [[ $rc != 0 ]] && grep -m5 -A8 'Invalid\|Error' "$OUT/memcheck.log" | head -40
    fi
fi

echo
echo "==== summary ($(date -u +%Y-%m-%dT%H:%MZ)) ===="
printf '%s\n' "${summary[@]}"
