#!/usr/bin/env bash
# cpu_host_check.sh: the CPU backend on the GPU machine's host CPU (a Sapphire Rapids Xeon: AVX-512 VNNI / BF16, AMX),
# run from the device copy's root with .ref (llama.tar.xz, data/, ggml-vocab-qwen2.gguf) and .gl carried: a CPU-only
# build into /tmp/bc; test_quant's cpu_* (the repacked kernels' 16-lane VNNI build bit for bit), test_ops' mul_mat*,
# test_families on the CPU (llama.cpp's recorded tokens, taken on such a host); then tessera bench vs llama-bench
# (llama.cpp built beside with AVX-512 VNNI / BF16 and without AMX) on Qwen3-0.6B-shaped q4_K / q5_K / q6_K files,
# 2 and 8 threads, medians of 3 alternated rounds. ~4 min. Output in $OUT/log.txt.
{
set -u
cd "$(dirname "$0")/../.."
lscpu | grep -E "Model name" ; grep -o 'avx512[a-z_0-9]*\|amx[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
mkdir -p /tmp/lr && tar xJf .ref/llama.tar.xz -C /tmp/lr
(cd /tmp/lr/llama.cpp && cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON \
   -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AVX512_VBMI=ON \
   > /tmp/lcfg.log 2>&1 && cmake --build build -j7 --target llama-bench > /tmp/lb.log 2>&1; echo $? > /tmp/lb.rc) &
cmake -S . -B /tmp/bc -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=OFF -DPCRE2_INCLUDE_DIR="$PWD/.gl/include" \
   -DTESSERA_TEST_DATA="$PWD/.ref/data" > /tmp/cfg.log 2>&1 || tail -20 /tmp/cfg.log
cmake --build /tmp/bc -j9 --target tessera random_model test_quant test_families test_ops > /tmp/build.log 2>&1 || grep -m5 -A10 error /tmp/build.log
echo "== build done $(date +%T)"
/tmp/bc/tests/test_quant --gtest_filter='cpu_*' 2>&1; /tmp/bc/tests/test_ops --gtest_filter='ops.mul_mat*' 2>&1 | grep -E "^\[  |FAIL|Which|act " | tail -30
mkdir -p /tmp/kq
for t in q4_k q5_k q6_k; do /tmp/bc/examples/random_model/random_model --vocab .ref/ggml-vocab-qwen2.gguf qwen3-0.6b $t /tmp/kq/$t.gguf > /dev/null 2>&1 & done
(cd /tmp/bc && timeout 200 ./tests/test_families 2>&1 | grep -E "^\[  |FAIL|Expected|Which|vs" | tail -45)
wait
for i in $(seq 200); do [ -f /tmp/lb.rc ] && break; sleep 2; done
echo "== llama build rc $(cat /tmp/lb.rc 2>/dev/null) $(date +%T)"; tail -3 /tmp/lb.log
L=/tmp/lr/llama.cpp/build/bin
export LD_LIBRARY_PATH=$L
for th in 2 8; do
for f in /tmp/kq/q4_k.gguf /tmp/kq/q5_k.gguf /tmp/kq/q6_k.gguf; do
  for r in 1 2 3; do
    /tmp/bc/cli/tessera bench -m $f -t $th -p 512 -n 64 -r 1 --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('T', ' '.join(f\"{x['avg_ts']:.1f}\" for x in d))"
    $L/llama-bench -m $f -t $th -p 512 -n 64 -r 1 -o json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('L', ' '.join(f\"{x['avg_ts']:.1f}\" for x in d))"
  done | python3 -c "
import sys,statistics
v={'T':[], 'L':[]}
for l in sys.stdin:
    p=l.split(); v[p[0]].append([float(x) for x in p[1:]])
m=lambda k,i: statistics.median(r[i] for r in v[k]) if v[k] else 0
print('$(basename $f) -t $th: tessera pp512 %.1f tg64 %.1f | llama pp512 %.1f tg64 %.1f | %.2fx %.2fx' % (m('T',0), m('T',1), m('L',0), m('L',1), m('T',0)/max(m('L',0),1e-9), m('T',1)/max(m('L',1),1e-9)))"
done
done
echo "== end $(date +%T)"
} 2>&1 | tee $OUT/log.txt
