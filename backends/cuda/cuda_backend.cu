// cuda_backend.cu: device buffers (cudaMalloc), weights uploaded once into one buffer, copies on one stream, and
// compute(): one switch over ops, each launching on that stream without waiting. Kernels are in ops/.
#include "backends/cuda/cuda_backend.h"

#include "backends/cuda/common.cuh"
#include "backends/cuda/ops/ops.cuh"
#include "backends/cuda/quant/formats.cuh"
#include "ggml-like/gelu.h"
#include "ggml-like/median.h"

#include <cudaTypedefs.h> // the driver API's function types (driver_kernel_node_params)

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <unistd.h> // sysconf

namespace tessera::cuda {

namespace {
// printf-style formatting: fmt's compile-time format check does not survive nvcc's front end
[[gnu::format(printf, 1, 2)]] std::string strf(const char* f, ...) {
    va_list ap, ap2;
    va_start(ap, f);
    va_copy(ap2, ap);
    const int n = std::vsnprintf(nullptr, 0, f, ap);
    va_end(ap);
    std::string s(size_t(n > 0 ? n : 0), '\0');
    std::vsnprintf(s.data(), s.size() + 1, f, ap2);
    va_end(ap2);
    return s;
}
} // namespace

void cuda_fail(const char* file, int line, const char* expr, cudaError_t e) {
    throw error(
        strf("CUDA error %s (%s) in %s at %s:%d", cudaGetErrorName(e), cudaGetErrorString(e), expr, file, line));
}

shape4 shape_of(const tensor& t, size_t elem_bytes) {
    shape4 s;
    for (int d = 0; d < 4; d++) {
        TS_ASSERT(t.nb[d] % elem_bytes == 0);
        s.ne[d] = t.ne[d];
        s.nb[d] = int64_t(t.nb[d] / elem_bytes);
    }
    return s;
}

uint8_t* cuda_context::ptr(const tensor* t) const {
    const tensor* root = t->view_src ? t->view_src : t;
    if (root->flags & flag_param) {
        const auto it = weights->find(root);
        if (it == weights->end())
            throw error(
                strf("cuda: weight %s is used by a graph but was not loaded (backend::load_weights)", root->name));
        return it->second + (t->view_src ? t->view_offs : 0);
    }
    TS_ASSERT(t->data != nullptr);
    return static_cast<uint8_t*>(t->data);
}

size_t work_size(const tensor& node) {
    switch (node.o) {
    case op::mul_mat:
        return mul_mat_work_size(node);
    case op::attention:
        return attention_work_size(node);
    case op::mul_mat_id:
        return mul_mat_id_work_size(node);
    default:
        return 0;
    }
}

namespace {

constexpr size_t n_counters = 4096; // cuda_context::counters

// The driver's cuGraphKernelNodeGetParams: it names a kernel node's function whichever library launched it, where the
// runtime's cudaGraphKernelNodeGetParams fails on cuBLAS's nodes ("invalid device function", an API error every
// graph under compute-sanitizer). Null if the driver has none.
PFN_cuGraphKernelNodeGetParams_v12000 driver_kernel_node_params() {
    static const auto fn =
        reinterpret_cast<PFN_cuGraphKernelNodeGetParams_v12000>(driver_entry_point("cuGraphKernelNodeGetParams"));
    return fn;
}

// What cudaGraphExecUpdate needs to match: each node's type, and each kernel node's function (the driver's function
// and kernel handles), in the graph's order. A query refused leaves 0s in its place (and no error behind: the update
// decides then).
std::vector<uintptr_t> graph_shape(cudaGraph_t g) {
    size_t n = 0;
    std::vector<uintptr_t> shape;
    if (cudaGraphGetNodes(g, nullptr, &n) != cudaSuccess) {
        (void)cudaGetLastError();
        return shape;
    }
    std::vector<cudaGraphNode_t> nodes(n);
    if (n > 0 && cudaGraphGetNodes(g, nodes.data(), &n) != cudaSuccess) {
        (void)cudaGetLastError();
        return shape;
    }
    shape.reserve(2 * n);
    for (cudaGraphNode_t node : nodes) {
        cudaGraphNodeType t{};
        if (cudaGraphNodeGetType(node, &t) != cudaSuccess) {
            (void)cudaGetLastError();
            shape.push_back(0);
            continue;
        }
        shape.push_back(uintptr_t(t) + 1);
        if (t == cudaGraphNodeTypeKernel) {
            CUDA_KERNEL_NODE_PARAMS_v2 kp{};
            const auto get = driver_kernel_node_params();
            if (!get || get(reinterpret_cast<CUgraphNode>(node), &kp) != CUDA_SUCCESS) kp = {};
            shape.push_back(reinterpret_cast<uintptr_t>(kp.func));
            shape.push_back(reinterpret_cast<uintptr_t>(kp.kern));
        }
    }
    return shape;
}

std::string mib(size_t bytes) {
    return strf("%.1f MiB", double(bytes) / (1024.0 * 1024.0));
}

struct device_buffer final : buffer {
    void* p = nullptr;
    size_t n = 0;
    // what: what the memory is for, named in the out-of-memory error
    device_buffer(size_t bytes, const device_info& dev, const char* what) : n(bytes) {
        const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1));
        if (e == cudaErrorMemoryAllocation) {
            (void)cudaGetLastError(); // clear it, so that the next check does not report it again
            size_t free_b = 0, total_b = 0;
            (void)cudaMemGetInfo(&free_b, &total_b);
            int n_dev = 0;
            (void)cudaGetDeviceCount(&n_dev);
            throw error(strf("CUDA out of memory: %s needs %s, %s of %s free on %s (device %d); %sput fewer layers "
                             "on the GPU (-ngl N) or run on the CPU (--device cpu)",
                             what, mib(bytes).c_str(), mib(free_b).c_str(), mib(total_b).c_str(), dev.name.c_str(), dev.id,
                             n_dev > 1 ? "spread the model over the GPUs (--split-mode layer or row), " : ""));
        }
        TS_CUDA_CHECK(e);
    }
    ~device_buffer() override { (void)cudaFree(p); }
    void* base() override { return p; }
    size_t size() const override { return n; }
};

