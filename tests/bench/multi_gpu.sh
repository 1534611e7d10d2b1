#!/usr/bin/env bash
# multi_gpu.sh: several GPUs (#24) on a machine with 2 or more CUDA devices, tessera built with CUDA and NCCL in
# $BUILD. Random-weight llama files from examples/random_model (llama-bpe vocabulary, q4_0):
#   1. the 8B shape: `tessera run` greedy text (--temp 0, --repeat-penalty 1.5, 48 tokens, 3 prompts) on one GPU,
#      --split-mode layer and --split-mode row, compared byte for byte with one GPU's (reported); perplexity
#      (CHUNKS x 512 of $TEXT) of each, |dPPL|/PPL against one GPU (bound 1e-3: a failure)
#   2. speed on BIG (the 70B shape): `tessera bench -p 512 -n 128` with -sm none (one GPU), layer and row, and
#      beside it llama-bench -ngl 99 -sm none / layer / row / tensor on the same file when LLAMA_BENCH is set; a
#      table (a failed llama-bench row keeps its error's last line in $WORK/llama_bench_SM.err)
# Logs in $WORK. Exit status 1 when a check fails.
#   usage: tests/bench/multi_gpu.sh [correct|speed|all]
#   env:   BUILD (/tmp/build), REF (.ref), TEXT ($REF/data/wiki.test.raw), WORK (/tmp/multi_gpu), CHUNKS (8), REPS (3),
#          BIG (70b), LLAMA_BENCH (unset: tessera only), TESSERA_MODES (none layer row), LLAMA_MODES (none layer row
#          tensor)
set -uo pipefail
cd "$(dirname "$0")/../.."
what=${1:-all}
BUILD=${BUILD:-/tmp/build}
REF=${REF:-$PWD/.ref}
TEXT=${TEXT:-$REF/data/wiki.test.raw}
WORK=${WORK:-/tmp/multi_gpu}
CHUNKS=${CHUNKS:-8}
REPS=${REPS:-3}
BIG=${BIG:-70b}
T=$BUILD/cli/tessera
RM=$BUILD/examples/random_model/random_model
export NCCL_NVLS_ENABLE=0 # NVLink multicast stays off on shared hosts
mkdir -p "$WORK"
failed=0
for f in "$T" "$RM"; do [[ -x $f ]] || { echo "missing $f"; exit 1; }; done
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | sed 's/^/gpu: /'
nvidia-smi topo -m 2>/dev/null | head -4

gen() { # SHAPE -> $WORK/SHAPE.q4_0.gguf
    local f=$WORK/$1.q4_0.gguf
    [[ -f $f ]] || "$RM" --vocab "$REF/ggml-vocab-llama-bpe.gguf" "$1" q4_0 "$f" > "$WORK/gen_$1.log" 2>&1 ||
        { tail -3 "$WORK/gen_$1.log"; return 1; }
    echo "$f"
}

