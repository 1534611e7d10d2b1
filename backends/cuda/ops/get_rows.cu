// get_rows.cu: dst[:, r] = dequant(src0 row ids[r]) (token embeddings). Quantized rows go through the format's
// reference dequantize (quant/<format>.h, TS_HD), the very code the CPU uses; float rows are converted per element.
#include "backends/cuda/ops/ops.cuh"

#include "backends/cuda/quant/formats.cuh"

#include <cuda_bf16.h>

namespace tessera::cuda {

namespace {

constexpr int GET_ROWS_THREADS = 128;

// One block per output row; thread t dequantizes blocks t, t + 128, ... of the source row. An id outside the table
// gives a row of NaN (the session checks ids before this; a NaN row makes a bug visible instead of reading past).
template <class F>
static __global__ void get_rows_q_kernel(const uint8_t* w, int64_t w_nb1, int64_t n_rows, const int32_t* ids, float* y,
                                         int64_t y_nb1, int64_t ne0, float scale) {
    const int64_t r = blockIdx.x;
    const int32_t id = ids[r];
    float* yr = y + r * y_nb1;
    const bool ok = id >= 0 && id < n_rows;
    const auto* b = reinterpret_cast<const typename F::block*>(w + int64_t(id) * w_nb1);
    for (int64_t ib = threadIdx.x; ib < ne0 / F::block_size; ib += blockDim.x) {
        float* o = yr + ib * F::block_size;
        if (ok) {
            F::dequantize(b[ib], o);
            if (scale != 1.0f) // a per-tensor scale (i2_s): the block holds unit-scale values
                for (int j = 0; j < F::block_size; j++) o[j] *= scale;
        } else {
            for (int j = 0; j < F::block_size; j++) o[j] = NAN;
        }
    }
}

// From the split layout (a weight uploaded only that way): thread t dequantizes chunks t, t + 128, ... of the row.
template <class D>
static __global__ void get_rows_split_kernel(split_weight w, const int32_t* ids, float* y, int64_t y_nb1) {
    using chunk_t = typename D::chunk_t;
    const int64_t r = blockIdx.x;
    const int32_t id = ids[r];
    float* yr = y + r * y_nb1;
    const bool ok = id >= 0 && id < w.n;
    const int64_t nc = w.k / 32, ng = nc / D::chunks_per_scale;
    const uint8_t* q = w.qs + (ok ? id : 0) * nc * int64_t(sizeof(chunk_t));
    const uint8_t* sc = w.sc + (ok ? id : 0) * ng * D::scale_bytes;
    for (int64_t c = threadIdx.x; c < nc; c += blockDim.x) {
        const chunk_t v = ldg_chunk<chunk_t>(q + c * int64_t(sizeof(chunk_t)));
        for (int h = 0; h < 2; h++) {
            __half2 o[8];
            D::dequant_split(v, sc + (c / D::chunks_per_scale) * D::scale_bytes, int(c % D::chunks_per_scale), h, o);
            for (int i = 0; i < 8; i++) {
                const float2 f = __half22float2(o[i]);
                yr[c * 32 + 16 * h + 2 * i] = ok ? f.x * w.out_scale : NAN;
                yr[c * 32 + 16 * h + 2 * i + 1] = ok ? f.y * w.out_scale : NAN;
            }
        }
    }
}

// The batched form (f32 only): y[:, i, b] = a[:, ids[i, b], b], one thread per element (an id outside a: NaN)
static __global__ void get_rows_batched_kernel(const float* a, shape4 sa, const int32_t* ids, int64_t ids_nb1,
                                               float* y, shape4 sy, int64_t n) {
    pdl_wait();
    pdl_trigger();
    const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= n) return;
    const int64_t j = e % sy.ne[0], i = e / sy.ne[0] % sy.ne[1], b = e / (sy.ne[0] * sy.ne[1]);
    const int32_t id = ids[i + b * ids_nb1];
    y[j * sy.nb[0] + i * sy.nb[1] + b * sy.nb[2]] =
        id >= 0 && id < sa.ne[1] ? a[j * sa.nb[0] + id * sa.nb[1] + b * sa.nb[2]] : NAN;
}

template <class T> __device__ __forceinline__ float to_f32_elem(T x);
template <> __device__ __forceinline__ float to_f32_elem<float>(float x) {
    return x;
}
template <> __device__ __forceinline__ float to_f32_elem<f16>(f16 x) {
    return f16_to_f32(x);
}
template <> __device__ __forceinline__ float to_f32_elem<bf16>(bf16 x) {
    return __uint_as_float(uint32_t(x.bits) << 16);
}

template <class T>
static __global__ void get_rows_f_kernel(const uint8_t* w, int64_t w_nb1, int64_t n_rows, const int32_t* ids, float* y,
                                         int64_t y_nb1, int64_t ne0) {
    const int64_t r = blockIdx.x;
    const int32_t id = ids[r];
    float* yr = y + r * y_nb1;
    const bool ok = id >= 0 && id < n_rows;
    const T* x = reinterpret_cast<const T*>(w + int64_t(id) * w_nb1);
    for (int64_t i = threadIdx.x; i < ne0; i += blockDim.x) yr[i] = ok ? to_f32_elem<T>(x[i]) : NAN;
}

// w (ne0, n_rows) rows w_nb1 bytes apart; y (ne0, n_ids) rows y_nb1 floats apart.
template <class T, bool QUANT>
void get_rows_launch(const uint8_t* w, int64_t w_nb1, int64_t n_rows, const int32_t* ids, int64_t n_ids, float* y,
                     int64_t y_nb1, int64_t ne0, float scale, cudaStream_t stream) {
    if (n_ids == 0) return;
    if constexpr (QUANT)
        get_rows_q_kernel<T>
            <<<unsigned(n_ids), GET_ROWS_THREADS, 0, stream>>>(w, w_nb1, n_rows, ids, y, y_nb1, ne0, scale);
    else
        get_rows_f_kernel<T><<<unsigned(n_ids), GET_ROWS_THREADS, 0, stream>>>(w, w_nb1, n_rows, ids, y, y_nb1, ne0);
    TS_CUDA_CHECK(cudaGetLastError());
}

} // namespace

