// Several GPUs through a session (llm/model.h, session_params::split / tensor_split / main_gpu) with CPU backends in
// the GPUs' places, so that CI checks them without a GPU:
// - layer split: consecutive layers on consecutive backends, in proportion to the shares, with -ngl too: the logits
//   of one backend bit for bit (every node is computed the same way wherever the boundaries fall);
// - row split (tensor parallelism): every layer's heads and feed-forward width divided over two members whose partial
//   sums meet in all_reduce nodes (a host-memory group here, NCCL on GPUs): close to one backend's logits (only the
//   order of the sums of wo's and ffn_down's inner products changes) for every dense family, prompt and decode steps,
//   and perplexity through the score op; the output layer's vocabulary split over the members and its logits rows
//   gathered (all_gather) where they divide it (llama-spm's 32000 tokens), member 0's alone where not (gpt-2's 50257);
// - mixture-of-experts layers split every expert's width (qwen3moe, gpt-oss with MXFP4 experts, biases and sinks);
// - BitNet's sub-norms sum their squares over the members (tq2_0; i2_s, whose slices carry the tensor's scale);
// - what cannot be split is one clear error.
// With two CUDA devices, the split_cuda.* tests run the same checks on the GPUs (skipped with a message otherwise).
#include "backends/cpu/cpu_backend.h"
#include "ggml-like/error.h"
#include "helpers.h"
#include "llm/device.h"
#include "llm/model.h"
#include "tiny_model.h"

#include <fmt/core.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include <unistd.h>

using namespace tessera;
namespace fs = std::filesystem;

namespace {

using split_mode = session_params::split_mode;

struct temp_file {
    std::string path;
    explicit temp_file(const std::string& name)
        : path((fs::temp_directory_path() / ("tessera_test_split_" + std::to_string(::getpid()) + "_" + name))
                   .string()) {}
    ~temp_file() { fs::remove(path); }
};

// random_model's file of a family (small, real vocabulary), or "" when the vocabulary is missing
std::string make_family(const temp_file& f, const std::string& args) {
    std::string a = args;
    const std::string vocab_dir = test::data_dir() + "/vocab";
    for (size_t p; (p = a.find("@VOCAB")) != std::string::npos;) a.replace(p, 6, vocab_dir);
    const size_t vp = a.find("--vocab ") + 8;
    if (!fs::exists(a.substr(vp, a.find(' ', vp) - vp))) return "";
    const std::string cmd = std::string(TESSERA_RANDOM_MODEL) + " " + a + " " + f.path + " 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) return "";
    return f.path;
}

std::function<std::unique_ptr<backend>(int)> cpu_gpus() {
    return [](int) { return std::make_unique<cpu::cpu_backend>(cpu::cpu_options{1, false}); };
}

struct result {
    std::vector<float> logits; // the prompt's every position, then each decode step's
    size_t splits = 0, members = 0;
    std::string label;
};

// a prompt of 21 tokens in batches of 16 (or n_prompt in batches of n_batch), then 6 decode steps (the graph
// repeats from the second)
result run(const model& m, session_params p, int n_prompt = 21, int n_batch = 16) {
    p.n_ctx = n_prompt + 43;
    p.n_batch = n_batch;
    p.n_threads = 1;
    session s(m, p);
    result r;
    r.logits = test::prompt_then_steps(s, n_prompt);
    r.splits = s.n_splits();
    r.members = s.n_members();
    r.label = s.backend_label();
    return r;
}

session_params fake_gpus(int n, split_mode mode, std::vector<float> shares = {}) {
    session_params p;
    p.gpu_backend = cpu_gpus();
    p.n_gpus = n;
    p.split = mode;
    p.tensor_split = std::move(shares);
    return p;
}

// the largest |a - b| relative to the largest |b| of each logits row
double worst_row_error(const std::vector<float>& a, const std::vector<float>& b, int64_t n_vocab) {
    double worst = 0;
    for (size_t r = 0; r + size_t(n_vocab) <= b.size(); r += size_t(n_vocab)) {
        double diff = 0, mag = 0;
        for (size_t i = r; i < r + size_t(n_vocab); i++) {
            diff = std::max(diff, double(std::fabs(a[i] - b[i])));
            mag = std::max(mag, double(std::fabs(b[i])));
        }
        worst = std::max(worst, diff / std::max(mag, 1e-30));
    }
    return worst;
}

} // namespace

