// -ngl through a session (llm/model.h, session_params::n_gpu_layers) with a second CPU backend in the GPU's place:
// every split point, 0 to all layers, gives the logits of one backend bit for bit (the CPU computes each node the same
// way wherever the layer boundary falls), prompt and decode steps, caches included; each layer's cache lives with it.
// Then the same with the real CUDA backend (offload_cuda.*, skipped with a message where there is no CUDA device, as
// in CI): in exact mode every -ngl gives the all-CPU logits bit for bit; in fast mode within a stated bound.
// On a GPU machine tests/bench/ngl_check.sh also checks `tessera run` / `perplexity` at several -ngl.
#include "backends/cpu/cpu_backend.h"
#include "llm/device.h"
#include "llm/model.h"
#include "tiny_model.h"

#ifdef TESSERA_HAS_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

#include <fmt/core.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <unistd.h>

using namespace tessera;
namespace fs = std::filesystem;

namespace {

std::string temp_path(const std::string& name) {
    return (fs::temp_directory_path() / ("tessera_test_offload_" + std::to_string(::getpid()) + "_" + name)).string();
}

// a prompt, then 6 decode steps: the logits of every step, one after the other
std::vector<float> run(const model& m, int n_gpu_layers, size_t* splits, int n_cpu_moe = 0) {
    session_params p{.n_ctx = 64, .n_batch = 16, .n_threads = 2};
    p.n_gpu_layers = n_gpu_layers;
    p.n_cpu_moe = n_cpu_moe;
    p.gpu_backend = [](int) { return std::make_unique<cpu::cpu_backend>(cpu::cpu_options{1, false}); };
    session s(m, p);
    const std::vector<float> out = test::prompt_then_steps(s, 21);
    *splits = s.n_splits();
    if (n_gpu_layers >= 1 && n_gpu_layers <= m.hp.n_layer) {
        EXPECT_EQ(s.backend_label(), fmt::format("cpu+cpu ngl {}/{}", n_gpu_layers, m.hp.n_layer + 1));
    }
    return out;
}

// a tiny qwen3moe file: 3 layers of 4 experts, 2 chosen
void write_tiny_moe(const std::string& path) {
    test::tiny_model_spec spec;
    spec.arch = "qwen3moe";
    spec.n_layer = 3;
    spec.n_expert = 4;
    spec.n_expert_used = 2;
    test::write_tiny_model(path, spec);
}

} // namespace

TEST(offload, every_layer_count_gives_the_logits_of_one_backend) {
    for (bool tied : {false, true}) {
        const std::string path = temp_path(tied ? "ngl_tied.gguf" : "ngl.gguf");
        test::tiny_model_spec spec;
        spec.n_layer = 3;
        spec.tied_output = tied; // the output reads the token embeddings: they go with it
        test::write_tiny_model(path, spec);
        auto m = model::load(path);
        size_t splits = 0;
        const std::vector<float> ref = run(*m, -1, &splits); // everything on the "GPU"
        EXPECT_EQ(splits, 1u);
        for (int ngl = 0; ngl <= 5; ngl++) {
            const std::vector<float> got = run(*m, ngl, &splits);
            ASSERT_EQ(got.size(), ref.size());
            EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0) << "-ngl " << ngl << " tied " << tied;
            // 0: all on the CPU; 1..3: the CPU's layers (and the embeddings), then the rest; >= n_layer + 1: all
            // offloaded
            const size_t want = ngl == 0 || ngl >= 4 ? 1u : (tied ? 3u : 2u);
            EXPECT_EQ(splits, want) << "-ngl " << ngl << " tied " << tied;
        }
        fs::remove(path);
    }
}

