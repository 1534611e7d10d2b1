#!/usr/bin/env bash
# moe_goldens.sh: llama.cpp's greedy ids and perplexity for the mixture-of-experts cases of tests/test_families.cpp
# (the rows whose random_model arguments have --experts), for recording goldens on a machine with AVX-512 (the GPU
# host's Xeon: run it there through the device tool, carrying REF). Prints "<case> p<i> gen: <24 ids>" per prompt and
# "<case> ppl <value>", plus which buffers llama.cpp put the weights in (the AMX one sums q8_0 in its own order).
#   REF=.ref/moe tests/bench/moe_goldens.sh      REF holds: llama-src.tar.xz (the llama-cpp-python 0.3.36 sdist's
#   vendor/llama.cpp without models/ docs/ tests/), greedy_ids.cpp (a llama.h program: MODEL N PROMPT_FILE N_CTX ->
#   "prompt: ids" / "gen: ids", N argmax tokens through llama_process, no stop), random_model and the libfmt it
#   needs in lib/, or lbin.tar.gz (llama.cpp's binaries from an earlier run, returned in $OUT); VOCAB, WIKI: the test
#   data (vocab/ and wiki.test.raw)
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
REF=$(cd "${REF:-.ref/moe}" && pwd)
VOCAB=${VOCAB:-$ROOT/.ref/data/vocab}
WIKI=${WIKI:-$ROOT/.ref/data/wiki.test.raw}
OUT=${OUT:-/tmp/moe_goldens}
mkdir -p "$OUT"
export LD_LIBRARY_PATH=$REF/lib
lscpu | grep -m1 "Model name"
grep -oE 'avx512f|avx512_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
L=/tmp/lb/bin
if [[ -f $REF/lbin.tar.gz ]]; then
    mkdir -p $L && tar -xzf "$REF/lbin.tar.gz" -C $L
else
    mkdir -p /tmp/lsrc && tar -xJf "$REF/llama-src.tar.xz" -C /tmp/lsrc
    cmake -S /tmp/lsrc/llama.cpp -B /tmp/lb -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_OPENSSL=OFF > /tmp/lb-conf.log 2>&1 ||
        { tail -20 /tmp/lb-conf.log; exit 1; }
    cmake --build /tmp/lb -j "$(nproc)" --target llama-perplexity llama-bench > /tmp/lb-build.log 2>&1 ||
        { grep -m5 error /tmp/lb-build.log; exit 1; }
    I=/tmp/lsrc/llama.cpp
    g++ -O2 -std=c++17 -I$I/include -I$I/ggml/include "$REF/greedy_ids.cpp" -o $L/greedy_ids -L$L -lllama -lggml \
        -lggml-base -Wl,-rpath,'$ORIGIN' || exit 1
    (cd $L && tar -czhf "$OUT/lbin.tar.gz" greedy_ids llama-perplexity llama-bench lib*.so*)
fi
P=/tmp/moe_prompts
mkdir -p $P
printf 'The quick brown fox jumps over the lazy dog.' > $P/1.txt
printf 'Hello world!\nThis is line two.\n  Indented line three: 12345 + 678 = 13023\n' > $P/2.txt
printf 'def fib(n):\n    return n if n < 2 else fib(n-1) + fib(n-2)\n' > $P/3.txt
printf 'In 1969, 3 astronauts flew 384,400 km to the Moon; the year 2024 had 366 days.' > $P/4.txt
head -c 60000 "$WIKI" > /tmp/moe_wiki.txt
cases=$(grep -E '^\s*\{"[a-z0-9._-]+", "--arch [a-z0-9-]+ --experts' tests/test_families.cpp |
    sed -E 's/^\s*\{"([^"]+)", "([^"]+)".*/\1|\2/')
while IFS='|' read -r name args; do
    [[ -z $name ]] && continue
    f=/tmp/$name.gguf
    # shellcheck disable=SC2086
    "$REF/random_model" ${args//@VOCAB/$VOCAB} "$f" 2> /dev/null || { echo "$name: generation failed"; continue; }
    echo "$name sha256 $(sha256sum "$f" | cut -c1-16)"
    for i in 1 2 3 4; do
        echo "$name p$i $($L/greedy_ids "$f" 24 $P/$i.txt 4096 2> /tmp/moe_err.txt | grep '^gen:')"
    done
    grep -iE 'AMX|REPACK' /tmp/moe_err.txt | head -3
    echo "$name ppl $($L/llama-perplexity -m "$f" -f /tmp/moe_wiki.txt -c 128 --chunks 4 -t 8 -b 128 2>&1 |
        grep -oE 'Final estimate: PPL = [0-9.]+' | grep -oE '[0-9.]+$')"
done <<< "$cases" | tee "$OUT/goldens.txt"
