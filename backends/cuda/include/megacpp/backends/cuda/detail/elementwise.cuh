// CUDA backend: functor-driven elementwise maps, broadcasts, strided copies, layout changes,
// element-type conversion, fill and the index range check. Semantics: cpu/detail/elementwise.hpp.
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
#include <cstring>
#include <utility>

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

template <class T, class F, class... Ins>
void map(index_t rows, index_t cols, F f, T* out, Ins... ins) {
  const index_t total = rows * cols;
  if (total == 0) return;
  const bool any_broadcast = (ins.broadcast || ... || false);
  if constexpr (kHasPacket<T>) {
    constexpr index_t kSize = Packet<T>::kSize;
    // A broadcast operand's packets line up with the output's only when each row is whole packets.
    if (fits_packets<T>(total, {out, ins.data...}) && (!any_broadcast || cols % kSize == 0)) {
      const index_t packets = total / kSize;
      map_packet_kernel<T><<<grid_for(packets), kThreads, 0, kStream>>>(packets, cols, any_broadcast, f,
                                                                         reinterpret_cast<Packet<T>*>(out), ins...);
      MEGACPP_CUDA_CHECK_LAUNCH(map_packet_kernel);
      return;
    }
  }
  map_kernel<T><<<grid_for(total), kThreads, 0, kStream>>>(total, cols, any_broadcast, f, out, ins...);
  MEGACPP_CUDA_CHECK_LAUNCH(map_kernel);
}

// f(a[i], b[i], c[i], x[i]) for i < n, updating a, b, c in place (cpu/detail/elementwise.hpp).
template <class T, class F>
__global__ void update_in_place_kernel(index_t n, F f, T* a, T* b, T* c, const T* x) {
  for (index_t i = global_thread(); i < n; i += grid_stride()) f(a[i], b[i], c[i], x[i]);
}

// The same a packet of each per thread (AdamW's step reads four tensors and writes three).
template <class T, class F>
__global__ void update_in_place_packet_kernel(index_t packets, F f, Packet<T>* a, Packet<T>* b, Packet<T>* c,
                                              const Packet<T>* x) {
  for (index_t p = global_thread(); p < packets; p += grid_stride()) {
    Packet<T> pa = a[p], pb = b[p], pc = c[p];
    const Packet<T> px = x[p];
#pragma unroll
    for (int e = 0; e < Packet<T>::kSize; ++e) f(pa.e[e], pb.e[e], pc.e[e], px.e[e]);
    a[p] = pa;
    b[p] = pb;
    c[p] = pc;
  }
}