// Op offload: with -ngl 1 (the output alone on the "GPU"), a 40-token batch runs the CPU layers' matmuls on the
// "GPU" (their weights copied there per split; decode steps, one token, stay on the CPU): the logits of one backend
// bit for bit (q8_0: the copy's row kernel sums as the CPU's repacked one)
TEST(offload, a_batch_runs_the_cpu_layers_matmuls_on_the_gpu) {
    for (bool tied : {false, true}) {
        const std::string path = temp_path(tied ? "opoff_tied.gguf" : "opoff.gguf");
        test::tiny_model_spec spec;
        spec.n_layer = 3;
        spec.tied_output = tied;
        test::write_tiny_model(path, spec);
        auto m = model::load(path);
        auto go = [&](int ngl, bool op_offload, size_t* splits) {
            session_params p{.n_ctx = 128, .n_batch = 64, .n_threads = 2};
            p.n_gpu_layers = ngl;
            p.op_offload = op_offload;
            p.gpu_backend = [](int) { return std::make_unique<cpu::cpu_backend>(cpu::cpu_options{1, false}); };
            session s(*m, p);
            std::vector<float> out = test::prompt_then_steps(s, 40);
            *splits = s.n_splits();
            // the prompt alone: the 7 matmuls of each of the 3 CPU layers (-ngl 0 too: the GPU is there; the output's
            // matmul reads one token's row)
            session prompt_only(*m, p);
            std::vector<token> toks(40, token(7));
            prompt_only.decode(toks);
            EXPECT_EQ(prompt_only.n_offloaded(), op_offload ? 21u : 0u) << "tied " << tied;
            EXPECT_GT(prompt_only.n_splits(), op_offload ? 6u : 0u);
            return out;
        };
        size_t s_ref = 0, s_off = 0, s_on = 0;
        const std::vector<float> ref = go(0, false, &s_ref); // all on the CPU
        const std::vector<float> off = go(1, false, &s_off);
        const std::vector<float> on = go(1, true, &s_on);
        ASSERT_EQ(on.size(), ref.size());
        EXPECT_EQ(std::memcmp(off.data(), ref.data(), ref.size() * 4), 0) << "tied " << tied;
        EXPECT_EQ(std::memcmp(on.data(), ref.data(), ref.size() * 4), 0) << "tied " << tied;
        EXPECT_EQ(s_ref, 1u);
        // the last graph is a decode step: nothing offloaded, the splits of plain -ngl
        EXPECT_EQ(s_on, s_off) << "tied " << tied;
        fs::remove(path);
    }
}

// The same for the experts of --n-cpu-moe: a 40-token batch's mul_mat_ids on the "GPU", their whole expert stacks
// copied, the logits of one backend bit for bit
TEST(offload, a_batch_runs_the_cpu_experts_on_the_gpu) {
    const std::string path = temp_path("opoff_moe.gguf");
    write_tiny_moe(path);
    auto m = model::load(path);
    auto go = [&](bool op_offload, size_t* offloaded) {
        session_params p{.n_ctx = 128, .n_batch = 64, .n_threads = 2};
        p.n_cpu_moe = 2;
        p.op_offload = op_offload;
        p.gpu_backend = [](int) { return std::make_unique<cpu::cpu_backend>(cpu::cpu_options{1, false}); };
        session s(*m, p);
        std::vector<token> toks;
        for (int i = 0; i < 40; i++) toks.push_back(token((i * 7919 + 13) % m->hp.n_vocab));
        auto l = s.decode(toks, true);
        *offloaded = s.n_offloaded();
        return std::vector<float>(l.begin(), l.end());
    };
    size_t n_off = 0, n_on = 0;
    const std::vector<float> off = go(false, &n_off);
    const std::vector<float> on = go(true, &n_on);
    ASSERT_EQ(on.size(), off.size());
    EXPECT_EQ(std::memcmp(on.data(), off.data(), off.size() * 4), 0);
    EXPECT_EQ(n_off, 0u);
    EXPECT_EQ(n_on, 6u); // gate, up, down of the 2 layers whose experts stay on the CPU
    fs::remove(path);
}

// --n-cpu-moe on a tiny qwen3moe file: the experts of the first N layers on the CPU, the rest (attention, routers,
// later experts) offloaded; the logits of one backend for every N
TEST(offload, experts_of_the_first_layers_on_the_cpu) {
    const std::string path = temp_path("ncmoe.gguf");
    write_tiny_moe(path);
    auto m = model::load(path);
    size_t splits = 0;
    const std::vector<float> ref = run(*m, -1, &splits);
    EXPECT_EQ(splits, 1u);
    for (int n = 1; n <= 4; n++) {
        const std::vector<float> got = run(*m, -1, &splits, n);
        ASSERT_EQ(got.size(), ref.size());
        EXPECT_EQ(std::memcmp(got.data(), ref.data(), ref.size() * 4), 0) << "--n-cpu-moe " << n;
        // each layer with CPU experts leaves the offload backend for them and comes back
        EXPECT_EQ(splits, size_t(2 * std::min(n, 3) + 1)) << "--n-cpu-moe " << n;
    }
    fs::remove(path);
}

