#!/usr/bin/env bash
# cuda_agreement.sh: CPU vs CUDA agreement on the default model requantized to each format (issue #4's bar: top-1
# agreement >= 99.5% and |dPPL| / PPL <= 1e-3 over 40 chunks of wiki.test.raw at -c 512). For each type: quantize
# (Q4_1 -> f32 -> TYPE, as the format table), perplexity on the CPU writing the KLD base, then on CUDA against it.
# Prints a markdown table.
#   usage: tests/bench/cuda_agreement.sh [TYPES (default "q8_0 q4_1 awq4 nvfp4")] [CHUNKS (40)]
#   env:   BUILD (/tmp/build), WORK (/tmp/agree), WIKI (../shared/data/wiki.test.raw), TESSERA_MODEL,
#          EXACT=1 (CUDA runs with --exact: the CPU's results bit for bit; measured 100% / 99.99% top-1)
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-/tmp/build}
WORK=${WORK:-/tmp/agree}
WIKI=${WIKI:-../shared/data/wiki.test.raw}
MODEL=${TESSERA_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
types=${1:-q8_0 q4_1 awq4 nvfp4}
chunks=${2:-40}
bin=$BUILD/cli/tessera
mkdir -p "$WORK"
[[ -f $WORK/f32.gguf ]] || "$bin" quantize "$MODEL" "$WORK/f32.gguf" f32 > /dev/null 2>&1 || { echo "quantize f32 failed"; exit 1; }
echo "| type | PPL CPU | PPL CUDA | abs(dPPL)/PPL | same top-1 | mean KLD | CPU t/s | CUDA t/s |"
echo "|---|---|---|---|---|---|---|---|"
for t in $types; do
    f=$WORK/$t.gguf
    [[ -f $f ]] || "$bin" quantize "$WORK/f32.gguf" "$f" "$t" > "$WORK/q-$t.log" 2>&1 || { echo "| $t | quantize failed |"; continue; }
    "$bin" perplexity -m "$f" -f "$WIKI" --chunks "$chunks" --device cpu --kl-divergence-base "$WORK/$t.kld" --json \
        > "$WORK/cpu-$t.json" 2> "$WORK/cpu-$t.err" || { echo "| $t | cpu failed: $(tail -1 "$WORK/cpu-$t.err") |"; continue; }
    "$bin" perplexity -m "$f" -f "$WIKI" --chunks "$chunks" --device cuda ${EXACT:+--exact} --kl-divergence-base "$WORK/$t.kld" \
        --kl-divergence --json > "$WORK/cuda-$t.json" 2> "$WORK/cuda-$t.err" ||
        { echo "| $t | cuda failed: $(tail -1 "$WORK/cuda-$t.err") |"; continue; }
    python3 - "$WORK/cpu-$t.json" "$WORK/cuda-$t.json" "$t" <<'PY'
import json, sys
c, g = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
k = g["kld"]
print(f"| {sys.argv[3]} | {c['ppl']:.4f} | {g['ppl']:.4f} | {abs(g['ppl'] - c['ppl']) / c['ppl']:.2e} | "
      f"{100 * k['same_top_p']:.2f}% | {k['mean']:.6f} | {c['tokens_per_second']:.0f} | {g['tokens_per_second']:.0f} |")
PY
done
