// bench_mmv.cpp: the CUDA mul_mat per weight format at the shapes (n, k) = (4096, 4096), (14336, 4096),
// (4096, 14336). Not a test: each case checks its first output against the CPU first (NMSE), then times.
//   decode GEMV (one activation column): GB/s of weight bytes next to the device-to-device copy bandwidth measured in
//     the same run; each timed graph holds enough weight copies (> 3x L2) that they stream from HBM; a graph's time
//     includes the activation quantization and the launches.
//   prefill GEMM (m = 512 columns): TFLOP/s (2 n k m / time) next to cuBLAS's f16 GEMM (f32 accumulation) on the same
//     shape in the same run, the tensor-core peak this box reaches.
//   usage: bench_mmv [repeats] [gemv|gemm|all] [type name: that format only]
#include "backends/cpu/cpu_backend.h"
#include "ggml-like/ops.h"
#include "llm/device.h"
#include "quant/format.h"

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace tessera;

namespace {

// xorshift floats in about N(0, 1) (sum of uniforms): fast enough for 58 M values
std::vector<float> noise(size_t n, uint32_t seed) {
    std::vector<float> v(n);
    uint32_t s = seed * 2654435761u + 1;
    auto next = [&] {
        s ^= s << 13, s ^= s >> 17, s ^= s << 5;
        return float(s) * 2.3283064e-10f;
    };
    for (auto& x : v) x = (next() + next() + next() - 1.5f) * 2.0f + 1e-3f;
    return v;
}

// cuBLAS f16 x f16 -> f32 GEMM of (n, k) x (k, m), median ms over `repeats` (0 when cuBLAS fails)
double cublas_f16_ms(int64_t n, int64_t k, int64_t m, int repeats) {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 0;
    __half *a = nullptr, *b = nullptr;
    float* c = nullptr;
    double result = 0;
    if (cudaMalloc(&a, size_t(n * k) * 2) == cudaSuccess && cudaMalloc(&b, size_t(k * m) * 2) == cudaSuccess &&
        cudaMalloc(&c, size_t(n * m) * 4) == cudaSuccess) {
        cudaMemset(a, 0x3c, size_t(n * k) * 2); // 0x3c3c: a normal half (about 1.06), not zeros
        cudaMemset(b, 0x3c, size_t(k * m) * 2);
        const float one = 1.0f, zero = 0.0f;
        auto gemm = [&] {
            return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, a, CUDA_R_16F, int(k), b,
                                CUDA_R_16F, int(k), &zero, c, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT);
        };
        if (gemm() == CUBLAS_STATUS_SUCCESS && cudaDeviceSynchronize() == cudaSuccess) {
            cudaEvent_t e0, e1;
            cudaEventCreate(&e0);
            cudaEventCreate(&e1);
            std::vector<float> ms;
            for (int r = 0; r < repeats; r++) {
                cudaEventRecord(e0);
                for (int i = 0; i < 10; i++) gemm();
                cudaEventRecord(e1);
                cudaEventSynchronize(e1);
                float t = 0;
                cudaEventElapsedTime(&t, e0, e1);
                ms.push_back(t / 10);
            }
            std::sort(ms.begin(), ms.end());
            result = ms[ms.size() / 2];
            cudaEventDestroy(e0);
            cudaEventDestroy(e1);
        }
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cublasDestroy(h);
    return result;
}

} // namespace

