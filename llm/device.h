// device.h: where a session runs (CPU or CUDA), what GPU the machine has, and making the backend for a choice.
// The CUDA backend is optional at build time (TESSERA_HAS_CUDA); without it find_gpu() says so and CUDA is refused.
#pragma once

#include "ggml-like/backend.h"

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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

// How many CUDA devices there are (0 without CUDA). Never throws.
int gpu_count();

// Whether `d` can compute with weights of type t (every type on the CPU; the CUDA backend's list otherwise).
bool device_supports_weights(device_type d, type t);

// A backend for `d` (n_threads: CPU threads, 0 = default; exact: CUDA reproduces the CPU's bits, session_params::exact;
// gpu: the CUDA device). Throws tessera::error when d is CUDA and there is no such GPU.
std::unique_ptr<backend> make_backend(device_type d, int n_threads, bool exact = false, int gpu = 0);

// A group for tensor parallelism over these backends (ggml-like/backend.h backend_group), all of one kind: host
// memory for CPU backends, NCCL for CUDA ones (their devices, in the order given). Does not join them. Throws
// tessera::error for a mix of kinds or when CUDA's needs NCCL and the build has none.
std::shared_ptr<backend_group> make_group(const std::vector<backend*>& members);

} // namespace tessera
