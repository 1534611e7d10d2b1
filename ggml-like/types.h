// types.h: tensor element types with their GGUF ids, and the size table every layer uses (rows, blocks, bytes).
// The block formats themselves (layout and math) live in quant/; this file only knows their sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tessera {

// Values equal ggml's GGUF type ids where ggml defines one (ggml.h); ids >= 1024 are tessera's own.
enum class type : uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q8_1 = 9,
    q2_k = 10,
    q3_k = 11,
    q4_k = 12,
    q5_k = 13,
    q6_k = 14,
    q8_k = 15,
    iq2_xxs = 16,
    iq2_xs = 17,
    iq3_xxs = 18,
    iq1_s = 19,
    iq4_nl = 20,
    iq3_s = 21,
    iq2_s = 22,
    iq4_xs = 23,
    i8 = 24,
    i16 = 25,
    i32 = 26,
    i64 = 27,
    f64 = 28,
    iq1_m = 29,
    bf16 = 30,
    tq1_0 = 34,
    tq2_0 = 35,
    i2_s = 36, // BitNet's fork (collides with an id upstream ggml retired); FORMATS.md §4.3
    mxfp4 = 39,
    nvfp4 = 40,
    q1_0 = 41,
    awq4 = 1024,     // tessera's own: AWQ int4, group 128 (quant/awq4.h); never in a plain llama.cpp file
    awq4_g64 = 1025, // the same with group 64
    i8_s = 1026,     // activations only: int8 with one scale per row, the dot partner of i2_s (quant/i8_s.h)
};

struct type_traits {
    const char* name;   // lower-case name, as ggml prints it ("q4_1")
    int64_t block_size; // elements per block (1 for plain scalars)
    size_t type_size;   // bytes per block
    bool computable;    // tessera has a block format (quant/) for it; otherwise it can only be listed, not run
    size_t tail_bytes = 0; // bytes a whole tensor carries after its rows (i2_s: 32, its f32 scale first)
};

// Traits of a known type id; nullptr when the id is not a type tessera knows (never throws).
const type_traits* find_type(uint32_t id);
// Traits of a type that must be known (TS_ASSERT otherwise).
const type_traits& type_info(type t);
// Parses a lower-case type name ("q8_0"); false when unknown.
bool type_from_name(std::string_view name, type& out);

inline const char* type_name(type t) { return type_info(t).name; }
inline int64_t block_size(type t) { return type_info(t).block_size; }
inline size_t type_size(type t) { return type_info(t).type_size; }
// Bytes of one row of ne0 elements; ne0 must be a multiple of the block size.
inline size_t row_size(type t, int64_t ne0) { return type_size(t) * size_t(ne0 / block_size(t)); }
inline bool is_quantized(type t) { return block_size(t) > 1; }
// Bytes of a whole tensor of n_elements (whole rows): the rows plus the type's tail. This is what a GGUF file stores
// for it (i2_s: n/4 + 32).
inline size_t tensor_bytes(type t, int64_t n_elements) {
    return type_size(t) * size_t(n_elements / block_size(t)) + type_info(t).tail_bytes;
}

} // namespace tessera