// Page-locked host memory: copies to and from it go straight over the bus (no staging through a driver buffer), and
// a copy to it is truly asynchronous.
struct pinned_buffer final : buffer {
    void* p = nullptr;
    size_t n = 0;
    explicit pinned_buffer(void* mem, size_t bytes) : p(mem), n(bytes) {}
    ~pinned_buffer() override { (void)cudaFreeHost(p); }
    void* base() override { return p; }
    size_t size() const override { return n; }
};

cudaStream_t as_stream(CUstream_st* s) {
    return s;
}

} // namespace

std::vector<device_info> list_devices(std::string* why) {
    std::vector<device_info> out;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (why) *why = cudaGetErrorString(e);
        return out;
    }
    if (n == 0 && why) *why = "no CUDA device found";
    for (int i = 0; i < n; i++) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
        device_info d;
        d.id = i;
        d.name = prop.name;
        d.cc_major = prop.major;
        d.cc_minor = prop.minor;
        d.n_sm = prop.multiProcessorCount;
        int prev = 0;
        if (cudaGetDevice(&prev) == cudaSuccess && cudaSetDevice(i) == cudaSuccess) {
            (void)cudaMemGetInfo(&d.free_bytes, &d.total_bytes);
            (void)cudaSetDevice(prev);
        }
        out.push_back(d);
    }
    (void)cudaGetLastError();
    return out;
}

bool supports_weight_type(type t) {
    return weight_type_supported(t);
}

cuda_backend::cuda_backend(int device, bool exact) : exact_(exact) {
    std::string why;
    const std::vector<device_info> devs = list_devices(&why);
    if (devs.empty()) throw error("no CUDA device: " + why);
    if (device < 0 || device >= int(devs.size()))
        throw error(strf("CUDA device %d does not exist (%zu found)", device, devs.size()));
    info_ = devs[size_t(device)];
    TS_CUDA_CHECK(cudaSetDevice(device));
    if (const char* e = std::getenv("TESSERA_CUDA_EXACT"); e && std::string(e) == "1") exact_ = true;
    if (exact_) std::fprintf(stderr, "cuda: exact mode (the CPU's results bit for bit; slower)\n");
    if (const char* e = std::getenv("TESSERA_CUDA_PROFILE"); e && std::string(e) == "host")
        host_prof_ = std::make_unique<host_profile>();
    else if (e && std::string(e) != "0")
        profile_ = std::make_unique<profile_data>();
    cudaStream_t s = nullptr;
    TS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_ = s;
    wgmma_ = env_switch_on("TESSERA_CUDA_WGMMA") && wgmma_built(info_.cc_major, info_.cc_minor);
    // programmatic dependent launches (common.cuh: pdl_wait): Hopper and later; not in exact mode (its kernels are
    // launched plainly anyway) nor while the per-op profile times each node alone
    pdl_ = info_.cc_major >= 9 && env_switch_on("TESSERA_CUDA_PDL") && !exact_ && !profile_;
    gelu_table_ = std::make_unique<device_buffer>(size_t(1) << 17, info_, "gelu table");
    TS_CUDA_CHECK(cudaMemcpy(gelu_table_->base(), gelu_f16_table(), size_t(1) << 17, cudaMemcpyHostToDevice));
}

cuda_backend::~cuda_backend() {
    if (stream_) (void)cudaStreamSynchronize(as_stream(stream_));
    print_profile();
    if (host_prof_)
        for (void* e : host_prof_->ev)
            if (e) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
    for (captured& c : captured_)
        if (c.exec) (void)cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(c.exec));
    if (cublas_) {
        (void)cudaSetDevice(info_.id);
        cublas_destroy(cublas_);
    }
    scratch_.reset();
    stage_.reset();
    weights_buf_.reset();
    if (stream_) (void)cudaStreamDestroy(as_stream(stream_));
}

std::unique_ptr<buffer> cuda_backend::alloc(size_t bytes) {
    TS_CUDA_CHECK(cudaSetDevice(info_.id));
    return std::make_unique<device_buffer>(bytes, info_, "a compute or KV-cache buffer");
}

std::unique_ptr<buffer> cuda_backend::alloc_host(size_t bytes) {
    static const bool pinned = env_switch_on("TESSERA_CUDA_PINNED"); // =0: plain memory (side-by-side runs)
    if (!pinned) return backend::alloc_host(bytes);
    TS_CUDA_CHECK(cudaSetDevice(info_.id));
    void* p = nullptr;
    // portable: pinned for every device (a model split over GPUs copies its logits from another one)
    const cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) { // page-locked memory is limited: plain memory works, only slower
        (void)cudaGetLastError();
        return backend::alloc_host(bytes);
    }
    TS_CUDA_CHECK(e);
    return std::make_unique<pinned_buffer>(p, bytes);
}

std::unique_ptr<buffer> cuda_backend::alloc_zeroed(size_t bytes) {
    TS_CUDA_CHECK(cudaSetDevice(info_.id));
    auto b = std::make_unique<device_buffer>(bytes, info_, "the KV cache");
    TS_CUDA_CHECK(cudaMemsetAsync(b->base(), 0, bytes, as_stream(stream_)));
    TS_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
    return b;
}

void cuda_backend::join(std::shared_ptr<backend_group> group, int rank) {
    comm_ = nccl_comm(group.get(), rank, info_.id);
    group_ = std::move(group);
}

void cuda_backend::set(tensor& t, const void* src, size_t offset, size_t size) {
    TS_ASSERT(!(t.flags & flag_param)); // weights go through load_weights
    TS_CUDA_CHECK(cudaSetDevice(info_.id)); // the caller may drive several devices
    if (exact_ && t.t == type::i32 && t.n_bytes() <= (size_t(1) << 24)) { // positions, for rope's host-side angles
        auto& h = host_inputs_[&t];
        h.resize(t.n_bytes());
        TS_ASSERT(offset + size <= h.size());
        std::memcpy(h.data() + offset, src, size);
    }
    // from pageable memory the copy has left `src` when the call returns, so callers may free it right away
    TS_CUDA_CHECK(
        cudaMemcpyAsync(static_cast<uint8_t*>(t.data) + offset, src, size, cudaMemcpyHostToDevice, as_stream(stream_)));
}