// ---- the real CUDA backend in the offload's place ----

namespace {

#define TS_REQUIRE_CUDA()                                                                                              \
    do {                                                                                                               \
        std::string why_;                                                                                              \
        if (!find_gpu(&why_)) GTEST_SKIP() << "no CUDA device: " << why_;                                              \
    } while (0)

struct cuda_run {
    std::vector<float> logits; // every prompt position's, then each decode step's
    size_t rows = 0;
    size_t splits = 0;
    std::string label;
    long long captured = -1, reused = -1; // CUDA graphs (fast mode)
};

// A prompt of 72 tokens in batches of 64 (64 tokens: the CPU's tiled attention, CUDA's GEMM; then 8: the CPU's f16
// one_chunk attention, CUDA's GEMV), the logits of every position, then 6 decode steps (the graph repeats from the
// second: compute_again).
cuda_run run_on(const model& m, device_type d, int n_gpu_layers, bool exact, int n_cpu_moe = 0) {
    session_params p{.n_ctx = 128, .n_batch = 64, .n_threads = 2, .device = d, .exact = exact};
    p.n_gpu_layers = n_gpu_layers;
    p.n_cpu_moe = n_cpu_moe;
    session s(m, p);
    cuda_run r;
    r.logits = test::prompt_then_steps(s, 72);
    r.rows = r.logits.size() / size_t(m.hp.n_vocab);
    r.splits = s.n_splits();
    r.label = s.backend_label();
#ifdef TESSERA_HAS_CUDA
    if (d == device_type::cuda) {
        const auto* cb = dynamic_cast<const cuda::cuda_backend*>(&s.gpu());
        EXPECT_NE(cb, nullptr) << "the offloaded layers should run on the CUDA backend, not " << s.gpu().name();
        if (cb) r.captured = cb->graphs_captured(), r.reused = cb->graphs_reused();
    }
#endif
    return r;
}

struct agreement {
    size_t n_diff = 0;    // logits that differ in any bit
    double max_abs = 0;   // max |dlogit|
    double nmse = 0;      // sum (a - b)^2 / sum b^2
    size_t same_top1 = 0; // rows with the same argmax (first index on ties)
};

agreement compare(const cuda_run& got, const cuda_run& ref, int64_t n_vocab) {
    agreement a;
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.logits.size(); i++) {
        const double x = got.logits[i], y = ref.logits[i];
        a.n_diff += std::memcmp(&got.logits[i], &ref.logits[i], 4) != 0;
        a.max_abs = std::max(a.max_abs, std::fabs(x - y));
        num += (x - y) * (x - y);
        den += y * y;
    }
    a.nmse = den > 0 ? num / den : 0;
    if (!std::isfinite(num)) a.nmse = INFINITY;
    for (size_t r = 0; r < ref.rows; r++) {
        const float* g = got.logits.data() + r * size_t(n_vocab);
        const float* c = ref.logits.data() + r * size_t(n_vocab);
        a.same_top1 += std::max_element(g, g + n_vocab) - g == std::max_element(c, c + n_vocab) - c;
    }
    return a;
}

// 4 llama layers with heads of 64 (CUDA's exact attention covers head sizes 64 and 128), 256 wide
test::tiny_model_spec cuda_spec(type t, bool tied) {
    test::tiny_model_spec spec;
    spec.n_embd = 256;
    spec.n_layer = 4;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.n_ff = 512;
    spec.weight_type = t;
    spec.tied_output = tied;
    return spec;
}

// splits of a -ngl N session: all on one backend for 0 and N > n_layer; else the CPU's layers then the GPU's, and with
// tied embeddings the token lookup on the GPU first (the table goes with the output)
size_t want_splits(int ngl, int64_t n_layer, bool tied) {
    return ngl <= 0 || ngl > n_layer ? 1u : (tied ? 3u : 2u);
}

} // namespace

