// device.cpp: find_gpu and make_backend; the only place in llm/ that knows whether CUDA was built.
#include "llm/device.h"

#include "backends/cpu/cpu_backend.h"
#include "ggml-like/error.h"

#ifdef TESSERA_HAS_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

#include <fmt/core.h>

namespace tessera {

std::optional<gpu_info> find_gpu(std::string* why) {
#ifdef TESSERA_HAS_CUDA
    const std::vector<cuda::device_info> devs = cuda::list_devices(why);
    if (devs.empty()) return std::nullopt;
    return gpu_info{devs[0].name, devs[0].free_bytes, devs[0].total_bytes};
#else
    if (why) *why = "this build has no CUDA support; configure with -DTESSERA_CUDA=ON";
    return std::nullopt;
#endif
}

bool device_supports_weights(device_type d, type t) {
    if (d == device_type::cpu) return true;
#ifdef TESSERA_HAS_CUDA
    return cuda::supports_weight_type(t);
#else
    (void)t;
    return false;
#endif
}

std::unique_ptr<backend> make_backend(device_type d, int n_threads, bool exact) {
    switch (d) {
    case device_type::cpu: {
        cpu::cpu_options opt;
        opt.n_threads = n_threads;
        return std::make_unique<cpu::cpu_backend>(opt);
    }
    case device_type::cuda: {
#ifdef TESSERA_HAS_CUDA
        return std::make_unique<cuda::cuda_backend>(0, exact);
#else
        (void)exact;
        std::string why;
        find_gpu(&why);
        throw error(fmt::format("cannot run on CUDA: {}", why));
#endif
    }
    }
    TS_ASSERT(!"unknown device type");
    return nullptr;
}

} // namespace tessera
