// repack.cpp: the 16-row interleaved layout (see repack.h): scalar repacking, the choice of tensors, the store.
#include "repack.h"

#include "backends/cpu/quant/vec_dot.h"
#include "ggml-like/error.h"
#include "quant/format.h"

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

// bytes of one block record (values + scales) of 16 rows
constexpr size_t record_bytes(x16_kind kind) {
    switch (kind) {
    case x16_kind::q4_0_blockwise:
    case x16_kind::q4_0:
    case x16_kind::mxfp4_blockwise:
    case x16_kind::iq4_nl_blockwise:
        return 256 + 32;
    case x16_kind::q4_1: return 256 + 64;
    case x16_kind::q5_0: return 256 + 64 + 32;
    case x16_kind::q5_1: return 256 + 64 + 64;
    case x16_kind::q8_0: return 512 + 32;
    case x16_kind::nvfp4: return 512 + 64;
    case x16_kind::awq4: return 1024 + 64;
    case x16_kind::awq4_g64: return 512 + 64;
    case x16_kind::tq2_0: return 1024 + 64;
    case x16_kind::i2_s: return 512;
    case x16_kind::q4_k: return 2048 + 128 + 128 + 32 + 32;
    case x16_kind::q5_k: return 2048 + 512 + 128 + 128 + 32 + 32;
    case x16_kind::q6_k: return 2048 + 1024 + 256 + 64; // d padded: every record starts a cache line
    case x16_kind::q3_k: return 2048 + 256 + 64;        // likewise
    case x16_kind::q2_k: return 1024 + 256 + 256 + 32 + 32;
    case x16_kind::iq4_xs: return 2048 + 128 + 64; // d padded
    }
    return 0;
}

// A K super-block's 256 levels (q3_K 0..7, q4_K 0..15, q5_K 0..31, q6_K 0..63), in element order
void k_levels(const block_q4_k& x, uint8_t (&L)[256]) {
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) {
            L[64 * j + l] = x.qs[32 * j + l] & 0xf;
            L[64 * j + 32 + l] = x.qs[32 * j + l] >> 4;
        }
}
void k_levels(const block_q5_k& x, uint8_t (&L)[256]) {
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 32; l++) {
            L[64 * j + l] = uint8_t((x.qs[32 * j + l] & 0xf) | (((x.qh[l] >> (2 * j)) & 1) << 4));
            L[64 * j + 32 + l] = uint8_t((x.qs[32 * j + l] >> 4) | (((x.qh[l] >> (2 * j + 1)) & 1) << 4));
        }
}
void k_levels(const block_q3_k& x, uint8_t (&L)[256]) {
    for (int e = 0; e < 256; e++) L[e] = uint8_t(q3_k::level(x, e));
}
void k_levels(const block_q6_k& x, uint8_t (&L)[256]) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t lo0 = x.ql[64 * h + l], lo1 = x.ql[64 * h + 32 + l], hi = x.qh[32 * h + l];
            L[128 * h + l] = uint8_t((lo0 & 0xf) | ((hi & 3) << 4));
            L[128 * h + 32 + l] = uint8_t((lo1 & 0xf) | (((hi >> 2) & 3) << 4));
            L[128 * h + 64 + l] = uint8_t((lo0 >> 4) | (((hi >> 4) & 3) << 4));
            L[128 * h + 96 + l] = uint8_t((lo1 >> 4) | (((hi >> 6) & 3) << 4));
        }
}

// K formats: slot w = elements 4w..4w+3 of row r; nibble vector i (at 64 i) holds the low 4 bits of slot 2i in its low
// nibbles and of slot 2i + 1 in its high ones
void put_k_nibbles(uint8_t* q, int r, const uint8_t (&L)[256]) {
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 4; j++)
            q[i * 64 + r * 4 + j] = uint8_t((L[8 * i + j] & 0xf) | ((L[8 * i + 4 + j] & 0xf) << 4));
}
// ... and the levels' bits above the nibble (BITS of them: q5_K 1, q6_K 2) from 2048 on: vector u, lane r, byte j, bits
// BITS w .. holds slot W u + w's (W = 8 / BITS slots a vector)
template <int BITS> void put_k_high(uint8_t* q, int r, const uint8_t (&L)[256]) {
    constexpr int W = 8 / BITS;
    for (int u = 0; u < 64 / W; u++)
        for (int j = 0; j < 4; j++) {
            uint8_t v = 0;
            for (int w = 0; w < W; w++) v |= uint8_t((L[4 * (W * u + w) + j] >> 4) << (BITS * w));
            q[2048 + u * 64 + r * 4 + j] = v;
        }
}

