// cpu_backend.cpp: host buffers, the per-node scratch, and compute(): every thread walks the node list, does its
// share of each node, and meets the others at a barrier before the next node.
#include "cpu_backend.h"

#include "backends/cpu/ops/ops.h"
#include "backends/cpu/quant/repack.h"
#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "ggml-like/median.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

#include <sys/mman.h>

namespace tessera::cpu {

namespace {

struct host_buffer final : buffer {
    void* p = nullptr;
    size_t n = 0;
    explicit host_buffer(size_t bytes) : n(bytes) {
        p = std::aligned_alloc(TS_TENSOR_ALIGN, (bytes + TS_TENSOR_ALIGN - 1) / TS_TENSOR_ALIGN * TS_TENSOR_ALIGN);
        if (!p && bytes) throw std::bad_alloc();
    }
    ~host_buffer() override { std::free(p); }
    void* base() override { return p; }
    size_t size() const override { return n; }
};

// Anonymous pages: zero until written, committed only when touched (a large KV cache costs nothing up front).
struct mapped_buffer final : buffer {
    void* p = nullptr;
    size_t n = 0, mapped = 0;
    explicit mapped_buffer(size_t bytes) : n(bytes), mapped(std::max<size_t>(bytes, 1)) {
        p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::bad_alloc();
    }
    ~mapped_buffer() override { ::munmap(p, mapped); }
    void* base() override { return p; }
    size_t size() const override { return n; }
};

} // namespace

int default_n_threads() {
    const unsigned hc = std::thread::hardware_concurrency();
    return int(hc == 0 ? 1 : std::min(hc, 8u));
}

cpu_backend::cpu_backend(cpu_options opt)
    : opt_(opt), pool_(opt.n_threads > 0 ? opt.n_threads : default_n_threads()) {
    // TESSERA_CPU_REPACK=0 keeps the file's layout (benchmarks of the row kernels against the repacked ones)
    if (const char* e = std::getenv("TESSERA_CPU_REPACK"); e && std::string(e) == "0") opt_.repack = false;
    // TESSERA_CPU_REFERENCE=1: the scalar reference kernels everywhere (the oracle of the tests), for measuring how
    // far results move when only the order of float operations changes
    if (const char* e = std::getenv("TESSERA_CPU_REFERENCE"); e && std::string(e) == "1") opt_.reference = true;
}

std::unique_ptr<buffer> cpu_backend::alloc(size_t bytes) { return std::make_unique<host_buffer>(bytes); }

std::unique_ptr<buffer> cpu_backend::alloc_zeroed(size_t bytes) { return std::make_unique<mapped_buffer>(bytes); }

void cpu_backend::set(tensor& t, const void* src, size_t offset, size_t size) {
    std::memcpy(static_cast<uint8_t*>(t.data) + offset, src, size);
}

void cpu_backend::get(const tensor& t, void* dst, size_t offset, size_t size) {
    std::memcpy(dst, static_cast<const uint8_t*>(t.data) + offset, size);
}

bool cpu_backend::supports(const tensor& node) const {
    auto computable = [&](const tensor* s) { return s && find_cpu_ops(s->t) != nullptr; };
    auto f32 = [](const tensor* s) { return s && s->t == type::f32; };
    switch (node.o) {
    case op::none: return true;
    case op::view: return true;
    case op::get_rows:
        return computable(node.src[0]) && node.src[1]->t == type::i32 && (node.src[1]->ne[1] == 1 || f32(node.src[0]));
    case op::mul_mat: return computable(node.src[0]) && f32(node.src[1]);
    case op::mul_mat_id: return computable(node.src[0]) && f32(node.src[1]) && node.src[2]->t == type::i32;
    case op::top_k: return f32(node.src[0]) && node.src[0]->nb[0] == 4;
    case op::add_id:
        return f32(node.src[0]) && node.src[0]->nb[0] == 4 && f32(node.src[1]) && node.src[1]->nb[0] == 4 &&
               node.src[2]->t == type::i32;
    case op::sum_rows: return f32(node.src[0]);
    case op::div: return f32(node.src[0]) && f32(node.src[1]);
    case op::clamp: return f32(node.src[0]);
    case op::swiglu_oai: return f32(node.src[0]) && f32(node.src[1]);
    case op::add: return f32(node.src[0]) && f32(node.src[1]);
    case op::mul: return f32(node.src[0]) && f32(node.src[1]);
    case op::scale: return f32(node.src[0]);
    case op::rms_norm: return f32(node.src[0]);
    case op::rms_norm_part: return f32(node.src[0]) && f32(node.src[1]);
    case op::rope: return f32(node.src[0]);
    case op::soft_max: return f32(node.src[0]);
    case op::silu: return f32(node.src[0]);
    case op::swiglu: return f32(node.src[0]) && f32(node.src[1]);
    case op::geglu: return f32(node.src[0]) && f32(node.src[1]);
    case op::relu2_glu: return f32(node.src[0]) && f32(node.src[1]);
    case op::tanh: return f32(node.src[0]);
    case op::score:
        return f32(node.src[0]) && node.src[0]->nb[0] == 4 && node.src[1]->t == type::i32 && node.src[1]->is_contiguous();
    case op::cpy: return f32(node.src[0]) && find_cpu_ops(node.t) != nullptr;
    case op::set_rows:
        return f32(node.src[0]) && node.src[0]->nb[0] == 4 && find_cpu_ops(node.t) != nullptr &&
               (node.src[2]->t == type::i32 || node.src[2]->t == type::i64);
    case op::all_reduce: return group_ && f32(node.src[0]) && node.src[0]->is_contiguous();
    case op::all_gather:
        return group_ && f32(node.src[0]) && node.src[0]->is_contiguous() && node.is_contiguous() &&
               node.op_params.i[0] == group_->size();
    case op::attention:
        return f32(node.src[0]) && (node.src[1]->t == type::f16 || node.src[1]->t == type::f32) &&
               (!node.src[4] || f32(node.src[4]));
    }
    return false;
}

size_t work_size(const tensor& node, int n_threads) {
    switch (node.o) {
    case op::mul_mat: return mul_mat_work_size(node);
    case op::mul_mat_id: return mul_mat_id_work_size(node);
    case op::attention: return attention_work_size(node, n_threads);
    default: return 0;
    }
}

void cpu_backend::load_weights(std::span<tensor* const> weights) {
    if (opt_.reference || !opt_.repack) return;
    std::vector<std::pair<const tensor*, repacked_weight*>> todo;
    for (tensor* w : weights)
        if (repacked_weight* r = repacked_.reserve(*w)) todo.emplace_back(w, r);
    // every thread takes a share of each tensor's row groups
    pool_.run([&](int ith, int nth) {
        for (auto& [w, r] : todo) {
            int64_t g0, g1;
            split(r->n / 16, ith, nth, g0, g1);
            fill_groups(*w, *r, g0, g1);
        }
    });
}

namespace {

// Chains run as one node (one pass, one barrier instead of two or three), found per graph:
//   scale_mul     mul_mat followed by a `mul` of its result by a one-element f32 tensor (NVFP4's per-tensor `.scale`):
//                 mul_mat writes the mul's output, scaled, and the mul (a pass over memory and a barrier) is skipped
//   norm_mul      rms_norm -> mul by a weight row (every norm of a model), one pass per row
//   add_norm_mul  add -> rms_norm -> mul: the residual add, its norm and the weight (decode: three single-row nodes
//                 and their barriers become one)
//   mat_group     2-3 mul_mats of the same activations with weights repacked alike (q, k, v; gate, up): the
//                 activations converted once, one tile loop (mul_mat_group: two barriers instead of two a matrix)
// Each keeps its ops' arithmetic (the same bits); a fused result must have no reader but the chain's next node (the
// add's may have others: it is written), and the chain's output must not overlap what it reads (rows go to threads
// independently).
struct fusion {
    enum kind { none, scale_mul, norm_mul, add_norm_mul, mat_group } k = none;
    const tensor* scale = nullptr; // scale_mul: the one-element tensor
    int n = 0;                     // mat_group: its mul_mats
};

bool overlaps(const tensor* a, const tensor* b) {
    const auto* pa = static_cast<const uint8_t*>(a->data);
    const auto* pb = static_cast<const uint8_t*>(b->data);
    return pa && pb && pa < pb + b->n_bytes() && pb < pa + a->n_bytes();
}

bool f32_rows(const tensor* t) { return t->t == type::f32 && t->nb[0] == 4; }

// rms_norm node n -> mul node m by a weight row, n read by m alone
bool norm_mul_pair(const tensor* n, const tensor* m, std::unordered_map<const tensor*, int>& readers) {
    if (n->o != op::rms_norm || m->o != op::mul || m->src[0] != n || !m->src[1]) return false;
    const tensor* w = m->src[1];
    return readers[n] == 1 && !(n->flags & flag_output) && f32_rows(m) && f32_rows(n->src[0]) &&
           same_shape(*n, *m) && f32_rows(w) && w->ne[0] == n->ne[0] && w->n_elements() == w->ne[0] &&
           !overlaps(m, n->src[0]) && !overlaps(m, w);
}

std::vector<fusion> plan_fusions(const graph& g, const repack_store& repacked) {
    std::unordered_map<const tensor*, int> readers;
    for (const tensor* n : g.nodes)
        for (const tensor* s : n->src)
            if (s) readers[s]++;
    std::vector<fusion> out(g.nodes.size());
    for (size_t i = 0; i + 1 < g.nodes.size(); i++) {
        const tensor* n0 = g.nodes[i];
        const tensor* n1 = g.nodes[i + 1];
        int n_mat = 1;
        while (n_mat < 3 && i + n_mat < g.nodes.size() && mul_mat_groupable(repacked, *n0, *g.nodes[i + n_mat]))
            n_mat++;
        if (n_mat > 1) {
            out[i].k = fusion::mat_group;
            out[i].n = n_mat;
            i += size_t(n_mat) - 1;
            continue;
        }
        if (n0->o == op::add && i + 2 < g.nodes.size() && n1->src[0] == n0 &&
            norm_mul_pair(n1, g.nodes[i + 2], readers)) {
            const tensor* a = n0->src[0];
            const tensor* b = n0->src[1];
            const tensor* m = g.nodes[i + 2];
            if (f32_rows(n0) && f32_rows(a) && f32_rows(b) && same_shape(*a, *n0) && same_shape(*b, *n0) &&
                !overlaps(m, a) && !overlaps(m, b) && !overlaps(m, n0) && !overlaps(n0, a) && !overlaps(n0, b)) {
                out[i].k = fusion::add_norm_mul;
                i += 2;
                continue;
            }
        }
        if (norm_mul_pair(n0, n1, readers)) {
            out[i].k = fusion::norm_mul;
            i++;
            continue;
        }
        if (n0->o != op::mul_mat || n1->o != op::mul || n1->src[0] != n0 || !n1->src[1]) continue;
        const tensor* s = n1->src[1];
        if (s->t != type::f32 || s->n_elements() != 1 || !s->data || (n0->flags & flag_output) || readers[n0] != 1)
            continue;
        if (!same_shape(*n0, *n1) || n1->t != type::f32 || n1->nb[0] != 4) continue;
        out[i].k = fusion::scale_mul;
        out[i].scale = s;
        i++;
    }
    return out;
}

} // namespace

void cpu_backend::join(std::shared_ptr<backend_group> group, int rank) {
    group_ = std::dynamic_pointer_cast<host_group>(group);
    if (!group_) throw error("a CPU backend can only join a group of CPU backends");
    TS_ASSERT(rank >= 0 && rank < group_->size());
    rank_ = rank;
}

void cpu_backend::compute(graph& g) {
    size_t wsize = 0;
    for (tensor* n : g.nodes) wsize = std::max(wsize, work_size(*n, pool_.n_threads()));
    if (work_.size() < wsize) work_.resize(wsize);
    // fused pairs only without a per-node callback (it must see every node's own result)
    const std::vector<fusion> fused =
        on_eval || opt_.reference ? std::vector<fusion>(g.nodes.size()) : plan_fusions(g, repacked_);

    pool_.run([&](int ith, int nth) {
        compute_params p;
        p.ith = ith;
        p.nth = nth;
        p.wdata = work_.data();
        p.wsize = work_.size();
        p.pool = &pool_;
        p.reference = opt_.reference;
        p.repacked = &repacked_;
        for (size_t i = 0; i < g.nodes.size(); i++) {
            tensor* n = g.nodes[i];
            if (fused[i].k == fusion::scale_mul) { // mul_mat into the following mul's output, times its scalar
                tensor into = *n;
                tensor* mu = g.nodes[i + 1];
                into.data = mu->data;
                for (int d = 0; d < TS_MAX_DIMS; d++) into.nb[d] = mu->nb[d];
                p.out_scale = *static_cast<const float*>(fused[i].scale->data);
                mul_mat(p, into);
                p.out_scale = 1.0f;
                p.barrier();
                i++;
                continue;
            }
            if (fused[i].k == fusion::mat_group) {
                mul_mat_group(p, &g.nodes[i], fused[i].n);
                p.barrier();
                i += size_t(fused[i].n) - 1;
                continue;
            }
            if (fused[i].k == fusion::norm_mul) {
                add_rms_norm_mul(p, nullptr, *n, *g.nodes[i + 1]);
                p.barrier();
                i++;
                continue;
            }
            if (fused[i].k == fusion::add_norm_mul) {
                add_rms_norm_mul(p, n, *g.nodes[i + 1], *g.nodes[i + 2]);
                p.barrier();
                i += 2;
                continue;
            }
            switch (n->o) {
            case op::none: break;
            case op::view: break;
            case op::get_rows: get_rows(p, *n); break;
            case op::mul_mat: mul_mat(p, *n); break;
            case op::mul_mat_id: mul_mat_id(p, *n); break;
            case op::top_k: top_k(p, *n); break;
            case op::add_id: add_id(p, *n); break;
            case op::sum_rows: sum_rows(p, *n); break;
            case op::div: div(p, *n); break;
            case op::clamp: clamp(p, *n); break;
            case op::swiglu_oai: swiglu_oai(p, *n); break;
            case op::add: add(p, *n); break;
            case op::mul: mul(p, *n); break;
            case op::scale: scale(p, *n); break;
            case op::rms_norm: rms_norm(p, *n); break;
            case op::rms_norm_part: rms_norm_part(p, *n); break;
            case op::rope: rope(p, *n); break;
            case op::soft_max: soft_max(p, *n); break;
            case op::silu: silu(p, *n); break;
            case op::swiglu: swiglu(p, *n); break;
            case op::geglu: geglu(p, *n); break;
            case op::relu2_glu: relu2_glu(p, *n); break;
            case op::tanh: tanh(p, *n); break;
            case op::score: score(p, *n); break;
            case op::cpy: cpy(p, *n); break;
            case op::set_rows: set_rows(p, *n); break;
            case op::attention: attention(p, *n); break;
            case op::all_reduce:
                if (ith == 0)
                    group_->all_reduce(rank_, static_cast<const float*>(n->src[0]->data), static_cast<float*>(n->data),
                                       size_t(n->n_elements()));
                break;
            case op::all_gather:
                if (ith == 0)
                    group_->all_gather(rank_, static_cast<const float*>(n->src[0]->data), static_cast<float*>(n->data),
                                       size_t(n->src[0]->ne[0]), size_t(n->src[0]->n_elements() / n->src[0]->ne[0]));
                break;
            }
            if (n->o != op::view && n->o != op::none) p.barrier();
            if (on_eval && n->o != op::view && n->o != op::none) {
                if (ith == 0) on_eval(*n);
                p.barrier();
            }
        }
    });
}

// memcpy between two 256 MiB buffers (past the caches), split over the pool's threads: the median of 5 after a pass
// that touches the pages
double cpu_backend::copy_gbs() {
    constexpr size_t bytes = size_t(256) << 20;
    std::vector<uint8_t> a(bytes, 1), b(bytes);
    std::vector<double> gbs;
    for (int rep = 0; rep < 6; rep++) {
        const auto t0 = std::chrono::steady_clock::now();
        pool_.run([&](int ith, int nth) {
            const size_t lo = bytes * size_t(ith) / size_t(nth), hi = bytes * size_t(ith + 1) / size_t(nth);
            std::memcpy(b.data() + lo, a.data() + lo, hi - lo);
        });
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (rep > 0) gbs.push_back(sec > 0.0 ? 2.0 * double(bytes) / sec / 1e9 : 0.0);
    }
    return median(gbs);
}

} // namespace tessera::cpu
