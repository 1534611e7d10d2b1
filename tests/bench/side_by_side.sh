#!/usr/bin/env bash
# side_by_side.sh: #23's figures in one device call: tessera and llama.cpp's llama-bench (its CUDA build, made here
# by device_build.sh LLAMA=1 beside ours) on the same random-weight files (examples/random_model, the llama-bpe
# vocabulary): pp512, tg128, and tg128 at each depth in DEPTHS, ROUNDS rounds alternating the two programs. tessera's
# decode rows also give the bytes a token reads against the copy bandwidth it measures (bench --roofline). Prints one
# line a run and a markdown table (each round's t/s, the ratio of the means); logs into ${OUT:-/tmp}/side_by_side.txt.
#   usage: tests/bench/side_by_side.sh ["SHAPE..."] ["TYPE..."]    (default "1b 8b", "q4_0")
#     SHAPE: a random_model preset (1b, 8b, 70b) or E,L,H,KV,FF,VOCAB[,HEAD_DIM]
#   env: ROUNDS (2), REPS (3: llama-bench's and tessera's repetitions a run), DEPTHS ("4096"), TESTS ("pp512 tg128":
#        either or both; the depth runs come from DEPTHS)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
shapes=${1:-1b 8b}
types=${2:-q4_0}
log=${OUT:-/tmp}/side_by_side.txt
reps=${REPS:-3}
LLAMA=1 bash tests/bench/device_build.sh tessera || exit 1
RM=/tmp/bt/examples/random_model/random_model
T=/tmp/bt/cli/tessera
LB=/tmp/lr/llama.cpp/build/bin/llama-bench
file_of() { echo "/tmp/ab_$(echo "$1" | tr ',' '_').$2.gguf"; }
for s in $shapes; do
    for t in $types; do
        f=$(file_of "$s" "$t")
        [[ -f $f ]] || ("$RM" --vocab .ref/ggml-vocab-llama-bpe.gguf "$s" "$t" "$f.tmp" > "$f.log" 2>&1 && mv "$f.tmp" "$f") &
    done
done
wait
for _ in $(seq 1 120); do [[ -f /tmp/lb.rc ]] && break; sleep 5; done
[[ $(cat /tmp/lb.rc 2> /dev/null) == 0 ]] || { echo "llama.cpp build failed or unfinished: $(tail -3 /tmp/lb.log)"; exit 1; }
# the tests, as "label tessera-args llama-bench-args"
tests=()
for x in ${TESTS-pp512 tg128}; do
    case $x in
    pp512) tests+=("pp512|-p 512 -n 0|-p 512 -n 0") ;;
    tg128) tests+=("tg128|-p 0 -n 128|-p 0 -n 128") ;;
    *) echo "unknown test $x (pp512, tg128)" && exit 1 ;;
    esac
done
for d in ${DEPTHS-4096}; do tests+=("tg128@d$d|-p 0 -n 128 -d $d|-p 0 -n 128 -d $d"); done
declare -A runs share
for r in $(seq 1 "${ROUNDS:-2}"); do
    for s in $shapes; do
        for t in $types; do
            f=$(file_of "$s" "$t")
            [[ -f $f ]] || { echo "no file for $s $t: $(tail -1 "$f.log")" | tee -a "$log"; continue; }
            for x in "${tests[@]}"; do
                IFS='|' read -r label targs largs <<< "$x"
                # shellcheck disable=SC2086 # argument lists
                read -r v sh < <("$T" bench -m "$f" $targs -r "$reps" --roofline -o json 2> /tmp/sbs.err |
                    python3 -c "import json,sys
r=json.load(sys.stdin)[0]
sh=100*r['read_bytes_per_token']*r['avg_ts']/1e9/r['copy_gbs'] if r.get('copy_gbs') and r.get('read_bytes_per_token') else 0
print('%.1f %.1f' % (r['avg_ts'], sh))" 2> /dev/null)
                # shellcheck disable=SC2086
                l=$("$LB" -m "$f" $largs -r "$reps" -ngl 99 -o json 2> /tmp/sbs_lb.err |
                    python3 -c "import json,sys; print('%.1f' % json.load(sys.stdin)[0]['avg_ts'])" 2> /dev/null)
                of=""
                [[ -n ${sh:-} && $sh != 0.0 ]] && of=" ($sh% of copy)"
                echo "round $r $s $t $label: tessera ${v:-FAIL $(tail -1 /tmp/sbs.err)}$of," \
                    "llama.cpp ${l:-FAIL $(tail -1 /tmp/sbs_lb.err)}" | tee -a "$log"
                runs["$s $t $label T"]+="${v:-nan} "
                runs["$s $t $label L"]+="${l:-nan} "
                [[ -n $of ]] && share["$s $t $label"]+="${sh}% "
            done
        done
    done
done
echo "| shape | type | test | tessera t/s | llama.cpp t/s | ratio of means | tessera's read share of copy bw |" | tee -a "$log"
echo "|---|---|---|---|---|---|---|" | tee -a "$log"
for s in $shapes; do
    for t in $types; do
        for x in "${tests[@]}"; do
            label=${x%%|*}
            a=${runs["$s $t $label T"]:-}
            b=${runs["$s $t $label L"]:-}
            ratio=$(python3 -c "import sys,statistics as st
a=[float(v) for v in sys.argv[1].split()]; b=[float(v) for v in sys.argv[2].split()]
print('%.2fx' % (st.mean(a)/st.mean(b)))" "$a" "$b" 2> /dev/null)
            echo "| $s | $t | $label | $a | $b | ${ratio:--} | ${share["$s $t $label"]:--} |" | tee -a "$log"
        done
    done
done