// q4_K / q5_K's 8 scales then 8 mins (byte 16 c + r), then f16 d and dmin (16 each) at `at`
template <class B> void put_k_scales(uint8_t* q, int r, const B& x, size_t at) {
    for (int c = 0; c < 8; c++) {
        int sc, m;
        kq::scale_min(x.scales, c, sc, m);
        q[at + 16 * c + r] = uint8_t(sc);
        q[at + 128 + 16 * c + r] = uint8_t(m);
    }
    reinterpret_cast<uint16_t*>(q + at + 256)[r] = x.d.bits;
    reinterpret_cast<uint16_t*>(q + at + 256)[16 + r] = x.dmin.bits;
}

// 4 nibbles of 4 consecutive elements (low) and of the 4 elements 16 later (high) -> lane r of a q4_0-style vector
template <class Code> void put_nibbles(uint8_t* vec, int r, int e0, Code code) {
    for (int j = 0; j < 4; j++) vec[r * 4 + j] = uint8_t(code(e0 + j) | (code(e0 + 16 + j) << 4));
}

} // namespace

int64_t x16_block_elems(x16_kind kind) {
    switch (kind) {
    case x16_kind::nvfp4:
    case x16_kind::awq4_g64: return 64;
    case x16_kind::awq4:
    case x16_kind::i2_s: return 128;
    case x16_kind::tq2_0:
    case x16_kind::q4_k:
    case x16_kind::q5_k:
    case x16_kind::q6_k:
    case x16_kind::q3_k:
    case x16_kind::q2_k:
    case x16_kind::iq4_xs: return 256;
    default: return 32;
    }
}

size_t x16_group_bytes(x16_kind kind, int64_t k) {
    const size_t bytes = size_t(k / x16_block_elems(kind)) * record_bytes(kind);
    return (bytes + 63) / 64 * 64;
}

int64_t x16_act_sums_count(x16_kind kind, int64_t k) {
    switch (kind) {
    case x16_kind::q4_0_blockwise:
    case x16_kind::mxfp4_blockwise:
        return k / 32;
    case x16_kind::q4_0:
    case x16_kind::q5_0:
    case x16_kind::q8_0:
    case x16_kind::nvfp4: return k / 4;
    case x16_kind::awq4:
    case x16_kind::awq4_g64:
    case x16_kind::tq2_0: return k / 32;
    case x16_kind::q4_1:
    case x16_kind::q5_1:
    case x16_kind::i2_s:
    case x16_kind::q4_k:
    case x16_kind::q5_k:
    case x16_kind::q6_k:
    case x16_kind::q3_k:
    case x16_kind::q2_k:
    case x16_kind::iq4_nl_blockwise:
    case x16_kind::iq4_xs: return 0;
    }
    return 0;
}