void cuda_backend::get(const tensor& t, void* dst, size_t offset, size_t size) {
    const auto t0 = std::chrono::steady_clock::now();
    TS_CUDA_CHECK(cudaSetDevice(info_.id));
    cuda_context ctx;
    ctx.weights = &weights_;
    TS_CUDA_CHECK(cudaMemcpyAsync(dst, ctx.ptr(&t) + offset, size, cudaMemcpyDeviceToHost, as_stream(stream_)));
    TS_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
    if (host_prof_) {
        host_prof_->get_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (host_prof_->ev_pending) {
            float ms = 0.0f;
            TS_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(host_prof_->ev[0]),
                                               static_cast<cudaEvent_t>(host_prof_->ev[1])));
            host_prof_->graph_gpu_s += 1e-3 * double(ms);
            host_prof_->graph_gpu_n++;
            host_prof_->ev_pending = false;
        }
    }
}

// Same order as the op list and the CPU's supports(): element types each op accepts on CUDA.
bool cuda_backend::supports(const tensor& node) const {
    auto f32 = [](const tensor* s) { return s && s->t == type::f32; };
    auto f32_rows = [&](const tensor* s) { return f32(s) && s->nb[0] == 4; };
    // exact mode computes a matmul only where it has the CPU's numerics (not the K formats: q8_K activations there)
    if (exact_ && (node.o == op::mul_mat || node.o == op::mul_mat_id)) {
        const type t = node.src[0]->t;
        if (t != type::f32 && t != type::f16 && t != type::bf16 && !gemm_exact_available(t)) return false;
    }
    switch (node.o) {
    case op::none:
        return true;
    case op::view:
        return true;
    case op::get_rows:
        return get_rows_supported(node);
    case op::mul_mat:
        return mul_mat_supported(node);
    case op::add:
        return f32(node.src[0]) && f32(node.src[1]);
    case op::mul:
        return f32(node.src[0]) && f32(node.src[1]);
    case op::scale:
        return f32(node.src[0]);
    case op::rms_norm:
        return f32(node.src[0]);
    case op::rope:
        return f32(node.src[0]) && node.src[1]->t == type::i32 && (!node.src[2] || f32_rows(node.src[2])) &&
               node.src[0]->ne[3] == 1;
    case op::soft_max:
        return f32(node.src[0]) && (!node.src[1] || f32_rows(node.src[1]));
    case op::silu:
        return f32(node.src[0]);
    case op::swiglu:
    case op::geglu:
    case op::relu2_glu:
        return f32(node.src[0]) && f32(node.src[1]);
    case op::tanh:
        return f32(node.src[0]);
    case op::score:
        return score_supported(node);
    case op::cpy:
        return f32(node.src[0]) && (node.t == type::f32 || node.t == type::f16 || node.t == type::bf16);
    case op::set_rows:
        return set_rows_supported(node);
    case op::attention:
        return attention_supported(node);
    case op::top_k:
        return top_k_supported(node);
    case op::mul_mat_id:
        return mul_mat_id_supported(node);
    case op::add_id:
        return f32_rows(node.src[0]) && f32_rows(node.src[1]) && node.src[2]->t == type::i32 &&
               node.src[2]->nb[0] == 4 && node.nb[0] == 4;
    case op::sum_rows:
        return f32(node.src[0]);
    case op::div:
        return f32(node.src[0]) && f32(node.src[1]);
    case op::clamp:
        return f32(node.src[0]);
    case op::swiglu_oai:
        return f32(node.src[0]) && f32(node.src[1]);
    case op::all_reduce:
        return comm_ && f32(node.src[0]) && node.src[0]->is_contiguous();
    case op::all_gather:
        return comm_ && f32(node.src[0]) && node.src[0]->is_contiguous() && node.is_contiguous();
    case op::rms_norm_part:
        return f32(node.src[0]) && f32(node.src[1]);
    }
    return false;
}

namespace {

// Bytes of w's values and scales in the split layout (0, 0 when w stays in the file's layout): see split_eligible.
std::pair<size_t, size_t> split_bytes(const tensor& w) {
    std::pair<size_t, size_t> bytes{0, 0};
    if (!split_eligible(w)) return bytes;
    visit_format(w.t, [&]<class F>() {
        if constexpr (has_split<F>::value) {
            using D = cuda_format<F>;
            const size_t chunks = size_t(w.ne[0] / 32) * size_t(w.ne[1] * w.ne[2]); // experts: one after the other
            bytes = {chunks * sizeof(typename D::chunk_t), chunks / D::chunks_per_scale * D::scale_bytes};
        }
    });
    return bytes;
}

// Rows [0, rows) of a weight in the file's layout (row r at src + r row_bytes) -> the split layout: row r's chunks at
// qs + r qs_row, its scale groups at sc + r sc_row. A thread a file block (split_block).
template <class F>
__global__ void split_rows_kernel(const uint8_t* src, size_t row_bytes, int64_t blocks_per_row, int64_t rows,
                                  size_t qs_row, size_t sc_row, uint8_t* qs, uint8_t* sc) {
    using D = cuda_format<F>;
    const int64_t n = rows * blocks_per_row;
    for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = j / blocks_per_row;
        D::split_block(reinterpret_cast<const typename D::block*>(src + size_t(r) * row_bytes), j - r * blocks_per_row,
                       qs + size_t(r) * qs_row, sc + size_t(r) * sc_row);
    }
}

// The host memory the system could still give (MemAvailable: free pages and the page cache it can drop), in bytes.
size_t host_memory_available() {
    if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
        char line[256];
        unsigned long long kib = 0;
        bool found = false;
        while (!found && std::fgets(line, sizeof line, f))
            found = std::sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
        std::fclose(f);
        if (found) return size_t(kib) * 1024;
    }
    return size_t(sysconf(_SC_AVPHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
}

float split_out_scale(const tensor& w) {
    float s = 1.0f;
    visit_format(w.t, [&]<class F>() {
        if constexpr (has_split<F>::value) s = cuda_format<F>::out_scale(w.data, w.n_elements());
    });
    return s;
}

} // namespace

