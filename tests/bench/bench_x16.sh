#!/usr/bin/env bash
# bench_x16.sh: builds tests/bench/bench_x16.cpp against the libraries in build/ (cmake --build build --target
# tessera_cpu first) and runs it: repacked vs row kernels per type, GB/s of weights (GEMV) and GFLOP/s (m = 16).
#   tests/bench/bench_x16.sh [types...]      THREADS=2 by default; run on an idle machine (check `uptime`)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
B=${BUILD:-build}
out=$B/tests/bench_x16
mkdir -p $B/tests
c++ -O2 -std=c++20 -I. tests/bench/bench_x16.cpp $B/backends/cpu/libtessera_cpu.a $B/ggml-like/libtessera_core.a \
    -lpthread -o "$out"
echo "# $(date -u +%F) $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1 /proc/loadavg)"
"$out" "$@"
