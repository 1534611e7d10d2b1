// shard.cpp: a model's share for one member of a tensor-parallel group (arch.h, struct shard): row slices point into
// the mapped file, column slices are gathered row by row into the shard's own memory.
#include "arch.h"

#include "ggml-like/error.h"

#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <unordered_set>

#include <sys/mman.h>

namespace tessera::arch {

shard::mapping::mapping(size_t bytes) : n(std::max<size_t>(bytes, 1)) {
    p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
}

shard::mapping::~mapping() { ::munmap(p, n); }

void shard::release_host_copies() {
    for (const auto& m : mem) (void)::madvise(m->p, m->n, MADV_DONTNEED);
}

namespace {

struct slicer {
    const model& m;
    shard& s;

    std::unordered_set<const tensor*> replaced; // the model's tensors the slices stand for

    tensor* header(const tensor* w, std::initializer_list<int64_t> ne) {
        replaced.insert(w);
        tensor* t = s.ctx.new_tensor(w->t, ne);
        t->flags |= flag_param;
        t->set_name(fmt::format("{}@{}/{}", w->name, s.rank, s.n_ranks));
        if (auto it = m.out_scale.find(w); it != m.out_scale.end()) s.out_scale[t] = it->second;
        s.params.push_back(t);
        return t;
    }
    void check_matrix(const tensor* w) {
        if (type_info(w->t).tail_bytes || w->ne[2] != 1 || w->ne[3] != 1)
            throw error(fmt::format("--split-mode row: tensor {} of type {} cannot be split", w->name,
                                    type_name(w->t)));
    }
    // rows [first, first + n) of a matrix (k, rows): a view of the file
    tensor* rows(const tensor* w, int64_t first, int64_t n) {
        check_matrix(w);
        tensor* t = header(w, {w->ne[0], n});
        t->data = static_cast<uint8_t*>(w->data) + size_t(first) * w->nb[1];
        return t;
    }
    // elements [first, first + n) of a vector (a bias): a view of the file
    tensor* elems(const tensor* b, int64_t first, int64_t n) {
        if (!b) return nullptr;
        TS_ASSERT(b->t == type::f32 && b->ne[1] == 1);
        tensor* t = header(b, {n});
        t->data = static_cast<uint8_t*>(b->data) + size_t(first) * b->nb[0];
        return t;
    }
    // columns [first, first + n) of every row of a matrix (k, rows): whole blocks, copied
    tensor* cols(const tensor* w, int64_t first, int64_t n) {
        check_matrix(w);
        const int64_t blk = block_size(w->t);
        if (first % blk != 0 || n % blk != 0)
            throw error(fmt::format("--split-mode row: {} of type {} splits into {} columns a member, not whole "
                                    "blocks of {}",
                                    w->name, type_name(w->t), n, blk));
        tensor* t = header(w, {n, w->ne[1]});
        const size_t skip = row_size(w->t, first), bytes = row_size(w->t, n);
        auto* mem = static_cast<uint8_t*>(s.mem.emplace_back(std::make_unique<shard::mapping>(bytes * size_t(w->ne[1])))->p);
        for (int64_t r = 0; r < w->ne[1]; r++)
            std::memcpy(mem + size_t(r) * bytes, static_cast<const uint8_t*>(w->data) + size_t(r) * w->nb[1] + skip, bytes);
        t->data = mem;
        return t;
    }
    static tensor* shared(tensor* w) { return w; } // every member reads the model's tensor
};

} // namespace

std::unique_ptr<shard> make_shard(const model& m, int rank, int n_ranks) {
    TS_ASSERT(n_ranks >= 1 && rank >= 0 && rank < n_ranks);
    auto s = std::make_unique<shard>();
    s->rank = rank;
    s->n_ranks = n_ranks;
    const hparams& hp = m.hp;
    const int64_t R = n_ranks;
    if (hp.n_expert > 0)
        throw error(fmt::format("--split-mode row: {} is a mixture-of-experts model, whose experts are not split by "
                                "rows yet (use --split-mode layer)",
                                m.arch));
    s->hp = hp;
    hparams& sh = s->hp;
    sh.head_l.assign(size_t(hp.n_layer), 0);
    sh.head_kv_l.assign(size_t(hp.n_layer), 0);
    sh.ff_l.assign(size_t(hp.n_layer), 0);
    slicer sl{m, *s, {}};
    for (int64_t il = 0; il < hp.n_layer; il++) {
        const layer_weights& l = m.layers[size_t(il)];
        const int64_t H = hp.n_head_at(il), HKV = hp.n_head_kv_at(il), F = hp.n_ff_at(il), D = hp.head_dim;
        if (l.attn_sub_norm || l.ffn_sub_norm)
            throw error(fmt::format("--split-mode row: {}'s sub-norms normalize over the whole width, which a split "
                                    "by rows divides (use --split-mode layer)",
                                    m.arch));
        if (H % R != 0 || HKV % R != 0 || F % R != 0)
            throw error(fmt::format("--split-mode row: layer {} has {} heads, {} KV heads and a feed-forward width of "
                                    "{}, which {} GPUs do not divide evenly",
                                    il, H, HKV, F, R));
        const int64_t h = H / R, hkv = HKV / R, f = F / R;
        sh.head_l[size_t(il)] = h;
        sh.head_kv_l[size_t(il)] = hkv;
        sh.ff_l[size_t(il)] = f;
        layer_weights o;
        o.attn_norm = sl.shared(l.attn_norm);
        o.wq = sl.rows(l.wq, rank * h * D, h * D);
        o.wk = sl.rows(l.wk, rank * hkv * D, hkv * D);
        o.wv = sl.rows(l.wv, rank * hkv * D, hkv * D);
        o.wo = sl.cols(l.wo, rank * h * D, h * D);
        o.bq = sl.elems(l.bq, rank * h * D, h * D);
        o.bk = sl.elems(l.bk, rank * hkv * D, hkv * D);
        o.bv = sl.elems(l.bv, rank * hkv * D, hkv * D);
        o.bo = sl.shared(l.bo);
        o.q_norm = sl.shared(l.q_norm);
        o.k_norm = sl.shared(l.k_norm);
        o.attn_post_norm = sl.shared(l.attn_post_norm);
        o.attn_sinks = sl.elems(l.attn_sinks, rank * h, h);
        o.ffn_norm = sl.shared(l.ffn_norm);
        o.ffn_gate = sl.rows(l.ffn_gate, rank * f, f);
        o.ffn_up = sl.rows(l.ffn_up, rank * f, f);
        o.ffn_down = sl.cols(l.ffn_down, rank * f, f);
        o.ffn_post_norm = sl.shared(l.ffn_post_norm);
        s->layers.push_back(o);
    }
    // the member reads its slices and every weight of the model that no slice stands for
    for (tensor* w : m.params)
        if (!sl.replaced.count(w)) s->params.push_back(w);
    sh.n_head = sh.head_l[0];
    sh.n_head_kv = sh.head_kv_l[0];
    sh.n_ff = sh.ff_l[0];
    return s;
}

} // namespace tessera::arch