if [[ $what == correct || $what == all ]]; then
    f8=$(gen 8b) || exit 1
    prompts=("The history of the city begins in the Roman period, when a small settlement grew up around a bridge."
        "def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\n"
        "In 1969, 3 astronauts flew 384,400 km to the Moon; the year 2024 had 366 days.")
    echo "-- greedy text, 8B q4_0, 48 tokens: layer / row against one GPU"
    for i in "${!prompts[@]}"; do
        for sm in none layer row; do
            "$T" run -m "$f8" -p "${prompts[$i]}" --no-display-prompt --temp 0 --repeat-penalty 1.5 -n 48 -c 512 \
                -sm "$sm" -v > "$WORK/run_${i}_$sm.txt" 2> "$WORK/run_${i}_$sm.err" ||
                { failed=1; echo "FAIL run -sm $sm: $(tail -1 "$WORK/run_${i}_$sm.err")"; }
        done
        for sm in layer row; do
            if cmp -s "$WORK/run_${i}_$sm.txt" "$WORK/run_${i}_none.txt"; then r="same text"
            else r="differs from byte $(cmp "$WORK/run_${i}_$sm.txt" "$WORK/run_${i}_none.txt" 2>&1 |
                grep -o 'byte [0-9]*' | grep -o '[0-9]*') of $(wc -c < "$WORK/run_${i}_none.txt")"; fi
            tg=$(grep -o '([0-9.]* tok/s)' "$WORK/run_${i}_$sm.err" | tail -1)
            echo "   prompt $((i + 1)) -sm $sm: $r $tg"
        done
    done
    echo "-- perplexity, 8B q4_0, $CHUNKS chunks of 512"
    declare -A ppl
    for sm in none layer row; do
        read -r p s < <("$T" perplexity -m "$f8" -f "$TEXT" -c 512 --chunks "$CHUNKS" -sm "$sm" --json \
            2> "$WORK/ppl_$sm.err" |
            python3 -c "import json,sys; d=json.load(sys.stdin); print(repr(d['ppl']), round(d['tokens_per_second']))")
        ppl[$sm]=${p:-nan}
        rel=$(python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.2e' % (abs(a-b)/b))" \
            "${ppl[$sm]}" "${ppl[none]}" 2> /dev/null)
        echo "   -sm $sm: PPL ${ppl[$sm]} ($s tok/s) |dPPL|/PPL $rel"
        if [[ $sm != none ]] && ! python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-3 else 1)" "$rel" \
            2> /dev/null; then
            failed=1
            echo "FAIL perplexity -sm $sm: $rel ($(tail -1 "$WORK/ppl_$sm.err"))"
        fi
    done
fi

if [[ $what == speed || $what == all ]]; then
    fb=$(gen "$BIG") || exit 1
    echo "-- speed, $BIG q4_0 ($(du -h "$fb" | cut -f1)), $REPS repetitions, means (avg_ts, as llama-bench)"
    printf '| %-10s | %-8s | %-9s | %-9s |\n' program -sm pp512 tg128
    printf '|%s|%s|%s|%s|\n' ------------ ---------- ----------- -----------
    for sm in ${TESSERA_MODES:-none layer row}; do
        read -r pp tg < <("$T" bench -m "$fb" -p 512 -n 128 -r "$REPS" -sm "$sm" \
            -o json 2> "$WORK/bench_$sm.err" |
            python3 -c "import json,sys
rows=json.load(sys.stdin)
rows=rows if isinstance(rows, list) else rows.get('results', rows)
v={r['test'][:2]: r['avg_ts'] if 'avg_ts' in r else r.get('tokens_per_second') for r in rows}
print(round(v.get('pp', 0)), round(v.get('tg', 0), 1))") || { pp=fail; tg="$(tail -1 "$WORK/bench_$sm.err")"; }
        printf '| %-10s | %-8s | %-9s | %-9s |\n' tessera "$sm" "$pp" "$tg"
    done
    if [[ -n ${LLAMA_BENCH:-} ]]; then
        for sm in ${LLAMA_MODES:-none layer row tensor}; do # tensor: the vendored llama.cpp's own tensor parallelism (meta device)
            read -r pp tg < <("$LLAMA_BENCH" -m "$fb" -p 512 -n 128 -r "$REPS" -ngl 99 -sm "$sm" -o json \
                2> "$WORK/llama_bench_$sm.err" | python3 -c "import json,sys
v={('pp' if r['n_prompt'] else 'tg'): r['avg_ts'] for r in json.load(sys.stdin)}
print(round(v.get('pp', 0)), round(v.get('tg', 0), 1))") || { pp=fail; tg="$(tail -1 "$WORK/llama_bench_$sm.err")"; }
            printf '| %-10s | %-8s | %-9s | %-9s |\n' llama.cpp "$sm" "$pp" "$tg"
        done
    fi
fi
exit $failed
