#!/usr/bin/env bash
# env_ab.sh: decode speed (tg128, `tessera bench -p 0 -n 128`) of several environment settings on several
# random-weight files (q4_0, or the TYPES given), in ROUNDS alternated rounds, one call on a device machine: the way
# to decide a CUDA rule that an env switch already reaches (e.g. the GEMVs' split-k threshold TESSERA_CUDA_MMV_WARPS, the L2 prefetch
# depth TESSERA_CUDA_PREFETCH). Builds with tests/bench/device_build.sh (.ref and .gl carried); files from
# examples/random_model with the llama-bpe vocabulary into /tmp (kept while the machine stays warm). Prints one line
# a run and a table of every round's figures; logs into ${OUT:-/tmp}/env_ab.txt.
#   usage: tests/bench/env_ab.sh "SHAPE..." "SETTING..."
#     SHAPE: a random_model preset (1b, 8b, 70b) or E,L,H,KV,FF,VOCAB (e.g. 8192,80,32,4,14336,128256: a 70B row
#            member's shapes on one GPU); SETTING: VAR=V[,VAR=V...] or "-" for the defaults
#   env: ROUNDS (2), N (128), DEPTH (0: tg at that depth, -d), TYPES ("q4_0": block formats of the files)
#   e.g. tests/bench/env_ab.sh "1b 8b" "- TESSERA_CUDA_MMV_WARPS=24 TESSERA_CUDA_MMV_WARPS=24,TESSERA_CUDA_PREFETCH=1"
set -uo pipefail
cd "$(dirname "$0")/../.."
shapes=${1:?usage: env_ab.sh \"SHAPE...\" \"SETTING...\"}
settings=${2:--}
log=${OUT:-/tmp}/env_ab.txt
bash tests/bench/device_build.sh tessera || exit 1
RM=/tmp/bt/examples/random_model/random_model
T=/tmp/bt/cli/tessera
types=${TYPES:-q4_0}
file_of() { echo "/tmp/ab_$(echo "$1" | tr ',' '_').$2.gguf"; }
for s in $shapes; do # the files in parallel (the 70B's ~4 min, the 8B's ~1)
    for t in $types; do
        f=$(file_of "$s" "$t")
        [[ -f $f ]] || ("$RM" --vocab .ref/ggml-vocab-llama-bpe.gguf "$s" "$t" "$f.tmp" > "$f.log" 2>&1 && mv "$f.tmp" "$f") &
    done
done
wait
declare -A runs
for r in $(seq 1 "${ROUNDS:-2}"); do
    for st in $shapes; do for t in $types; do
        s="$st $t"
        f=$(file_of "$st" "$t")
        [[ -f $f ]] || { echo "no file for $s: $(tail -1 "$f.log")" | tee -a "$log"; continue; }
        for e in $settings; do
            env_args=()
            [[ $e != - ]] && IFS=, read -r -a env_args <<< "$e"
            v=$(env "${env_args[@]}" "$T" bench -m "$f" -p 0 -n "${N:-128}" -d "${DEPTH:-0}" -r 3 -o json 2> /tmp/ab.err |
                python3 -c "import json,sys; print('%.1f' % json.load(sys.stdin)[0]['avg_ts'])" 2> /dev/null)
            echo "round $r $s $e: ${v:-FAIL $(tail -1 /tmp/ab.err)}" | tee -a "$log"
            runs["$s $e"]+="${v:-nan} "
        done
    done; done
done
echo "| shape | setting | tg t/s, each round |" | tee -a "$log"
echo "|---|---|---|" | tee -a "$log"
for st in $shapes; do for t in $types; do for e in $settings; do
    echo "| $st $t | $e | ${runs["$st $t $e"]:-} |" | tee -a "$log"
done; done; done
