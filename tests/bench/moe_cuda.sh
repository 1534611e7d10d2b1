#!/usr/bin/env bash
# moe_cuda.sh: mixture-of-experts models on the GPU (#22): for each random-weight file (examples/random_model presets,
# a real vocabulary) the CPU-vs-CUDA agreement (perplexity on wiki text, |dPPL| / PPL; the greedy tokens' common
# prefix) and the speed, tessera bench --device cuda beside llama-bench -ngl 99 on the same file when LLAMA_BENCH is
# set. Benchmark, not a test: the op tests are test_backend_ops (mul_mat_id, top_k, ..., moe_ffn_*), the families'
# agreement test_families.
#   BUILD=/tmp/build VOCAB=path.gguf TEXT=wiki.test.raw [LLAMA_BENCH=...] tests/bench/moe_cuda.sh
#   CASES="qwen3moe-small:q4_0 gpt-oss-small:q8_0" (preset:type; type "q8_0" of a gpt-oss preset keeps MXFP4 experts)
#   AGREE=0: speed only (the CPU perplexity of a 30B shape takes long); CHUNKS (4) chunks of 512 for the perplexity
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${BUILD:-/tmp/build}
bin=$BUILD/cli/tessera
rm_bin=$BUILD/examples/random_model/random_model
vocab=${VOCAB:?VOCAB: a vocabulary GGUF (ggml-vocab-*.gguf)}
text=${TEXT:?TEXT: a text file for the perplexity}
work=${WORK:-/tmp/tessera-moe-cuda}
reps=${REPS:-3}
mkdir -p "$work"
speeds() { python3 -c "import json,sys
v={}
for r in json.load(sys.stdin):
    t = r.get('test') or ('pp%d' % r['n_prompt'] if r['n_prompt'] else 'tg%d' % r['n_gen'])
    v[t[:2]] = r['avg_ts']
print(f\"{v.get('pp', float('nan')):.0f} {v.get('tg', float('nan')):.1f}\")"; }
ppl() { "$bin" perplexity -m "$1" -f "$text" -c 512 --chunks "${CHUNKS:-4}" --device "$2" --json 2>/dev/null |
    python3 -c "import json,sys; print(json.load(sys.stdin)['ppl'])"; }
simple=$BUILD/examples/simple/simple
ids() { "$simple" --ids $([ "$3" = cuda ] && echo --cuda) "$1" "$2" 32 2>/dev/null | sed -n 's/^gen: //p' || true; }
rows=()
for c in ${CASES:-qwen3moe-small:q4_0 qwen3moe-small:q8_0 gpt-oss-small:q8_0}; do
    shape=${c%%:*} t=${c##*:}
    f="$work/$shape-$t.gguf"
    [ -f "$f" ] || "$rm_bin" --vocab "$vocab" "$shape" "$t" "$f" > /dev/null
    size=$(python3 -c "import os; print(f'{os.path.getsize(\"$f\")/2**30:.2f}')")
    agree="-"
    if [ "${AGREE:-1}" != 0 ]; then
        pc=$(ppl "$f" cpu) pg=$(ppl "$f" cuda)
        same=0
        for p in "The capital of France is" "1, 2, 3, 4, 5," "def fib(n):"; do
            a=$(ids "$f" "$p" cpu) b=$(ids "$f" "$p" cuda)
            same=$((same + $(python3 -c "import sys
a, b = sys.argv[1].split(), sys.argv[2].split()
n = 0
while n < min(len(a), len(b)) and a[n] == b[n]: n += 1
print(n)" "$a" "$b")))
        done
        agree=$(python3 -c "print(f'PPL cpu {$pc:.4f} cuda {$pg:.4f} ({abs($pg - $pc) / $pc:.1e}); greedy prefix $same of 96 ids')")
    fi
    read -r tpp ttg < <("$bin" bench -m "$f" -p 512 -n 128 -r "$reps" --device cuda -o json 2>/dev/null | speeds)
    lpp=- ltg=-
    if [ -n "${LLAMA_BENCH:-}" ]; then
        read -r lpp ltg < <("$LLAMA_BENCH" -m "$f" -p 512 -n 128 -r "$reps" -ngl 99 -o json 2>/dev/null | speeds) ||
            { lpp=error; ltg=error; }
    fi
    rows+=("| $shape | $t | $size | $tpp / $ttg | $lpp / $ltg | $agree |")
    echo "${rows[-1]}" >&2
done
echo "| model | type | GiB | tessera pp512 / tg128 | llama.cpp pp512 / tg128 | CPU vs CUDA |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
