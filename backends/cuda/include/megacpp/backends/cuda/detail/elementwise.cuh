// CUDA backend: functor-driven elementwise maps, broadcasts, strided copies, layout changes,
// element-type conversion, fill and the index range check: the kernels (launched by
// elementwise_launch.cuh). Semantics: cpu/detail/elementwise.hpp.
//
// Every kernel is a grid-stride loop computing each output element on exactly one thread, so
// results do not depend on the launch geometry.
//
// Maps, in-place updates and fills take 16 bytes per operand per thread (`Packet`, packet.cuh)
// when every pointer is 16-byte aligned and the length a whole number of packets, and one element
// per thread otherwise. Each element gets the same functor call on its own either way, so the
// results are the same bits.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>

#include "megacpp/backends/cuda/detail/block_reduce.cuh"
#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/operand.cuh"
#include "megacpp/backends/cuda/detail/packet.cuh"
#include "megacpp/core/backend.hpp"
#include "megacpp/core/dtypes.hpp"

namespace megacpp::cuda {

// out[r, c] = f(ins[r, c]...); broadcast operands read ins[c]. Each element is read and written
// by one thread, so `out` may alias a full operand (the accumulate-into-gradient pattern).
template <class T, class F, class... Ins>
__global__ void map_kernel(index_t total, index_t cols, bool any_broadcast, F f, T* out, Ins... ins) {
  for (index_t i = global_thread(); i < total; i += grid_stride()) {
    const index_t col = any_broadcast ? i % cols : 0;  // 64-bit modulo only when needed
    out[i] = f(operand_at(ins, i, col)...);
  }
}

// Operand `in`'s packet for the output's packet number `packet`, whose first element is in column
// `col` (a broadcast operand's packet starts there: the caller checks cols % kSize == 0).
template <class T>
__device__ inline Packet<T> packet_at(const In<T>& in, index_t packet, index_t col) {
  return *reinterpret_cast<const Packet<T>*>(in.broadcast ? in.data + col : in.data + packet * Packet<T>::kSize);
}

template <class T, class F, class... Ps>
__device__ inline Packet<T> apply_packets(F& f, const Ps&... ps) {
  Packet<T> y;
#pragma unroll
  for (int e = 0; e < Packet<T>::kSize; ++e) y.e[e] = f(ps.e[e]...);
  return y;
}

// map_kernel a packet per thread: every operand is loaded before the output is stored, so `out`
// may still alias a full operand.
template <class T, class F, class... Ins>
__global__ void map_packet_kernel(index_t packets, index_t cols, bool any_broadcast, F f, Packet<T>* out, Ins... ins) {
  for (index_t p = global_thread(); p < packets; p += grid_stride()) {
    const index_t col = any_broadcast ? (p * Packet<T>::kSize) % cols : 0;
    out[p] = apply_packets<T>(f, packet_at(ins, p, col)...);
  }
}

// out[i] = bf16(f(ins[i]...)) for i < n, rounded as convert rounds (cpu/detail/elementwise.hpp).
template <class T, class F, class... Ins>
__global__ void map_to_bf16_kernel(index_t n, F f, bf16* out, const Ins*... ins) {
  for (index_t i = global_thread(); i < n; i += grid_stride()) out[i] = convert_element<bf16>(static_cast<T>(f(ins[i]...)));
}

// The same a packet of each operand per thread, the kSize roundings stored as one (8-byte for
// float) access.
template <class T, class F, class... Ps>
__global__ void map_to_bf16_packet_kernel(index_t packets, F f, Vec<bf16, Packet<T>::kSize>* out, const Ps*... ins) {
  for (index_t p = global_thread(); p < packets; p += grid_stride()) {
    const Packet<T> y = apply_packets<T>(f, ins[p]...);
    Vec<bf16, Packet<T>::kSize> rounded;
#pragma unroll
    for (int e = 0; e < Packet<T>::kSize; ++e) rounded.e[e] = convert_element<bf16>(y.e[e]);
    out[p] = rounded;
  }
}

// f(a[i], b[i], c[i], x[i]) for i < n, updating a, b, c in place, and a_rounded[i] = bf16(a[i])
// when a_rounded is not null (cpu/detail/elementwise.hpp).
template <class T, class F>
__global__ void update_in_place_kernel(index_t n, F f, T* a, T* b, T* c, const T* x, bf16* a_rounded) {
  for (index_t i = global_thread(); i < n; i += grid_stride()) {
    f(a[i], b[i], c[i], x[i]);
    if (a_rounded) a_rounded[i] = convert_element<bf16>(a[i]);
  }
}

// The same a packet of each per thread (AdamW's step reads four tensors and writes three, and the
// parameter's bf16 rounding when asked: kSize 2-byte stores per thread, any alignment).
template <class T, class F>
__global__ void update_in_place_packet_kernel(index_t packets, F f, Packet<T>* a, Packet<T>* b, Packet<T>* c,
                                              const Packet<T>* x, bf16* a_rounded) {
  for (index_t p = global_thread(); p < packets; p += grid_stride()) {
    Packet<T> pa = a[p], pb = b[p], pc = c[p];
    const Packet<T> px = x[p];
#pragma unroll
    for (int e = 0; e < Packet<T>::kSize; ++e) f(pa.e[e], pb.e[e], pc.e[e], px.e[e]);
    a[p] = pa;
    b[p] = pb;
    c[p] = pc;
    if (a_rounded) {
#pragma unroll
      for (int e = 0; e < Packet<T>::kSize; ++e) a_rounded[p * Packet<T>::kSize + e] = convert_element<bf16>(pa.e[e]);
    }
  }
}

// The one-state form, f(a[i], x[i]) (Muon's weight update), element and packet kernels.
template <class T, class F>
__global__ void update_one_in_place_kernel(index_t n, F f, T* a, const T* x, bf16* a_rounded) {
  for (index_t i = global_thread(); i < n; i += grid_stride()) {
    f(a[i], x[i]);
    if (a_rounded) a_rounded[i] = convert_element<bf16>(a[i]);
  }
}
template <class T, class F>
__global__ void update_one_in_place_packet_kernel(index_t packets, F f, Packet<T>* a, const Packet<T>* x, bf16* a_rounded) {
  for (index_t p = global_thread(); p < packets; p += grid_stride()) {
    Packet<T> pa = a[p];
    const Packet<T> px = x[p];
#pragma unroll
    for (int e = 0; e < Packet<T>::kSize; ++e) f(pa.e[e], px.e[e]);
    a[p] = pa;
    if (a_rounded) {
#pragma unroll
      for (int e = 0; e < Packet<T>::kSize; ++e) a_rounded[p * Packet<T>::kSize + e] = convert_element<bf16>(pa.e[e]);
    }
  }
}

// dst[o, j, i] = beta * dst[o, j, i] + scale * src[o, i]  (the backward of a sum over j).
template <class T>
__global__ void expand_kernel(index_t outer, index_t n, index_t inner, T scale, const T* src, T beta, T* dst) {
  const index_t total = outer * n * inner;
  for (index_t idx = global_thread(); idx < total; idx += grid_stride()) {
    const T s = scale * src[(idx / (n * inner)) * inner + idx % inner];
    dst[idx] = beta == T(0) ? s : beta * dst[idx] + s;
  }
}

// dst[r, :cols] = beta * dst[r, :cols] + src[r, :cols] with row strides (slice, concat).
template <class T>
__global__ void copy_2d_kernel(index_t rows, index_t cols, const T* src, index_t src_ld, T beta, T* dst, index_t dst_ld) {
  const index_t total = rows * cols;
  for (index_t idx = global_thread(); idx < total; idx += grid_stride()) {
    const index_t r = idx / cols, c = idx % cols;
    T& d = dst[r * dst_ld + c];
    d = beta == T(0) ? src[r * src_ld + c] : beta * d + src[r * src_ld + c];
  }
}

// Swaps two axes: src (outer, d0, mid, d1, inner) -> dst (outer, d1, mid, d0, inner),
// dst = beta * dst + permuted src. One thread per destination element (coalesced writes,
// strided reads); a shared-memory tiled transpose would also coalesce the reads, but the
// layer code transposes rarely (matmul takes transpose flags instead).
template <class T>
__global__ void transpose_kernel(index_t outer, index_t d0, index_t mid, index_t d1, index_t inner, const T* src, T beta,
                                 T* dst) {
  const index_t total = outer * d1 * mid * d0 * inner;
  for (index_t idx = global_thread(); idx < total; idx += grid_stride()) {
    index_t rest = idx;
    const index_t i = rest % inner;
    rest /= inner;
    const index_t a = rest % d0;
    rest /= d0;
    const index_t m = rest % mid;
    rest /= mid;
    const index_t b = rest % d1;
    const index_t o = rest / d1;
    const T s = src[(((o * d0 + a) * mid + m) * d1 + b) * inner + i];
    dst[idx] = beta == T(0) ? s : beta * dst[idx] + s;
  }
}

// Element-type conversion with the host's exact rounding (convert_element is MEGACPP_HD).
template <class From, class To>
__global__ void convert_kernel(index_t n, const From* src, To* dst) {
  for (index_t i = global_thread(); i < n; i += grid_stride()) dst[i] = convert_element<To>(src[i]);
}

// kConvertVector elements as one aligned access (float4 for float, 8 bytes for bf16).
inline constexpr int kConvertVector = 4;
template <class T>
struct alignas(kConvertVector * sizeof(T)) ConvertVector {
  T e[kConvertVector];
};

// The same conversion, kConvertVector elements per thread through one load and one store: the
// bf16 casts of a mixed-precision step's operands ran at 1.3 TB/s one element per thread (ncu,
// H100), a large part of the step. Both pointers kConvertVector-element aligned, n a multiple.
template <class From, class To>
__global__ void convert_vector_kernel(index_t vectors, const ConvertVector<From>* src, ConvertVector<To>* dst) {
  for (index_t i = global_thread(); i < vectors; i += grid_stride()) {
    const ConvertVector<From> x = src[i];
    ConvertVector<To> y;
#pragma unroll
    for (int e = 0; e < kConvertVector; ++e) y.e[e] = convert_element<To>(x.e[e]);
    dst[i] = y;
  }
}

template <class T>
__global__ void fill_kernel(index_t n, T value, T* dst) {
  for (index_t i = global_thread(); i < n; i += grid_stride()) dst[i] = value;
}

template <class T>
__global__ void fill_packet_kernel(index_t packets, Packet<T> value, Packet<T>* dst) {
  for (index_t p = global_thread(); p < packets; p += grid_stride()) dst[p] = value;
}

// Smallest and largest index (for the ops' range checks). Integer min/max are exact and
// order-independent, so atomics across blocks are deterministic here.
template <class I>
__global__ void minmax_index_kernel(index_t n, const I* idx, I* result) {
  I lo = ::cuda::std::numeric_limits<I>::max();
  I hi = ::cuda::std::numeric_limits<I>::min();
  for (index_t i = global_thread(); i < n; i += grid_stride()) {
    lo = min(lo, idx[i]);
    hi = max(hi, idx[i]);
  }
  lo = block_reduce(lo, MinOp{}, ::cuda::std::numeric_limits<I>::max());
  hi = block_reduce(hi, MaxOp{}, ::cuda::std::numeric_limits<I>::min());
  if (threadIdx.x == 0) {
    atomicMin(result, lo);
    atomicMax(result + 1, hi);
  }
}

}  // namespace megacpp::cuda
