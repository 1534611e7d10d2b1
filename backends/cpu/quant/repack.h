// repack.h: load-time repacking of block-format weight matrices into groups of 16 interleaved rows, and the kernels
// that multiply them. The layout belongs to the CPU backend, never to a file.
//
// Why: a row-at-a-time dot ends every block (or row) with a horizontal sum across SIMD lanes. With 16 rows side by
// side, lane r of every vector belongs to row r: a block is a few loads and integer dots (vpdpbusd: 4 bytes x 16 rows
// each) against one activation word broadcast to all lanes, with no shuffles and no horizontal sums until the end.
//
// Results stay bit-identical to the row kernels, because each lane keeps exactly the accumulators the row kernel keeps
// (integer sums are exact, so only the float steps need the same order):
//   - `q4_0_blockwise` (q4_0 as llama.cpp's repacked q4_0_8x8 kernels sum it): per row, per block,
//     acc = fma(float(integer block dot), d_w * d_a, acc).
//   - `q4_0`, `q4_1`, `q8_0` (ggml_vec_dot_*; for q8_0 also tinyBLAS_Q0_AVX's, llama.cpp's x86 prompt path) and
//     `nvfp4` (ggml's AVX2 kernel): per row 8 float lanes, lane g (elements 4g..4g+3 of every 32)
//     acc_g = fma(scale, float(integer dot of those 4), acc_g); at the end the 8 lanes are folded as hsum_float_8
//     does, plus, for q4_1, the running sum of m_w * s_a. nvfp4's 64-element block is two such steps (q8_0 blocks
//     2b, 2b + 1), scale = UE4M3(d_sub) * d_a as ggml multiplies it.
//   - `tq2_0` (ggml's AVX2 kernel): per row 8 float lanes; lane l of a 256-block is the exact integer
//     sum over elements 128h + 32n + 4l + (0..3) (h < 2, n < 4) of code * q minus sum q[32l .. 32l + 31] (bsums),
//     acc_l = fma(float(int), d_a * d_w, acc_l); folded as hsum_float_8.
//   - `awq4`, `awq4_g64` (tessera's own order, the row kernel's too): per row, per group g, per q8_1 block b of it,
//     the exact integer I = sum (q - z) q8; acc_g = fma(float(I), d8_b, acc_g) (from 0), acc = fma(s_g, acc_g, acc).
//   - `mxfp4_blockwise` (mxfp4 as llama.cpp's repacked mxfp4_8x8 kernels sum it): per row, per block,
//     acc = fma(float(integer block dot of doubled E2M1 values), 2^(e - 128) * d_a, acc).
//   - `i2_s` (BitNet's order): the exact integer sum over the whole row of (code - 1) q, times the row's d_a; mul_mat
//     then multiplies by the tensor's scale (read_tensor_scale), as it does for the row kernel.
//   - `q5_0`, `q5_1`: q4_0's and q4_1's lanes (ggml_vec_dot's; for q5_0 tinyBLAS's too).
//   - K formats against q8_K, two orders each, picked by the matmul's batch as llama.cpp picks them (x16_batch):
//     `q4_k` (llama.cpp's repacked q4_K_8x8, matrices of rows % 8 == 0): S = sum sc x dot, M = sum m x (sub-block
//     activation sum), exact; its gemv per super-block acc = fma(float(S), d_w d_a, acc), acc_min = fma(float(M),
//     dmin_w d_a, acc_min), result acc - acc_min; its gemm (whole groups of 4 activation rows) the same per 64
//     elements. `q5_k`, `q6_k`, `q3_k`: under 8 activation rows ggml_vec_dot's 8 int32 lanes a super-block (lane t: chunks
//     of 32, elements 4t..4t+3 of each, times their scales; q6_K / q3_K minus 32 / 4 sc bsum of sub-blocks 2t, 2t + 1),
//     acc_t = fma(d_a d_w, float(lane), acc_t), hsum_float_8, q5_K + summs = fma(-d_a dmin_w, float(M), summs);
//     from 8 rows ggml's tiled order: r = fma(-dmin_w, float(M), float(S) d_w), acc = fma(r, d_a, acc). `q2_k`: its
//     vec_dot's lanes as q3_K's (scales unsigned, no offset), each lane first fma'd its min lane m_2t bsum_2t +
//     m_2t+1 bsum_2t+1 times -d_a dmin_w; from 8 rows the tiled order as q5_K's.
//   - `iq4_nl_blockwise` (llama.cpp's iq4_nl_8x8): q4_0_blockwise's order on the table's levels. `iq4_xs`:
//     ggml_vec_dot's 8 int32 lanes (lane t: sum over sub-blocks of ls x the dot of elements 32c + 4t..+3), fma of d_w d_a,
//     hsum_float_8; from 8 rows the tiled order (acc = fma(float(S) d_w, d_a, acc)). Levels are signed (-127..113):
//     AVX2 dots |level| with the activation signed as the level, VNNI the positive and negative parts apart.
//
// Group layout (16 rows, padded to 64 bytes): one record per block, values then scales (one sequential stream; a
// separate scale array measured 40% slower from DRAM). "Vector" = 64 bytes, lane r = its bytes 4r..4r+3 = row r.
//   q4_0, q4_1: 32-element blocks; 4 vectors then [16 f16 d][q4_1: 16 f16 m]; vector v, lane r, byte j holds element
//               4v + j of row r in its low nibble and element 16 + 4v + j in its high nibble
//   q8_0:       8 vectors then 16 f16 d; vector g, lane r, byte j = element 4g + j of row r, plus 128
//   mxfp4:      32-element blocks; 4 vectors of E2M1 codes, nibbles as q4_0, then 16 E8M0 bytes and 16 zero bytes
//   nvfp4:      64-element blocks; 8 vectors then 64 bytes of UE4M3 sub-scales (byte 16s + r = row r's d[s], with
//               0x7f and bit 7 cleared: the kernel reads byte << 7 as an f16 of value UE4M3/2 / 128, exactly);
//               vector v, lane r, byte j: low nibble = E2M1 code of element 4v + j, high nibble = element 32 + 4v + j
//   awq4, awq4_g64: one record per group of G: G/32 x 4 vectors (q8_1 block b's vectors 4b..4b+3, nibbles as q4_0
//               within the block, AWQ's order undone), then 64 bytes: 16 f16 s, 16 u8 z, 16 zero bytes
//   tq2_0:      256-element blocks; 16 vectors then 16 f16 d and 32 zero bytes; vector 2l + h, lane r = bytes
//               qs[32h + 4l .. + 3] of row r's block (bits 2n..2n+1 of byte j: element 128h + 32n + 4l + j)
//   i2_s:       128-element blocks; 8 vectors, no scale; vector l, lane r = bytes qs[4l .. 4l + 3] of row r's block
//               (bits 7-2n..6-2n of byte j: element 32n + 4l + j)
//   q5_0, q5_1: q4_0's 4 vectors, then one of fifth bits (lane r, byte j, bit g: element 4g + j's), then 16 f16 d
//               [q5_1: 16 f16 m]
//   q4_K, q5_K, q6_K: 256-element super-blocks; word slot w = elements 4w..4w+3; 32 vectors of nibbles (vector i,
//               lane r, byte j: low nibble = element 8i + j's low 4 bits, high nibble = element 8i + 4 + j's), then
//               q5_K: 8 vectors of fifth bits (vector c, byte j, bit b: element 32c + 4b + j's), q6_K: 16 vectors of
//               high bit pairs (vector s, byte j, bits 2f..2f+1: element 16s + 4f + j's); then the sub-block scales
//               as bytes (byte 16s + r = row r's; q4_K / q5_K: 8 scales, 8 mins, both unpacked to 0..63; q6_K: 16
//               int8), 16 f16 d [q4_K / q5_K: 16 f16 dmin; q6_K: 32 zero bytes]
//   q3_K:       q6_K's nibble vectors holding the levels 0..7, no high bits; 16 x 16 int8 scales, 16 f16 d, 32 zero
//               bytes
//   iq4_nl:     q4_0's record (the file's block has q4_0's bytes), the nibbles indexing the levels
//   iq4_xs:     q4_K's 32 nibble vectors of level indices, 8 x 16 int8 scales ls - 32, 16 f16 d, 32 zero bytes
//   q2_K:       16 vectors of 2-bit levels (vector s, byte j, bits 2f..2f+1: element 16s + 4f + j's), 16 x 16 scales,
//               16 x 16 mins (bytes 0..15), 16 f16 d, 16 f16 dmin
// vpdpbusd multiplies unsigned by signed bytes, so weights are stored or decoded unsigned (nibble, q8 + 128, E2M1
// value + 12, 2-bit code) and each integer dot starts from a correction taken from the activations (exact in int32):
// -8 x (sum of the 4 or 32 activation bytes) for q4_0, -16 x (sum of 4) for q5_0, -128 x (sum of 4) for q8_0, -12 x
// (sum of 4) for nvfp4 and (of 32) for mxfp4, -(sum of 32) per lane for tq2_0, -(sum of 32) per q8_1 block for awq4
// (times z, per row). mul_mat computes those sums once per activation row (act_sums). The K formats take theirs from
// q8_K's own bsums (q6_K: levels 0..63, 32 sc x bsum taken off).
#pragma once