TEST(split, layers_over_backends_give_the_logits_of_one_backend) {
    for (bool tied : {false, true}) {
        temp_file f(tied ? "layer_tied.gguf" : "layer.gguf");
        test::tiny_model_spec spec;
        spec.n_layer = 4;
        spec.tied_output = tied;
        test::write_tiny_model(f.path, spec);
        auto m = model::load(f.path);
        session_params one;
        one.gpu_backend = cpu_gpus();
        const result ref = run(*m, one);
        EXPECT_EQ(ref.splits, 1u);
        // shares: equal over 2 and 3, 3:1 (layers 0-3 on the first, the output on the second), a GPU left out
        const std::vector<std::pair<int, std::vector<float>>> cases = {
            {2, {}}, {3, {}}, {2, {3.0f, 1.0f}}, {3, {1.0f, 0.0f, 1.0f}}, {2, {1.0f, 1.0f}}};
        for (const auto& [n, shares] : cases) {
            const result got = run(*m, fake_gpus(n, split_mode::layer, shares));
            ASSERT_EQ(got.logits.size(), ref.logits.size());
            EXPECT_EQ(std::memcmp(got.logits.data(), ref.logits.data(), ref.logits.size() * 4), 0)
                << n << " backends, tied " << tied;
            const size_t used = shares.empty() ? size_t(n) : size_t(std::count_if(shares.begin(), shares.end(),
                                                                                   [](float x) { return x > 0; }));
            // tied: the token embeddings live with the output on the last backend, so the first layers' backend is
            // a second split
            EXPECT_EQ(got.splits, used + (tied ? 1 : 0)) << n << " backends, tied " << tied;
            EXPECT_EQ(got.label, fmt::format("cpu x{} layer", used));
        }
        // with -ngl 3 (the last two layers and the output): the CPU, then the two GPUs
        session_params p = fake_gpus(2, split_mode::layer);
        p.n_gpu_layers = 3;
        const result got = run(*m, p);
        EXPECT_EQ(std::memcmp(got.logits.data(), ref.logits.data(), ref.logits.size() * 4), 0) << "-ngl 3, tied " << tied;
        EXPECT_EQ(got.splits, tied ? 4u : 3u); // tied: the embeddings live with the output, after the CPU's layers
        EXPECT_EQ(got.label, "cpu x2 layer+cpu ngl 3/5");
    }
}

// The CPU group's all_reduce (what the CPU stand-ins' all_reduce nodes run): three members, one of them in place, the
// others into poisoned outputs, several calls in a row: every member ends with ((x0 + x1) + x2), the same bits.
TEST(split, host_group_sums_in_rank_order) {
    constexpr int R = 3;
    constexpr size_t n = 1001; // not a multiple of the members: uneven slices
    cpu::host_group g(R);
    for (int call = 0; call < 4; call++) {
        std::vector<std::vector<float>> x(R), y(R);
        for (int r = 0; r < R; r++) {
            x[size_t(r)] = test::random_normal(n, uint32_t(100 * call + r), 1e3f);
            y[size_t(r)].assign(n, 0.0f);
            test::poison(y[size_t(r)]);
        }
        std::vector<float> want(n);
        for (size_t i = 0; i < n; i++) want[i] = (x[0][i] + x[1][i]) + x[2][i];
        std::vector<std::thread> threads;
        for (int r = 0; r < R; r++)
            threads.emplace_back([&, r] {
                float* out = r == 1 ? x[1].data() : y[size_t(r)].data(); // member 1 in place
                g.all_reduce(r, x[size_t(r)].data(), out, n);
            });
        for (std::thread& t : threads) t.join();
        for (int r = 0; r < R; r++) {
            const std::vector<float>& got = r == 1 ? x[1] : y[size_t(r)];
            EXPECT_EQ(std::memcmp(got.data(), want.data(), n * sizeof(float)), 0) << "member " << r << ", call " << call;
        }
    }
}

