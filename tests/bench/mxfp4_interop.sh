#!/usr/bin/env bash
# mxfp4_interop.sh: MXFP4 files between llama.cpp and tessera (#22), on the CPU, with llama.cpp's tools built in
# $LLAMA_BIN (llama-quantize, llama-simple, llama-perplexity). From one random-weight gpt-oss file in f32
# (examples/random_model, gpt-2 vocabulary):
#   1. llama.cpp's file: `llama-quantize ... MXFP4_MOE` (experts MXFP4, the rest q8_0) run by both programs:
#      greedy text (24 tokens, 3 prompts) must be equal, perplexity (4 x 128 of $TEXT) within 1e-3;
#   2. tessera's file: `tessera quantize ... mxfp4` (every matrix MXFP4) the same way;
#   3. the expert tensors of the two files byte for byte (the same f32 input through both quantizers).
#   usage: LLAMA_BIN=/work/ref/build/bin tests/bench/mxfp4_interop.sh
#   env:   BUILD (build), VOCAB (../shared/data/vocab/ggml-vocab-gpt-2.gguf), TEXT (../shared/data/wiki.test.raw),
#          WORK (/tmp/mxfp4_interop)
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
LLAMA_BIN=${LLAMA_BIN:?set LLAMA_BIN to the folder of llama.cpp tools}
VOCAB=${VOCAB:-../shared/data/vocab/ggml-vocab-gpt-2.gguf}
TEXT=${TEXT:-../shared/data/wiki.test.raw}
WORK=${WORK:-/tmp/mxfp4_interop}
T=$BUILD/cli/tessera
export LD_LIBRARY_PATH=$LLAMA_BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p "$WORK"
failed=0
head -c 60000 "$TEXT" > "$WORK/text.txt"
"$BUILD/examples/random_model/random_model" --arch gpt-oss --experts 8,4 --expert-type f32 --vocab "$VOCAB" \
    256,2,4,2,256,300,64 f32 "$WORK/f32.gguf" > /dev/null 2>&1 || { echo "random_model failed"; exit 1; }
"$LLAMA_BIN/llama-quantize" "$WORK/f32.gguf" "$WORK/llama.gguf" MXFP4_MOE > "$WORK/quantize.log" 2>&1 ||
    { tail -3 "$WORK/quantize.log"; exit 1; }
"$T" quantize "$WORK/f32.gguf" "$WORK/tessera.gguf" mxfp4 > /dev/null 2>&1 || { echo "tessera quantize failed"; exit 1; }

prompts=("The quick brown fox jumps over the lazy dog."
    "In 1969, 3 astronauts flew 384,400 km to the Moon; the year 2024 had 366 days."
    "def fib(n):")
for f in llama tessera; do
    same=0
    for p in "${prompts[@]}"; do
        l=$("$LLAMA_BIN/llama-simple" -m "$WORK/$f.gguf" -n 24 "$p" 2> /dev/null)
        t=$("$T" run -m "$WORK/$f.gguf" -p "$p" -n 24 --temp 0 --repeat-penalty 1 2> /dev/null)
        [[ "$l" == "$t" ]] && same=$((same + 1))
    done
    lp=$("$LLAMA_BIN/llama-perplexity" -m "$WORK/$f.gguf" -f "$WORK/text.txt" -c 128 --chunks 4 2>&1 |
        grep -o 'Final estimate: PPL = [0-9.]*' | grep -o '[0-9.]*$')
    tp=$("$T" perplexity -m "$WORK/$f.gguf" -f "$WORK/text.txt" -c 128 --chunks 4 --json 2> /dev/null |
        python3 -c "import json,sys; print(json.load(sys.stdin)['ppl'])")
    rel=$(python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print('%.1e' % (abs(a-b)/b))" "$tp" "$lp")
    echo "$f's file: greedy text equal on $same of ${#prompts[@]} prompts; PPL llama.cpp $lp, tessera $tp ($rel)"
    [[ $same == "${#prompts[@]}" ]] || failed=1
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-3 else 1)" "$rel" || failed=1
done

# the experts' bytes: GGUF read here (tensor infos, then the data section at the alignment)
python3 - "$WORK/llama.gguf" "$WORK/tessera.gguf" << 'EOF' || failed=1
import struct, sys
from functools import reduce
def tensors(path):
    d = open(path, 'rb').read()
    o = 8
    nt, nkv = struct.unpack_from('<QQ', d, o); o += 16
    def rs(o):
        n, = struct.unpack_from('<Q', d, o); o += 8
        return d[o:o + n].decode('utf-8', 'replace'), o + n
    sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def rv(t, o):
        if t == 8: return rs(o)
        if t == 9:
            at, = struct.unpack_from('<I', d, o); o += 4
            n, = struct.unpack_from('<Q', d, o); o += 8
            for _ in range(n): _, o = rv(at, o)
            return None, o
        return None, o + sizes[t]
    align = 32
    for _ in range(nkv):
        k, o = rs(o)
        t, = struct.unpack_from('<I', d, o); o += 4
        if k == 'general.alignment': align, = struct.unpack_from('<I', d, o)
        _, o = rv(t, o)
    info = {}
    for _ in range(nt):
        name, o = rs(o)
        nd, = struct.unpack_from('<I', d, o); o += 4
        ne = struct.unpack_from('<%dQ' % nd, d, o); o += 8 * nd
        tt, off = struct.unpack_from('<IQ', d, o); o += 12
        info[name] = (ne, tt, off)
    return d, (o + align - 1) // align * align, info
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
n_same = n_all = 0
for name, (ne, t, off) in a[2].items():
    if t != 39: continue  # MXFP4
    ne2, t2, off2 = b[2][name]
    size = reduce(lambda x, y: x * y, ne) // 32 * 17
    n_all += 1
    n_same += t2 == 39 and a[0][a[1] + off:a[1] + off + size] == b[0][b[1] + off2:b[1] + off2 + size]
print(f"MXFP4 tensors byte for byte equal in both files: {n_same} of {n_all}")
sys.exit(0 if n_all and n_same == n_all else 1)
EOF
rm -f "$WORK"/*.gguf
exit $failed