#include "ggml-like/tensor.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>

namespace tessera::cpu {

enum class x16_kind : uint8_t {
    q4_0_blockwise, q4_0, q4_1, q8_0, nvfp4, awq4, awq4_g64, tq2_0, i2_s, mxfp4_blockwise, q4_k, q5_k, q6_k, q5_0, q5_1,
    q3_k, q2_k, iq4_nl_blockwise, iq4_xs
};

// y[j * ys + r] = row r of the group . activation row j (at a + j * as, the weight's dot type), r < 16, j < na;
// nb = k / 32 (every kind's block is a multiple of 32 elements); s: that row's act_sums (at s + j * ss int32s), unused
// by kinds without corrections. i2_s's output is at unit weight scale (the caller multiplies by the tensor's scale).
using x16_gemm_fn = void (*)(const uint8_t* w, int64_t nb, const uint8_t* a, size_t as, const int32_t* s, size_t ss,
                             int64_t na, float* y, size_t ys);
// the corrections for one activation row (dot-type row of k elements) -> s (act_sums_count int32s)
using x16_sums_fn = void (*)(const void* a, int32_t* s, int64_t k);

// Which activation rows of a matmul a kind's batch kernel takes (llama.cpp picks the order by the batch): none; all of
// them once the matmul has 8 or more (q5_K, q6_K: ggml's tiled kernels); those in whole groups of 4 (q4_K: its
// repacked gemm; the last m % 4 rows go to its gemv)
enum class x16_batch : uint8_t { none, m8, groups4 };

struct x16_kernels {
    x16_gemm_fn gemm = nullptr;
    x16_sums_fn sums = nullptr;       // null: no corrections
    x16_gemm_fn gemm_batch = nullptr; // the batch order (x16_batch), same arguments
    x16_batch batch = x16_batch::none;
};

// How many of a tile's na activation rows, starting at row m0 (a multiple of 4) of a matmul of m, take gemm_batch
// (the first ones); gemm takes the rest
inline int64_t x16_batch_rows(const x16_kernels& k, int64_t m, int64_t m0, int64_t na) {
    switch (k.batch) {
    case x16_batch::none: return 0;
    case x16_batch::m8: return m >= 8 ? na : 0;
    case x16_batch::groups4: return std::max<int64_t>(0, std::min(na, m - m % 4 - m0));
    }
    return 0;
}

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
// elements per block of a kind (one record of the group layout): 32, 64 (nvfp4, awq4_g64), 128 (awq4, i2_s), 256
int64_t x16_block_elems(x16_kind kind);
// bytes of one 16-row group with k elements per row
size_t x16_group_bytes(x16_kind kind, int64_t k);

// Scalar repacking of 16 rows (row i at src + i * src_stride) into one group at dst (x16_group_bytes).
void repack_x16(x16_kind kind, const uint8_t* src, size_t src_stride, int64_t k, uint8_t* dst);

struct repacked_weight {
    x16_kind kind;
    // elements per row, rows (all experts' of a 3-D weight, expert by expert: a multiple of 16); n / 16 groups, the
    // rows past them (2-D only) stay with the file
    int64_t k = 0, n = 0;
    size_t group_bytes = 0;
    float scale = 1.0f;    // the tensor's scale (i2_s's tail), applied to the output; 1 for every other type
    std::unique_ptr<uint8_t, void (*)(void*)> data{nullptr, nullptr};
    const uint8_t* group(int64_t g) const { return data.get() + size_t(g) * group_bytes; }
};

// Which repacking (if any) the CPU backend uses for a weight: q4_0 / q4_1 / q5_0 / q5_1 / q8_0 / nvfp4 / awq4 /
// awq4_g64 / tq2_0 / i2_s / mxfp4 / q5_K / q6_K / q4_K (rows % 8 == 0), 2-D with 16 rows or more (or a 3-D stack of
// experts of whole groups, for mul_mat_id: gemm only, never gemm_batch), contiguous, on a CPU with AVX2. q4_0 and mxfp4
// matrices llama.cpp would repack (rows a multiple of 8, the tied output's token table too) are summed blockwise, the
// rest in ggml_vec_dot's order (mxfp4 then is not repacked). A token table is repacked only as the tied output
// (flag_tied), for mul_mat; get_rows reads the file.
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
