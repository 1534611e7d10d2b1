// ops.h: the CPU op implementations, one function per op (one file per op family: elementwise, norm, rope, ...).
// Every function is called by all threads of the pool with the same node; thread ith does its share.
#pragma once

#include "backends/cpu/thread_pool.h"
#include "ggml-like/tensor.h"

#include <cstddef>
#include <cstdint>

namespace tessera::cpu {

class repack_store;

struct compute_params {
    int ith = 0, nth = 1;
    uint8_t* wdata = nullptr; // scratch shared by all threads of this node (see work_size)
    size_t wsize = 0;
    thread_pool* pool = nullptr;
    bool reference = false; // use the scalar reference kernels (tests)
    const repack_store* repacked = nullptr; // weights repacked at load time (repack.h)
    float out_scale = 1.0f; // mul_mat: a following mul by a per-tensor scale (NVFP4's `.scale`), fused (cpu_backend.cpp)
    void barrier() const {
        if (pool) pool->barrier();
    }
};

// [begin, end) of n items for thread ith
inline void split(int64_t n, int ith, int nth, int64_t& begin, int64_t& end) {
    const int64_t per = (n + nth - 1) / nth;
    begin = std::min<int64_t>(n, per * ith);
    end = std::min<int64_t>(n, begin + per);
}

// Calls fn(i1, i2, i3) for this thread's share of dst's rows (row r = i1 + ne1 * (i2 + ne2 * i3)).
template <class Fn> void for_rows(const compute_params& p, const tensor& dst, Fn&& fn) {
    int64_t r0, r1;
    split(dst.n_rows(), p.ith, p.nth, r0, r1);
    for (int64_t r = r0; r < r1; r++) fn(r % dst.ne[1], (r / dst.ne[1]) % dst.ne[2], r / (dst.ne[2] * dst.ne[1]));
}

// Scratch bytes a node needs with n_threads threads.
size_t work_size(const tensor& node, int n_threads);
size_t mul_mat_work_size(const tensor& node);

void get_rows(const compute_params& p, tensor& dst);
void mul_mat(const compute_params& p, tensor& dst);
// Whether mul_mat nodes a and b can run as one (mul_mat_group): the same activations (f32 rows), both weights
// repacked with one kind, type and k.
bool mul_mat_groupable(const repack_store& repacked, const tensor& a, const tensor& b);
// 1 to 3 such mul_mats (q, k, v; gate, up) as one: the activations converted once, one tile loop over all of them
// (one barrier inside instead of one a matrix); each result the same bits as its mul_mat alone.
void mul_mat_group(const compute_params& p, tensor* const* dsts, int n);
void add(const compute_params& p, tensor& dst);
void mul(const compute_params& p, tensor& dst);
void div(const compute_params& p, tensor& dst);
void clamp(const compute_params& p, tensor& dst);
void sum_rows(const compute_params& p, tensor& dst);
void scale(const compute_params& p, tensor& dst);
void rms_norm(const compute_params& p, tensor& dst);
void rms_norm_part(const compute_params& p, tensor& dst);
// [sum = a + b ->] rms_norm -> dst = norm * w (f32 rows of unit stride; w one row, broadcast), one pass per row with
// the three ops' arithmetic (the same bits); sum (the add node, null: none) is written, the norm's own result is not.
void add_rms_norm_mul(const compute_params& p, const tensor* sum, const tensor& norm, tensor& dst);
void rope(const compute_params& p, tensor& dst);
void soft_max(const compute_params& p, tensor& dst);
void silu(const compute_params& p, tensor& dst);
void swiglu(const compute_params& p, tensor& dst);
void geglu(const compute_params& p, tensor& dst);
void relu2_glu(const compute_params& p, tensor& dst);
void swiglu_oai(const compute_params& p, tensor& dst);
void tanh(const compute_params& p, tensor& dst);
void score(const compute_params& p, tensor& dst);
void top_k(const compute_params& p, tensor& dst);
void mul_mat_id(const compute_params& p, tensor& dst);
size_t mul_mat_id_work_size(const tensor& node);
void add_id(const compute_params& p, tensor& dst);
void cpy(const compute_params& p, tensor& dst);
void set_rows(const compute_params& p, tensor& dst);
void attention(const compute_params& p, tensor& dst);
// Attention sinks (gpt-oss, the attention op's src[4]): after the last key of a row, the head's learned logit joins
// the online softmax as ggml adds it: above the running max M, the accumulator acc (hd) is rescaled by e^(M - sink)
// in f32 and the sink counts 1, else it counts e^(sink - M); S = S * ms + vs as one fma (GCC's contraction of ggml's
// statement). Called by both attention paths (attention.cpp); lives in softmax.cpp.
void attention_sink(float sink, float M, float& S, float* acc, int64_t hd);
size_t attention_work_size(const tensor& node, int n_threads); // scratch: see attention.cpp

// Element address helper: t->data + i0*nb0 + i1*nb1 + i2*nb2 + i3*nb3
template <class T> inline T* at(const tensor& t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) {
    return reinterpret_cast<T*>(static_cast<uint8_t*>(t.data) + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] +
                                i3 * t.nb[3]);
}

} // namespace tessera::cpu
