#!/usr/bin/env bash
# cpu_formats.sh: the block-format table on the CPU: SmolLM2-135M-Instruct requantized (Q4_1 -> f32 -> each type),
# file size, bits per weight, perplexity on wiki.test.raw (first N chunks of 512) and tessera bench pp512 / tg128,
# side by side with llama-bench on the same files where llama.cpp reads the type (LLAMA_BENCH=path/to/llama-bench).
#   tests/bench/cpu_formats.sh [CHUNKS=40] [THREADS=2]     (TYPES="q8_0 q4_0" to run a subset)
# Speeds are medians over ROUNDS (default 5) rounds; a round runs tessera bench and llama-bench once each (-r 1),
# one after the other, so that load from other processes on a shared machine hits both programs alike. The load
# average at the start of each type is printed to stderr. CHUNKS=0 skips the perplexity.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
chunks=${1:-40}
threads=${2:-2}
rounds=${ROUNDS:-5}
bin=${TESSERA:-build/cli/tessera}
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
wiki=${WIKI:-../shared/data/wiki.test.raw}
work=${WORK:-/tmp/tessera-formats}
mkdir -p "$work"
[ -f "$work/f32.gguf" ] || "$bin" quantize "$model" "$work/f32.gguf" f32 -t "$threads" >/dev/null
# samples_ts of every test in a tessera bench / llama-bench JSON array, one "test sample" per line
samples() { python3 -c "import json,sys
for r in json.load(sys.stdin):
    t = r.get('test') or ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'])
    for s in r['samples_ts']: print(t[:2], s)"; }
median() { python3 -c "import statistics,sys; v=[float(x) for x in sys.stdin.read().split()]; print(f'{statistics.median(v):.1f}' if v else '-')"; }
echo "| type | size (MiB) | bpw | PPL (${chunks} x 512) | pp512 t/s | tg128 t/s | llama-bench pp512 | llama-bench tg128 |"
echo "|---|---|---|---|---|---|---|---|"
for t in ${TYPES:-f16 bf16 q8_0 q4_1 q4_0 q5_0 q5_1 Q4_K_M Q5_K_M q6_K Q3_K_M Q2_K IQ4_XS IQ4_NL nvfp4 awq4 awq4_g64 tq2_0 i2_s}; do
    f="$work/$t.gguf"
    [ -f "$f" ] || "$bin" quantize "$work/f32.gguf" "$f" "$t" -t "$threads" >/dev/null 2>&1
    size=$(python3 -c "import os; print(f'{os.path.getsize(\"$f\")/2**20:.1f}')")
    bpw=$("$bin" info "$f" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"{d['totals']['bpw']:.2f}\")" 2>/dev/null || echo "?")
    ppl="-"
    if [ "$chunks" -gt 0 ]; then
        ppl=$("$bin" perplexity -m "$f" -f "$wiki" --chunks "$chunks" -t "$threads" --json 2>/dev/null |
              python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"{d['ppl']:.4f}\")")
    fi
    llama=""
    if [ -n "${LLAMA_BENCH:-}" ] && [[ "$t" =~ ^(f16|bf16|q8_0|q4_1|q4_0|q5_0|q5_1|Q4_K_M|Q5_K_M|q6_K|Q3_K_M|Q2_K|IQ4_XS|IQ4_NL|nvfp4|tq2_0)$ ]]; then llama=1; fi
    echo "$t: load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
    : > "$work/$t.tessera" && : > "$work/$t.llama"
    for _ in $(seq "$rounds"); do
        "$bin" bench -m "$f" -p 512 -n 128 -t "$threads" -r 1 -o json 2>/dev/null | samples >> "$work/$t.tessera"
        if [ -n "$llama" ]; then
            "$LLAMA_BENCH" -m "$f" -p 512 -n 128 -t "$threads" -r 1 -o json 2>/dev/null | samples >> "$work/$t.llama" || true
        fi
    done
    pp=$(awk '$1 == "pp" {print $2}' "$work/$t.tessera" | median)
    tg=$(awk '$1 == "tg" {print $2}' "$work/$t.tessera" | median)
    lpp=$(awk '$1 == "pp" {print $2}' "$work/$t.llama" | median)
    ltg=$(awk '$1 == "tg" {print $2}' "$work/$t.llama" | median)
    echo "| $t | $size | $bpw | $ppl | $pp | $tg | $lpp | $ltg |"
done