// The CPU group's all_gather (the split output layer's logits rows): three members into poisoned outputs, several
// calls of different shapes in a row: every member ends with the members' rows side by side in rank order.
TEST(split, host_group_gathers_in_rank_order) {
    constexpr int R = 3;
    cpu::host_group g(R);
    for (int call = 0; call < 4; call++) {
        const size_t part = 37 + size_t(call) * 11, rows = 1 + size_t(call);
        std::vector<std::vector<float>> x(R), y(R);
        for (int r = 0; r < R; r++) {
            x[size_t(r)] = test::random_normal(part * rows, uint32_t(100 * call + r), 1.0f);
            y[size_t(r)].assign(part * rows * R, 0.0f);
            test::poison(y[size_t(r)]);
        }
        std::vector<float> want(part * rows * R);
        for (size_t row = 0; row < rows; row++)
            for (int r = 0; r < R; r++)
                for (size_t i = 0; i < part; i++)
                    want[row * part * R + size_t(r) * part + i] = x[size_t(r)][row * part + i];
        std::vector<std::thread> threads;
        for (int r = 0; r < R; r++)
            threads.emplace_back([&, r] { g.all_gather(r, x[size_t(r)].data(), y[size_t(r)].data(), part, rows); });
        for (std::thread& t : threads) t.join();
        for (int r = 0; r < R; r++)
            EXPECT_EQ(std::memcmp(y[size_t(r)].data(), want.data(), want.size() * sizeof(float)), 0)
                << "member " << r << ", call " << call;
    }
}

// Layer dumps over a split (compare --layers, AWQ calibration): every backend's nodes reach the session's callback
// with the backend that holds them, and read through it they are one backend's values.
TEST(split, eval_callback_sees_every_backends_nodes) {
    temp_file f("callback.gguf");
    test::tiny_model_spec spec;
    spec.n_layer = 4;
    test::write_tiny_model(f.path, spec);
    auto m = model::load(f.path);
    auto dump = [&](session_params p, std::set<const backend*>* holders) {
        p.n_ctx = 64;
        p.n_threads = 1;
        session s(*m, p);
        std::map<std::string, std::vector<float>> out;
        s.set_eval_callback([&](backend& be, const tensor& t) {
            if (std::strncmp(t.name, "l_out-", 6) != 0) return;
            std::vector<float> v(size_t(t.n_elements()));
            be.get(t, v.data(), 0, v.size() * sizeof(float));
            out[t.name] = std::move(v);
            holders->insert(&be);
        });
        std::vector<token> prompt;
        for (int i = 0; i < 9; i++) prompt.push_back(token((i * 7919 + 13) % m->hp.n_vocab));
        s.decode(prompt);
        s.set_eval_callback({});
        return out;
    };
    std::set<const backend*> one_holders, split_holders;
    session_params one;
    one.gpu_backend = cpu_gpus();
    const auto ref = dump(one, &one_holders);
    session_params p = fake_gpus(2, split_mode::layer);
    p.n_gpu_layers = 4; // layer 0 on the CPU, 1-2 on the first stand-in, 3 and the output on the second
    const auto got = dump(p, &split_holders);
    ASSERT_EQ(ref.size(), 4u);
    ASSERT_EQ(got.size(), ref.size());
    for (const auto& [name, v] : ref) EXPECT_EQ(got.at(name), v) << name;
    EXPECT_EQ(one_holders.size(), 1u);
    EXPECT_EQ(split_holders.size(), 3u);
}

