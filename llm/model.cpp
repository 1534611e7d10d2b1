// model.cpp: loading a GGUF model (architecture dispatch, tensor checks) and the session that evaluates batches.
#include "llm/model.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "ggml-like/ops.h"
#include "llm/arch/arch.h"
#include "quant/quantize.h"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

#include <unistd.h>

namespace tessera {

// Tensors of tessera's own types (ids >= 1024, e.g. awq4) only appear in files marked with tessera.format (written
// by `tessera quantize`, quant/quantize.h); a file without the key claims to be a plain llama.cpp GGUF and is refused.
static void check_tessera_types(const gguf_file& f) {
    const std::optional<int64_t> version = f.get_int(tessera_format_key);
    if (version && (*version < 1 || *version > tessera_format_version))
        throw error(fmt::format("{}: {} = {} is not supported (this tessera reads version {})", f.path(),
                                tessera_format_key, *version, tessera_format_version));
    if (version) return;
    for (const auto& t : f.tensors())
        if (t.type_id >= 1024)
            throw error(fmt::format("{}: tensor {} has tessera's own type {}, but the file has no {} key (it claims to "
                                    "be a plain llama.cpp GGUF)",
                                    f.path(), t.name, find_type(t.type_id) ? find_type(t.type_id)->name : "?",
                                    tessera_format_key));
}

model::model(gguf_file f) : file(std::move(f)), voc(vocab::from_gguf(file)) {}

std::unique_ptr<model> model::load(const std::string& path, const progress_fn& progress) {
    if (!std::filesystem::exists(path)) throw error(fmt::format("{}: no such file", path));
    gguf_file f = gguf_file::open(path);
    check_tessera_types(f);
    const std::string arch = f.get_string("general.architecture").value_or("");
    if (arch.empty()) throw error(fmt::format("{}: missing general.architecture", path));
    const arch::family* fam = arch::find_family(arch);
    if (!fam)
        throw error(fmt::format("{}: architecture '{}' is not supported (supported: {})", path, arch,
                                arch::family_names()));

    std::unique_ptr<model> m(new model(std::move(f)));
    m->path = path;
    m->arch = arch;
    m->name = m->file.get_string("general.name").value_or(std::filesystem::path(path).filename().string());
    m->used_.assign(m->file.tensors().size(), false);
    m->family = fam;
    fam->load(*m);

    // every tensor in the file must have been claimed (a stray tensor means a layout we do not understand)
    for (size_t i = 0; i < m->used_.size(); i++)
        if (!m->used_[i])
            throw error(fmt::format("{}: unexpected tensor {} for architecture {}", path, m->file.tensors()[i].name,
                                    arch));
    if (progress) progress(1.0f);
    return m;
}

tensor* model::require(const std::string& tname, std::initializer_list<int64_t> ne, bool required) {
    const auto& infos = file.tensors();
    const gguf_tensor_info* info = file.find_tensor(tname);
    if (!info) {
        if (required) throw error(fmt::format("{}: missing tensor {}", path, tname));
        return nullptr;
    }
    used_[size_t(info - infos.data())] = true;
    int64_t want[4] = {1, 1, 1, 1};
    int i = 0;
    for (int64_t d : ne) want[i++] = d;
    bool ok = true;
    for (int d = 0; d < 4; d++) ok &= (want[d] < 0 || want[d] == info->ne[d]);
    auto shape = [](const int64_t* x) {
        int n = 4;
        while (n > 1 && x[n - 1] == 1) n--;
        std::string s = x[0] < 0 ? "?" : std::to_string(x[0]);
        for (int d = 1; d < n; d++) s += " x " + (x[d] < 0 ? std::string("?") : std::to_string(x[d]));
        return s;
    };
    if (!ok)
        throw error(fmt::format("{}: tensor {}: expected shape {}, got {}", path, tname, shape(want), shape(info->ne)));
    const type_traits* tt = find_type(info->type_id);
    if (!tt || !cpu::find_cpu_ops(info->t()))
        throw error(fmt::format("{}: tensor {} has type {} which tessera cannot compute yet", path, tname,
                                tt ? tt->name : fmt::format("id {}", info->type_id)));
    tensor* t = weights.new_tensor(info->t(), info->ne, 4);
    t->data = const_cast<uint8_t*>(info->data);
    t->flags |= flag_param;
    t->set_name(tname);
    params.push_back(t);
    n_params += uint64_t(info->n_elements());
    n_bytes += info->size;
    return t;
}

std::vector<tensor*> model::split_rows(tensor* w, std::initializer_list<int64_t> rows) {
    int64_t total = 0;
    for (int64_t r : rows) total += r;
    const bool vec = w && w->ne[1] == 1 && w->ne[2] == 1 && w->ne[3] == 1 && rows.size() > 1 && total == w->ne[0];
    TS_ASSERT(w && (w->flags & flag_param) && w->ne[2] == 1 && w->ne[3] == 1 && (vec || total == w->ne[1]));
    TS_ASSERT(!vec || w->t == type::f32);
    if (type_info(w->t).tail_bytes)
        throw error(fmt::format("{}: tensor {} of type {} holds several matrices in one, which this type's per-tensor "
                                "scale cannot be split for",
                                path, w->name, type_name(w->t)));
    auto it = std::find(params.begin(), params.end(), w);
    TS_ASSERT(it != params.end());
    params.erase(it);
    std::vector<tensor*> parts;
    int64_t first = 0;
    for (int64_t r : rows) {
        tensor* t = vec ? weights.new_tensor(w->t, {r}) : weights.new_tensor(w->t, {w->ne[0], r});
        t->data = static_cast<uint8_t*>(w->data) + size_t(first) * (vec ? w->nb[0] : w->nb[1]);
        t->flags |= flag_param;
        t->set_name(fmt::format("{}[{}:{}]", w->name, first, first + r));
        params.push_back(t);
        parts.push_back(t);
        first += r;
    }
    return parts;
}

bool hparams::uniform() const {
    for (int64_t il = 0; il < n_layer; il++)
        if (n_head_at(il) != n_head || n_head_kv_at(il) != n_head_kv || n_ff_at(il) != n_ff) return false;
    return true;
}

std::string model::type_summary() const {
    std::map<std::string, uint64_t> bytes;
    for (const auto& t : file.tensors())
        if (t.n_dims >= 2) bytes[type_info(t.t()).name] += t.size;
    std::string best;
    uint64_t most = 0;
    for (auto& [k, v] : bytes)
        if (v > most) {
            most = v;
            best = k;
        }
    return best;
}

struct session::batch_graph {
    context ctx;
    graph g;
    arch::batch_inputs in;
    tensor* logits = nullptr;  // null on tensor-parallel members past the first
    int score = -1;            // the score_mode of the score node, -1 without one
    tensor* targets = nullptr; // its inputs and result
    tensor* base = nullptr;
    tensor* scores = nullptr;
};

// A thread per tensor-parallel member past the first: run(f) calls f(r) for every member at once (member 0 on the
// calling thread) and returns when all are done, rethrowing the first error. Their graphs meet in all_reduce nodes,
// so they must run at the same time.
class session::rank_threads {
  public:
    explicit rank_threads(int n) : n_(n), errors_(size_t(n)) {
        for (int r = 1; r < n; r++) threads_.emplace_back([this, r] { loop(r); });
    }
    ~rank_threads() {
        {
            std::lock_guard lk(mu_);
            stop_ = true;
            gen_++;
        }
        cv_.notify_all();
        for (std::thread& t : threads_) t.join();
    }
    void run(const std::function<void(int)>& f) {
        {
            std::lock_guard lk(mu_);
            job_ = &f;
            pending_ = n_ - 1;
            std::fill(errors_.begin(), errors_.end(), nullptr);
            gen_++;
        }
        cv_.notify_all();
        try {
            f(0);
        } catch (...) {
            errors_[0] = std::current_exception();
        }
        {
            std::unique_lock lk(mu_);
            done_.wait(lk, [&] { return pending_ == 0; });
            job_ = nullptr;
        }
        for (const std::exception_ptr& e : errors_)
            if (e) std::rethrow_exception(e);
    }