// Exact mode (session_params::exact): CUDA's mul_mat (q8_0, q4_0 and the tied q8_0 output in the CPU's orders), norms,
// rope, attention and swiglu reproduce the CPU bit for bit, and the boundary copies move bytes: every -ngl, 0 to all
// layers + output and past it, gives the all-CPU logits bit for bit. Bound: 0 differing bits (so measured on the
// H200, 2026-11-26, for every -ngl of both files).
TEST(offload_cuda, exact_mode_every_layer_count_gives_the_cpus_logits_bit_for_bit) {
    TS_REQUIRE_CUDA();
    struct variant {
        type t;
        bool tied;
    };
    for (const variant v : {variant{type::q8_0, false}, variant{type::q4_0, true}}) {
        const std::string path = temp_path(fmt::format("cuda_exact_{}_{}.gguf", type_name(v.t), v.tied));
        const test::tiny_model_spec spec = cuda_spec(v.t, v.tied);
        test::write_tiny_model(path, spec);
        auto m = model::load(path);
        const int64_t L = m->hp.n_layer, V = m->hp.n_vocab;
        const cuda_run ref = run_on(*m, device_type::cpu, -1, true);
        EXPECT_EQ(ref.splits, 1u);
        for (int ngl = -1; ngl <= int(L) + 2; ngl++) {
            const cuda_run got = run_on(*m, device_type::cuda, ngl, true);
            ASSERT_EQ(got.logits.size(), ref.logits.size());
            const agreement a = compare(got, ref, V);
            std::printf("exact %s tied %d -ngl %2d [%s]: %zu splits, %zu of %zu logits differ, max |dlogit| %g, "
                        "top-1 %zu/%zu\n",
                        type_name(v.t), int(v.tied), ngl, got.label.c_str(), got.splits, a.n_diff, ref.logits.size(),
                        a.max_abs, a.same_top1, ref.rows);
            EXPECT_EQ(a.n_diff, 0u) << "-ngl " << ngl << " " << type_name(v.t) << " tied " << v.tied
                                    << ": max |dlogit| " << a.max_abs;
            EXPECT_EQ(got.splits, want_splits(ngl, L, v.tied)) << "-ngl " << ngl << " tied " << v.tied;
            if (ngl >= 0 && ngl <= L)
                EXPECT_EQ(got.label, fmt::format("cuda+cpu ngl {}/{}", ngl, L + 1));
            else
                EXPECT_EQ(got.label, "cuda");
        }
        fs::remove(path);
    }
}

// Fast mode (CUDA's own float orders, fused kernels, CUDA graphs): each -ngl against the all-CPU logits. The integer
// dot products are the CPU's; float sums in other orders move a logit by ulps, and an 8-bit activation rounding that
// flips moves it by ~1e-2 on these random weights, more with each CUDA layer. Measured (H200, 2026-11-26): all on
// CUDA NMSE 4.8e-4, max |dlogit| 0.11, top-1 75/78; a split lies between (7e-8 with the output alone on CUDA, 2.2e-4
// with 4 of 5). Bound: NMSE <= 2e-3 and <= 2x the all-CUDA run's + 1e-6 (a split is no farther from the CPU than
// CUDA alone), the same top-1 on >= 90% of the 78 rows (near ties flip); the split counts of exact mode. Decode steps
// replay their CUDA graph where CUDA holds one split (untied output: 5 of 6 steps).
TEST(offload_cuda, fast_mode_every_layer_count_stays_near_the_cpus_logits) {
    TS_REQUIRE_CUDA();
    auto env_is = [](const char* name, const char* value) {
        const char* e = std::getenv(name);
        return e && std::string(e) == value;
    };
    const char* prof = std::getenv("TESSERA_CUDA_PROFILE");
    const bool graphs = !env_is("TESSERA_CUDA_GRAPHS", "0") && !env_is("TESSERA_CUDA_EXACT", "1") &&
                        !env_is("TESSERA_CUDA_REPLAY", "0") &&
                        !(prof && std::string(prof) != "0" && std::string(prof) != "host");
    for (const bool tied : {false, true}) {
        const std::string path = temp_path(fmt::format("cuda_fast_{}.gguf", tied));
        const test::tiny_model_spec spec = cuda_spec(type::q8_0, tied);
        test::write_tiny_model(path, spec);
        auto m = model::load(path);
        const int64_t L = m->hp.n_layer, V = m->hp.n_vocab;
        const cuda_run ref = run_on(*m, device_type::cpu, -1, false);
        double all_cuda = 0;
        for (int ngl = -1; ngl <= int(L) + 1; ngl++) {
            const cuda_run got = run_on(*m, device_type::cuda, ngl, false);
            ASSERT_EQ(got.logits.size(), ref.logits.size());
            const agreement a = compare(got, ref, V);
            if (ngl == -1) all_cuda = a.nmse;
            std::printf("fast q8_0 tied %d -ngl %2d [%s]: %zu splits, NMSE %.3g, max |dlogit| %g, top-1 %zu/%zu, "
                        "CUDA graphs captured %lld replayed %lld\n",
                        int(tied), ngl, got.label.c_str(), got.splits, a.nmse, a.max_abs, a.same_top1, ref.rows,
                        got.captured, got.reused);
            EXPECT_LE(a.nmse, 2e-3) << "-ngl " << ngl << " tied " << tied;
            EXPECT_LE(a.nmse, 2 * all_cuda + 1e-6) << "-ngl " << ngl << " tied " << tied;
            EXPECT_GE(double(a.same_top1), 0.9 * double(ref.rows)) << "-ngl " << ngl << " tied " << tied;
            EXPECT_EQ(got.splits, want_splits(ngl, L, tied)) << "-ngl " << ngl << " tied " << tied;
            // (tied output with some layers on the CPU: CUDA holds two splits, and each compute captures its graph
            // again, never replaying: a known gap of the CUDA backend's one-graph cache, not checked here)
            if (graphs && ngl != 0 && !(tied && ngl >= 1 && ngl <= L)) {
                EXPECT_GE(got.reused, 4) << "-ngl " << ngl << " tied " << tied << ": decode steps should replay";
            }
        }
        fs::remove(path);
    }
}

