// types.cpp: the type table (names, block sizes, bytes per block) for every GGUF type id tessera can list.
#include "types.h"

#include "error.h"

#include <array>
#include <string>

namespace tessera {

namespace {

struct entry {
    uint32_t id;
    type_traits traits;
};

// Sizes from ggml-common.h (i2_s: BitNet's fork); computable = has a block format in quant/ (TS_BLOCK_FORMATS) or is a
// plain float. Ids >= 1024 are tessera's own (ggml has no such type).
constexpr entry table[] = {
    {0, {"f32", 1, 4, true}},          {1, {"f16", 1, 2, true}},           {2, {"q4_0", 32, 18, true}},
    {3, {"q4_1", 32, 20, true}},       {6, {"q5_0", 32, 22, true}},        {7, {"q5_1", 32, 24, true}},
    {8, {"q8_0", 32, 34, true}},       {9, {"q8_1", 32, 36, true}},        {10, {"q2_K", 256, 84, true}}, 
    {11, {"q3_K", 256, 110, true}},    {12, {"q4_K", 256, 144, true}},    {13, {"q5_K", 256, 176, true}},
    {14, {"q6_K", 256, 210, true}},   {15, {"q8_K", 256, 292, true}},    {16, {"iq2_xxs", 256, 66, false}},
    {17, {"iq2_xs", 256, 74, false}},  {18, {"iq3_xxs", 256, 98, true}},  {19, {"iq1_s", 256, 50, false}},
    {20, {"iq4_nl", 32, 18, true}},   {21, {"iq3_s", 256, 110, true}},   {22, {"iq2_s", 256, 82, false}},
    {23, {"iq4_xs", 256, 136, true}}, {24, {"i8", 1, 1, false}},          {25, {"i16", 1, 2, false}},
    {26, {"i32", 1, 4, true}},         {27, {"i64", 1, 8, false}},         {28, {"f64", 1, 8, false}},
    {29, {"iq1_m", 256, 56, false}},   {30, {"bf16", 1, 2, true}},         {34, {"tq1_0", 256, 54, false}},
    {35, {"tq2_0", 256, 66, true}},    {36, {"i2_s", 128, 32, true, 32}},  {39, {"mxfp4", 32, 17, true}},
    {40, {"nvfp4", 64, 36, true}},     {41, {"q1_0", 128, 18, false}},     {1024, {"awq4", 128, 68, true}},
    {1025, {"awq4_g64", 64, 36, true}}, {1026, {"i8_s", 128, 136, true}},
};

} // namespace

const type_traits* find_type(uint32_t id) {
    for (const auto& e : table)
        if (e.id == id) return &e.traits;
    return nullptr;
}

const type_traits& type_info(type t) {
    const type_traits* tt = find_type(uint32_t(t));
    TS_ASSERT(tt != nullptr);
    return *tt;
}

bool type_from_name(std::string_view name, type& out) {
    for (const auto& e : table) {
        std::string n = e.traits.name;
        for (auto& c : n) c = char(std::tolower((unsigned char)c));
        std::string want(name);
        for (auto& c : want) c = char(std::tolower((unsigned char)c));
        if (n == want) {
            out = type(e.id);
            return true;
        }
    }
    return false;
}

} // namespace tessera
