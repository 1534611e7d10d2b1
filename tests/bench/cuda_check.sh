#!/usr/bin/env bash
# cuda_check.sh: the CUDA backend on a GPU machine, in one go: build Release with CUDA into $BUILD (/tmp/build), run
# test_backend_ops (every op vs the CPU; the default model's top-1 agreement), the GEMV benchmark, compute-sanitizer
# memcheck on test_backend_ops, test_model and test_cli, and `tessera run` on the default model on CUDA and the CPU.
# Logs go to $LOG (/tmp/cuda_check), packed into $OUT/cuda_check_logs.tgz when OUT is set; a summary is printed last.
#   usage: tests/bench/cuda_check.sh [STAGE...]   stages: build, ops (op tests, GEMV bench, memcheck), model (the
#          default model: agreement, test_model, test_cli, tessera run); none given: all three
#   The device tool carries at most 64 MiB a call and the default model is 94 MiB: carry its two halves (split -b)
#   in two calls and `cat` them into models/ before the model stage (ignored files stay while the machine is warm).
#   env:   BUILD, LOG, OUT, TESSERA_MODEL (default models/SmolLM2-135M-Instruct.Q4_1.gguf), PCRE2_INCLUDE_DIR (a machine
#          with the PCRE2 runtime but no headers: a directory holding a copy of pcre2.h), JOBS (16)
set -u
cd "$(dirname "$0")/../.."
stages=" ${*:-build ops model} "
has() { [[ $stages == *" $1 "* ]]; }
BUILD=${BUILD:-/tmp/build}
LOG=${LOG:-/tmp/cuda_check}
JOBS=${JOBS:-16}
MODEL=${TESSERA_MODEL:-$PWD/models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p "$LOG"
[[ ! -f $BUILD/CMakeCache.txt ]] && stages+="build " # a fresh machine: build first
summary=()
note() { summary+=("$*"); echo "== $*"; }

if has build; then
    gen=()
    command -v ninja > /dev/null && gen=(-G Ninja)
    t0=$(date +%s)
    cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
        ${PCRE2_INCLUDE_DIR:+-DPCRE2_INCLUDE_DIR=$PCRE2_INCLUDE_DIR} > "$LOG/configure.log" 2>&1 ||
        { tail -30 "$LOG/configure.log"; exit 1; }
    t1=$(date +%s)
    cmake --build "$BUILD" -j "$JOBS" > "$LOG/build.log" 2>&1 || { grep -B2 -A12 -m3 'error' "$LOG/build.log"; exit 1; }
    t2=$(date +%s)
    # the CUDA sources alone, recompiled: the compile-time cost of the backend
    touch backends/cuda/*.cu backends/cuda/ops/*.cu
    t3=$(date +%s)
    cmake --build "$BUILD" -j "$JOBS" --target tessera_cuda >> "$LOG/build.log" 2>&1
    t4=$(date +%s)
    note "build: configure $((t1 - t0)) s, everything $((t2 - t1)) s with -j$JOBS; tessera_cuda alone $((t4 - t3)) s"
fi

if has ops || has model; then
    cmake --build "$BUILD" -j "$JOBS" >> "$LOG/build.log" 2>&1 || { grep -B2 -A12 -m3 'error' "$LOG/build.log"; exit 1; }
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm --format=csv \
        | tee "$LOG/gpu.txt"
fi

if has ops; then
    "$BUILD/tests/test_backend_ops" --gtest_filter='cuda/*:backend_ops_cuda*' > "$LOG/test_backend_ops.log" 2>&1
    rc=$?
    grep -E '^\[  FAILED  \]|Failure|NMSE' "$LOG/test_backend_ops.log" | head -60
    note "test_backend_ops (ops): rc $rc, $(grep -E '^\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]+ test' \
        "$LOG/test_backend_ops.log" | tr '\n' ' ')"
    # the prefill GEMM's other paths on a Hopper GPU: 64- and 128-column tiles for every shape (the tests' matrices
    # are too small to get them by default), without the warp-specialized 256-column kernel, and the mma.sync kernels
    # (wgmma off)
    for sw in TESSERA_CUDA_WGMMA_TN=64 TESSERA_CUDA_WGMMA_TN=128 TESSERA_CUDA_WGMMA_WQ=0 TESSERA_CUDA_WGMMA=0; do
        # shellcheck disable=SC2086 # one or two assignments
        env $sw "$BUILD/tests/test_backend_ops" --gtest_filter='cuda/*mul_mat*:cuda/*fused*:cuda/*shared*' \
            > "$LOG/test_backend_ops_${sw// /_}.log" 2>&1
        note "test_backend_ops (GEMM paths, $sw): rc $?, $(grep -E '^\[ +(PASSED|FAILED) +\] [0-9]+ test' \
            "$LOG/test_backend_ops_${sw// /_}.log" | tr '\n' ' ')"
    done

    "$BUILD/tests/bench_mmv" 20 2>&1 | tee "$LOG/bench_mmv.txt"

    if command -v compute-sanitizer > /dev/null; then
        t0=$(date +%s)
        # not the out-of-memory test: the failing cudaMalloc it provokes is an API error to the sanitizer
        timeout 300 compute-sanitizer --tool memcheck --error-exitcode 1 "$BUILD/tests/test_backend_ops" \
            --gtest_filter='cuda/*:backend_ops_cuda*:-*out_of_memory*' > "$LOG/memcheck.log" 2>&1
        rc=$?
        note "compute-sanitizer memcheck, test_backend_ops ops: rc $rc in $(($(date +%s) - t0)) s, \
$(grep -m1 'ERROR SUMMARY' "$LOG/memcheck.log")"
        [[ $rc != 0 ]] && grep -m5 -A8 'Invalid\|Error' "$LOG/memcheck.log" | head -40
    fi
fi

if has model; then
    if [[ -f $MODEL ]]; then
        note "model: $MODEL ($(stat -c %s "$MODEL") bytes)"
        export TESSERA_MODEL=$MODEL
        "$BUILD/tests/test_backend_ops" --gtest_filter='backend_ops_model*' > "$LOG/test_backend_ops_model.log" 2>&1
        note "test_backend_ops (model): rc $? $(grep -m1 'top-1 agreement' "$LOG/test_backend_ops_model.log")"
        grep -E 'Failure|FAILED' -A5 "$LOG/test_backend_ops_model.log" | head -20
        for dev in cuda cpu; do
            "$BUILD/cli/tessera" run -m "$MODEL" -p "The capital of France is" -n 128 --temp 0 --device $dev \
                > "$LOG/run_$dev.txt" 2> "$LOG/run_$dev.err"
            note "tessera run --device $dev (rc $?): $(tail -1 "$LOG/run_$dev.err")"
            head -c 300 "$LOG/run_$dev.txt"
            echo
        done
        cmp -s "$LOG/run_cuda.txt" "$LOG/run_cpu.txt" && note "run: CUDA text == CPU text (128 greedy tokens)" ||
            note "run: CUDA text differs from CPU text"
        "$BUILD/cli/tessera" run -m "$MODEL" -p "Hi" -n 4 --temp 0 2>&1 > /dev/null | head -1 | sed 's/^/default: /'
    else
        note "model: MISSING ($MODEL): model checks skipped"
    fi
    # test_model (golden ids on the CPU) and test_cli (`tessera run` picks CUDA by default here)
    (cd "$BUILD" && timeout 300 ctest -j 12 --timeout 240 -R 'model|cli' -E 'backend_ops' --output-on-failure) \
        > "$LOG/ctest.log" 2>&1
    note "ctest test_model, test_cli: $(grep -E 'tests passed|tests failed' "$LOG/ctest.log")"
    grep -E '\((Failed|Timeout|SEGFAULT|Exception)\)' "$LOG/ctest.log" | head -20
fi

echo
echo "==== summary ($(date -u +%Y-%m-%dT%H:%MZ)) ===="
printf '%s\n' "${summary[@]}"
if [[ -n ${OUT:-} ]]; then tar -czf "$OUT/cuda_check_logs.tgz" -C "$LOG" .; fi