void cuda_backend::load_weights(std::span<tensor* const> weights) {
    constexpr size_t align = 256;
    auto up = [&](size_t x) { return (x + align - 1) / align * align; };
    size_t total = 0;
    struct item {
        tensor* t;
        bool plain;                     // the file's layout (get_rows reads the embedding in it)
        std::pair<size_t, size_t> split; // bytes of values and scales in the split layout, 0: none
    };
    std::vector<item> todo;
    for (tensor* t : weights) {
        TS_ASSERT(t->flags & flag_param && !t->view_src && t->data != nullptr);
        if (weights_.count(t) || split_.count(t)) continue;
        if (std::find_if(todo.begin(), todo.end(), [&](const item& i) { return i.t == t; }) != todo.end()) continue;
        // a token table is kept as in the file (get_rows reads it); only as the tied output also split
        item it{t, true, t->lookup_only() ? std::pair<size_t, size_t>{0, 0} : split_bytes(*t)};
        it.plain = it.split.first == 0 || (t->flags & flag_embedding);
        todo.push_back(it);
        total += (it.plain ? up(t->n_bytes()) : 0) + (it.split.first ? up(it.split.first) + up(it.split.second) : 0);
    }
    if (todo.empty()) return;
    TS_ASSERT(!weights_buf_); // one upload per backend: every weight in one buffer
    TS_CUDA_CHECK(cudaSetDevice(info_.id));
    weights_buf_ =
        std::make_unique<device_buffer>(total, info_, strf("the weights (%zu tensors)", todo.size()).c_str());
    auto* base = static_cast<uint8_t*>(weights_buf_->base());
    for (const item& it : todo) {
        tensor* t = it.t;
        if (it.plain) {
            // on the backend's stream (kernels on it then see the weights); from pageable memory, staged by the driver
            TS_CUDA_CHECK(cudaMemcpyAsync(base, t->data, t->n_bytes(), cudaMemcpyHostToDevice, as_stream(stream_)));
            weights_[t] = base;
            base += up(t->n_bytes());
        }
        if (it.split.first) {
            const size_t sc_offset = up(it.split.first);
            upload_split(*t, static_cast<const uint8_t*>(t->data), base, base + sc_offset);
            split_[t] = split_weight{t->t, t->ne[0], t->ne[1], base, base + sc_offset, split_out_scale(*t)};
            base += up(sc_offset + it.split.second);
        }
    }
    TS_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
    stage_.reset(); // op offload makes its own when it first needs one
}

cuda_backend::upload_stage::upload_stage() {
    TS_CUDA_CHECK(cudaStreamCreateWithFlags(reinterpret_cast<cudaStream_t*>(&copies), cudaStreamNonBlocking));
    for (void** e : {&filled[0], &filled[1], &read[0], &read[1]})
        TS_CUDA_CHECK(cudaEventCreateWithFlags(reinterpret_cast<cudaEvent_t*>(e), cudaEventDisableTiming));
}

cuda_backend::upload_stage::~upload_stage() {
    (void)cudaStreamSynchronize(as_stream(copies));
    for (void* e : {filled[0], filled[1], read[0], read[1]}) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
    (void)cudaStreamDestroy(as_stream(copies));
}

// w's values from src (its bytes in the file's layout, in host memory, page-locked or not) into the split layout at qs
// and sc on the device: runs of rows copied into the halves of the stage in turn on its copy stream, each split from
// there by split_rows_kernel on the backend's stream (so after the kernels that read the destination before). A copy
// from pageable memory returns once the driver has staged the run; one from page-locked memory at once.
void cuda_backend::upload_split(const tensor& w, const uint8_t* src, uint8_t* qs, uint8_t* sc) {
    constexpr size_t half_max = size_t(32) << 20;
    visit_format(w.t, [&]<class F>() {
        if constexpr (has_split<F>::value) {
            using D = cuda_format<F>;
            const int64_t k = w.ne[0], rows = w.ne[1] * w.ne[2]; // contiguous: row r of expert e is row e ne1 + r
            const size_t row_bytes = w.nb[1];
            const size_t qs_row = size_t(k / 32) * sizeof(typename D::chunk_t);
            const size_t sc_row = size_t(k / 32 / D::chunks_per_scale) * D::scale_bytes;
            const int64_t run = std::min<int64_t>(rows, std::max<int64_t>(1, int64_t(half_max / row_bytes)));
            const size_t need = (size_t(run) * row_bytes + 255) / 256 * 256;
            if (!stage_) stage_ = std::make_unique<upload_stage>();
            upload_stage& st = *stage_;
            if (st.half < need) {
                // kernels may still read the old stage
                TS_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
                st.mem.reset();
                st.mem = std::make_unique<device_buffer>(2 * need, info_, "the weights' upload staging");
                st.half = need;
            }
            const int64_t per_row = k / F::block_size;
            for (int64_t r0 = 0, i = 0; r0 < rows; r0 += run, i++) {
                const int64_t n = std::min(run, rows - r0);
                uint8_t* half = static_cast<uint8_t*>(st.mem->base()) + size_t(i % 2) * st.half;
                auto* filled = static_cast<cudaEvent_t>(st.filled[i % 2]);
                auto* read = static_cast<cudaEvent_t>(st.read[i % 2]);
                TS_CUDA_CHECK(cudaStreamWaitEvent(as_stream(st.copies), read, 0)); // never recorded: no wait
                TS_CUDA_CHECK(cudaMemcpyAsync(half, src + size_t(r0) * row_bytes, size_t(n) * row_bytes,
                                              cudaMemcpyHostToDevice, as_stream(st.copies)));
                TS_CUDA_CHECK(cudaEventRecord(filled, as_stream(st.copies)));
                TS_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream_), filled, 0));
                const int64_t blocks = std::min<int64_t>((n * per_row + 255) / 256, int64_t(info_.n_sm) * 16);
                split_rows_kernel<F><<<unsigned(blocks), 256, 0, as_stream(stream_)>>>(
                    half, row_bytes, per_row, n, qs_row, sc_row, qs + size_t(r0) * qs_row, sc + size_t(r0) * sc_row);
                TS_CUDA_CHECK(cudaGetLastError());
                TS_CUDA_CHECK(cudaEventRecord(read, as_stream(stream_)));
            }
        }
    });
}

size_t cuda_backend::weight_copy_bytes(const tensor& w) const {
    const auto [qs, sc] = split_bytes(w);
    return qs ? (qs + 255) / 256 * 256 + (sc + 3) / 4 * 4 : w.n_bytes(); // scales padded to a 4-byte word
}

