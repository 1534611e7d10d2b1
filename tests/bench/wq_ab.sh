# wq_ab.sh: the warp-specialized block-format GEMM (gemm_wgmma.cu gemm_wq_kernel) on a device machine, from the
# repository root with .ref (vocabularies) and .gl (pcre2.h) carried, ~7 min on an H100:
# 1. the kernel outside the model (tests/bench/wq_harness.cu, q4_0 and q8_0: TFLOP/s next to the old kernel, results
#    compared), with PROTO=1 also tests/bench/ws_q4_proto.cu;
# 2. the project build, the op suite (its failing lines into the log), 8B q4_0 pp512 with TESSERA_CUDA_WGMMA_WQ=1 / 0
#    in two rounds, the greedy text of both, the pp512's kernels under ncu; with Q8=1 also 8B q8_0 pp512 WQ=1 / 0.
# QUICK=1 stops after step 1.
L=$OUT/log.txt
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader | tee -a $L
if [[ ! -f /tmp/bt/CMakeCache.txt ]]; then
cmake -S . -B /tmp/bt -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real \
  -DPCRE2_INCLUDE_DIR=$PWD/.gl/include > $OUT/configure.log 2>&1 || { tail -30 $OUT/configure.log; exit 1; }
fi
cmake --build /tmp/bt -j16 --target random_model > $OUT/build0.log 2>&1 || { grep -B2 -A12 -m3 'error' $OUT/build0.log; exit 1; }
RM=/tmp/bt/examples/random_model/random_model; T=/tmp/bt/cli/tessera
[[ -f /tmp/8b.gguf ]] || (setsid nohup bash -c "$RM --vocab .ref/ggml-vocab-llama-bpe.gguf 8b q4_0 /tmp/8b.gguf > $OUT/gen.log 2>&1; echo \$? > /tmp/gen.rc" > /dev/null 2>&1 &)
nvcc -std=c++20 -O3 -DNDEBUG -I. --generate-code=arch=compute_90a,code=sm_90a tests/bench/wq_harness.cu -o /tmp/wqh \
  -Xlinker --unresolved-symbols=ignore-all 2>&1 | grep -E "error" | head -5 | tee -a $L
[[ -n "$PROTO" ]] && (cd tests/bench && nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a ws_q4_proto.cu -lcublas -o /tmp/wsp 2>&1 | head -5) | tee -a $L
[[ -n "$PROTO" ]] && { echo "== prototype" | tee -a $L; timeout 60 /tmp/wsp 2>&1 | tee -a $L; }
for f in q4_0 q8_0; do timeout 60 /tmp/wqh $f 2>&1 | tee -a $L; done
echo "harness done at $(( $(date +%s) - t0 )) s" | tee -a $L
[[ -n "$QUICK" ]] && exit 0
cmake --build /tmp/bt -j16 --target tessera test_backend_ops > $OUT/build.log 2>&1 || { grep -B2 -A12 -m3 'error' $OUT/build.log | tee -a $L; exit 1; }
echo "build done at $(( $(date +%s) - t0 )) s" | tee -a $L
timeout 240 /tmp/bt/tests/test_backend_ops > /tmp/ops.txt 2>&1; echo "ops rc $?" | tee -a $L
grep -E "FAILED|Failure|rror|Abort|what\(\)|PASSED" /tmp/ops.txt | head -20 | tee -a $L; tail -5 /tmp/ops.txt | tee -a $L
for i in $(seq 1 60); do [[ -f /tmp/gen.rc ]] && break; sleep 5; done
pp() { $T bench -m /tmp/8b.gguf -p 512 -n 0 -r 5 2>&1 | grep pp512 | awk -F'|' '{print $8}'; }
for rep in 1 2; do for v in 1 0; do echo "WQ=$v pp512: $(TESSERA_CUDA_WGMMA_WQ=$v pp)" | tee -a $L; done; done
P="The history of the city begins in the Roman period, when a small settlement grew up around a bridge."
for v in 1 0; do TESSERA_CUDA_WGMMA_WQ=$v $T run -m /tmp/8b.gguf -p "$P" --temp 0 -n 48 --no-display-prompt 2>/dev/null | md5sum | sed "s/^/WQ=$v text /" | tee -a $L; done
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
timeout 120 $NCU --clock-control none --metrics gpu__time_duration.sum --csv $T bench -m /tmp/8b.gguf -p 512 -n 0 -r 1 > /tmp/ncu_pp.csv 2>/dev/null
python3 - /tmp/ncu_pp.csv <<'PY' | tee -a $L
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ki = h.index('Kernel Name'); vi = h.index('Metric Value'); gi = h.index('Grid Size')
d = collections.OrderedDict()
for r in rows[1:]:
    d.setdefault(r[ki].split('(')[0][:80] + ' ' + r[gi], []).append(float(r[vi].replace(',', '')) / 1000)
print(f"{len(rows)-1} kernels, {sum(sum(v) for v in d.values())/2:.1f} us a run")
for k, v in sorted(d.items(), key=lambda kv: -sum(kv[1]))[:8]:
    v.sort(); print(f"{sum(v)/2:9.1f} us/run {len(v):5d} x med {v[len(v)//2]:7.2f} us  {k}")
PY
echo "total $(( $(date +%s) - t0 )) s" | tee -a $L