// --n-cpu-moe with CUDA on a tiny qwen3moe file, through the session API (the CLI refuses MoE on CUDA until #22's
// CUDA part lands). MoE ops the CUDA backend lacks (top_k, mul_mat_id, ...: all of them when this was written) fall
// back to the CPU, which reads the experts where they are; the router's soft_max may run on CUDA, whose expf is not
// the CPU's even in exact mode, so a routing weight can differ in an ulp. Bound: NMSE <= 1e-6 and the same top-1 on
// >= 95% of the rows, exact mode, for every N; no crash. (Measured on the H200, 2026-11-26: 0 bits differ, 8 splits.)
TEST(offload_cuda, experts_of_the_first_layers_on_the_cpu) {
    TS_REQUIRE_CUDA();
    const std::string path = temp_path("cuda_ncmoe.gguf");
    test::tiny_model_spec spec = cuda_spec(type::q8_0, false);
    spec.arch = "qwen3moe";
    spec.n_layer = 3;
    spec.n_ff = 256;
    spec.n_expert = 4;
    spec.n_expert_used = 2;
    test::write_tiny_model(path, spec);
    auto m = model::load(path);
    const int64_t V = m->hp.n_vocab;
    const cuda_run ref = run_on(*m, device_type::cpu, -1, true);
    // exact mode has no exact mul_mat_id (the fast kernel runs): where CUDA holds experts (n < 3 layers), the bounds of
    // fast mode (NMSE 2e-3, top-1 90%); with every layer's experts on the CPU, the CPU's bits up to the router's soft_max
    for (int n = 0; n <= 4; n++) {
        const cuda_run got = run_on(*m, device_type::cuda, -1, true, n);
        ASSERT_EQ(got.logits.size(), ref.logits.size());
        const agreement a = compare(got, ref, V);
        std::printf("exact qwen3moe --n-cpu-moe %d [%s]: %zu splits, %zu of %zu logits differ, NMSE %.3g, max |dlogit| "
                    "%g, top-1 %zu/%zu\n",
                    n, got.label.c_str(), got.splits, a.n_diff, ref.logits.size(), a.nmse, a.max_abs, a.same_top1,
                    ref.rows);
        const bool cuda_experts = n < m->hp.n_layer;
        EXPECT_LE(a.nmse, cuda_experts ? 2e-3 : 1e-6) << "--n-cpu-moe " << n;
        EXPECT_GE(double(a.same_top1), (cuda_experts ? 0.9 : 0.95) * double(ref.rows)) << "--n-cpu-moe " << n;
    }
    fs::remove(path);
}