namespace {

struct family_case {
    const char* name;
    const char* args; // random_model's; heads, KV heads and widths even
    // NMSE and worst-row bounds: the order of two partial sums moves f32 results by an ulp or so; where f32 results
    // then feed int8 activations (gpt-oss-mxfp4: f32 attention, MXFP4 experts), such a move can flip a rounding
    double nmse = 1e-8, worst = 1e-3, nll = 1e-3;
    double same_top1 = 1.0; // the share of rows whose argmax must be one backend's
};
const family_case families[] = {
    {"llama-f32", "--arch llama --vocab @VOCAB/ggml-vocab-llama-spm.gguf 128,2,4,2,256,300 f32"},
    {"llama-q8_0", "--arch llama --vocab @VOCAB/ggml-vocab-llama-spm.gguf 128,2,4,2,256,300 q8_0"},
    {"llama-q4_0", "--arch llama --vocab @VOCAB/ggml-vocab-llama-spm.gguf 128,2,4,2,256,300 q4_0"},
    {"qwen2-q8_0", "--arch qwen2 --vocab @VOCAB/ggml-vocab-gpt-2.gguf 128,2,4,2,256,300 q8_0"},
    {"qwen3-q8_0", "--arch qwen3 --vocab @VOCAB/ggml-vocab-gpt-2.gguf 128,2,4,2,256,300,64 q8_0"},
    {"gemma3-q8_0", "--arch gemma3 --vocab @VOCAB/ggml-vocab-llama-spm.gguf 128,4,4,2,256,300,64 q8_0"},
    {"phi3-q8_0", "--arch phi3 --vocab @VOCAB/ggml-vocab-llama-spm.gguf 128,2,4,2,256,300 q8_0"},
    // mixture of experts: each expert's width split (8 experts, 3 / 4 chosen, 64 wide)
    {"qwen3moe-q8_0", "--arch qwen3moe --experts 8,3 --vocab @VOCAB/ggml-vocab-gpt-2.gguf 128,2,4,2,64,300,64 q8_0"},
    {"gpt-oss-mxfp4", "--arch gpt-oss --experts 8,4 --vocab @VOCAB/ggml-vocab-gpt-2.gguf 128,2,4,2,64,300,64 f32",
     1e-5, 1e-2}, // measured 1.8e-6 / 4.4e-3
    {"gpt-oss-q8_0", "--arch gpt-oss --experts 8,4 --vocab @VOCAB/ggml-vocab-gpt-2.gguf 128,2,4,2,64,300,64 q8_0"},
    {"gpt-oss-f32", "--arch gpt-oss --experts 8,4 --expert-type f32 --vocab @VOCAB/ggml-vocab-gpt-2.gguf 128,2,4,2,64,300,64 f32"},
    // BitNet: the sub-norms' sums of squares meet in an all_reduce (rms_norm_part). Ternary matrices take int8
    // activations, where a last-bit change of a sum flips roundings, and one flip moves a dot by 1/127 of its scale:
    // TQ2_0 (q8_K blocks of 256, whole in each member) measured NMSE 9.1e-6, worst row 8.1e-3, NLL 1.4e-3; with the
    // sums left out (each member's own width) 1.6e-3 / 8.3e-2 / 9.8e-3. I2_S: each slice carries the tensor's scale,
    // and each member quantizes its part of the sub-norm's output with its own absmax (BitNet's one scale a token is
    // one scale a member's part), so the split is another rounding of the same model: measured NMSE 4.6e-4 / 6.0e-4,
    // worst row 3.4e-2 / 3.6e-2, NLL 5.1e-3 / 7.7e-3, one of 27 rows' argmax moved
    {"bitnet-tq2_0", "--arch bitnet --vocab @VOCAB/ggml-vocab-gpt-2.gguf 512,2,4,2,1024,300 tq2_0", 5e-5, 2e-2, 5e-3},
    {"bitnet-i2_s", "--arch bitnet --vocab @VOCAB/ggml-vocab-gpt-2.gguf 256,2,4,2,512,300 i2_s", 2e-3, 8e-2, 2e-2, 0.9},
    {"bitnet-b1.58-i2_s", "--arch bitnet-b1.58 --vocab @VOCAB/ggml-vocab-gpt-2.gguf 256,2,4,2,512,300 i2_s", 2e-3,
     8e-2, 2e-2, 0.9},
};

} // namespace

class split_row : public ::testing::TestWithParam<family_case> {};