void cuda_backend::set_weight_copy(tensor& copy, const tensor& w) {
    const auto [qs, sc] = split_bytes(w);
    if (!qs) { // the file's layout: mul_mat's kernels for it read the copy as it is
        set(copy, w.data, 0, w.n_bytes());
        return;
    }
    TS_CUDA_CHECK(cudaSetDevice(info_.id));
    offload_source& h = offload_src_[&w];
    if (!h.made) {
        h.made = true;
        h.sc_offset = (qs + 255) / 256 * 256;
        h.out_scale = split_out_scale(w);
        // page-locked memory cannot be paged out: copies of the file's bytes while they take at most half of the host
        // memory available when the first was made, the rest from the file's pages, which the system may drop
        static const bool pinned = env_switch_on("TESSERA_CUDA_PINNED");
        if (pinned_left_ == SIZE_MAX) pinned_left_ = pinned ? host_memory_available() / 2 : 0;
        if (w.n_bytes() <= pinned_left_) {
            std::unique_ptr<buffer> mem = alloc_host(w.n_bytes());
            if (dynamic_cast<pinned_buffer*>(mem.get())) {
                std::memcpy(mem->base(), w.data, w.n_bytes());
                h.mem = std::move(mem);
                pinned_left_ -= w.n_bytes();
            } else {
                pinned_left_ = 0; // none left
            }
        }
    }
    // after the kernels of the split before, which read the slot
    upload_split(w, static_cast<const uint8_t*>(h.mem ? h.mem->base() : w.data), static_cast<uint8_t*>(copy.data),
                 static_cast<uint8_t*>(copy.data) + h.sc_offset);
    auto* base = static_cast<uint8_t*>(copy.data);
    if (split_.insert_or_assign(&copy, split_weight{w.t, w.ne[0], w.ne[1], base, base + h.sc_offset, h.out_scale})
            .second)
        streamed_.push_back(&copy);
}

void cuda_backend::forget_weight_copies() {
    for (const tensor* t : streamed_) split_.erase(t);
    streamed_.clear();
}

void cuda_backend::compute(graph& g) {
    timed(&cuda_backend::compute_impl, g);
}

// Runs (this->*f)(g), timed for the host profile when one is kept (TESSERA_CUDA_PROFILE=host).
void cuda_backend::timed(void (cuda_backend::*f)(graph&), graph& g) {
    if (!host_prof_) {
        (this->*f)(g);
        return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    if (host_prof_->calls) host_prof_->between_s += std::chrono::duration<double>(t0 - host_prof_->last_end).count();
    (this->*f)(g);
    host_prof_->last_end = std::chrono::steady_clock::now();
    host_prof_->compute_s += std::chrono::duration<double>(host_prof_->last_end - t0).count();
    host_prof_->calls++;
}

size_t cuda_backend::fusion_window() const {
    static const bool fuse = env_switch_on("TESSERA_CUDA_FUSE");
    return fuse && !exact_ ? 20 : 0;
}

void cuda_backend::compute_impl(graph& g) {
    TS_CUDA_CHECK(cudaSetDevice(info_.id));
    size_t need = 0;
    for (tensor* n : g.nodes) need = std::max(need, work_size(*n));
    if (need > 0 && (!scratch_ || scratch_->size() < need)) {
        TS_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_))); // the old scratch may still be read
        scratch_.reset();
        scratch_ = std::make_unique<device_buffer>(need + need / 8, info_, "the quantized activations");
    }
    if (!counters_) { // kernels set every counter back to 0 when they end
        counters_ = std::make_unique<device_buffer>(n_counters * sizeof(int), info_, "block counters");
        TS_CUDA_CHECK(cudaMemsetAsync(counters_->base(), 0, counters_->size(), as_stream(stream_)));
    }
    // the prefill GEMM's partial sums (its split tail: at most one CTA an SM of 128 x 256 floats), from the first
    // graph with a batch the wgmma GEMM takes
    if (!gemm_part_ && wgmma_ && !exact_)
        for (const tensor* n : g.nodes)
            if (n->o == op::mul_mat && n->src[1]->ne[1] * n->src[1]->ne[2] * n->src[1]->ne[3] >= 192) {
                gemm_part_ = std::make_unique<device_buffer>(
                    size_t(std::max(info_.n_sm, 1)) * 128 * 256 * sizeof(float), info_, "the GEMM's partial sums");
                break;
            }
    if (!cublas_ && !exact_) // outside any capture: cuBLAS allocates when its handle is made
        for (const tensor* n : g.nodes)
            if (n->o == op::mul_mat && gemm_float_shape(*n)) {
                cublas_ = cublas_create(as_stream(stream_));
                break;
            }
    // Without a per-node callback the launches are captured into a CUDA graph and run as one: the GPU then goes from
    // kernel to kernel without waiting for the CPU (a decode step is ~15 kernels a layer, most a few microseconds).
    // A graph whose signature (its structure, every launch's pointers, shapes and parameters) equals the one captured
    // last time just launches that executable again: a decode step does, token after token, since the KV-cache write
    // takes its rows from a graph input (set_rows) and the KV length is padded (kv_pad), so the session runs the same
    // graph, bound to the same memory (session::decode_batch); set() has refilled its inputs (tokens, positions,
    // mask, cache rows) at the same device addresses before this.
    // Otherwise the launches are captured again and the executable updated in place when the kernels are the same
    // (cheap), or instantiated anew. TESSERA_CUDA_GRAPHS=0: plain launches.
    static const bool graphs = env_switch_on("TESSERA_CUDA_GRAPHS");
    if (exact_) { // rope's angles are computed on the host at launch: no capture
        size_t table = 0;
        for (const tensor* n : g.nodes)
            if (n->o == op::rope) table = std::max(table, size_t(n->src[0]->ne[2]) * size_t(n->op_params.i[0]) * 4);
        if (table > 0 && (!exact_buf_ || exact_buf_->size() < table)) {
            TS_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
            exact_buf_.reset();
            exact_buf_ = std::make_unique<device_buffer>(table, info_, "rope's angle table");
        }
        launch_nodes(g);
        return;
    }
    if (on_eval || !graphs || profile_) {
        launch_nodes(g);
        return;
    }
    cudaStream_t st = as_stream(stream_);
    const auto sig_t0 = std::chrono::steady_clock::now();
    graph_signature(g, next_sig_);
    n_computes_++;
    const void* scratch = scratch_ ? scratch_->base() : nullptr;
    captured* same = nullptr;
    for (captured& c : captured_)
        if (c.exec && c.sig == next_sig_) same = &c;
    if (host_prof_)
        host_prof_->sig_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - sig_t0).count();
    if (same) {
        same->g = &g;
        same->scratch = scratch;
        launch_exec(*same);
        return;
    }
    // the slot to capture into: the one this graph used last (a new shape of it: an update may do), else a free one,
    // else the least recently launched
    captured* slot = nullptr;
    for (captured& c : captured_)
        if (c.g == &g) slot = &c;
    if (!slot && captured_.size() < max_captured) slot = &captured_.emplace_back();
    if (!slot)
        slot = &*std::min_element(captured_.begin(), captured_.end(),
                                  [](const captured& a, const captured& b) { return a.used < b.used; });
    slot->sig.clear(); // valid again once this capture has become slot->exec
    slot->g = nullptr;
    graphs_captured_++;
    const auto cap_t0 = std::chrono::steady_clock::now();
    TS_CUDA_CHECK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t cg = nullptr;
    try {
        launch_nodes(g);
    } catch (...) {
        (void)cudaStreamEndCapture(st, &cg); // leave capture mode before the error goes up
        if (cg) (void)cudaGraphDestroy(cg);
        (void)cudaGetLastError();
        throw;
    }
    TS_CUDA_CHECK(cudaStreamEndCapture(st, &cg));
    auto exec = reinterpret_cast<cudaGraphExec_t>(slot->exec);
    // an update can only succeed between graphs of the same nodes (kernels, copies) in the same order: other graphs
    // are instantiated afresh without asking (a refused update is an API error to compute-sanitizer)
    std::vector<uintptr_t> shape = graph_shape(cg);
    if (exec && shape != slot->shape) {
        (void)cudaGraphExecDestroy(exec);
        exec = nullptr;
        slot->exec = nullptr;
    }
    if (exec) {
        cudaGraphExecUpdateResultInfo info{};
        if (cudaGraphExecUpdate(exec, cg, &info) != cudaSuccess) { // another shape of graph: start over
            (void)cudaGetLastError();
            (void)cudaGraphExecDestroy(exec);
            exec = nullptr;
            slot->exec = nullptr;
        }
    }
    if (!exec) {
        const cudaError_t e = cudaGraphInstantiate(&exec, cg, 0);
        if (e != cudaSuccess) (void)cudaGraphDestroy(cg);
        TS_CUDA_CHECK(e);
    }
    slot->exec = reinterpret_cast<CUgraphExec_st*>(exec);
    slot->shape = std::move(shape);
    TS_CUDA_CHECK(cudaGraphDestroy(cg));
    TS_CUDA_CHECK(cudaGraphLaunch(exec, st));
    slot->sig.swap(next_sig_);
    slot->g = &g;
    slot->scratch = scratch;
    slot->used = n_computes_;
    if (host_prof_)
        host_prof_->capture_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - cap_t0).count();
}