template <class T, class F>
void update_in_place(index_t n, F f, T* a, T* b, T* c, const T* x) {
  if (n == 0) return;
  if constexpr (kHasPacket<T>) {
    constexpr index_t kSize = Packet<T>::kSize;
    if (fits_packets<T>(n, {a, b, c, x})) {
      const index_t packets = n / kSize;
      update_in_place_packet_kernel<T><<<grid_for(packets), kThreads, 0, kStream>>>(
          packets, f, reinterpret_cast<Packet<T>*>(a), reinterpret_cast<Packet<T>*>(b), reinterpret_cast<Packet<T>*>(c),
          reinterpret_cast<const Packet<T>*>(x));
      MEGACPP_CUDA_CHECK_LAUNCH(update_in_place_packet_kernel);
      return;
    }
  }
  update_in_place_kernel<T><<<grid_for(n), kThreads, 0, kStream>>>(n, f, a, b, c, x);
  MEGACPP_CUDA_CHECK_LAUNCH(update_in_place_kernel);
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

template <class T>
void expand(index_t outer, index_t n, index_t inner, T scale, const T* src, T beta, T* dst) {
  const index_t total = outer * n * inner;
  if (total == 0) return;
  expand_kernel<T><<<grid_for(total), kThreads, 0, kStream>>>(outer, n, inner, scale, src, beta, dst);
  MEGACPP_CUDA_CHECK_LAUNCH(expand_kernel);
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

template <class T>
void copy_2d(index_t rows, index_t cols, const T* src, index_t src_ld, T beta, T* dst, index_t dst_ld) {
  if (rows == 0 || cols == 0) return;
  if (beta == T(0)) {
    // Plain copies go to the copy engine: one contiguous block, or a pitched 2D copy while the
    // pitches stay below cudaMemcpy2D's limit (the device's memPitch, 2^31 - 1 bytes).
    const auto bytes = [](index_t elems) { return static_cast<std::size_t>(elems) * sizeof(T); };
    if (rows == 1 || (src_ld == cols && dst_ld == cols)) {
      MEGACPP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes(rows * cols), cudaMemcpyDeviceToDevice, kStream));
      return;
    }
    constexpr std::size_t kMaxPitch = (std::size_t{1} << 31) - 1;
    if (bytes(src_ld) <= kMaxPitch && bytes(dst_ld) <= kMaxPitch) {
      MEGACPP_CUDA_CHECK(cudaMemcpy2DAsync(dst, bytes(dst_ld), src, bytes(src_ld), bytes(cols), static_cast<std::size_t>(rows),
                                           cudaMemcpyDeviceToDevice, kStream));
      return;
    }
  }
  copy_2d_kernel<T><<<grid_for(rows * cols), kThreads, 0, kStream>>>(rows, cols, src, src_ld, beta, dst, dst_ld);
  MEGACPP_CUDA_CHECK_LAUNCH(copy_2d_kernel);
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

template <class T>
void transpose(index_t outer, index_t d0, index_t mid, index_t d1, index_t inner, const T* src, T beta, T* dst) {
  const index_t total = outer * d0 * mid * d1 * inner;
  if (total == 0) return;
  transpose_kernel<T><<<grid_for(total), kThreads, 0, kStream>>>(outer, d0, mid, d1, inner, src, beta, dst);
  MEGACPP_CUDA_CHECK_LAUNCH(transpose_kernel);
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

template <class From, class To>
void convert(std::size_t n, const From* src, To* dst) {
  if (n == 0) return;
  const auto count = static_cast<index_t>(n);
  const bool aligned = reinterpret_cast<std::uintptr_t>(src) % sizeof(ConvertVector<From>) == 0 &&
                       reinterpret_cast<std::uintptr_t>(dst) % sizeof(ConvertVector<To>) == 0;
  if (aligned && count % kConvertVector == 0) {
    const index_t vectors = count / kConvertVector;
    convert_vector_kernel<From, To><<<grid_for(vectors), kThreads, 0, kStream>>>(
        vectors, reinterpret_cast<const ConvertVector<From>*>(src), reinterpret_cast<ConvertVector<To>*>(dst));
    MEGACPP_CUDA_CHECK_LAUNCH(convert_vector_kernel);
    return;
  }
  convert_kernel<From, To><<<grid_for(count), kThreads, 0, kStream>>>(count, src, dst);
  MEGACPP_CUDA_CHECK_LAUNCH(convert_kernel);
}

template <class T>
__global__ void fill_kernel(index_t n, T value, T* dst) {
  for (index_t i = global_thread(); i < n; i += grid_stride()) dst[i] = value;
}

template <class T>
__global__ void fill_packet_kernel(index_t packets, Packet<T> value, Packet<T>* dst) {
  for (index_t p = global_thread(); p < packets; p += grid_stride()) dst[p] = value;
}

// A value whose bytes are all zero (0, 0.0f, not -0.0f) is one cudaMemsetAsync (zeroing gradients
// is most of the fills of a training step); others a packet per thread where the pointer and
// length allow.
template <class T>
void fill(T* dst, std::size_t n, T value) {
  if (n == 0) return;
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  bool zero = true;
  for (const unsigned char b : bytes) zero = zero && b == 0;
  if (zero) {
    MEGACPP_CUDA_CHECK(cudaMemsetAsync(dst, 0, n * sizeof(T), kStream));
    return;
  }
  const auto count = static_cast<index_t>(n);
  if constexpr (kHasPacket<T>) {
    constexpr index_t kSize = Packet<T>::kSize;
    if (fits_packets<T>(count, {dst})) {
      Packet<T> packet;
      for (int e = 0; e < Packet<T>::kSize; ++e) packet.e[e] = value;
      const index_t packets = count / kSize;
      fill_packet_kernel<T><<<grid_for(packets), kThreads, 0, kStream>>>(packets, packet, reinterpret_cast<Packet<T>*>(dst));
      MEGACPP_CUDA_CHECK_LAUNCH(fill_packet_kernel);
      return;
    }
  }
  fill_kernel<T><<<grid_for(count), kThreads, 0, kStream>>>(count, value, dst);
  MEGACPP_CUDA_CHECK_LAUNCH(fill_kernel);
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

// A two-int device buffer per host thread for minmax_index's result, allocated once (a
// cudaMalloc per embedding call would synchronize the device each time).
class MinmaxScratch {
 public:
  MinmaxScratch() = default;
  MinmaxScratch(const MinmaxScratch&) = delete;
  MinmaxScratch& operator=(const MinmaxScratch&) = delete;
  ~MinmaxScratch() { if (data_) cudaFree(data_); }  // status ignored: may run at process exit
  std::int32_t* get() {
    if (!data_) MEGACPP_CUDA_CHECK(cudaMalloc(&data_, 2 * sizeof(std::int32_t)));
    return data_;
  }

 private:
  std::int32_t* data_ = nullptr;
};

inline std::pair<std::int32_t, std::int32_t> minmax_index(index_t n, const std::int32_t* idx) {
  std::int32_t host[2] = {::cuda::std::numeric_limits<std::int32_t>::max(),
                          ::cuda::std::numeric_limits<std::int32_t>::min()};
  if (n == 0) return {host[0], host[1]};
  thread_local MinmaxScratch scratch;
  std::int32_t* result = scratch.get();
  MEGACPP_CUDA_CHECK(cudaMemcpyAsync(result, host, sizeof(host), cudaMemcpyHostToDevice, kStream));
  minmax_index_kernel<std::int32_t><<<grid_for(n), kThreads, 0, kStream>>>(n, idx, result);
  MEGACPP_CUDA_CHECK_LAUNCH(minmax_index_kernel);
  MEGACPP_CUDA_CHECK(cudaMemcpy(host, result, sizeof(host), cudaMemcpyDeviceToHost));
  return {host[0], host[1]};
}

}  // namespace megacpp::cuda