// Two members, each with half the heads and half the width: the logits of one backend up to the order of the partial
// sums (measured on this VM: the quantized files bit for bit, f32 NMSE 6e-10 and at most 9e-5 of a row's largest
// logit; bounds 1e-8 and 1e-3), argmax equal on every row, and the same perplexity words through the score op.
TEST_P(split_row, two_members_give_one_backends_logits) {
    const family_case& c = GetParam();
    temp_file f(std::string(c.name) + ".gguf");
    if (make_family(f, c.args).empty()) GTEST_SKIP() << "vocabulary or random_model missing for " << c.name;
    auto m = model::load(f.path);
    session_params one;
    one.gpu_backend = cpu_gpus();
    const result ref = run(*m, one);
    const result got = run(*m, fake_gpus(2, split_mode::row));
    EXPECT_EQ(got.members, 2u);
    EXPECT_EQ(got.label, "cpu x2 row");
    ASSERT_EQ(got.logits.size(), ref.logits.size());
    const double err = worst_row_error(got.logits, ref.logits, m->hp.n_vocab);
    std::printf("%s: row split vs one backend: worst row error %.2e, NMSE %.2e\n", c.name, err,
                test::nmse(got.logits.data(), ref.logits.data(), ref.logits.size()));
    EXPECT_LE(err, c.worst) << c.name;
    EXPECT_LE(test::nmse(got.logits.data(), ref.logits.data(), ref.logits.size()), c.nmse) << c.name;
    size_t same_argmax = 0, rows = ref.logits.size() / size_t(m->hp.n_vocab);
    for (size_t r = 0; r < rows; r++) {
        auto a = got.logits.begin() + ptrdiff_t(r * size_t(m->hp.n_vocab));
        auto b = ref.logits.begin() + ptrdiff_t(r * size_t(m->hp.n_vocab));
        same_argmax += std::max_element(a, a + m->hp.n_vocab) - a == std::max_element(b, b + m->hp.n_vocab) - b;
    }
    EXPECT_GE(double(same_argmax), c.same_top1 * double(rows)) << c.name;

    // perplexity words: the NLL of every row of two packed sequences
    std::vector<token> toks;
    for (int i = 0; i < 32; i++) toks.push_back(token((i * 104729 + 7) % m->hp.n_vocab));
    std::vector<int32_t> targets(toks.begin() + 1, toks.end());
    targets.push_back(toks[0]);
    auto nll = [&](session_params p) {
        p.n_ctx = 64;
        p.n_threads = 1;
        session s(*m, p);
        auto w = s.score_from(toks, 0, targets, score_mode::nll, {}, 16);
        std::vector<double> out;
        for (size_t r = 0; r < toks.size(); r++) {
            double d = 0;
            std::memcpy(&d, &w[r * size_t(score_row_words(score_mode::nll, m->hp.n_vocab))], sizeof d);
            out.push_back(d);
        }
        return out;
    };
    const std::vector<double> a = nll(fake_gpus(2, split_mode::row)), b = nll(one);
    ASSERT_EQ(a.size(), b.size());
    double nll_err = 0;
    for (size_t i = 0; i < a.size(); i++) {
        nll_err = std::max(nll_err, std::fabs(a[i] - b[i]) / std::max(1.0, std::fabs(b[i])));
        EXPECT_NEAR(a[i], b[i], c.nll * std::max(1.0, std::fabs(b[i]))) << i;
    }
    std::printf("%s: row split vs one backend: NLL error %.2e\n", c.name, nll_err);
}

INSTANTIATE_TEST_SUITE_P(all, split_row, ::testing::ValuesIn(families),
                         [](const auto& info) {
                             std::string n = info.param.name;
                             std::replace(n.begin(), n.end(), '-', '_');
                             std::replace(n.begin(), n.end(), '.', '_');
                             return n;
                         });

