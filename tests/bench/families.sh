#!/usr/bin/env bash
# families.sh: every model family against llama.cpp on one GPU machine, in one go.
#  1. builds tessera (CUDA) and llama.cpp (CPU + CUDA, from a tarball of the llama-cpp-python sdist's
#     vendor/llama.cpp) side by side, and the greedy-ids tool (.ref/greedy_ids.cpp, outside the project's code);
#  2. writes the small random-weight models of tests/test_families.cpp (same arguments, same vocabularies) and for
#     each: llama.cpp's greedy ids on the CPU (24 tokens, 4 prompts; CUDA hidden so nothing is offloaded), tessera's on
#     the CPU and on CUDA, and the perplexity of all three (128-token chunks); prints the goldens as C++ rows;
#  3. the CUDA op tests (test_backend_ops);
#  4. speed: real-shape random-weight models of every family (examples/random_model presets, real vocabularies),
#     llama-bench vs tessera bench, pp512 / tg128, side by side.
#   usage: tests/bench/families.sh        env: REF (.ref: llama.tar.xz, vocabularies, greedy_ids.cpp), VOCAB (the
#          test vocabularies), BUILD, LBUILD, MODELS, OUT, SKIP_BENCH=1, BENCH ("qwen3-8b:q4_0 ..."), REPS (3)
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
REF=${REF:-$ROOT/.ref}
VOCAB=${VOCAB:-$REF}
BUILD=${BUILD:-/tmp/tb}
LBUILD=${LBUILD:-/tmp/lb}
MODELS=${MODELS:-/tmp/fam}
OUT=${OUT:-/tmp/fam_out}
REPS=${REPS:-3}
mkdir -p "$MODELS" "$OUT"
lscpu | grep -m1 "Model name"
grep -q avx512f /proc/cpuinfo && echo "cpu: AVX-512" || echo "cpu: no AVX-512"

t0=$(date +%s)
if [[ ! -x $BUILD/cli/tessera ]]; then
    (cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
        ${PCRE2_INCLUDE_DIR:+-DPCRE2_INCLUDE_DIR=$PCRE2_INCLUDE_DIR} > "$OUT/tb-configure.log" 2>&1 &&
        cmake --build "$BUILD" -j 8 --target tessera random_model simple test_backend_ops > "$OUT/tb-build.log" 2>&1 ||
        echo "tessera build failed: $(grep -m3 error "$OUT/tb-build.log" "$OUT/tb-configure.log")") &
fi
if [[ ! -x $LBUILD/bin/llama-bench ]]; then
    (mkdir -p /tmp/lsrc && tar -xJf "$REF/llama.tar.xz" -C /tmp/lsrc &&
        cmake -S /tmp/lsrc/llama.cpp -B "$LBUILD" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_CUDA=ON \
            -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
            -DLLAMA_BUILD_APP=OFF > "$OUT/lb-configure.log" 2>&1 &&
        cmake --build "$LBUILD" -j 8 --target llama-bench llama-perplexity llama > "$OUT/lb-build.log" 2>&1 &&
        g++ -O2 -std=c++17 -I/tmp/lsrc/llama.cpp/include -I/tmp/lsrc/llama.cpp/ggml/include "$REF/greedy_ids.cpp" \
            -o "$LBUILD/bin/greedy_ids" -L"$LBUILD/bin" -lllama -lggml -lggml-base -Wl,-rpath,"$LBUILD/bin" ||
        echo "llama.cpp build failed: $(grep -m3 -i error "$OUT/lb-build.log" "$OUT/lb-configure.log")") &
fi
wait
echo "builds: $(($(date +%s) - t0)) s"
RM=$BUILD/examples/random_model/random_model
SIMPLE=$BUILD/examples/simple/simple
T=$BUILD/cli/tessera
G=$LBUILD/bin/greedy_ids
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader

# the prompts of tests/test_families.cpp
P=$MODELS/prompts
mkdir -p "$P"
printf 'The quick brown fox jumps over the lazy dog.' > "$P/1.txt"
printf 'Hello world!\nThis is line two.\n  Indented line three: 12345 + 678 = 13023\n' > "$P/2.txt"
printf 'def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\n' > "$P/3.txt"
printf 'In 1969, 3 astronauts flew 384,400 km to the Moon; the year 2024 had 366 days.' > "$P/4.txt"
head -c 60000 "$ROOT/../shared/data/wiki.test.raw" > "$MODELS/wiki.txt" 2>/dev/null ||
    head -c 60000 "$REF/wiki.test.raw" > "$MODELS/wiki.txt"

