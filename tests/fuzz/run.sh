#!/usr/bin/env bash
# run.sh: builds the fuzz targets (clang, TESSERA_FUZZ=ON, into build-fuzz/) and runs each one from its seed corpus
# for RUNS executions (default 2 million), printing executions and seconds per target. Crashes are written to
# build-fuzz/findings/<target>/ (the committed corpus is only read).
#   tests/fuzz/run.sh [RUNS] [TARGET...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
runs=${1:-2000000}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_gguf fuzz_tokenizer_spm fuzz_tokenizer_bpe fuzz_tokenizer_wpm fuzz_chat_template fuzz_kld_base fuzz_jinja)

if [ ! -f build-fuzz/CMakeCache.txt ]; then
    CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSERA_CUDA=OFF \
        -DTESSERA_FUZZ=ON -DTESSERA_TESTS=OFF
fi
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"

# max_len per target: big enough for the seeds and for several records/messages, small enough to stay fast
declare -A max_len=([fuzz_gguf]=8192 [fuzz_tokenizer_spm]=2048 [fuzz_tokenizer_bpe]=2048 [fuzz_tokenizer_wpm]=2048
                    [fuzz_chat_template]=1024 [fuzz_kld_base]=4096 [fuzz_jinja]=8192)
for t in "${targets[@]}"; do
    work=build-fuzz/findings/$t
    mkdir -p "$work/corpus"
    start=$(date +%s)
    # -close_fd_mask=2: the vocabulary loader's warnings about odd metadata would flood the log
    build-fuzz/tests/fuzz/$t "$work/corpus" tests/fuzz/corpus/$t -runs="$runs" -max_len="${max_len[$t]}" \
        -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$work/" -print_final_stats=1 -close_fd_mask=2 \
        >"$work/log" 2>&1 || { echo "$t: FAILED, see $work/log"; tail -30 "$work/log"; exit 1; }
    echo "$t: $(grep -m1 stat::number_of_executed_units "$work/log" | awk '{print $2}') executions in" \
         "$(( $(date +%s) - start )) s, corpus $(ls "$work/corpus" | wc -l) inputs"
done