bool get_rows_supported(const tensor& dst) {
    const tensor& w = *dst.src[0];
    const tensor& ids = *dst.src[1];
    if (ids.ne[1] > 1) // batched: (ne0, n_rows, n_b) f32 by (n, n_b) ids (the chosen experts' router weights)
        return w.t == type::f32 && ids.t == type::i32 && ids.nb[0] == 4 && w.ne[2] == ids.ne[1] && w.ne[3] == 1 &&
               ids.ne[2] == 1 && dst.t == type::f32;
    return ids.t == type::i32 && ids.is_contiguous() && ids.ne[1] == 1 && dst.nb[0] == 4 && w.nb[0] == type_size(w.t) &&
           weight_type_supported(w.t);
}

void get_rows(cuda_context& ctx, tensor& dst) {
    const tensor* w = dst.src[0];
    const tensor* ids = dst.src[1];
    const int64_t y_nb1 = int64_t(dst.nb[1] / 4);
    if (ids->ne[1] > 1) {
        const int64_t n = dst.n_elements();
        if (n == 0) return;
        constexpr int threads = 256;
        launch(ctx, get_rows_batched_kernel, unsigned(ceil_div(n, threads)), threads, 0, ctx.as<float>(w),
               shape_of(*w, 4), ctx.as<int32_t>(ids), int64_t(ids->nb[1] / 4), ctx.as<float>(&dst), shape_of(dst, 4),
               n);
        return;
    }
    // a weight uploaded only in the split layout (the upload keeps the file's layout for flag_embedding tensors)
    if (!w->view_src && ctx.split && ctx.weights && !ctx.weights->count(w)) {
        if (auto it = ctx.split->find(w); it != ctx.split->end()) {
            if (ids->ne[0] == 0) return;
            const bool known = visit_format(w->t, [&]<class F>() {
                if constexpr (has_split<F>::value)
                    get_rows_split_kernel<cuda_format<F>><<<unsigned(ids->ne[0]), GET_ROWS_THREADS, 0, ctx.stream>>>(
                        it->second, ctx.as<int32_t>(ids), ctx.as<float>(&dst), y_nb1);
            });
            TS_ASSERT(known);
            TS_CUDA_CHECK(cudaGetLastError());
            return;
        }
    }
    const uint8_t* wp = ctx.ptr(w);
    const int64_t w_nb1 = int64_t(w->nb[1]), n_rows = w->ne[1], ne0 = w->ne[0];
    // per-tensor scale (i2_s's tail), read from the host copy of a weight
    const tensor& root = w->view_src ? *w->view_src : *w;
    const float scale = (root.flags & flag_param) ? read_tensor_scale(w->t, root.data, root.n_elements()) : 1.0f;
    auto launch = [&]<class T, bool QUANT>() {
        get_rows_launch<T, QUANT>(wp, w_nb1, n_rows, ctx.as<int32_t>(ids), ids->ne[0], ctx.as<float>(&dst), y_nb1, ne0,
                                  scale, ctx.stream);
    };
    switch (w->t) {
    case type::f32:
        launch.template operator()<float, false>();
        return;
    case type::f16:
        launch.template operator()<f16, false>();
        return;
    case type::bf16:
        launch.template operator()<bf16, false>();
        return;
    default:
        break;
    }
    // every format's reference dequantize (TS_HD) reads the file's layout
    const bool known = visit_format(w->t, [&]<class F>() { launch.template operator()<F, true>(); });
    TS_ASSERT(known);
}

} // namespace tessera::cuda
