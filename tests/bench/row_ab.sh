#!/usr/bin/env bash
# row_ab.sh: a change to the row split (#24) against a base, in one call on a machine with 2 GPUs: the working tree
# (built into /tmp/bt) and BASE, a `git archive` tarball of the other side (built into /tmp/bb beside it), on a
# random-weight SHAPE q4_0 file (llama-bpe vocabulary, from .ref):
#   - `tessera bench -p 512 -n 128 -r 3`: one GPU (new), row split (new), row split (base), alternated, ROUNDS rounds;
#   - greedy text (-sm row, 32 tokens) of new and base compared byte for byte;
#   - p2p_harness's chain (new and base builds, alternated, 2 rounds);
#   - split_cuda.* (test_split, new).
# .ref (vocabularies, data/) and .gl (pcre2.h) carried. The 70B shape takes ~585 s of a 600 s call when cold
# (random_model ~200 s, the file ready with tessera's builds at ~410 s, a bench ~20 s), so one call does one A/B.
# Everything goes to ${OUT:-/tmp}/log.txt (printed at the end).
#   usage: tests/bench/row_ab.sh BASE.tar.xz      env: SHAPE (70b), ROUNDS (2), SPLIT_TEST (1: run split_cuda)
# e.g. git archive HEAD | xz > .ref/base.tar.xz (before the change), then on the device:
#   bash tests/bench/row_ab.sh .ref/base.tar.xz
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
base=${1:?usage: row_ab.sh BASE.tar.xz}
shape=${SHAPE:-70b}
rounds=${ROUNDS:-2}
L=${OUT:-/tmp}/log.txt
export NCCL_NVLS_ENABLE=0 # NVLink multicast stays off on shared hosts
t0=$(date +%s)
el() { echo "[$(($(date +%s) - t0)) s] $*" >> "$L"; }
mkdir -p /tmp/bbsrc && tar xJf "$base" -C /tmp/bbsrc || exit 1
# the base configured as device_build.sh configures the working tree into /tmp/bt
[[ -f /tmp/bb/CMakeCache.txt ]] || cmake -S /tmp/bbsrc -B /tmp/bb -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90a-real -DPCRE2_INCLUDE_DIR="$PWD/.gl/include" -DTESSERA_TEST_DATA="$PWD/.ref/data" \
    > /tmp/conf_bb.log 2>&1 || { tail -20 /tmp/conf_bb.log >> "$L"; exit 1; }
harness() { # SRC OUT
    (cd "$1" && nvcc -std=c++20 -O3 -DNDEBUG -I. --generate-code=arch=compute_90a,code=sm_90a \
        tests/bench/p2p_harness.cu -o "$2" -Xlinker --unresolved-symbols=ignore-all > "$2.log" 2>&1)
}
harness "$PWD" /tmp/ph_new &
harness /tmp/bbsrc /tmp/ph_base &
JOBS=32 OUT=/tmp bash tests/bench/device_build.sh random_model >> "$L" 2>&1 || exit 1 # configures /tmp/bt
el "random_model built"
F=/tmp/row_ab_$shape.q4_0.gguf
rm -f /tmp/gen.rc
if [[ -f $F ]]; then
    echo 0 > /tmp/gen.rc
else
    (/tmp/bt/examples/random_model/random_model --vocab .ref/ggml-vocab-llama-bpe.gguf "$shape" q4_0 "$F.tmp" \
        > /tmp/gen.log 2>&1 && mv "$F.tmp" "$F"
    echo $? > /tmp/gen.rc) &
fi
JOBS=20 OUT=/tmp bash tests/bench/device_build.sh tessera >> "$L" 2>&1 &
p1=$!
cmake --build /tmp/bb -j12 --target tessera > /tmp/bb.log 2>&1 || { grep -B2 -A10 -m3 error /tmp/bb.log >> "$L"; exit 1; }
wait $p1 || exit 1
el "tessera built"
while [[ ! -f /tmp/gen.rc ]]; do sleep 2; done
[[ $(cat /tmp/gen.rc) == 0 ]] || { tail -3 /tmp/gen.log >> "$L"; exit 1; }
el "file ready: $F"
rm -f /tmp/ts.rc
[[ ${SPLIT_TEST:-1} == 1 ]] && (cmake --build /tmp/bt -j8 --target test_split > /tmp/ts.log 2>&1; echo $? > /tmp/ts.rc) &
bench() { # LABEL BUILD SM
    /tmp/"$2"/cli/tessera bench -m "$F" -p 512 -n 128 -r 3 -sm "$3" --json > /tmp/ab.json 2> /tmp/ab.err ||
        { echo "$1 FAIL $(tail -1 /tmp/ab.err)" >> "$L"; return; }
    python3 -c "
import json, sys
d = json.load(open('/tmp/ab.json'))
print(sys.argv[1], d[0]['backend'] + ':', ' '.join('%s %.2f' % (x['test'], x['avg_ts']) for x in d))" "$1" >> "$L"
}
for r in $(seq "$rounds"); do
    bench "one GPU (new), round $r" bt none
    bench "row (new), round $r" bt row
    bench "row (base), round $r" bb row
done
el "benches done"
P="The history of the city begins in the Roman period, when a small settlement grew up around a bridge."
for x in bt bb; do
    /tmp/"$x"/cli/tessera run -m "$F" -p "$P" --no-display-prompt --temp 0 -n 32 -c 512 -sm row > "/tmp/greedy_$x.txt" \
        2> "/tmp/greedy_$x.err" || echo "greedy $x FAIL $(tail -1 "/tmp/greedy_$x.err")" >> "$L"
done
if cmp -s /tmp/greedy_bt.txt /tmp/greedy_bb.txt; then echo "greedy text, row: new = base" >> "$L"
else echo "greedy text, row: new differs from base ($(cmp /tmp/greedy_bt.txt /tmp/greedy_bb.txt 2>&1))" >> "$L"; fi
for r in 1 2; do
    for x in new base; do
        [[ -x /tmp/ph_$x ]] && echo "harness ($x): $(timeout 60 /tmp/ph_$x 2000 chain 2>&1)" >> "$L"
    done
done
el "harness done"
if [[ ${SPLIT_TEST:-1} == 1 ]]; then
    while [[ ! -f /tmp/ts.rc ]]; do sleep 2; done
    [[ $(cat /tmp/ts.rc) == 0 ]] && /tmp/bt/tests/test_split --gtest_filter='split_cuda.*' 2>&1 |
        grep -E "worst row error|OK|FAIL|PASSED" >> "$L"
    el "split_cuda done"
fi
cat "$L"
