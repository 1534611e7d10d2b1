#!/usr/bin/env bash
# bitnet_b158_check.sh RANDOM_MODEL SIMPLE: writes a small bitnet-b1.58 I2_S file (random weights), runs tessera's
# greedy generation on two prompts and checks every token against the NumPy reference (bitnet_b158_ref.py --check).
# Exits 77 (skipped) without NumPy.
set -u
RM=$1
SIMPLE=$2
PY=python3
[[ -x /usr/bin/python3 ]] && PY=/usr/bin/python3
$PY -c "import numpy" 2> /dev/null || { echo "NumPy not found: skipped"; exit 77; }
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
status=0
for shape in 256,2,4,2,512,300 256,3,4,1,512,300,128; do
    "$RM" --arch bitnet-b1.58 "$shape" i2_s "$DIR/m.gguf" 2> /dev/null || { echo "random_model failed"; exit 1; }
    for prompt in "Hello world, 123" "The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 again and again"; do
        out=$("$SIMPLE" --ids "$DIR/m.gguf" "$prompt" 24) || { echo "simple failed"; exit 1; }
        p=$(sed -n 's/^prompt: //p' <<< "$out")
        g=$(sed -n 's/^gen: //p' <<< "$out")
        r=$($PY "$(dirname "$0")/bitnet_b158_ref.py" --check "$DIR/m.gguf" "$p" "$g") || status=1
        echo "$shape, \"$prompt\": $r"
    done
done
exit $status