void repack_x16(x16_kind kind, const uint8_t* src, size_t src_stride, int64_t k, uint8_t* dst) {
    const int64_t be = x16_block_elems(kind), nb = k / be;
    const size_t rb = record_bytes(kind);
    for (int r = 0; r < 16; r++) {
        const uint8_t* row = src + size_t(r) * src_stride;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t* q = dst + size_t(b) * rb;
            switch (kind) {
            case x16_kind::q4_0_blockwise:
            case x16_kind::q4_0:
            case x16_kind::iq4_nl_blockwise: { // iq4_nl's block is q4_0's bytes: f16 d, then nibbles in its order
                static_assert(sizeof(block_iq4_nl) == sizeof(block_q4_0));
                const auto& x = reinterpret_cast<const block_q4_0*>(row)[b];
                for (int v = 0; v < 4; v++)
                    for (int j = 0; j < 4; j++) q[v * 64 + r * 4 + j] = x.qs[4 * v + j];
                reinterpret_cast<uint16_t*>(q + 256)[r] = x.d.bits;
                break;
            }
            case x16_kind::mxfp4_blockwise: {
                const auto& x = reinterpret_cast<const block_mxfp4*>(row)[b];
                for (int v = 0; v < 4; v++)
                    for (int j = 0; j < 4; j++) q[v * 64 + r * 4 + j] = x.qs[4 * v + j];
                q[256 + r] = x.e;
                q[256 + 16 + r] = 0;
                break;
            }
            case x16_kind::q4_1: {
                const auto& x = reinterpret_cast<const block_q4_1*>(row)[b];
                for (int v = 0; v < 4; v++)
                    for (int j = 0; j < 4; j++) q[v * 64 + r * 4 + j] = x.qs[4 * v + j];
                reinterpret_cast<uint16_t*>(q + 256)[r] = x.d.bits;
                reinterpret_cast<uint16_t*>(q + 256)[16 + r] = x.m.bits;
                break;
            }
            case x16_kind::q5_0:
            case x16_kind::q5_1: { // q4_0's nibble vectors, then one vector: lane r, byte j, bit g = the fifth bit of
                                   // element 4g + j; then f16 d (q5_1: and m)
                const bool q51 = kind == x16_kind::q5_1;
                const auto* x0 = reinterpret_cast<const block_q5_0*>(row) + b;
                const auto* x1 = reinterpret_cast<const block_q5_1*>(row) + b;
                const uint8_t* qs = q51 ? x1->qs : x0->qs;
                uint32_t qh;
                std::memcpy(&qh, q51 ? x1->qh : x0->qh, 4);
                for (int v = 0; v < 4; v++)
                    for (int j = 0; j < 4; j++) q[v * 64 + r * 4 + j] = qs[4 * v + j];
                for (int j = 0; j < 4; j++) {
                    uint8_t bits = 0;
                    for (int g = 0; g < 8; g++) bits |= uint8_t(((qh >> (4 * g + j)) & 1) << g);
                    q[256 + r * 4 + j] = bits;
                }
                auto* sc = reinterpret_cast<uint16_t*>(q + 320);
                sc[r] = q51 ? x1->d.bits : x0->d.bits;
                if (q51) sc[16 + r] = x1->m.bits;
                break;
            }
            case x16_kind::q8_0: {
                const auto& x = reinterpret_cast<const block_q8_0*>(row)[b];
                for (int g = 0; g < 8; g++)
                    for (int j = 0; j < 4; j++) q[g * 64 + r * 4 + j] = uint8_t(x.qs[4 * g + j]) ^ 0x80;
                reinterpret_cast<uint16_t*>(q + 512)[r] = x.d.bits;
                break;
            }
            case x16_kind::nvfp4: {
                const auto& x = reinterpret_cast<const block_nvfp4*>(row)[b];
                // element e: sub-block e / 16, byte 8 (e / 16) + e % 8, high nibble when e % 16 >= 8
                auto code = [&](int e) { return (x.qs[8 * (e / 16) + e % 8] >> (4 * ((e % 16) / 8))) & 0xf; };
                for (int v = 0; v < 8; v++)
                    for (int j = 0; j < 4; j++)
                        q[v * 64 + r * 4 + j] = uint8_t(code(4 * v + j) | (code(32 + 4 * v + j) << 4));
                for (int sb = 0; sb < 4; sb++) // 0x7f reads as 0 (ue4m3_to_fp32_half); bit 7 is ignored
                    q[512 + 16 * sb + r] = x.d[sb] == 0x7f ? 0 : x.d[sb] & 0x7f;
                break;
            }
            case x16_kind::awq4:
            case x16_kind::awq4_g64: {
                auto pack = [&]<int G>(const block_awq4<G>& x) {
                    auto code = [&](int e) { return int(x.qs[e / 8] >> (4 * awq_slot(e % 8))) & 0xf; };
                    for (int qb = 0; qb < G / 32; qb++)
                        for (int v = 0; v < 4; v++) put_nibbles(q + (4 * qb + v) * 64, r, 32 * qb + 4 * v, code);
                    reinterpret_cast<uint16_t*>(q + G * 8)[r] = x.s.bits;
                    q[G * 8 + 32 + r] = x.z;
                    q[G * 8 + 48 + r] = 0;
                };
                if (kind == x16_kind::awq4)
                    pack(reinterpret_cast<const block_awq4<128>*>(row)[b]);
                else
                    pack(reinterpret_cast<const block_awq4<64>*>(row)[b]);
                break;
            }
            case x16_kind::tq2_0: {
                const auto& x = reinterpret_cast<const block_tq2_0*>(row)[b];
                for (int h = 0; h < 2; h++) // vector 2l + h: the kernel reads the record front to back
                    for (int l = 0; l < 8; l++) std::memcpy(q + (2 * l + h) * 64 + r * 4, x.qs + 32 * h + 4 * l, 4);
                reinterpret_cast<uint16_t*>(q + 1024)[r] = x.d.bits;
                break;
            }
            case x16_kind::i2_s: {
                const auto& x = reinterpret_cast<const block_i2_s*>(row)[b];
                for (int l = 0; l < 8; l++) std::memcpy(q + l * 64 + r * 4, x.qs + 4 * l, 4);
                break;
            }
            case x16_kind::q4_k: {
                const auto& x = reinterpret_cast<const block_q4_k*>(row)[b];
                uint8_t L[256];
                k_levels(x, L);
                put_k_nibbles(q, r, L);
                put_k_scales(q, r, x, 2048);
                break;
            }
            case x16_kind::q5_k: { // then 8 vectors of fifth bits: vector c, lane r, byte j, bit b = slot 8c + b's
                const auto& x = reinterpret_cast<const block_q5_k*>(row)[b];
                uint8_t L[256];
                k_levels(x, L);
                put_k_nibbles(q, r, L);
                put_k_high<1>(q, r, L);
                put_k_scales(q, r, x, 2048 + 512);
                break;
            }
            case x16_kind::q6_k: { // then 16 vectors of high bit pairs: vector s, lane r, byte j, bits 2f..2f+1 =
                                   // slot 4s + f's; then 16 x 16 int8 scales (byte 16 s + r) and 16 f16 d
                const auto& x = reinterpret_cast<const block_q6_k*>(row)[b];
                uint8_t L[256];
                k_levels(x, L);
                put_k_nibbles(q, r, L);
                put_k_high<2>(q, r, L);
                for (int s = 0; s < 16; s++) q[3072 + 16 * s + r] = uint8_t(x.scales[s]);
                reinterpret_cast<uint16_t*>(q + 3328)[r] = x.d.bits;
                reinterpret_cast<uint16_t*>(q + 3360)[r] = 0; // the padding
                break;
            }
            case x16_kind::q2_k: { // 16 vectors of 2-bit levels (vector s, lane r, byte j, bits 2f..2f+1 = element
                                   // 16s + 4f + j's), then 16 x 16 scales, 16 x 16 mins (byte 16 s + r), 16 f16 d, dmin
                const auto& x = reinterpret_cast<const block_q2_k*>(row)[b];
                for (int s = 0; s < 16; s++) {
                    for (int j = 0; j < 4; j++) {
                        uint8_t v = 0;
                        for (int f = 0; f < 4; f++) v = uint8_t(v | (q2_k::level(x, 16 * s + 4 * f + j) << (2 * f)));
                        q[64 * s + 4 * r + j] = v;
                    }
                    q[1024 + 16 * s + r] = uint8_t(x.scales[s] & 0xF);
                    q[1280 + 16 * s + r] = uint8_t(x.scales[s] >> 4);
                }
                reinterpret_cast<uint16_t*>(q + 1536)[r] = x.d.bits;
                reinterpret_cast<uint16_t*>(q + 1568)[r] = x.dmin.bits;
                break;
            }
            case x16_kind::iq4_xs: { // the level indices as q4_K's nibbles, then 8 x 16 int8 scales ls - 32 (byte
                                     // 16 c + r), 16 f16 d
                const auto& x = reinterpret_cast<const block_iq4_xs*>(row)[b];
                uint8_t L[256];
                for (int c = 0; c < 8; c++) {
                    for (int j = 0; j < 16; j++) {
                        L[32 * c + j] = x.qs[16 * c + j] & 0xf;
                        L[32 * c + 16 + j] = x.qs[16 * c + j] >> 4;
                    }
                    q[2048 + 16 * c + r] = uint8_t(int8_t(iq4_xs::scale(x, c)));
                }
                put_k_nibbles(q, r, L);
                reinterpret_cast<uint16_t*>(q + 2176)[r] = x.d.bits;
                reinterpret_cast<uint16_t*>(q + 2208)[r] = 0; // the padding
                break;
            }
            case x16_kind::q3_k: { // the levels 0..7 as nibbles, then 16 x 16 int8 scales (byte 16 s + r), 16 f16 d
                const auto& x = reinterpret_cast<const block_q3_k*>(row)[b];
                uint8_t L[256];
                k_levels(x, L);
                put_k_nibbles(q, r, L);
                for (int s = 0; s < 16; s++) q[2048 + 16 * s + r] = uint8_t(int8_t(q3_k::scale(x, s)));
                reinterpret_cast<uint16_t*>(q + 2304)[r] = x.d.bits;
                reinterpret_cast<uint16_t*>(q + 2336)[r] = 0; // the padding
                break;
            }
            }
        }
    }
    const size_t used = size_t(nb) * rb;
    std::memset(dst + used, 0, x16_group_bytes(kind, k) - used);
}

