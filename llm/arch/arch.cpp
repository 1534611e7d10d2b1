// arch.cpp: the architecture table (arch.h).
#include "arch.h"

#include <array>

namespace tessera::arch {

namespace {

// bitnet: llama.cpp's (1bitLLM checkpoints, SwiGLU); bitnet-b1.58: BitNet's own converter (Microsoft's 2B-4T,
// squared-ReLU gate); one file serves both (bitnet.cpp)
constexpr std::array families = {
    family{"llama", llama_load, llama_build},
    family{"qwen2", qwen2_load, qwen2_build},
    family{"qwen3", qwen3_load, qwen3_build},
    family{"qwen3moe", qwen3moe_load, qwen3moe_build},
    family{"gemma3", gemma3_load, gemma3_build},
    family{"phi3", phi3_load, phi3_build},
    family{"gpt-oss", gpt_oss_load, gpt_oss_build},
    family{"bitnet", bitnet_load, bitnet_build},
    family{"bitnet-b1.58", bitnet_load, bitnet_build},
};

} // namespace

const family* find_family(std::string_view name) {
    for (const family& f : families)
        if (name == f.name) return &f;
    return nullptr;
}

std::string family_names() {
    std::string s;
    for (const family& f : families) s += (s.empty() ? "" : ", ") + std::string(f.name);
    return s;
}

} // namespace tessera::arch
