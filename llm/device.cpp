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

int gpu_count() {
#ifdef TESSERA_HAS_CUDA
    return int(cuda::list_devices().size());
#else
    return 0;
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

std::unique_ptr<backend> make_backend(device_type d, int n_threads, bool exact, int gpu) {
    switch (d) {
    case device_type::cpu: {
        cpu::cpu_options opt;
        opt.n_threads = n_threads;
        return std::make_unique<cpu::cpu_backend>(opt);
    }
    case device_type::cuda: {
#ifdef TESSERA_HAS_CUDA
        return std::make_unique<cuda::cuda_backend>(gpu, exact);
#else
        (void)exact, (void)gpu;
        std::string why;
        find_gpu(&why);
        throw error(fmt::format("cannot run on CUDA: {}", why));
#endif
    }
    }
    TS_ASSERT(!"unknown device type");
    return nullptr;
}

std::shared_ptr<backend_group> make_group(const std::vector<backend*>& members) {
    TS_ASSERT(!members.empty());
    size_t n_cpu = 0;
    for (backend* b : members)
        if (dynamic_cast<cpu::cpu_backend*>(b)) n_cpu++;
    if (n_cpu == members.size()) return std::make_shared<cpu::host_group>(int(members.size()));
#ifdef TESSERA_HAS_CUDA
    std::vector<int> devices;
    for (backend* b : members)
        if (auto* c = dynamic_cast<cuda::cuda_backend*>(b)) devices.push_back(c->info().id);
    if (devices.size() == members.size()) return cuda::make_nccl_group(devices);
#endif
    throw error("a tensor-parallel group needs backends of one kind (all CPU or all CUDA)");
}

} // namespace tessera