int main(int argc, char** argv) {
    const int repeats = argc > 1 ? std::atoi(argv[1]) : 20;
    const std::string what = argc > 2 ? argv[2] : "all";
    const std::string only = argc > 3 ? argv[3] : "";
    std::string why;
    const auto gpu = find_gpu(&why);
    if (!gpu) {
        fmt::print(stderr, "bench_mmv: no CUDA device: {}\n", why);
        return 0;
    }
    const double copy = make_backend(device_type::cuda, 0)->copy_gbs(); // backend::copy_gbs
    fmt::print("{}: device-to-device copy {:.0f} GB/s (read + write)\n", gpu->name, copy);
    struct shape {
        int64_t n, k;
    };
    const shape shapes[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
    const type types[] = {type::q4_0, type::q4_1, type::q8_0, type::nvfp4, type::awq4, type::tq2_0, type::i2_s, type::f16};
    for (const int64_t m : {int64_t(1), int64_t(512)}) {
        const bool gemm = m > 1;
        if (what != "all" && what != (gemm ? "gemm" : "gemv")) continue;
        if (gemm)
            fmt::print("\n{:<8} {:>6} {:>6} {:>5} {:>9} {:>9} {:>12} {:>8}\n", "type", "n", "k", "m", "us", "TFLOP/s",
                       "cuBLAS f16", "% of it");
        else
            fmt::print("\n{:<8} {:>6} {:>6} {:>9} {:>9} {:>8} {:>10}\n", "type", "n", "k", "MB", "us", "GB/s", "% of copy");
        for (type t : types)
            for (shape s : shapes) {
                if (gemm && t == type::f16) continue; // cuBLAS's column is the f16 reference
                if (!only.empty() && only != type_name(t)) continue;
                const size_t row = row_size(t, s.k), bytes = row * size_t(s.n);
                std::vector<uint8_t> w(bytes);
                {
                    const auto v = noise(size_t(s.n * s.k), uint32_t(s.n + s.k));
                    const row_ops* ops = find_row_ops(t);
                    for (int64_t r = 0; r < s.n; r++) ops->from_float(v.data() + r * s.k, w.data() + size_t(r) * row, s.k);
                }
                const auto xv = noise(size_t(s.k * m), 7);
                const int copies = int(std::max<size_t>(4, (160u << 20) / bytes + 1)); // > 3x the 50 MB L2
                std::unique_ptr<backend> be = make_backend(device_type::cuda, 0);
                context ctx;
                std::vector<tensor*> ws;
                for (int c = 0; c < copies; c++) {
                    tensor* wt = ctx.new_tensor(t, {s.k, s.n});
                    wt->flags |= flag_param;
                    wt->data = w.data();
                    ws.push_back(wt);
                }
                be->load_weights(ws);
                tensor* x = ctx.new_tensor(type::f32, {s.k, m});
                x->flags |= flag_input;
                graph g;
                std::vector<tensor*> ys;
                for (tensor* wt : ws) {
                    tensor* y = mul_mat(ctx, wt, x);
                    y->flags |= flag_output;
                    g.expand(y);
                    ys.push_back(y);
                }
                graph_runner runner(*be);
                runner.prepare(g);
                be->set(*x, xv.data(), 0, xv.size() * 4);
                runner.compute(g);
                be->synchronize();
                // check the first output against the CPU before timing it
                std::vector<float> got(size_t(s.n * m)), ref(size_t(s.n * m));
                be->get(*ys[0], got.data(), 0, got.size() * 4);
                {
                    cpu::cpu_backend cpu_be;
                    context c2;
                    tensor* wt = c2.new_tensor(t, {s.k, s.n});
                    wt->data = w.data();
                    tensor* x2 = c2.new_tensor(type::f32, {s.k, m});
                    x2->data = const_cast<float*>(xv.data());
                    tensor* y2 = mul_mat(c2, wt, x2);
                    y2->flags |= flag_output;
                    graph g2;
                    g2.expand(y2);
                    graph_runner r2(cpu_be);
                    r2.prepare(g2);
                    r2.compute(g2);
                    std::memcpy(ref.data(), y2->data, ref.size() * 4);
                }
                double num = 0, den = 0;
                for (size_t i = 0; i < ref.size(); i++) {
                    num += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
                    den += double(ref[i]) * ref[i];
                }
                const double e = den > 0 ? num / den : num;
                // the ternary formats quantize activations differently on the CPU (q8_k, i8_s): test_backend_ops's 5e-4
                const double bound = t == type::tq2_0 || t == type::i2_s ? 5e-4 : gemm ? 2e-4 : 1e-5;
                if (!(e < bound)) {
                    fmt::print("{:<8} {:>6} {:>6}: WRONG, NMSE vs CPU {:.3g}\n", type_name(t), s.n, s.k, e);
                    continue;
                }
                std::vector<double> us;
                for (int r = 0; r < repeats; r++) {
                    const auto t0 = std::chrono::steady_clock::now();
                    runner.compute(g);
                    be->synchronize();
                    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                                 copies);
                }
                std::sort(us.begin(), us.end());
                const double med = us[us.size() / 2];
                if (gemm) {
                    const double flop = 2.0 * double(s.n) * double(s.k) * double(m), tf = flop / (med * 1e-6) / 1e12;
                    const double ref_ms = cublas_f16_ms(s.n, s.k, m, repeats);
                    const double ref_tf = ref_ms > 0 ? flop / (ref_ms * 1e-3) / 1e12 : 0;
                    fmt::print("{:<8} {:>6} {:>6} {:>5} {:>9.1f} {:>9.1f} {:>12.1f} {:>7.0f}%\n", type_name(t), s.n, s.k, m,
                               med, tf, ref_tf, ref_tf > 0 ? 100.0 * tf / ref_tf : 0.0);
                } else {
                    const double gbs = double(bytes) / (med * 1e-6) / 1e9;
                    fmt::print("{:<8} {:>6} {:>6} {:>9.1f} {:>9.1f} {:>8.0f} {:>9.0f}%\n", type_name(t), s.n, s.k,
                               double(bytes) / 1e6, med, gbs, 100.0 * gbs / copy);
                }
            }
    }
    return 0;
}
