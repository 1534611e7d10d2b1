#!/usr/bin/env bash
# ppl_speed.sh: perplexity (and its KL-divergence modes) on CUDA against the same file's prefill speed, on a GPU
# machine: builds tessera (as cuda_check.sh), writes random-weight GGUFs in real shapes with a real vocabulary
# (examples/random_model --vocab), then for each: `tessera bench -p 512 -n 0` (pp512), `tessera perplexity` over
# CHUNKS chunks of 512 (plain, writing a KL-divergence base, comparing with it), tokens per second of each as a table.
#   usage: tests/bench/ppl_speed.sh [SHAPES (default "1b")] [TYPES (default "q4_0")]
#   env:   BUILD (/tmp/build), MODELS (/tmp/models), VOCAB (.ref/ggml-vocab-llama-bpe.gguf), TEXT
#          (.ref/data/wiki.test.raw), CHUNKS (100), PCRE2_INCLUDE_DIR
set -u
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-/tmp/build}
MODELS=${MODELS:-/tmp/models}
VOCAB=${VOCAB:-.ref/ggml-vocab-llama-bpe.gguf}
TEXT=${TEXT:-.ref/data/wiki.test.raw}
CHUNKS=${CHUNKS:-100}
shapes=${1:-1b}
types=${2:-q4_0}
mkdir -p "$MODELS"
if [[ ! -f $BUILD/CMakeCache.txt ]]; then
    gen=()
    command -v ninja > /dev/null && gen=(-G Ninja)
    cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON -DTESSERA_WERROR=ON \
        ${PCRE2_INCLUDE_DIR:+-DPCRE2_INCLUDE_DIR=$PCRE2_INCLUDE_DIR} > /tmp/ppl_speed_configure.log 2>&1 ||
        { tail -30 /tmp/ppl_speed_configure.log; exit 1; }
fi
cmake --build "$BUILD" -j 16 --target tessera random_model > /tmp/ppl_speed_build.log 2>&1 ||
    { grep -m3 -A12 error /tmp/ppl_speed_build.log; exit 1; }
T=$BUILD/cli/tessera
tps() { python3 -c "import json,sys; print(f\"{json.load(sys.stdin)['tokens_per_second']:.0f}\")" 2>/dev/null || echo error; }

echo "| model | type | pp512 t/s (bench) | perplexity t/s | KLD base write t/s | KLD compare t/s | PPL |"
echo "|---|---|---|---|---|---|---|"
for s in $shapes; do
    for t in $types; do
        f=$MODELS/random-$s-$t-vocab.gguf
        [[ -f $f ]] || "$BUILD/examples/random_model/random_model" --vocab "$VOCAB" "$s" "$t" "$f" > /dev/null 2>&1 ||
            { echo "| $s | $t | generation failed |"; continue; }
        pp=$("$T" bench -m "$f" -p 512 -n 0 -r 3 --device cuda --json 2> /dev/null |
            python3 -c "import json,sys; print(f\"{json.load(sys.stdin)[0]['avg_ts']:.0f}\")" 2>/dev/null || echo error)
        j=$("$T" perplexity -m "$f" -f "$TEXT" -c 512 --chunks "$CHUNKS" --device cuda --json 2> /dev/null)
        plain=$(echo "$j" | tps)
        ppl=$(echo "$j" | python3 -c "import json,sys; print(f\"{json.load(sys.stdin)['ppl']:.4f}\")" 2>/dev/null || echo -)
        base=/tmp/ppl_speed_base.kld
        wr=$("$T" perplexity -m "$f" -f "$TEXT" -c 512 --chunks "$CHUNKS" --device cuda --json \
            --kl-divergence-base "$base" 2> /dev/null | tps)
        cmp=$("$T" perplexity -m "$f" -f "$TEXT" -c 512 --chunks "$CHUNKS" --device cuda --json \
            --kl-divergence-base "$base" --kl-divergence 2> /dev/null | tps)
        rm -f "$base"
        echo "| $s | $t | $pp | $plain | $wr | $cmp | $ppl |"
    done
done