  private:
    void loop(int r) {
        uint64_t seen = 0;
        for (;;) {
            const std::function<void(int)>* job = nullptr;
            {
                std::unique_lock lk(mu_);
                cv_.wait(lk, [&] { return gen_ != seen; });
                seen = gen_;
                if (stop_) return;
                job = job_;
            }
            std::exception_ptr err;
            try {
                (*job)(r);
            } catch (...) {
                err = std::current_exception();
            }
            std::lock_guard lk(mu_);
            errors_[size_t(r)] = err;
            if (--pending_ == 0) done_.notify_one();
        }
    }
    int n_;
    std::vector<std::exception_ptr> errors_;
    std::vector<std::thread> threads_;
    std::mutex mu_;
    std::condition_variable cv_, done_;
    const std::function<void(int)>* job_ = nullptr;
    int pending_ = 0;
    uint64_t gen_ = 0;
    bool stop_ = false;
};

session::session(const model& m, const session_params& p) : m_(m), p_(p) {
    const int64_t n_layer = m.hp.n_layer;
    if (p.n_cpu_moe < 0) throw error(fmt::format("--n-cpu-moe {} must not be negative", p.n_cpu_moe));
    if (p_.n_batch < 1) throw error(fmt::format("batch size {} must be positive", p_.n_batch));
    int64_t n_ctx = p.n_ctx > 0 ? p.n_ctx : std::min<int64_t>(m.hp.n_ctx_train, 4096);
    if (n_ctx < 1 || n_ctx > (int64_t(1) << 24)) throw error(fmt::format("context size {} is out of range", n_ctx));

    // the GPUs and their shares (llama.cpp's --split-mode, --tensor-split, --main-gpu)
    const bool gpu = p.device == device_type::cuda || bool(p.gpu_backend);
    using split_mode = session_params::split_mode;
    std::vector<int> gpus;
    std::vector<float> shares;
    if (gpu) {
        const int count = p.gpu_backend ? p.n_gpus : gpu_count();
        if (p.main_gpu < 0 || p.main_gpu >= count)
            throw error(fmt::format("--main-gpu {}: there {} {} GPU{} (0..{})", p.main_gpu, count == 1 ? "is" : "are",
                                    count, count == 1 ? "" : "s", count - 1));
        if (p.tensor_split.size() > size_t(count))
            throw error(fmt::format("--tensor-split gives {} shares for {} GPU{}", p.tensor_split.size(), count,
                                    count == 1 ? "" : "s"));
        for (float x : p.tensor_split)
            if (!std::isfinite(x) || x < 0.0f)
                throw error(fmt::format("--tensor-split: {} is not a share (a number >= 0)", x));
        if (p.split == split_mode::none) {
            gpus = {p.main_gpu};
            shares = {1.0f};
        } else {
            for (int i = 0; i < count; i++) {
                const float x = p.tensor_split.empty() ? 1.0f : i < int(p.tensor_split.size()) ? p.tensor_split[size_t(i)]
                                                                                               : 0.0f;
                if (x > 0.0f) gpus.push_back(i), shares.push_back(x);
            }
            if (gpus.empty()) throw error("--tensor-split gives every GPU a share of 0");
        }
    }
    const bool row = p.split == split_mode::row && gpus.size() > 1;
    const bool some_layers = p.n_gpu_layers >= 0 && p.n_gpu_layers <= n_layer;
    const bool with_cpu = gpu && (some_layers || (p.n_cpu_moe > 0 && m.hp.n_expert > 0));
    if (row && with_cpu)
        throw error("--split-mode row keeps every layer on the GPUs: it does not combine with -ngl below the layer "
                    "count or --n-cpu-moe");
    if (row) {
        for (float x : shares)
            if (x != shares[0])
                throw error("--split-mode row divides every layer evenly: give the GPUs equal --tensor-split shares");
        // member 0 (the output layer) is the main GPU
        if (const auto it = std::find(gpus.begin(), gpus.end(), p.main_gpu); it != gpus.end())
            std::rotate(gpus.begin(), it, it + 1);
    }
    n_gpus_used_ = std::max<int>(1, int(gpus.size()));
    if (!gpu) {
        backends_.push_back(make_backend(p.device, p.n_threads, p.exact));
    } else {
        if (with_cpu) {
            backends_.push_back(make_backend(device_type::cpu, p.n_threads));
            cpu_ = backends_.back().get();
        }
        for (int g : gpus)
            backends_.push_back(p.gpu_backend ? p.gpu_backend(g) : make_backend(device_type::cuda, p.n_threads, p.exact, g));
    }

    if (n_ctx > m.hp.n_ctx_train)
        fmt::print(stderr, "warning: context {} is larger than the {} tokens {} was trained on; text past {} tokens "
                   "may degrade\n", n_ctx, m.hp.n_ctx_train, m.name, m.hp.n_ctx_train);
    // K and V, f16, per layer and position. Checked against the machine's memory first: the allocation itself would
    // succeed (pages are committed lazily) and the process be killed once the context fills.
    const double ram_gib = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE)) / double(1 << 30);
    auto init_kv = [&](rank& r, const hparams& hp, const std::vector<backend*>& kv_be) {
        std::vector<int64_t> kv_widths;
        for (int64_t il = 0; il < n_layer; il++) kv_widths.push_back(hp.n_embd_kv(il));
        const double kv_gib = double(kv_cache::bytes_for(kv_widths, n_ctx)) / double(1 << 30);
        auto no_room = [&] {
            return error(fmt::format("the KV cache for a context of {} tokens needs {:.1f} GiB, more than the {:.1f} "
                                     "GiB of memory here (lower -c)",
                                     n_ctx, kv_gib, ram_gib));
        };
        if (!gpu && ram_gib > 0 && kv_gib > ram_gib) throw no_room();
        try {
            r.kv.init(kv_be, kv_widths, n_ctx);
        } catch (const std::bad_alloc&) {
            throw no_room();
        }
    };

    if (row) {
        // tensor parallelism: member i on GPU gpus[i] with its share of every layer, its own cache and scheduler
        const int R = int(gpus.size());
        std::vector<backend*> members;
        threads_ = std::make_unique<rank_threads>(R);
        for (int i = 0; i < R; i++) ranks_.emplace_back().bes = {backends_[size_t(i)].get()};
        threads_->run([&](int i) { // each member slices and loads its share at the same time as the others
            rank& r = ranks_[size_t(i)];
            r.part = arch::make_shard(m, i, R);
            r.bes[0]->load_weights(r.part->params);
            if (!dynamic_cast<cpu::cpu_backend*>(r.bes[0])) r.part->release_host_copies(); // copied to the device
        });
        for (int i = 0; i < R; i++) {
            rank& r = ranks_[size_t(i)];
            r.home = [](const tensor&) { return 0; };
            r.sched = std::make_unique<scheduler>(r.bes);
            init_kv(r, r.part->hp, std::vector<backend*>(size_t(n_layer), r.bes[0]));
            members.push_back(r.bes[0]);
        }
        group_ = make_group(members);
        for (int i = 0; i < R; i++) members[size_t(i)]->join(group_, i);
        main_ = members[0];
        return;
    }

    // one graph over the backends: layer il on layer_be[il] (il == n_layer: the output layer). -ngl: layers
    // [offload_from, n_layer] on the GPUs, the rest on the CPU; the offloaded ones in consecutive runs, layer i of
    // them on the GPU whose cumulative share first exceeds i / (their count), as llama.cpp assigns them
    rank& r = ranks_.emplace_back();
    for (auto& b : backends_) r.bes.push_back(b.get());
    const int64_t offload_from = with_cpu && some_layers ? n_layer + 1 - p.n_gpu_layers : 0;
    std::vector<int> layer_be(size_t(n_layer + 1), 0);
    if (gpu) {
        std::vector<float> cum(shares.size());
        float sum = 0.0f;
        for (size_t i = 0; i < shares.size(); i++) cum[i] = (sum += shares[i]);
        for (float& c : cum) c /= sum;
        const int64_t n_off = n_layer + 1 - offload_from;
        for (int64_t il = offload_from; il <= n_layer; il++) {
            const float at = float(il - offload_from) / float(n_off);
            const size_t g = std::min<size_t>(size_t(std::upper_bound(cum.begin(), cum.end(), at) - cum.begin()),
                                              cum.size() - 1);
            layer_be[size_t(il)] = (cpu_ ? 1 : 0) + int(g);
        }
    }
    main_ = r.bes[size_t(layer_be[size_t(n_layer)])];
    // where each weight and cache lives: a weight's layer as llama.cpp names it (blk.N.* -> N, output* -> n_layer; the
    // token embeddings go with the output when it shares them, else stay with the first backend, the CPU's when it has
    // layers; other weights, such as rope factors every layer reads: no preference, every backend holds them), a
    // cache with its layer; the experts of the first --n-cpu-moe layers on the CPU
    r.home = [this, layer_be, &r](const tensor& t) -> int {
        if (r.bes.size() == 1) return 0;
        int64_t il = -1;
        if (t.flags & flag_param) {
            int n = -1, used = 0;
            if (std::sscanf(t.name, "blk.%d.%n", &n, &used) == 1 && used > 0) {
                il = n;
                const std::string_view rest(t.name + used);
                const bool expert = rest.starts_with("ffn_gate_exps") || rest.starts_with("ffn_up_exps") ||
                                    rest.starts_with("ffn_down_exps") || rest.starts_with("ffn_gate_up_exps");
                if (expert && n < p_.n_cpu_moe && cpu_) return 0;
            } else if (std::strncmp(t.name, "output", 6) == 0 || (&t == m_.tok_embd && m_.output == m_.tok_embd)) {
                il = m_.hp.n_layer;
            } else if (&t == m_.tok_embd) {
                return 0;
            } else {
                return -1;
            }
        } else {
            for (size_t l = 0; l < r.kv.k.size() && il < 0; l++)
                if (&t == r.kv.k[l] || &t == r.kv.v[l]) il = int64_t(l);
            if (il < 0) return -1;
        }
        return il >= 0 && il <= m_.hp.n_layer ? layer_be[size_t(il)] : -1;
    };
    for (size_t b = 0; b < r.bes.size(); b++) {
        std::vector<tensor*> mine;
        for (tensor* w : m.params) {
            const int h = r.home(*w);
            if (h == int(b) || h < 0) mine.push_back(w);
        }
        r.bes[b]->load_weights(mine);
    }
    r.sched = std::make_unique<scheduler>(r.bes);
    if (cpu_ && r.bes.size() > 1 && p.op_offload) { // to the GPU of the output layer, else the first
        const int out_be = layer_be[size_t(n_layer)];
        r.sched->set_op_offload(out_be > 0 ? out_be : 1, 32);
    }
    std::vector<backend*> kv_be;
    for (int64_t il = 0; il < n_layer; il++) kv_be.push_back(r.bes[size_t(layer_be[size_t(il)])]);
    init_kv(r, m.hp, kv_be);
}