// Launches c's executable again as it is (its graph's signature matched, or compute_again()).
void cuda_backend::launch_exec(captured& c) {
    cudaStream_t st = as_stream(stream_);
    graphs_reused_++;
    c.used = n_computes_;
    const auto t0 = std::chrono::steady_clock::now();
    if (host_prof_) {
        for (void*& e : host_prof_->ev)
            if (!e) TS_CUDA_CHECK(cudaEventCreate(reinterpret_cast<cudaEvent_t*>(&e)));
        TS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(host_prof_->ev[0]), st));
    }
    TS_CUDA_CHECK(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(c.exec), st));
    if (host_prof_) {
        TS_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(host_prof_->ev[1]), st));
        host_prof_->ev_pending = true;
        host_prof_->launch_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
}

// A decode step after the one before (backend::compute_again): a graph whose executable was captured or checked from
// it, unchanged but for its inputs' data (the session promises it), and the scratch it was captured with still in
// place, launches again without its signature (17 us a step on 1B, 42 on 8B: H100 host, 2026-11-23). Anything else,
// or a compute that does not capture (a callback, a profile, exact mode), goes through compute().
void cuda_backend::compute_again(graph& g) {
    static const bool replay = env_switch_on("TESSERA_CUDA_REPLAY");
    const void* scratch = scratch_ ? scratch_->base() : nullptr;
    bool ready = false;
    for (const captured& c : captured_)
        if (c.g == &g && c.exec && !c.sig.empty() && c.scratch == scratch) ready = true;
    if (!replay || !ready || on_eval || profile_ || exact_) {
        compute(g);
        return;
    }
    timed(&cuda_backend::replay, g);
}

void cuda_backend::replay(graph& g) {
    TS_CUDA_CHECK(cudaSetDevice(info_.id));
    n_computes_++;
    for (captured& c : captured_)
        if (c.g == &g) {
            launch_exec(c);
            return;
        }
    TS_ASSERT(!"replay: no captured graph for g (compute_again checked)");
}