bool x16_kind_for(const tensor& w, x16_kind& kind) {
    // 2-D matrices of 16 rows or more (rows past the last whole group: the row kernels, in the same order), and 3-D
    // stacks of them (mixture-of-experts weights: each expert's rows are whole groups)
    if (!(w.flags & flag_param) || w.is_view() || !w.is_contiguous() || w.ne[3] != 1) return false;
    if (w.ne[0] % 32 != 0 || w.ne[1] < 16 || (w.ne[2] != 1 && w.ne[1] % 16 != 0)) return false;
    // a token table that is not also the output matrix is only looked up (get_rows reads the file)
    if (w.lookup_only()) return false;
    // llama.cpp repacks (and sums blockwise) the q4_0 and mxfp4 matrices whose row count is a multiple of 8, the
    // tied output's copy of the token table included (mul_mat's row kernels: vec_dot_rows8)
    const bool rows8 = w.ne[1] % 8 == 0;
    switch (w.t) {
    case type::q4_0: kind = rows8 ? x16_kind::q4_0_blockwise : x16_kind::q4_0; break;
    case type::q4_1: kind = x16_kind::q4_1; break;
    case type::q5_0: kind = x16_kind::q5_0; break;
    case type::q5_1: kind = x16_kind::q5_1; break;
    case type::q8_0: kind = x16_kind::q8_0; break;
    case type::nvfp4: kind = x16_kind::nvfp4; break;
    case type::awq4: kind = x16_kind::awq4; break;
    case type::awq4_g64: kind = x16_kind::awq4_g64; break;
    case type::tq2_0: kind = x16_kind::tq2_0; break;
    case type::i2_s: kind = x16_kind::i2_s; break;
    case type::q4_k: // llama.cpp's repacked orders only (q4_K_8x8)
        if (!rows8) return false;
        kind = x16_kind::q4_k;
        break;
    case type::q5_k: kind = x16_kind::q5_k; break;
    case type::q6_k: kind = x16_kind::q6_k; break;
    case type::q3_k: kind = x16_kind::q3_k; break;
    case type::q2_k: kind = x16_kind::q2_k; break;
    case type::mxfp4: // blockwise only (no repacked kind in ggml_vec_dot's order)
        if (!rows8) return false;
        kind = x16_kind::mxfp4_blockwise;
        break;
    case type::iq4_nl: // likewise (llama.cpp's iq4_nl_8x8)
        if (!rows8) return false;
        kind = x16_kind::iq4_nl_blockwise;
        break;
    case type::iq4_xs: kind = x16_kind::iq4_xs; break;
    default: return false;
    }
    if (w.ne[0] % x16_block_elems(kind) != 0) return false;
    return find_x16_kernels(kind).gemm != nullptr;
}

repacked_weight* repack_store::reserve(const tensor& w) {
    x16_kind kind;
    if (!x16_kind_for(w, kind)) return nullptr;
    repacked_weight r;
    r.kind = kind;
    r.k = w.ne[0];
    r.n = w.ne[1] * w.ne[2];
    r.group_bytes = x16_group_bytes(kind, r.k);
    r.scale = read_tensor_scale(w.t, w.data, w.n_elements()); // i2_s's tail; 1 otherwise
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