session::~session() = default;

std::string session::backend_label() const {
    std::string label = gpu().name();
    if (n_gpus_used_ > 1) label += fmt::format(" x{} {}", n_gpus_used_, ranks_.size() > 1 ? "row" : "layer");
    if (!cpu_) return label;
    label += "+cpu";
    if (p_.n_gpu_layers >= 0 && p_.n_gpu_layers <= m_.hp.n_layer)
        label += fmt::format(" ngl {}/{}", p_.n_gpu_layers, m_.hp.n_layer + 1);
    if (p_.n_cpu_moe > 0) label += fmt::format(" cpu-moe {}", p_.n_cpu_moe);
    return label;
}

void session::set_eval_callback(const node_callback& cb) {
    for (backend* b : ranks_[0].bes) {
        if (cb)
            b->set_eval_callback([cb, b](const tensor& node) { cb(*b, node); });
        else
            b->set_eval_callback({});
    }
}

int session::n_threads() const {
    const auto* cpu = dynamic_cast<const cpu::cpu_backend*>(cpu_ ? cpu_ : main_);
    return cpu ? cpu->n_threads() : 0;
}

void session::check_batch(std::span<const token> tokens, int64_t first_output) const {
    const int64_t n_tok = int64_t(tokens.size());
    if (tokens.empty()) throw error("decode: no tokens to evaluate");
    if (first_output < 0 || first_output >= n_tok)
        throw error(fmt::format("decode: first output {} is outside the batch of {} tokens", first_output, n_tok));
    if (n_past() + n_tok > n_ctx())
        throw error(fmt::format("context is full: {} tokens held + {} new > context size {} (raise -c)", n_past(),
                                tokens.size(), n_ctx()));
    for (token t : tokens)
        if (t < 0 || t >= m_.hp.n_vocab)
            throw error(fmt::format("token id {} is out of range (vocabulary has {} tokens)", t, m_.hp.n_vocab));
}