// Everything launch_nodes' launches depend on, as words. Per node, views included: the host tensor, op, type, flags,
// ne, nb, op_params and device address; per source present: the host tensor, type, ne, nb and device address (a
// weight's: its host tensor and offset, the backend maps it to its copies, which never move); and the scratch buffer.
// The host tensors stand for the graph's structure, on which launch_nodes' choices rest besides shapes and pointers:
// which nodes fuse (readers per tensor, chains of consecutive nodes: ops/fused.cu) and which mul_mat reuses the
// activations the one before converted (ctx.act_src). A session runs the same graph object again while the batch
// shape stays (session::decode_batch), so these repeat too. Every source is a node or a leaf of g (graph::expand
// follows every source), so each tensor is described once, leaves first, and a source only named: ~20 words a node.
// Describing every source at every use took ~140 us a decode step on 8B (H100 host, 2026-11-22); this takes 31 us
// (TESSERA_CUDA_PROFILE=host prints it).
void cuda_backend::graph_signature(const graph& g, std::vector<uint64_t>& sig) const {
    sig.clear();
    sig.push_back(uint64_t(reinterpret_cast<uintptr_t>(scratch_ ? scratch_->base() : nullptr)));
    sig.push_back(uint64_t(scratch_ ? scratch_->size() : 0));
    sig.push_back(uint64_t(g.nodes.size()));
    sig.push_back(uint64_t(g.leafs.size()));
    auto ptr = [](const void* p) { return uint64_t(reinterpret_cast<uintptr_t>(p)); };
    auto describe = [&](const tensor& t) {
        sig.push_back(ptr(&t));
        sig.push_back(uint64_t(t.t) | uint64_t(t.flags) << 32);
        for (int d = 0; d < TS_MAX_DIMS; d++) sig.push_back(uint64_t(t.ne[d]));
        for (int d = 0; d < TS_MAX_DIMS; d++) sig.push_back(uint64_t(t.nb[d]));
        const tensor* root = t.view_src ? t.view_src : &t;
        if (root->flags & flag_param) { // tensor structs are aligned: the low bit tags a weight
            sig.push_back(ptr(root) | 1u);
            sig.push_back(uint64_t(t.view_src ? t.view_offs : 0));
        } else {
            sig.push_back(ptr(t.data));
        }
    };
    for (const tensor* l : g.leafs) describe(*l);
    for (const tensor* n : g.nodes) {
        uint64_t present = 0;
        for (int i = 0; i < TS_MAX_SRC; i++)
            if (n->src[i]) present |= uint64_t(1) << i;
        sig.push_back(uint64_t(n->o) | present << 8);
        describe(*n);
        for (int i = 0; i < TS_MAX_OP_PARAMS; i += 2)
            sig.push_back(uint64_t(uint32_t(n->op_params.i[i])) | uint64_t(uint32_t(n->op_params.i[i + 1])) << 32);
        for (const tensor* s : n->src)
            if (s) sig.push_back(ptr(s)); // described as a leaf above or as an earlier node (post-order)
    }
}

void cuda_backend::launch_nodes(graph& g) {
    cuda_context ctx;
    ctx.stream = as_stream(stream_);
    ctx.device = info_.id;
    ctx.n_sm = info_.n_sm;
    ctx.weights = &weights_;
    ctx.split = &split_;
    ctx.scratch = scratch_ ? scratch_->base() : nullptr;
    ctx.scratch_size = scratch_ ? scratch_->size() : 0;
    ctx.exact = exact_;
    ctx.wgmma = wgmma_;
    ctx.pdl = pdl_;
    ctx.host_inputs = &host_inputs_;
    ctx.gelu_table = static_cast<const uint16_t*>(gelu_table_->base());
    ctx.exact_buf = exact_buf_ ? exact_buf_->base() : nullptr;
    ctx.exact_buf_size = exact_buf_ ? exact_buf_->size() : 0;
    ctx.counters = counters_ ? static_cast<int*>(counters_->base()) : nullptr;
    ctx.n_counters = counters_ ? n_counters : 0;
    ctx.gemm_part = gemm_part_ ? static_cast<float*>(gemm_part_->base()) : nullptr;
    ctx.gemm_part_bytes = gemm_part_ ? gemm_part_->size() : 0;
    ctx.group = comm_;
    ctx.cublas = cublas_;
    cudaEvent_t ev[2] = {nullptr, nullptr};
    if (profile_) {
        TS_CUDA_CHECK(cudaEventCreate(&ev[0]));
        TS_CUDA_CHECK(cudaEventCreate(&ev[1]));
    }
    // readers per tensor, for fusing chains whose intermediates nothing else reads (ops/fused.cu); not while a
    // callback wants to see every node
    std::unordered_map<const tensor*, int> uses;
    const bool fusing = !on_eval && !exact_;
    if (fusing)
        for (const tensor* n : g.nodes)
            for (const tensor* s : n->src)
                if (s) uses[s]++;
    for (size_t ni = 0; ni < g.nodes.size(); ni++) {
        tensor* n = g.nodes[ni];
        if (profile_ && n->o != op::view && n->o != op::none) TS_CUDA_CHECK(cudaEventRecord(ev[0], ctx.stream));
        if (fusing) {
            if (const size_t covered = fuse(ctx, g.nodes, ni, uses)) {
                if (profile_) {
                    TS_CUDA_CHECK(cudaEventRecord(ev[1], ctx.stream));
                    TS_CUDA_CHECK(cudaEventSynchronize(ev[1]));
                    float ms = 0.0f;
                    TS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
                    std::string key = "fused";
                    for (size_t j = 0, k = 0; j < covered; j++)
                        if (g.nodes[ni + j]->o != op::view && g.nodes[ni + j]->o != op::none)
                            key += std::string(k++ ? "+" : " ") + op_name(g.nodes[ni + j]->o);
                    for (size_t j = 0; j < covered; j++) // the matrices' rows, to tell the groups apart
                        if (g.nodes[ni + j]->o == op::mul_mat)
                            key += strf(" %lld", (long long)g.nodes[ni + j]->src[0]->ne[1]);
                    auto& [t, count] = profile_->by_op[key];
                    t += double(ms);
                    count++;
                }
                ni += covered - 1;
                continue;
            }
        }
        switch (n->o) {
        case op::none:
            break;
        case op::view:
            break;
        case op::get_rows:
            get_rows(ctx, *n);
            break;
        case op::mul_mat:
            mul_mat(ctx, *n);
            break;
        case op::add:
            add(ctx, *n);
            break;
        case op::mul:
            mul(ctx, *n);
            break;
        case op::scale:
            scale(ctx, *n);
            break;
        case op::rms_norm:
            rms_norm(ctx, *n);
            break;
        case op::rms_norm_part:
            rms_norm_part(ctx, *n);
            break;
        case op::rope:
            rope(ctx, *n);
            break;
        case op::soft_max:
            soft_max(ctx, *n);
            break;
        case op::silu:
            silu(ctx, *n);
            break;
        case op::swiglu:
            swiglu(ctx, *n);
            break;
        case op::geglu:
            geglu(ctx, *n);
            break;
        case op::relu2_glu:
            relu2_glu(ctx, *n);
            break;
        case op::tanh:
            tanh(ctx, *n);
            break;
        case op::score:
            score(ctx, *n);
            break;
        case op::cpy:
            cpy(ctx, *n);
            break;
        case op::set_rows:
            set_rows(ctx, *n);
            break;
        case op::attention:
            attention(ctx, *n);
            break;
        case op::top_k:
            top_k(ctx, *n);
            break;
        case op::mul_mat_id:
            mul_mat_id(ctx, *n);
            break;
        case op::add_id:
            add_id(ctx, *n);
            break;
        case op::sum_rows:
            sum_rows(ctx, *n);
            break;
        case op::div:
            div(ctx, *n);
            break;
        case op::clamp:
            clamp(ctx, *n);
            break;
        case op::swiglu_oai:
            swiglu_oai(ctx, *n);
            break;
        case op::all_reduce:
            group_all_reduce(ctx, comm_, ctx.as<const float>(n->src[0]), ctx.as<float>(n), n->ne[0],
                             n->n_elements() / std::max<int64_t>(1, n->ne[0]));
            break;
        case op::all_gather:
            group_all_gather(ctx, comm_, ctx.as<const float>(n->src[0]), ctx.as<float>(n), n->src[0]->ne[0],
                             n->src[0]->n_elements() / std::max<int64_t>(1, n->src[0]->ne[0]), n->op_params.i[0]);
            break;
        }
        if (profile_ && n->o != op::view && n->o != op::none) {
            TS_CUDA_CHECK(cudaEventRecord(ev[1], ctx.stream));
            TS_CUDA_CHECK(cudaEventSynchronize(ev[1]));
            float ms = 0.0f;
            TS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
            std::string key = op_name(n->o);
            if (n->o == op::mul_mat) {
                const int64_t cols = n->src[1]->ne[1] * n->src[1]->ne[2] * n->src[1]->ne[3];
                key += strf(" %s %s %lldx%lld", type_name(n->src[0]->t), cols > 8 ? "gemm" : "gemv",
                            (long long)n->src[0]->ne[1], (long long)n->src[0]->ne[0]); // rows x k
            }
            auto& [t, count] = profile_->by_op[key];
            t += double(ms);
            count++;
        }
        if (on_eval && n->o != op::view && n->o != op::none) on_eval(*n); // reads the node through get(): waits
    }
    for (cudaEvent_t e : ev)
        if (e) (void)cudaEventDestroy(e);
}

