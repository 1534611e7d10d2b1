// repack.h: load-time repacking of q4_0 / q4_1 / q8_0 weight matrices into groups of 16 interleaved rows, and the
// kernels that multiply them. The layout belongs to the CPU backend, never to a file.
//
// Why: a row-at-a-time dot ends every block (or row) with a horizontal sum across SIMD lanes. With 16 rows side by
// side, lane r of every vector belongs to row r: a block is 4 (nibbles) or 8 (bytes) loads and 8 integer dots
// (vpdpbusd: 4 bytes x 16 rows each) against one activation word broadcast to all lanes, with no shuffles and no
// horizontal sums until the very end.
//
// Results stay bit-identical to the row kernels (and so to llama.cpp), because each lane keeps exactly the float
// accumulator the row kernel keeps:
//   - `blockwise` (q4_0 as llama.cpp's repacked q4_0_8x8 kernels sum it): per row, per block,
//     acc = fma(float(integer block dot), d_w * d_a, acc).
//   - `plain` (ggml_vec_dot_*: q4_0, q4_1, q8_0): per row 8 float lanes, lane g (elements 4g..4g+3 of every block)
//     acc_g = fma(d_w * d_a, float(integer dot of those 4), acc_g); at the end the 8 lanes are folded as hsum_float_8
//     does, plus, for q4_1, the running sum of m_w * s_a.
//
// Group layout (16 rows, nb = k / 32 blocks, padded to 64 bytes): nb block records, each [qs][16 f16 d][q4_1: 16 f16 m]
// (scales next to their values: one sequential stream; a separate scale array measured 40% slower from DRAM)
//   q4_0, q4_1: qs = 256 bytes, four 64-byte vectors; vector v, lane r, byte j holds element 4v + j of row r in its
//               low nibble and element 16 + 4v + j in its high nibble (so v's low nibbles are word-group v, high
//               nibbles word-group 4 + v)
//   q8_0:       qs = 512 bytes, eight 64-byte vectors; vector g, lane r, byte j = element 4g + j of row r, plus 128
// vpdpbusd multiplies unsigned by signed bytes, so weights are stored unsigned (nibble, or q8 + 128) and each integer
// dot starts from a correction taken from the activations: -8 x (sum of the 4 or 32 activation bytes) for q4_0,
// -128 x (sum of 4) for q8_0 (exact in int32). mul_mat computes those sums once per activation row (act_sums).
#pragma once

#include "ggml-like/tensor.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

namespace tessera::cpu {

enum class x16_kind : uint8_t { q4_0_blockwise, q4_0, q4_1, q8_0 };

// y[j * ys + r] = row r of the group . activation row j (at a + j * as, the weight's dot type), r < 16, j < na;
// s: that row's act_sums (at s + j * ss int32s), unused by kinds without corrections
using x16_gemm_fn = void (*)(const uint8_t* w, int64_t nb, const uint8_t* a, size_t as, const int32_t* s, size_t ss,
                             int64_t na, float* y, size_t ys);
// the corrections for one activation row (dot-type row of k elements) -> s (act_sums_count int32s)
using x16_sums_fn = void (*)(const void* a, int32_t* s, int64_t k);

struct x16_kernels {
    x16_gemm_fn gemm = nullptr;
    x16_sums_fn sums = nullptr; // null: no corrections
};

// The kernels for a kind on this CPU; gemm is null when the CPU has no AVX2 (then nothing is repacked).
x16_kernels find_x16_kernels(x16_kind kind);
// Each instruction-set build (tests run both where the CPU has AVX-512 VNNI)
namespace avx2 {
x16_kernels x16_kernels_for(x16_kind kind);
}
namespace avx512vnni {
x16_kernels x16_kernels_for(x16_kind kind);
}
// int32 corrections per activation row of k elements
int64_t x16_act_sums_count(x16_kind kind, int64_t k);
// bytes of one 16-row group with k elements per row
size_t x16_group_bytes(x16_kind kind, int64_t k);

// Scalar repacking of 16 rows (row i at src + i * src_stride) into one group at dst (x16_group_bytes).
void repack_x16(x16_kind kind, const uint8_t* src, size_t src_stride, int64_t k, uint8_t* dst);

struct repacked_weight {
    x16_kind kind;
    int64_t k = 0, n = 0;  // elements per row, rows (a multiple of 16)
    size_t group_bytes = 0;
    std::unique_ptr<uint8_t, void (*)(void*)> data{nullptr, nullptr};
    const uint8_t* group(int64_t g) const { return data.get() + size_t(g) * group_bytes; }
};

// Which repacking (if any) the CPU backend uses for a weight: q4_0 / q4_1 / q8_0, 2-D, contiguous, rows a multiple
// of 16, on a CPU with AVX2. q4_0 matrices llama.cpp would repack (not the token embedding) are summed blockwise,
// the rest in ggml_vec_dot's order. The embedding's copy is used by mul_mat (tied output); get_rows reads the file.
bool x16_kind_for(const tensor& w, x16_kind& kind);

// The repacked weights of one backend, by weight tensor.
class repack_store {
  public:
    // Makes room for w's repacked copy if x16_kind_for says so (nullptr if not); fill it with fill_groups.
    repacked_weight* reserve(const tensor& w);
    const repacked_weight* find(const tensor& w) const {
        auto it = map_.find(&w);
        return it == map_.end() ? nullptr : &it->second;
    }
    bool empty() const { return map_.empty(); }
    size_t bytes() const;

  private:
    std::unordered_map<const tensor*, repacked_weight> map_;
};

// Repacks groups [g0, g1) of w into r.
void fill_groups(const tensor& w, repacked_weight& r, int64_t g0, int64_t g1);

} // namespace tessera::cpu
