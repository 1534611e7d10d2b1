// device.h: where a session runs (CPU or CUDA), what GPU the machine has, and making the backend for a choice.
// The CUDA backend is optional at build time (TESSERA_HAS_CUDA); without it find_gpu() says so and CUDA is refused.
#pragma once

#include "ggml-like/backend.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

namespace tessera {

enum class device_type { cpu, cuda };

struct gpu_info {
    std::string name;      // "NVIDIA H100 80GB HBM3"
    size_t free_bytes = 0; // device memory free now
    size_t total_bytes = 0;
};

// The first CUDA device, or nullopt with the reason in *why ("this build has no CUDA support", "no CUDA-capable
// device is detected"). Never throws.
std::optional<gpu_info> find_gpu(std::string* why = nullptr);

// Whether `d` can compute with weights of type t (every type on the CPU; the CUDA backend's list otherwise).
bool device_supports_weights(device_type d, type t);

// A backend for `d` (n_threads: CPU threads, 0 = default; exact: CUDA reproduces the CPU's bits, session_params::exact).
// Throws tessera::error when d is CUDA and there is no GPU.
std::unique_ptr<backend> make_backend(device_type d, int n_threads, bool exact = false);

} // namespace tessera