void cuda_backend::print_profile() const {
    if (host_prof_ && host_prof_->calls) {
        const double n = double(host_prof_->calls);
        std::fprintf(stderr,
                     "cuda host profile (TESSERA_CUDA_PROFILE=host): %lld computes; per compute %.1f us launching "
                     "(%.1f us of it building and comparing the graph's signature, %.1f us in cudaGraphLaunch of an "
                     "unchanged graph, %.1f us capturing, updating or instantiating a graph: %.2f ms over all), %.1f us "
                     "from its end to the next compute (graph building, logits: %.1f us of that waiting in get()); "
                     "CUDA graphs: %lld captured, %lld launched again unchanged\n",
                     (long long)host_prof_->calls, 1e6 * host_prof_->compute_s / n, 1e6 * host_prof_->sig_s / n,
                     1e6 * host_prof_->launch_s / n, 1e6 * host_prof_->capture_s / n, 1e3 * host_prof_->capture_s,
                     1e6 * host_prof_->between_s / n, 1e6 * host_prof_->get_s / n, (long long)graphs_captured_,
                     (long long)graphs_reused_);
        if (host_prof_->graph_gpu_n)
            std::fprintf(stderr, "cuda host profile: an unchanged graph ran %.1f us on the GPU (mean of %lld)\n",
                         1e6 * host_prof_->graph_gpu_s / double(host_prof_->graph_gpu_n),
                         (long long)host_prof_->graph_gpu_n);
    }
    if (!profile_ || profile_->by_op.empty()) return;
    std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(profile_->by_op.begin(), profile_->by_op.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    double total = 0;
    for (const auto& r : rows) total += r.second.first;
    std::fprintf(stderr, "cuda profile (TESSERA_CUDA_PROFILE; kernels timed one node at a time, no CUDA graphs):\n");
    std::fprintf(stderr, "  %-28s %10s %8s %10s %6s\n", "op", "ms", "calls", "us/call", "share");
    for (const auto& [k, v] : rows)
        std::fprintf(stderr, "  %-28s %10.2f %8lld %10.1f %5.1f%%\n", k.c_str(), v.first, (long long)v.second,
                     1000.0 * v.first / double(v.second), 100.0 * v.first / total);
}

void cuda_backend::synchronize() {
    TS_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream_)));
}

// A device-to-device copy of 512 MiB on the backend's stream, the median of 5 after a warm-up; 0 when the two
// buffers do not fit next to the model
double cuda_backend::copy_gbs() {
    constexpr size_t bytes = size_t(512) << 20;
    TS_CUDA_CHECK(cudaSetDevice(info_.id));
    void* a = nullptr;
    void* b = nullptr;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
        (void)cudaGetLastError(); // the failed allocation's error, cleared
        if (a) TS_CUDA_CHECK(cudaFree(a));
        return 0.0;
    }
    cudaStream_t st = as_stream(stream_);
    cudaEvent_t ev[2];
    TS_CUDA_CHECK(cudaEventCreate(&ev[0]));
    TS_CUDA_CHECK(cudaEventCreate(&ev[1]));
    TS_CUDA_CHECK(cudaMemsetAsync(a, 1, bytes, st));
    std::vector<double> gbs;
    for (int rep = 0; rep < 6; rep++) {
        TS_CUDA_CHECK(cudaEventRecord(ev[0], st));
        TS_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, st));
        TS_CUDA_CHECK(cudaEventRecord(ev[1], st));
        TS_CUDA_CHECK(cudaEventSynchronize(ev[1]));
        float ms = 0.0f;
        TS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
        if (rep > 0) gbs.push_back(ms > 0.0f ? 2.0 * double(bytes) / (double(ms) * 1e-3) / 1e9 : 0.0);
    }
    TS_CUDA_CHECK(cudaEventDestroy(ev[0]));
    TS_CUDA_CHECK(cudaEventDestroy(ev[1]));
    TS_CUDA_CHECK(cudaFree(a));
    TS_CUDA_CHECK(cudaFree(b));
    return median(gbs);
}

} // namespace tessera::cuda
