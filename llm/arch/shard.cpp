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
        if (w->ne[3] != 1)
            throw error(fmt::format("--split-mode row: tensor {} of type {} cannot be split", w->name,
                                    type_name(w->t)));
    }
    // memory for a slice of w of `bytes` bytes of rows, followed by a copy of w's tail (a per-tensor scale: i2_s),
    // which every slice carries after its own rows
    uint8_t* alloc(const tensor* w, size_t bytes) {
        const size_t tail = type_info(w->t).tail_bytes;
        auto* mem = static_cast<uint8_t*>(s.mem.emplace_back(std::make_unique<shard::mapping>(bytes + tail))->p);
        if (tail) std::memcpy(mem + bytes, static_cast<const uint8_t*>(w->data) + size_t(w->ne[2]) * w->nb[2], tail);
        return mem;
    }
    // rows [first, first + n) of a matrix (k, rows): a view of the file (gathered when the type has a tail); of every
    // expert of a 3-D one (k, rows, experts), gathered
    tensor* rows(const tensor* w, int64_t first, int64_t n) {
        check_matrix(w);
        if (w->ne[2] == 1 && !type_info(w->t).tail_bytes) {
            tensor* t = header(w, {w->ne[0], n});
            t->data = static_cast<uint8_t*>(w->data) + size_t(first) * w->nb[1];
            return t;
        }
        tensor* t = w->ne[2] == 1 ? header(w, {w->ne[0], n}) : header(w, {w->ne[0], n, w->ne[2]});
        const size_t bytes = size_t(n) * w->nb[1];
        uint8_t* mem = alloc(w, bytes * size_t(w->ne[2]));
        for (int64_t x = 0; x < w->ne[2]; x++)
            std::memcpy(mem + size_t(x) * bytes,
                        static_cast<const uint8_t*>(w->data) + size_t(x) * w->nb[2] + size_t(first) * w->nb[1], bytes);
        t->data = mem;
        return t;
    }
    // elements [first, first + n) of a vector (a bias): a view of the file; of every column of an f32 matrix (one
    // bias per expert: (width, experts)), gathered
    tensor* elems(const tensor* b, int64_t first, int64_t n) {
        if (!b) return nullptr;
        TS_ASSERT(b->t == type::f32 && b->ne[2] == 1);
        if (b->ne[1] == 1) {
            tensor* t = header(b, {n});
            t->data = static_cast<uint8_t*>(b->data) + size_t(first) * b->nb[0];
            return t;
        }
        tensor* t = header(b, {n, b->ne[1]});
        uint8_t* mem = alloc(b, size_t(n * b->ne[1]) * sizeof(float));
        for (int64_t x = 0; x < b->ne[1]; x++)
            std::memcpy(mem + size_t(x * n) * sizeof(float),
                        static_cast<const uint8_t*>(b->data) + size_t(x) * b->nb[1] + size_t(first) * sizeof(float),
                        size_t(n) * sizeof(float));
        t->data = mem;
        return t;
    }
    // columns [first, first + n) of every row of a matrix (k, rows) or of every expert's (k, rows, experts): whole
    // blocks, copied (with the tail, as rows)
    tensor* cols(const tensor* w, int64_t first, int64_t n) {
        check_matrix(w);
        const int64_t blk = block_size(w->t);
        if (first % blk != 0 || n % blk != 0)
            throw error(fmt::format("--split-mode row: {} of type {} splits into {} columns a member, not whole "
                                    "blocks of {}",
                                    w->name, type_name(w->t), n, blk));
        tensor* t = w->ne[2] == 1 ? header(w, {n, w->ne[1]}) : header(w, {n, w->ne[1], w->ne[2]});
        const size_t skip = row_size(w->t, first), bytes = row_size(w->t, n);
        const int64_t n_rows = w->ne[1] * w->ne[2];
        uint8_t* mem = alloc(w, bytes * size_t(n_rows));
        for (int64_t r = 0; r < n_rows; r++) {
            const int64_t x = r / w->ne[1], i = r % w->ne[1];
            std::memcpy(mem + size_t(r) * bytes,
                        static_cast<const uint8_t*>(w->data) + size_t(x) * w->nb[2] + size_t(i) * w->nb[1] + skip, bytes);
        }
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
    s->hp = hp;
    hparams& sh = s->hp;
    sh.head_l.assign(size_t(hp.n_layer), 0);
    sh.head_kv_l.assign(size_t(hp.n_layer), 0);
    sh.ff_l.assign(size_t(hp.n_layer), 0);
    if (!hp.ff_exp_l.empty()) sh.ff_exp_l.assign(size_t(hp.n_layer), 0);
    slicer sl{m, *s, {}};
    for (int64_t il = 0; il < hp.n_layer; il++) {
        const layer_weights& l = m.layers[size_t(il)];
        const int64_t H = hp.n_head_at(il), HKV = hp.n_head_kv_at(il), F = hp.n_ff_at(il), D = hp.head_dim;
        // the feed-forward width split: the dense block's, or each expert's (every member holds a share of every
        // expert, so the router's choice needs no exchange)
        const int64_t FF = l.ffn_gate_inp ? hp.n_ff_exp_at(il) : F;
        if (H % R != 0 || HKV % R != 0 || FF % R != 0)
            throw error(fmt::format("--split-mode row: layer {} has {} heads, {} KV heads and a feed-forward width{} of "
                                    "{}, which {} GPUs do not divide evenly",
                                    il, H, HKV, l.ffn_gate_inp ? " per expert" : "", FF, R));
        const int64_t h = H / R, hkv = HKV / R, f = FF / R;
        sh.head_l[size_t(il)] = h;
        sh.head_kv_l[size_t(il)] = hkv;
        sh.ff_l[size_t(il)] = l.ffn_gate_inp ? F : f;
        if (l.ffn_gate_inp) sh.ff_exp_l[size_t(il)] = f;
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
        if (l.ffn_gate_inp) { // the router is every member's; each expert's rows (gate, up) and columns (down) split
            o.ffn_gate_inp = sl.shared(l.ffn_gate_inp);
            o.ffn_gate_inp_b = sl.shared(l.ffn_gate_inp_b);
            o.ffn_gate_exps = sl.rows(l.ffn_gate_exps, rank * f, f);
            o.ffn_up_exps = sl.rows(l.ffn_up_exps, rank * f, f);
            o.ffn_down_exps = sl.cols(l.ffn_down_exps, rank * f, f);
            o.ffn_gate_exps_b = sl.elems(l.ffn_gate_exps_b, rank * f, f);
            o.ffn_up_exps_b = sl.elems(l.ffn_up_exps_b, rank * f, f);
            // the down projection's bias is added once, by member 0, before the members' sums meet
            o.ffn_down_exps_b = rank == 0 ? sl.shared(l.ffn_down_exps_b) : nullptr;
            if (rank != 0 && l.ffn_down_exps_b) sl.replaced.insert(l.ffn_down_exps_b);
        } else {
            o.ffn_gate = sl.rows(l.ffn_gate, rank * f, f);
            o.ffn_up = sl.rows(l.ffn_up, rank * f, f);
            o.ffn_down = sl.cols(l.ffn_down, rank * f, f);
        }
        o.ffn_post_norm = sl.shared(l.ffn_post_norm);
        // sub-norms (BitNet) over the split widths: the member's part of the weight (builder::sub_norm sums the
        // squares over the members)
        o.attn_sub_norm = sl.elems(l.attn_sub_norm, rank * h * D, h * D);
        o.ffn_sub_norm = sl.elems(l.ffn_sub_norm, rank * f, f);
        s->layers.push_back(o);
    }
    // the output's vocabulary rows, split when the members divide it (else member 0 computes all of them); tied to the
    // token embeddings, the full table stays every member's too, for the lookups only
    if (m.output && m.output->ne[1] == hp.n_vocab && hp.n_vocab % R == 0 && m.output->ne[2] == 1) {
        const int64_t v = hp.n_vocab / R;
        s->output = sl.rows(m.output, rank * v, v);
        s->output_b = sl.elems(m.output_b, rank * v, v);
        if (m.output == m.tok_embd) { // the lookups read the whole table through an alias that is no output
            tensor* t = sl.header(m.tok_embd, {m.tok_embd->ne[0], m.tok_embd->ne[1]});
            t->data = m.tok_embd->data;
            t->flags |= flag_embedding;
            s->tok_embd = t;
        }
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