namespace {

std::string message_of(const model& m, const session_params& p) {
    try {
        session s(m, p);
    } catch (const error& e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST(split, what_cannot_be_split_is_one_clear_error) {
    temp_file f("errors.gguf");
    test::tiny_model_spec spec; // 4 heads, 2 KV heads, width 128
    test::write_tiny_model(f.path, spec);
    auto m = model::load(f.path);
    auto message = [&](const session_params& p) { return message_of(*m, p); };
    EXPECT_NE(message(fake_gpus(3, split_mode::row)).find("do not divide evenly"), std::string::npos);
    EXPECT_NE(message(fake_gpus(4, split_mode::row)).find("do not divide evenly"), std::string::npos);
    EXPECT_NE(message(fake_gpus(2, split_mode::row, {3.0f, 1.0f})).find("equal --tensor-split"), std::string::npos);
    EXPECT_NE(message(fake_gpus(2, split_mode::layer, {1.0f, 1.0f, 1.0f})).find("3 shares for 2 GPUs"),
              std::string::npos);
    EXPECT_NE(message(fake_gpus(2, split_mode::layer, {0.0f, 0.0f})).find("share of 0"), std::string::npos);
    EXPECT_NE(message(fake_gpus(2, split_mode::layer, {-1.0f})).find("not a share"), std::string::npos);
    session_params bad_main = fake_gpus(2, split_mode::none);
    bad_main.main_gpu = 2;
    EXPECT_NE(message(bad_main).find("--main-gpu 2"), std::string::npos);
    session_params with_cpu = fake_gpus(2, split_mode::row);
    with_cpu.n_gpu_layers = 2;
    EXPECT_NE(message(with_cpu).find("does not combine with -ngl"), std::string::npos);

    // experts 96 wide in q4_0 (blocks of 32) over 2 members: 48 columns each, not whole blocks
    temp_file moe("errors_moe.gguf");
    if (!make_family(moe, "--arch qwen3moe --experts 4,2 --vocab @VOCAB/ggml-vocab-gpt-2.gguf 128,2,4,2,96,300,64 "
                          "q4_0")
             .empty()) {
        auto mm = model::load(moe.path);
        EXPECT_NE(message_of(*mm, fake_gpus(2, split_mode::row)).find("not whole blocks"), std::string::npos);
    }
}

// ---- two CUDA devices ----

TEST(split_cuda, layer_and_row_agree_with_one_gpu) {
    if (gpu_count() < 2) GTEST_SKIP() << "fewer than 2 CUDA devices (" << gpu_count() << ")";
    for (const family_case& c : {families[1], families[4], families[5], families[7], families[9], families[11],
                                 families[12]}) {
        temp_file f(std::string("cuda_") + c.name + ".gguf");
        if (make_family(f, c.args).empty()) GTEST_SKIP() << "vocabulary or random_model missing";
        auto m = model::load(f.path);
        session_params one;
        one.device = device_type::cuda;
        const result ref = run(*m, one);
        for (split_mode mode : {split_mode::layer, split_mode::row}) {
            session_params p;
            p.device = device_type::cuda;
            p.split = mode;
            const result got = run(*m, p);
            EXPECT_EQ(got.label, mode == split_mode::row ? "cuda x2 row" : "cuda x2 layer");
            const double err = worst_row_error(got.logits, ref.logits, m->hp.n_vocab);
            std::printf("%s: CUDA %s split vs one GPU: worst row error %.2e\n", c.name,
                        mode == split_mode::row ? "row" : "layer", err);
            // layer: the same kernels on each GPU (bit for bit but for graph-capture-independent choices); row: the
            // partial sums' order, and each member's GEMV shapes (BitNet: the CPU's bounds, split_row above)
            EXPECT_LE(err, mode == split_mode::layer ? 1e-6 : std::max(5e-3, c.worst)) << c.name;
        }
        // exact mode (the CPU's float order): on these quantized files the CPU's row split gives one backend's logits
        // bit for bit (split_row above), so the GPUs' must too (not with experts: exact mode has no exact
        // mul_mat_id; not BitNet's ternary matrices, which have no exact kernels)
        if (m->hp.n_expert > 0 || c.worst > 1e-3) continue;
        session_params ex = one;
        ex.exact = true;
        const result ex_ref = run(*m, ex);
        ex.split = split_mode::row;
        const result ex_row = run(*m, ex);
        ASSERT_EQ(ex_row.logits.size(), ex_ref.logits.size());
        EXPECT_EQ(std::memcmp(ex_row.logits.data(), ex_ref.logits.data(), ex_ref.logits.size() * 4), 0)
            << c.name << ": exact mode, row split against one GPU";
        // a batch of 70 tokens: its sums through NCCL (more than p2p.cuh's 64 rows), the decode steps' over peer memory
        ex.split = split_mode::none;
        const result long_ref = run(*m, ex, 70, 80);
        ex.split = split_mode::row;
        const result long_row = run(*m, ex, 70, 80);
        ASSERT_EQ(long_row.logits.size(), long_ref.logits.size());
        EXPECT_EQ(std::memcmp(long_row.logits.data(), long_ref.logits.data(), long_ref.logits.size() * 4), 0)
            << c.name << ": exact mode, row split of a 70-token batch against one GPU";
    }
}
