// iq3_grid.h: the point sets of ggml's 3-bit formats. A point is 4 values, each one of 8 levels; its code holds the
// level index of value k in bits 3k .. 3k + 2 (12 bits). IQ3_XXS uses 256 of the 4096 codes, IQ3_S 512; grid index i
// is the i-th member code in ascending order (as the files index them). The sets are stored as 4096-bit membership
// masks and unfolded at compile time into codes and into the packed byte form the kernels read (value k in byte k).
// Levels: IQ3_XXS 4, 12, ..., 52 and 62 (8l + 4, the top one raised to 62); IQ3_S and the quantizer 2l + 1 (1 .. 15).
// Signs: 7 sign bits name 8 signs, the 8th making the count of minus signs even (ggml's ksigns_iq2xs).
#pragma once

#include "ggml-like/fp16.h"

#include <array>
#include <cstdint>

namespace tessera::iq3 {

inline constexpr uint64_t xxs_members[64] = {
    0x2800000402058a15ull, 0x010010020522050aull, 0x200082008a050215ull, 0x0100000000200582ull,
    0x2800801080000800ull, 0x0000040004000082ull, 0x0010000020000000ull, 0x0002000800005100ull,
    0x00000180150a050aull, 0x0000000000050205ull, 0x040000000102050aull, 0x0040004002010005ull,
    0x0000010000000022ull, 0x0200004000110000ull, 0x0000000000000020ull, 0x0000000100040000ull,
    0x0000000402450a05ull, 0x018800000102052aull, 0x0000200180058205ull, 0x1100000000001102ull,
    0x0000080020000000ull, 0x1000000200800008ull, 0x0000000000000000ull, 0x000000200000400aull,
    0x04200100000a0502ull, 0x0000005002010005ull, 0x040004000020010aull, 0x0000000008000200ull,
    0x0400008001000000ull, 0x0000200000040041ull, 0x0008000040001000ull, 0x0001000008000000ull,
    0x00008800a0008010ull, 0x1000000000000000ull, 0x0041000180010000ull, 0x0000002000000080ull,
    0x0010020000000010ull, 0x0100000800200000ull, 0x0000000000000000ull, 0x0000000001000520ull,
    0x0100000200000400ull, 0x0000200000400041ull, 0x0400000004001000ull, 0x0000080000000004ull,
    0x0400000000880100ull, 0x0000000002000004ull, 0x0000010000000000ull, 0x0000000400100000ull,
    0x0010005000100000ull, 0x0002000000020000ull, 0x0010000000008000ull, 0x0000000041000000ull,
    0x0000001000000000ull, 0x0000040000000020ull, 0x0000000008000000ull, 0x0000000000020008ull,
    0x00000400040001a8ull, 0x0000000100400000ull, 0x0000042000000400ull, 0x0001000008002001ull,
    0x0000000200020000ull, 0x0000000000100005ull, 0x0000000001000000ull, 0x0000000000000000ull,
};
inline constexpr uint64_t s_members[64] = {
    0x92050aa5082357a7ull, 0x0422001022892317ull, 0x09000aa4112249a3ull, 0x228005104a052208ull,
    0x0100020904128801ull, 0x084000a208450014ull, 0x0200040002000a40ull, 0x0000110008450015ull,
    0x040250005205ab17ull, 0x410005020902114bull, 0x040120090411a401ull, 0x0104000211820992ull,
    0x000011440a001428ull, 0x0000020005020902ull, 0x0000005000910000ull, 0x010400022002050aull,
    0x2980052a058a55abull, 0x0000020412248905ull, 0x12008802810a0092ull, 0x004001040a140225ull,
    0x2400000224090082ull, 0x0100080180040210ull, 0x0002200000020085ull, 0x0000010801400220ull,
    0x020802942a04aa04ull, 0x44010001000a102aull, 0x0000010014010401ull, 0x0800208a018a1102ull,
    0x0011040002044208ull, 0x0800401004200502ull, 0x0000000200004000ull, 0x000000002005000aull,
    0x0100010204910411ull, 0x0000220821040a84ull, 0x010480010802210aull, 0x0000000022050a10ull,
    0x0200000180100005ull, 0x00040000000200a0ull, 0x0001000010000800ull, 0x0000020801002100ull,
    0x1040049100041104ull, 0x040000000402042aull, 0x0000080041080201ull, 0x0820021000800184ull,
    0x0000004004010012ull, 0x00000a0000400400ull, 0x0000000400000000ull, 0x0000000000040014ull,
    0x000100000a002a00ull, 0x0010000000810001ull, 0x0104200410000400ull, 0x0000000100021001ull,
    0x0004000800200000ull, 0x0001000010000009ull, 0x0000000100000020ull, 0x0000000000000a00ull,
    0x0004100140050091ull, 0x0000002800100204ull, 0x0000020001024112ull, 0x0000080024000004ull,
    0x0000010000010822ull, 0x0000000400040000ull, 0x0000000002000004ull, 0x0000000000000001ull,
};

// the member codes of a 4096-bit mask, ascending
template <int N> constexpr std::array<uint16_t, N> member_codes(const uint64_t (&mask)[64]) {
    std::array<uint16_t, N> codes{};
    int n = 0;
    for (int c = 0; c < 4096; c++)
        if (mask[c / 64] >> (c % 64) & 1) codes[n++] = uint16_t(c);
    return codes;
}
inline constexpr auto xxs_codes = member_codes<256>(xxs_members);
inline constexpr auto s_codes = member_codes<512>(s_members);

constexpr uint32_t xxs_level(int l) { return l == 7 ? 62 : 8 * l + 4; }
constexpr uint32_t s_level(int l) { return 2 * l + 1; }

// a grid point as 4 bytes, value k in byte k
template <int N, class Level> constexpr std::array<uint32_t, N> packed(const std::array<uint16_t, N>& codes, Level lv) {
    std::array<uint32_t, N> g{};
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 4; k++) g[i] |= lv(codes[i] >> (3 * k) & 7) << (8 * k);
    return g;
}
inline constexpr auto xxs_grid = packed<256>(xxs_codes, xxs_level);
inline constexpr auto s_grid = packed<512>(s_codes, s_level);

// the sign byte of 7 sign bits: bit 7 set when bits 0..6 hold an odd count
TS_HD constexpr uint8_t sign_byte(uint32_t s7) {
    uint32_t p = s7 ^ s7 >> 4;
    p ^= p >> 2;
    p ^= p >> 1;
    return uint8_t((s7 & 127) | (p & 1) << 7);
}

// The grids in device memory too (CUDA code: 1 / 2 KiB, L1-resident), and point i of either on host or device.
template <int N> struct point_table {
    uint32_t v[N];
};
template <int N> constexpr point_table<N> table_of(const std::array<uint32_t, N>& g) {
    point_table<N> t{};
    for (int i = 0; i < N; i++) t.v[i] = g[size_t(i)];
    return t;
}
#if defined(__CUDACC__)
__device__ const point_table<256> xxs_grid_dev = table_of<256>(xxs_grid);
__device__ const point_table<512> s_grid_dev = table_of<512>(s_grid);
#endif
TS_HD uint32_t xxs_point(int i) {
#if defined(__CUDA_ARCH__)
    return xxs_grid_dev.v[i];
#else
    return xxs_grid[size_t(i)];
#endif
}
TS_HD uint32_t s_point(int i) {
#if defined(__CUDA_ARCH__)
    return s_grid_dev.v[i];
#else
    return s_grid[size_t(i)];
#endif
}

} // namespace tessera::iq3
