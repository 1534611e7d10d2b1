// bench_x16.cpp: CPU GEMV / small GEMM of the 16-row repacked kernels (backends/cpu/quant/repack.h) against the row
// kernels, per type, on one matrix larger than the L3 cache. Checked first (repacked output == row output, bit for
// bit), then timed; prints GB/s of weights streamed (decode, m = 1) and GFLOP/s (m = 16). Not a test.
//   tests/bench/bench_x16.sh [types...]        (builds this file against build/, then runs it)
#include "backends/cpu/quant/repack.h"
#include "backends/cpu/quant/vec_dot.h"
#include "quant/format.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace tessera;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// runs fn(ith, nth) on nth threads
template <class Fn> void parallel(int nth, Fn fn) {
    std::vector<std::thread> ts;
    for (int i = 1; i < nth; i++) ts.emplace_back(fn, i, nth);
    fn(0, nth);
    for (auto& t : ts) t.join();
}

void bench(type t, int64_t k, int64_t n, int nth) {
    cpu::x16_kind kind;
    tensor w{};
    w.t = t;
    w.ne[0] = k, w.ne[1] = n, w.ne[2] = w.ne[3] = 1;
    w.nb[0] = type_size(t), w.nb[1] = row_size(t, k), w.nb[2] = w.nb[3] = w.nb[1] * size_t(n);
    w.flags = flag_param;
    std::vector<uint8_t> wd(tensor_bytes(t, k * n));
    w.data = wd.data();
    if (!cpu::x16_kind_for(w, kind)) {
        std::printf("%-9s not repacked\n", type_name(t));
        return;
    }
    {
        std::mt19937 rng(1);
        std::student_t_distribution<float> dist(4.0f);
        std::vector<float> x(size_t(k * n));
        for (auto& v : x) v = dist(rng) * 0.02f;
        quantize_tensor_ref(t, x.data(), wd.data(), k, n);
    }
    const cpu::cpu_type_ops* ops = cpu::find_cpu_ops(t);
    const int64_t m = 16;
    const size_t arow = row_size(ops->dot_type, k);
    std::vector<uint8_t> act(arow * m);
    {
        std::mt19937 rng(2);
        std::normal_distribution<float> dist;
        std::vector<float> x(static_cast<size_t>(k));
        for (int64_t j = 0; j < m; j++) {
            for (auto& v : x) v = dist(rng);
            ops->act_from_float(x.data(), act.data() + j * arow, k);
        }
    }
    cpu::repack_store store;
    cpu::repacked_weight* rw = store.reserve(w);
    cpu::fill_groups(w, *rw, 0, n / 16);
    const cpu::x16_kernels kern = cpu::find_x16_kernels(kind);
    const int64_t ns = cpu::x16_act_sums_count(kind, k);
    std::vector<int32_t> sums(size_t(ns * m) + 1);
    if (kern.sums)
        for (int64_t j = 0; j < m; j++) kern.sums(act.data() + j * arow, sums.data() + j * ns, k);
    const int32_t* s = kern.sums ? sums.data() : nullptr;
    const size_t ss = kern.sums ? size_t(ns) : 0;
    std::vector<float> y_row(size_t(n * m)), y_x16(size_t(n * m));

    auto run_x16 = [&](int64_t na) {
        const int64_t nbat = cpu::x16_batch_rows(kern, na, 0, na); // K formats: the batch order for these rows
        parallel(nth, [&](int ith, int nt) {
            const int64_t groups = n / 16, g0 = groups * ith / nt, g1 = groups * (ith + 1) / nt;
            for (int64_t g = g0; g < g1; g++) {
                float* y = y_x16.data() + 16 * g;
                if (nbat) kern.gemm_batch(rw->group(g), k / 32, act.data(), arow, s, ss, nbat, y, size_t(n));
                if (nbat < na)
                    kern.gemm(rw->group(g), k / 32, act.data() + size_t(nbat) * arow, arow, s ? s + nbat * ss : s, ss,
                              na - nbat, y + nbat * n, size_t(n));
            }
        });
    };
    // the row kernels the repacked ones stand in for (mul_mat's row_ops_for: q4_0 / q4_K matrices in llama.cpp's
    // repacked orders, q4_K's gemm 4 x 4; q5_K / q6_K batches of >= 8 in ggml's tiled order)
    const bool rows8 = kind == cpu::x16_kind::q4_0_blockwise || kind == cpu::x16_kind::q4_k;
    auto run_row = [&](int64_t na) {
        const cpu::vec_dot_fn dot = rows8                            ? ops->vec_dot_rows8
                                    : na >= 8 && ops->vec_dot_batch8 ? ops->vec_dot_batch8
                                                                     : ops->vec_dot;
        parallel(nth, [&](int ith, int nt) {
            const int64_t r0 = n * ith / nt / 4 * 4, r1 = ith + 1 == nt ? n : n * (ith + 1) / nt / 4 * 4;
            int64_t j = 0;
            if (kind == cpu::x16_kind::q4_k)
                for (; j + 4 <= na; j += 4)
                    for (int64_t r = r0; r < r1; r += 4)
                        ops->gemm4_rows8(wd.data() + size_t(r) * w.nb[1], w.nb[1], act.data() + j * arow, arow, k,
                                         y_row.data() + j * n + r, size_t(n));
            for (; j < na; j++)
                for (int64_t r = r0; r < r1; r++)
                    y_row[size_t(j * n + r)] = dot(wd.data() + size_t(r) * w.nb[1], act.data() + j * arow, k);
        });
    };
    run_x16(m);
    run_row(m);
    int64_t bad = 0;
    for (size_t i = 0; i < y_row.size(); i++) bad += y_row[i] != y_x16[i];
    auto time = [&](auto&& fn, int64_t na) {
        double best = 1e30;
        for (int r = 0; r < 5; r++) {
            const double t0 = now();
            fn(na);
            best = std::min(best, now() - t0);
        }
        return best;
    };
    const double bytes = double(row_size(t, k)) * double(n);
    const double flops = 2.0 * double(k) * double(n) * double(m);
    const double tx1 = time(run_x16, 1), tr1 = time(run_row, 1), tx16 = time(run_x16, m), tr16 = time(run_row, m);
    std::printf("%-9s %6lld x %-6lld %3d thr  GEMV GB/s: x16 %6.1f  row %6.1f (%.2fx)   "
                "m=16 GFLOP/s: x16 %6.1f  row %6.1f  %s\n",
                type_name(t), (long long)n, (long long)k, nth, bytes / tx1 * 1e-9, bytes / tr1 * 1e-9, tr1 / tx1,
                flops / tx16 * 1e-9, flops / tr16 * 1e-9, bad ? "MISMATCH" : "same bits");
}

} // namespace

int main(int argc, char** argv) {
    // 8192 x 8192: 36-72 MB at 4.5-8.5 bits, beyond this machine's 32 MiB L3 (ternary: 17 MB); N=, K= to change
    const int64_t n = std::getenv("N") ? std::atoll(std::getenv("N")) : 8192;
    const int64_t k = std::getenv("K") ? std::atoll(std::getenv("K")) : 8192;
    std::vector<type> types;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        for (type t : {type::q4_0, type::q4_1, type::q8_0, type::nvfp4, type::awq4, type::awq4_g64, type::tq2_0,
                       type::i2_s, type::q4_k, type::q5_k, type::q6_k})
            if (a == type_name(t)) types.push_back(t);
    }
    if (types.empty())
        types = {type::q4_0,  type::q4_1, type::q8_0, type::nvfp4, type::awq4, type::awq4_g64,
                 type::tq2_0, type::i2_s, type::q4_k, type::q5_k,  type::q6_k};
    const int nth = std::getenv("THREADS") ? std::atoi(std::getenv("THREADS")) : 2;
    for (type t : types) bench(t, k, n, nth);
}
