#!/usr/bin/env bash
# cuda_bench.sh: CUDA speed on a GPU machine, in one go: build (as cuda_check.sh), the decode GEMV per format at the
# issue's shapes, then end-to-end tessera bench (pp512, tg128) on random-weight GGUFs with the real shapes of 1B, 7B
# and 8B llama models (examples/random_model, generated here), each time side by side with the previous version (the
# file's block layout and plain launches: TESSERA_CUDA_SPLIT=0 TESSERA_CUDA_GRAPHS=0) in the same run. Prints markdown
# tables; logs under $LOG.
#   usage: tests/bench/cuda_bench.sh [SHAPES (default "1b 7b")] [TYPES (default "q4_0 q8_0")]
#   env:   BUILD (/tmp/build), LOG (/tmp/cuda_bench), MODELS (/tmp/models), REPS (5), SKIP_MMV=1, PCRE2_INCLUDE_DIR
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-/tmp/build}
LOG=${LOG:-/tmp/cuda_bench}
MODELS=${MODELS:-/tmp/models}
REPS=${REPS:-5}
shapes=${1:-1b 7b}
types=${2:-q4_0 q8_0}
mkdir -p "$LOG" "$MODELS"
if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON -DTESSERA_WERROR=ON \
        ${PCRE2_INCLUDE_DIR:+-DPCRE2_INCLUDE_DIR=$PCRE2_INCLUDE_DIR} > "$LOG/configure.log" 2>&1 ||
        { tail -30 "$LOG/configure.log"; exit 1; }
fi
t0=$(date +%s)
cmake --build "$BUILD" -j 16 --target tessera bench_mmv random_model test_backend_ops > "$LOG/build.log" 2>&1 ||
    { grep -m3 -A12 error "$LOG/build.log"; exit 1; }
echo "build: $(($(date +%s) - t0)) s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,memory.used --format=csv,noheader

if [[ -z ${SKIP_MMV:-} ]]; then
    for split in 0 1; do
        echo "== bench_mmv, TESSERA_CUDA_SPLIT=$split"
        TESSERA_CUDA_SPLIT=$split "$BUILD/tests/bench_mmv" 20 2>&1 | tee "$LOG/mmv_split$split.txt"
    done
fi

echo
echo "| model | type | GiB | layout | pp512 t/s | tg128 t/s |"
echo "|---|---|---|---|---|---|"
for s in $shapes; do
    for t in $types; do
        f=$MODELS/random-$s-$t.gguf
        [[ -f $f ]] || "$BUILD/examples/random_model/random_model" "$s" "$t" "$f" 2> "$LOG/gen-$s-$t.log" ||
            { echo "| $s | $t | generation failed: $(tail -1 "$LOG/gen-$s-$t.log") |"; continue; }
        gib=$(python3 -c "import os; print(f'{os.path.getsize(\"$f\")/2**30:.2f}')")
        for split in 0 1; do
            out=$(TESSERA_CUDA_SPLIT=$split TESSERA_CUDA_GRAPHS=$split "$BUILD/cli/tessera" bench -m "$f" -p 512 -n 128 -r "$REPS" --device cuda \
                -o json 2> "$LOG/bench-$s-$t-$split.err")
            read -r pp tg < <(echo "$out" | python3 -c "import json,sys
d=json.load(sys.stdin); print(' '.join(f\"{r['avg_ts']:.0f}±{r['stddev_ts']:.0f}\" for r in d))" 2>/dev/null) ||
                { pp="error: $(tail -1 "$LOG/bench-$s-$t-$split.err")"; tg=-; }
            layout=$([[ $split == 1 ]] && echo "split + graphs (this version)" || echo "file blocks, launches (previous)")
            echo "| $s | $t | $gib | $layout | $pp | $tg |"
        done
    done
done
