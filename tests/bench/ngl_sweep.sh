#!/usr/bin/env bash
# ngl_sweep.sh: tok/s against -ngl (layers offloaded to the GPU, llama.cpp's count) on one model, tessera bench and
# llama-bench side by side in the same run: a markdown table, then a text plot of tg128 (decode is where the CPU's
# share shows). Benchmark, not a test (#24).
#   usage: tests/bench/ngl_sweep.sh MODEL.gguf ["0 8 16 24 32 33"]
#   env:   BUILD (/tmp/build: tessera built with CUDA), LLAMA_BENCH (path to llama.cpp's llama-bench; unset: tessera
#          only), REPS (3), THREADS (CPU threads for the layers left on the CPU; default: both programs' own),
#          ERRLOG (/dev/null: where the programs' stderr goes)
set -euo pipefail
cd "$(dirname "$0")/../.."
model=${1:?usage: ngl_sweep.sh MODEL.gguf [NGL LIST]}
list=${2:-0 8 16 24 32 33}
BUILD=${BUILD:-/tmp/build}
REPS=${REPS:-3}
ERRLOG=${ERRLOG:-/dev/null}
threads=()
[[ -n ${THREADS:-} ]] && threads=(-t "$THREADS")
speeds() { # JSON array of a bench run -> "pp tg backend" (avg_ts of the pp512 and tg128 rows; tessera's backend
    # label, e.g. "cuda+cpu ngl 8/17", llama-bench's "CUDA")
    python3 -c "import json,sys
d=json.load(sys.stdin)
v={('pp' if r.get('n_prompt', 0) or str(r.get('test','')).startswith('pp') else 'tg'): r['avg_ts'] for r in d}
be=d[0].get('backend', d[0].get('backends', '-')) if d else '-'
print(f\"{v.get('pp', float('nan')):.1f} {v.get('tg', float('nan')):.1f} {be}\")" 2>/dev/null
}
rows=()
echo "| -ngl | tessera backend | tessera pp512 | tessera tg128 | llama.cpp pp512 | llama.cpp tg128 |"
echo "|---|---|---|---|---|---|"
for n in $list; do
    read -r tpp ttg tbe < <("$BUILD/cli/tessera" bench -m "$model" -p 512 -n 128 -r "$REPS" -ngl "$n" "${threads[@]}" \
        -o json 2>>"$ERRLOG" | speeds) || { tpp=error; ttg=error; tbe=-; }
    lpp=-
    ltg=-
    if [[ -n ${LLAMA_BENCH:-} ]]; then
        read -r lpp ltg _ < <("$LLAMA_BENCH" -m "$model" -p 512 -n 128 -r "$REPS" -ngl "$n" "${threads[@]}" -o json \
            2>>"$ERRLOG" | speeds) || { lpp=error; ltg=error; }
    fi
    echo "| $n | $tbe | $tpp | $ttg | $lpp | $ltg |"
    rows+=("$n $ttg $ltg")
done
echo
echo "tg128 t/s against -ngl (# tessera, = llama.cpp):"
printf '%s\n' "${rows[@]}" | python3 -c "import sys
rows=[l.split() for l in sys.stdin if l.strip()]
def num(x):
    try: return float(x)
    except ValueError: return 0.0
top=max([num(r[1]) for r in rows] + [num(r[2]) for r in rows] + [1.0])
for n, t, l in rows:
    print(f'{n:>4} | ' + '#' * int(60 * num(t) / top) + f' {t}')
    print('     | ' + '=' * int(60 * num(l) / top) + f' {l}')"
