// -ngl through a session (llm/model.h, session_params::n_gpu_layers) with a second CPU backend in the GPU's place:
// every split point, 0 to all layers, gives the logits of one backend bit for bit (the CPU computes each node the same
// way wherever the layer boundary falls), prompt and decode steps, caches included; each layer's cache lives with it.
// On a GPU machine tests/bench/cuda_check.sh runs the same with CUDA (tessera run -ngl N).
#include "backends/cpu/cpu_backend.h"
#include "llm/model.h"
#include "tiny_model.h"

#include <fmt/core.h>
#include <gtest/gtest.h>

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
    p.offload_backend = [] { return std::make_unique<cpu::cpu_backend>(cpu::cpu_options{1, false}); };
    session s(m, p);
    std::vector<token> prompt;
    for (int i = 0; i < 21; i++) prompt.push_back(token((i * 7919 + 13) % m.hp.n_vocab));
    auto l = s.decode(prompt, true);
    std::vector<float> out(l.begin(), l.end());
    for (int i = 0; i < 6; i++) {
        const token t = token((i * 31 + 5) % m.hp.n_vocab);
        auto d = s.decode(std::span<const token>(&t, 1));
        out.insert(out.end(), d.begin(), d.end());
    }
    *splits = s.n_splits();
    if (n_gpu_layers >= 1 && n_gpu_layers <= m.hp.n_layer) {
        EXPECT_EQ(s.backend_label(), fmt::format("cpu+cpu ngl {}/{}", n_gpu_layers, m.hp.n_layer + 1));
    }
    return out;
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

// --n-cpu-moe on a tiny qwen3moe file: the experts of the first N layers on the CPU, the rest (attention, routers,
// later experts) offloaded; the logits of one backend for every N
TEST(offload, experts_of_the_first_layers_on_the_cpu) {
    const std::string path = temp_path("ncmoe.gguf");
    test::tiny_model_spec spec;
    spec.arch = "qwen3moe";
    spec.n_layer = 3;
    spec.n_expert = 4;
    spec.n_expert_used = 2;
    test::write_tiny_model(path, spec);
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
