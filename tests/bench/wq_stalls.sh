# wq_stalls.sh: where gemm_wq_kernel<q4_0, 64> (tests/bench/wq_harness.cu, 4096^2, m = 512) and the prototype's
# ws_q4_gemm<64> (tests/bench/ws_q4_proto.cu) spend their time, per SASS instruction: ncu's source counters (warp
# stall samples by reason), exported as CSV and summarized by tests/bench/wq_stalls.py (top instructions, and the
# samples before / in the epilogue). On a device machine from the repository root, ~1.5 min:
#   bash tests/bench/wq_stalls.sh      (the CSVs come back xz-compressed under $OUT for a closer look)
L=$OUT/log.txt
nvidia-smi --query-gpu=name --format=csv,noheader | tee -a $L
nvcc -std=c++20 -O3 -DNDEBUG -I. -lineinfo --generate-code=arch=compute_90a,code=sm_90a tests/bench/wq_harness.cu \
  -o /tmp/wqh -Xlinker --unresolved-symbols=ignore-all 2>&1 | grep -E "error" | head -5 | tee -a $L &
(cd tests/bench && nvcc -std=c++17 -O3 -lineinfo -gencode=arch=compute_90a,code=sm_90a ws_q4_proto.cu -lcublas \
  -o /tmp/wsp 2>&1 | head -5) | tee -a $L
wait
NCU=$(ls /usr/local/cuda/bin/ncu 2>/dev/null || which ncu)
S="--section SourceCounters --section WarpStateStats --section SpeedOfLight"
timeout 150 $NCU $S -k regex:ws_q4_gemm --launch-skip 1 --launch-count 1 -f -o /tmp/stalls_proto /tmp/wsp > /dev/null 2>&1
timeout 150 $NCU $S -k regex:gemm_wq_kernel --launch-skip 1 --launch-count 1 -f -o /tmp/stalls_wq /tmp/wqh q4_0 \
  > /dev/null 2>&1
for r in stalls_proto stalls_wq; do
  $NCU -i /tmp/$r.ncu-rep --page source --csv --print-source sass > /tmp/$r.csv 2> /dev/null
  python3 tests/bench/wq_stalls.py /tmp/$r.csv 12 | tee -a $L
  xz -9 -c /tmp/$r.csv > $OUT/$r.csv.xz
done