# name | random_model arguments (vocabularies: llama-spm = SentencePiece, gpt-2 = byte-level BPE)
cases=$(grep -E '^\s*\{"[a-z0-9._-]+", "' tests/test_families.cpp | sed -E 's/^\s*\{"([^"]+)", "([^"]+)".*/\1|\2/')
echo
echo "== goldens (llama.cpp CPU greedy ids, 24 tokens; tessera CPU / CUDA; PPL at 128-token chunks)"
while IFS='|' read -r name args; do
    [[ -z $name ]] && continue
    f=$MODELS/$name.gguf
    a=${args//@VOCAB/$VOCAB}
    # shellcheck disable=SC2086
    $RM $a "$f" 2> "$OUT/gen-$name.log" || { echo "$name: generation failed: $(tail -1 "$OUT/gen-$name.log")"; continue; }
    echo "$name sha256 $(sha256sum "$f" | cut -c1-16)"
    for i in 1 2 3 4; do
        ref=$(CUDA_VISIBLE_DEVICES= "$G" "$f" 24 "$P/$i.txt" 4096 2> /dev/null | sed -n 2p | sed 's/^gen: //')
        cpu=$("$SIMPLE" --ids "$f" "@$P/$i.txt" 24 2> /dev/null | sed -n 2p | sed 's/^gen: //')
        gpu=$("$SIMPLE" --ids --cuda "$f" "@$P/$i.txt" 24 2> /dev/null | sed -n 2p | sed 's/^gen: //')
        echo "$name p$i ref: $ref"
        [[ $cpu == "$ref" ]] && echo "$name p$i cpu: =" || echo "$name p$i cpu: $cpu"
        [[ $gpu == "$cpu" ]] && echo "$name p$i cuda: =" || echo "$name p$i cuda: $gpu"
    done
    lp=$(CUDA_VISIBLE_DEVICES= "$LBUILD/bin/llama-perplexity" -m "$f" -f "$MODELS/wiki.txt" -c 128 --chunks 4 -t 8 -b 128 \
        2>&1 | grep -oE "Final estimate: PPL = [0-9.]+" | grep -oE "[0-9.]+$")
    tp=$("$T" perplexity -m "$f" -f "$MODELS/wiki.txt" -c 128 --chunks 4 --device cpu --json 2> /dev/null |
        python3 -c "import json,sys; print(json.load(sys.stdin)['ppl'])")
    gp=$("$T" perplexity -m "$f" -f "$MODELS/wiki.txt" -c 128 --chunks 4 --device cuda --json 2> /dev/null |
        python3 -c "import json,sys; print(json.load(sys.stdin)['ppl'])")
    echo "$name ppl llama.cpp $lp tessera-cpu $tp tessera-cuda $gp"
done <<< "$cases" | tee "$OUT/goldens.txt"

echo
echo "== CUDA op tests"
"$BUILD/tests/test_backend_ops" --gtest_brief=1 > "$OUT/backend_ops.txt" 2>&1
tail -3 "$OUT/backend_ops.txt"
grep -E "FAILED|Failure" "$OUT/backend_ops.txt" | head -20

[[ -n ${SKIP_BENCH:-} ]] && exit 0
echo
echo "== speed: llama-bench vs tessera bench (-p 512 -n 128 -r $REPS, all layers on the GPU)"
echo "| model | type | llama.cpp pp512 | llama.cpp tg128 | tessera pp512 | tessera tg128 |"
echo "|---|---|---|---|---|---|"
for mt in ${BENCH:-qwen3-8b:q4_0 qwen2.5-7b:q4_0 gemma3-4b:q4_0 phi4-mini:q4_0 qwen3-0.6b:q8_0 bitnet-2b:tq2_0 bitnet-2b:i2_s}; do
    s=${mt%%:*}
    t=${mt##*:}
    case $s in
    qwen*) v=$VOCAB/ggml-vocab-qwen2.gguf ;;
    gemma*) v=$VOCAB/ggml-vocab-gemma-4.gguf ;;
    phi*) v=$VOCAB/ggml-vocab-phi-3.gguf ;;
    *) v=$VOCAB/ggml-vocab-llama-bpe.gguf ;;
    esac
    f=$MODELS/$s-$t.gguf
    [[ -f $f ]] || $RM --vocab "$v" "$s" "$t" "$f" 2> "$OUT/gen-$s-$t.log" ||
        { echo "| $s | $t | generation failed: $(tail -1 "$OUT/gen-$s-$t.log") |"; continue; }
    read -r lpp ltg < <("$LBUILD/bin/llama-bench" -m "$f" -p 512 -n 128 -r "$REPS" -ngl 99 -o json 2> "$OUT/lbench-$s-$t.err" |
        python3 -c "import json,sys
d=json.load(sys.stdin); print(' '.join(f\"{r['avg_ts']:.0f}\" for r in d))" 2> /dev/null) || { lpp="-"; ltg="-"; }
    read -r tpp ttg < <("$T" bench -m "$f" -p 512 -n 128 -r "$REPS" --device cuda -o json 2> "$OUT/tbench-$s-$t.err" |
        python3 -c "import json,sys
d=json.load(sys.stdin); print(' '.join(f\"{r['avg_ts']:.0f}\" for r in d))" 2> /dev/null) ||
        { tpp="error: $(tail -1 "$OUT/tbench-$s-$t.err")"; ttg="-"; }
    echo "| $s | $t | ${lpp:--} | ${ltg:--} | $tpp | $ttg |"
    rm -f "$f"
done
