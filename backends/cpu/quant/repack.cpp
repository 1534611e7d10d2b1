// repack.cpp: the 16-row interleaved layout (see repack.h): scalar repacking, the choice of tensors, the store.
#include "repack.h"

#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "quant/q4_0.h"
#include "quant/q4_1.h"
#include "quant/q8_0.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace tessera::cpu {

x16_kernels find_x16_kernels(x16_kind kind) {
    if (cpu_has_avx512vnni()) return avx512vnni::x16_kernels_for(kind);
    if (cpu_has_avx2()) return avx2::x16_kernels_for(kind);
    return {};
}

namespace {

constexpr size_t qs_bytes(x16_kind kind) { return kind == x16_kind::q8_0 ? 512 : 256; }
constexpr size_t scale_bytes(x16_kind kind) { return kind == x16_kind::q4_1 ? 64 : 32; }

} // namespace

size_t x16_group_bytes(x16_kind kind, int64_t k) {
    const size_t bytes = size_t(k / 32) * (qs_bytes(kind) + scale_bytes(kind));
    return (bytes + 63) / 64 * 64;
}

int64_t x16_act_sums_count(x16_kind kind, int64_t k) {
    switch (kind) {
    case x16_kind::q4_0_blockwise: return k / 32;
    case x16_kind::q4_0:
    case x16_kind::q8_0: return k / 4;
    case x16_kind::q4_1: return 0;
    }
    return 0;
}

void repack_x16(x16_kind kind, const uint8_t* src, size_t src_stride, int64_t k, uint8_t* dst) {
    const int64_t nb = k / 32;
    const size_t qsb = qs_bytes(kind), bsz = qsb + scale_bytes(kind);
    for (int r = 0; r < 16; r++) {
        const uint8_t* row = src + size_t(r) * src_stride;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t* q = dst + size_t(b) * bsz;
            auto* s = reinterpret_cast<uint16_t*>(q + qsb);
            switch (kind) {
            case x16_kind::q4_0_blockwise:
            case x16_kind::q4_0: {
                const auto& x = reinterpret_cast<const block_q4_0*>(row)[b];
                for (int v = 0; v < 4; v++)
                    for (int j = 0; j < 4; j++) q[v * 64 + r * 4 + j] = x.qs[4 * v + j];
                s[r] = x.d.bits;
                break;
            }
            case x16_kind::q4_1: {
                const auto& x = reinterpret_cast<const block_q4_1*>(row)[b];
                for (int v = 0; v < 4; v++)
                    for (int j = 0; j < 4; j++) q[v * 64 + r * 4 + j] = x.qs[4 * v + j];
                s[r] = x.d.bits;
                s[16 + r] = x.m.bits;
                break;
            }
            case x16_kind::q8_0: {
                const auto& x = reinterpret_cast<const block_q8_0*>(row)[b];
                for (int g = 0; g < 8; g++)
                    for (int j = 0; j < 4; j++) q[g * 64 + r * 4 + j] = uint8_t(x.qs[4 * g + j]) ^ 0x80;
                s[r] = x.d.bits;
                break;
            }
            }
        }
    }
    const size_t used = size_t(nb) * (qsb + scale_bytes(kind));
    std::memset(dst + used, 0, x16_group_bytes(kind, k) - used);
}

bool x16_kind_for(const tensor& w, x16_kind& kind) {
    if (!(w.flags & flag_param) || w.is_view() || !w.is_contiguous() || w.ne[2] != 1 || w.ne[3] != 1) return false;
    if (w.ne[1] % 16 != 0 || w.ne[0] % 32 != 0 || w.ne[1] == 0) return false;
    switch (w.t) {
    case type::q4_0:
        // llama.cpp repacks (and sums blockwise) the q4_0 matrices it can; never the token embedding
        kind = (w.flags & flag_embedding) ? x16_kind::q4_0 : x16_kind::q4_0_blockwise;
        break;
    case type::q4_1: kind = x16_kind::q4_1; break;
    case type::q8_0: kind = x16_kind::q8_0; break;
    default: return false;
    }
    return find_x16_kernels(kind).gemm != nullptr;
}

repacked_weight* repack_store::reserve(const tensor& w) {
    x16_kind kind;
    if (!x16_kind_for(w, kind)) return nullptr;
    repacked_weight r;
    r.kind = kind;
    r.k = w.ne[0];
    r.n = w.ne[1];
    r.group_bytes = x16_group_bytes(kind, r.k);
    const size_t total = r.group_bytes * size_t(r.n / 16);
    void* p = std::aligned_alloc(64, total);
    if (!p) throw std::bad_alloc();
    r.data = std::unique_ptr<uint8_t, void (*)(void*)>(static_cast<uint8_t*>(p), std::free);
    auto [it, fresh] = map_.insert_or_assign(&w, std::move(r));
    (void)fresh;
    return &it->second;
}

void fill_groups(const tensor& w, repacked_weight& r, int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; g++)
        repack_x16(r.kind, static_cast<const uint8_t*>(w.data) + size_t(g) * 16 * w.nb[1], w.nb[1], r.k,
                   r.data.get() + size_t(g) * r.group_bytes);
}

size_t repack_store::bytes() const {
    size_t total = 0;
    for (const auto& [t, r] : map_) total += r.group_bytes * size_t(r.n / 16);
    return total;
}

} // namespace tessera::cpu