std::span<const int32_t> session::score_from(std::span<const token> tokens, int64_t first_output,
                                             std::span<const int32_t> targets, score_mode mode,
                                             std::span<const uint16_t> base, int64_t seq_len) {
    check_batch(tokens, first_output);
    const int64_t n_tok = int64_t(tokens.size()), n_out = n_tok - first_output, n_vocab = m_.hp.n_vocab;
    if (seq_len < 0 || (seq_len > 0 && (n_past() != 0 || n_tok % seq_len != 0)))
        throw error(fmt::format("score: {} tokens are not whole sequences of {} in an empty cache", n_tok, seq_len));
    if (int64_t(targets.size()) != n_out)
        throw error(fmt::format("score: {} targets for {} output rows", targets.size(), n_out));
    for (int32_t t : targets)
        if (t < 0 || t >= n_vocab)
            throw error(fmt::format("score: target {} is out of range (vocabulary has {} tokens)", t, n_vocab));
    const int64_t rec = kld_record_size(n_vocab);
    if (mode == score_mode::compare && int64_t(base.size()) != n_out * rec)
        throw error(fmt::format("score: {} base values for {} rows of {}", base.size(), n_out, rec));
    const int64_t words = score_row_words(mode, n_vocab);
    n_scores_ = size_t(n_out * words);
    if (!scores_ || scores_->size() < n_scores_ * sizeof(int32_t)) {
        scores_.reset();
        scores_ = main_->alloc_host(n_scores_ * sizeof(int32_t));
    }
    for (int64_t i = 0; i < n_tok; i += p_.n_batch) {
        const int64_t n = std::min(n_tok - i, p_.n_batch);
        const int64_t first = std::max<int64_t>(first_output - i, 0);
        if (first >= n) { // no outputs in this batch
            decode_batch(tokens.subspan(size_t(i), size_t(n)), n, SIZE_MAX, nullptr, seq_len);
            continue;
        }
        const int64_t row = i + first - first_output; // the batch's first output row among all outputs
        const scoring sc{mode, targets.data() + row, mode == score_mode::compare ? base.data() + row * rec : nullptr};
        decode_batch(tokens.subspan(size_t(i), size_t(n)), first, size_t(row * words), &sc, seq_len);
    }
    return {static_cast<const int32_t*>(scores_->base()), n_scores_};
}

