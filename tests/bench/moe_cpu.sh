#!/usr/bin/env bash
# moe_cpu.sh: mixture-of-experts speed on the CPU, tessera bench vs llama-bench on the same random-weight files (the
# examples/random_model presets qwen3moe-small and gpt-oss-small, llama-spm vocabulary: 32000 rows, a multiple of 16,
# so the output matrix is repacked as a real vocabulary's would be; gpt-2's 50257 is not), pp512 / tg128, medians over
# ROUNDS (default 5) rounds of one run each of both programs, one after the other (load from other processes on a
# shared machine then hits both alike; the load average is printed to stderr).
# QUIET=0.8: each round first waits (up to 10 min) until the 1-minute load average is below 0.8 (a shared 2-core VM:
# llama-bench's spinning threads collapse when another process takes a core, and tessera's slow down too).
#   LLAMA_BENCH=path/to/llama-bench tests/bench/moe_cpu.sh [THREADS=2]      (CASES="qwen3moe-small:q4_0 ...")
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
threads=${1:-2}
rounds=${ROUNDS:-5}
bin=${TESSERA:-build/cli/tessera}
rm_bin=${RANDOM_MODEL:-build/examples/random_model/random_model}
vocab=${VOCAB:-../shared/data/vocab/ggml-vocab-llama-spm.gguf}
work=${WORK:-/tmp/tessera-moe}
mkdir -p "$work"
samples() { python3 -c "import json,sys
for r in json.load(sys.stdin):
    t = r.get('test') or ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'])
    for s in r['samples_ts']: print(t[:2], s)"; }
wait_quiet() {
    [ -n "${QUIET:-}" ] || return 0
    for _ in $(seq 60); do
        python3 -c "import sys; sys.exit(0 if float(open('/proc/loadavg').read().split()[0]) < $QUIET else 1)" && return 0
        sleep 10
    done
}
median() { python3 -c "import statistics,sys; v=[float(x) for x in sys.stdin.read().split()]; print(f'{statistics.median(v):.1f}' if v else '-')"; }
echo "| model | experts | MiB | tessera pp512 | tessera tg128 | llama.cpp pp512 | llama.cpp tg128 |"
echo "|---|---|---|---|---|---|---|"
for c in ${CASES:-qwen3moe-small:q4_0 qwen3moe-small:q8_0 gpt-oss-small:q8_0}; do
    shape=${c%%:*} t=${c##*:}
    f="$work/$shape-$t.gguf"
    [ -f "$f" ] || "$rm_bin" --vocab "$vocab" "$shape" "$t" "$f" 2>/dev/null
    size=$(python3 -c "import os; print(f'{os.path.getsize(\"$f\")/2**20:.0f}')")
    experts=$("$bin" info "$f" 2>/dev/null | sed -n 's/^  experts *//p' | cut -d';' -f1)
    echo "$shape $t: load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    : > "$work/$shape-$t.tessera" && : > "$work/$shape-$t.llama"
    for _ in $(seq "$rounds"); do
        wait_quiet
        "$bin" bench -m "$f" -p 512 -n 128 -t "$threads" -r 1 -o json 2>/dev/null | samples >> "$work/$shape-$t.tessera"
        if [ -n "${LLAMA_BENCH:-}" ]; then
            "$LLAMA_BENCH" -m "$f" -p 512 -n 128 -t "$threads" -r 1 -o json 2>/dev/null | samples >> "$work/$shape-$t.llama" || true
        fi
    done
    pp=$(awk '$1 == "pp" {print $2}' "$work/$shape-$t.tessera" | median)
    tg=$(awk '$1 == "tg" {print $2}' "$work/$shape-$t.tessera" | median)
    lpp=$(awk '$1 == "pp" {print $2}' "$work/$shape-$t.llama" | median)
    ltg=$(awk '$1 == "tg" {print $2}' "$work/$shape-$t.llama" | median)
    echo "| $shape | $experts | $size | $pp | $tg | $lpp | $ltg |"
done
