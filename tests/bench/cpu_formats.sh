#!/usr/bin/env bash
# cpu_formats.sh: the block-format table on the CPU: SmolLM2-135M-Instruct requantized (Q4_1 -> f32 -> each type),
# file size, bits per weight, perplexity on wiki.test.raw (first N chunks of 512) and tessera bench pp512 / tg128,
# side by side with llama-bench on the same files where llama.cpp reads the type (LLAMA_BENCH=path/to/llama-bench).
#   tests/bench/cpu_formats.sh [CHUNKS=40] [THREADS=2]     (TYPES="q8_0 q4_0" to run a subset)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
chunks=${1:-40}
threads=${2:-2}
bin=build/cli/tessera
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
wiki=${WIKI:-../shared/data/wiki.test.raw}
work=${WORK:-/tmp/tessera-formats}
mkdir -p "$work"
[ -f "$work/f32.gguf" ] || "$bin" quantize "$model" "$work/f32.gguf" f32 -t "$threads" >/dev/null
echo "| type | size (MiB) | bpw | PPL (${chunks} x 512) | pp512 t/s | tg128 t/s | llama-bench pp512 | llama-bench tg128 |"
echo "|---|---|---|---|---|---|---|---|"
for t in ${TYPES:-f16 q8_0 q4_1 q4_0 nvfp4 awq4 awq4_g64 tq2_0 i2_s}; do
    f="$work/$t.gguf"
    [ -f "$f" ] || "$bin" quantize "$work/f32.gguf" "$f" "$t" -t "$threads" >/dev/null 2>&1
    size=$(python3 -c "import os; print(f'{os.path.getsize(\"$f\")/2**20:.1f}')")
    bpw=$("$bin" info "$f" --json | python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"{d['totals']['bpw']:.2f}\")" 2>/dev/null || echo "?")
    ppl=$("$bin" perplexity -m "$f" -f "$wiki" --chunks "$chunks" -t "$threads" --json 2>/dev/null |
          python3 -c "import json,sys; d=json.load(sys.stdin); print(f\"{d['ppl']:.4f}\")")
    read -r pp tg < <("$bin" bench -m "$f" -p 512 -n 128 -t "$threads" -r 3 -o json |
          python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(f\"{r['avg_ts']:.1f}\" for r in d))")
    lpp="-"; ltg="-"
    if [ -n "${LLAMA_BENCH:-}" ] && [[ "$t" =~ ^(f16|q8_0|q4_1|q4_0|nvfp4|tq2_0)$ ]]; then
        read -r lpp ltg < <("$LLAMA_BENCH" -m "$f" -p 512 -n 128 -t "$threads" -r 3 -o json 2>/dev/null |
              python3 -c "import json,sys; d=json.load(sys.stdin); print(' '.join(f\"{r['avg_ts']:.1f}\" for r in d))") || true
    fi
    echo "| $t | $size | $bpw | $ppl | $pp | $tg | $lpp | $ltg |"
done