std::span<const float> session::decode_from(std::span<const token> tokens, int64_t first_output) {
    check_batch(tokens, first_output);
    const int64_t n_tok = int64_t(tokens.size());
    const int64_t n_vocab = m_.hp.n_vocab;
    n_logits_ = size_t((n_tok - first_output) * n_vocab);
    if (!logits_ || logits_->size() < n_logits_ * sizeof(float)) {
        logits_.reset();
        logits_ = main_->alloc_host(n_logits_ * sizeof(float));
    }
    for (int64_t i = 0; i < n_tok; i += p_.n_batch) {
        const int64_t n = std::min(n_tok - i, p_.n_batch);
        // rows of this batch that are outputs: [max(first_output - i, 0), n)
        const int64_t first = std::max<int64_t>(first_output - i, 0);
        const size_t offset = first < n ? size_t((i + first - first_output) * n_vocab) : SIZE_MAX;
        decode_batch(tokens.subspan(size_t(i), size_t(n)), std::min(first, n), offset);
    }
    return {static_cast<const float*>(logits_->base()), n_logits_};
}

void session::decode_batch(std::span<const token> tokens, int64_t first_output, size_t out_offset,
                           const scoring* sc, int64_t seq_len) {
    const int64_t n = int64_t(tokens.size());
    const int64_t n_past = this->n_past();
    // attention reads n_kv cache rows: the filled ones and this batch's, rounded up to the pad (masked past those)
    const int64_t pad = p_.kv_pad > 0 ? p_.kv_pad : std::max<int64_t>(main_->kv_pad(), 1);
    const int64_t n_kv = std::min(n_ctx(), (n_past + n + pad - 1) / pad * pad);

    first_output = std::min(first_output, n - 1); // a batch without outputs still needs a (discarded) last row

    // The graph depends on (n, n_kv, first_output) only: n_past reaches it through the inputs (positions, mask, cache
    // rows). The last graph is still planned into the scheduler's buffers (no other was prepared since), so a batch
    // of the same shape reuses it as it is.
    const int score_key = sc ? int(sc->mode) : -1;
    const batch_graph* last = ranks_[0].last.get();
    const bool same_graph = last && last->in.n_tok == n && last->in.n_kv == n_kv &&
                            last->in.first_output == first_output && last->score == score_key;
    if (!same_graph)
        for (rank& r : ranks_) {
            r.last.reset(); // its tensors point into the scheduler's buffers, which prepare() may replace
            auto bg = std::make_unique<batch_graph>();
            arch::batch_inputs& in = bg->in;
            context& ctx = bg->ctx;
            in.n_tok = n;
            in.n_past = n_past;
            in.n_kv = n_kv;
            in.first_output = first_output;
            in.part = r.part.get();
            in.ids = ctx.new_tensor(type::i32, {n});
            in.pos = ctx.new_tensor(type::i32, {n});
            in.mask = ctx.new_tensor(type::f32, {n_kv, n});
            in.kv_idx = ctx.new_tensor(type::i32, {n});
            for (tensor* t : {in.ids, in.pos, in.mask, in.kv_idx}) t->flags |= flag_input;
            if (m_.hp.any_swa()) {
                in.mask_swa = ctx.new_tensor(type::f32, {n_kv, n});
                in.mask_swa->flags |= flag_input;
            }
            bg->logits = m_.family->build(m_, ctx, bg->g, in, r.kv);
            if (sc && bg->logits) {
                const int64_t rows = bg->logits->ne[1];
                bg->targets = ctx.new_tensor(type::i32, {rows});
                bg->targets->flags |= flag_input;
                if (sc->mode == score_mode::compare) {
                    bg->base = ctx.new_tensor(type::i32, {kld_record_size(m_.hp.n_vocab) / 2, rows});
                    bg->base->flags |= flag_input;
                }
                bg->scores = score(ctx, bg->logits, bg->targets, bg->base, sc->mode);
                bg->scores->flags |= flag_output;
                bg->g.expand(bg->scores);
            }
            bg->score = score_key;
            r.sched->prepare(bg->g, r.home);
            r.last = std::move(bg);
        }

    // token i goes to cache row n_past + i; one sequence: that is its position. Packed sequences of seq_len tokens:
    // its position within its sequence, which starts at row s0
    auto seq_start = [&](int64_t row) { return seq_len > 0 ? row / seq_len * seq_len : 0; };
    std::vector<int32_t> rows(static_cast<size_t>(n)), pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; i++) {
        rows[size_t(i)] = int32_t(n_past + i);
        pos[size_t(i)] = int32_t(n_past + i - seq_start(n_past + i));
    }
    // causal: token i (row n_past + i) sees cache rows s0 <= j <= n_past + i; in sliding-window layers only the last
    // n_swa of them, n_past + i - j < n_swa (llama.cpp's "standard" window)
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> mask(static_cast<size_t>(n_kv * n)), mask_swa;
    for (int64_t i = 0; i < n; i++) {
        const int64_t s0 = seq_start(n_past + i);
        for (int64_t j = 0; j < n_kv; j++) mask[size_t(i * n_kv + j)] = j >= s0 && j <= n_past + i ? 0.0f : -inf;
    }
    if (m_.hp.any_swa()) {
        mask_swa = mask;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n_kv; j++)
                if (n_past + i - j >= m_.hp.n_swa) mask_swa[size_t(i * n_kv + j)] = -inf;
    }
    for (rank& r : ranks_) {
        const arch::batch_inputs& in = r.last->in;
        auto set = [&](tensor& t, const void* src, size_t bytes) { r.sched->backend_of(t).set(t, src, 0, bytes); };
        set(*in.ids, tokens.data(), size_t(n) * 4);
        set(*in.pos, pos.data(), pos.size() * 4);
        set(*in.mask, mask.data(), mask.size() * 4);
        if (in.mask_swa) set(*in.mask_swa, mask_swa.data(), mask_swa.size() * 4);
        set(*in.kv_idx, rows.data(), rows.size() * 4);
        if (sc && r.last->targets) {
            const size_t n_rows = size_t(r.last->targets->ne[0]);
            set(*r.last->targets, sc->targets, n_rows * 4);
            if (r.last->base) set(*r.last->base, sc->base, r.last->base->n_bytes());
        }
    }

    // same_graph: nothing in a graph changed since it last ran, only its inputs (set above)
    if (ranks_.size() == 1)
        ranks_[0].sched->compute(ranks_[0].last->g, same_graph);
    else
        try {
            threads_->run([&](int i) { ranks_[size_t(i)].sched->compute(ranks_[size_t(i)].last->g, same_graph); });
        } catch (...) {
            group_->abort(); // the other members would wait for this one's sums forever
            throw;
        }
    for (rank& r : ranks_) r.kv.n_used = n_past + n;
    if (out_offset == SIZE_MAX) return;
    const batch_graph& out = *ranks_[0].last;
    if (sc)
        ranks_[0].sched->backend_of(*out.scores)
            .get(*out.scores, static_cast<int32_t*>(scores_->base()) + out_offset, 0, out.scores->n_bytes());
    else
        ranks_[0].sched->backend_of(*out.logits)
            .get(*out.logits, static_cast<float*>(logits_->base()) + out_offset, 0,
                 size_t(out.logits->n_elements()) * sizeof(float));
}

} // namespace tessera
