// gelu.cpp: the f16 GELU table (gelu.h).
#include "ggml-like/gelu.h"

#include <cmath>
#include <vector>

namespace tessera {

namespace {

// ggml's gelu_f32 as its CPU backend is compiled (GCC with FMA contracts 1 + a x x into fma(a x, x, 1)); glibc's tanhf
float gelu_f32(float x) {
    constexpr float coef_a = 0.044715f;
    constexpr float sqrt_2_over_pi = 0.79788456080286535587989211986876f;
    return 0.5f * x * (1.0f + std::tanh(sqrt_2_over_pi * x * std::fma(coef_a * x, x, 1.0f)));
}

} // namespace

const uint16_t* gelu_f16_table() {
    static const std::vector<uint16_t> table = [] {
        std::vector<uint16_t> t(1 << 16);
        for (uint32_t h = 0; h < (1u << 16); h++) t[h] = fp32_to_fp16(gelu_f32(fp16_to_fp32(uint16_t(h))));
        return t;
    }();
    return table.data();
}

} // namespace tessera
