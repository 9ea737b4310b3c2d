// CUDA backend: the launches of elementwise.cuh's kernels (maps, in-place updates, broadcasts,
// strided copies, layout changes, conversions, fills) and the index range check. Apart from the
// kernels, as the SSM scan's are (ssm/scan_launch.cuh), so that the CUDA emulation
// (tests/cuda_emulation) compiles the kernels with a host compiler and launches them as this file
// does. Each launch picks a 16-byte packet per thread where every pointer and the length allow
// (packet.cuh), one element per thread otherwise.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/elementwise.cuh"
#include "megacpp/backends/cuda/detail/packet.cuh"

namespace megacpp::cuda {

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

template <class T, class F, class... Ins>
void map_to_bf16(index_t n, F f, bf16* out, const Ins*... ins) {
  static_assert((std::is_same_v<Ins, T> && ...), "map_to_bf16: every operand is a T");
  if (n == 0) return;
  if constexpr (kHasPacket<T>) {
    using Rounded = Vec<bf16, Packet<T>::kSize>;  // a packet's roundings, stored as one access
    if (fits_packets<T>(n, {ins...}) && reinterpret_cast<std::uintptr_t>(out) % alignof(Rounded) == 0) {
      const index_t packets = n / Packet<T>::kSize;
      map_to_bf16_packet_kernel<T><<<grid_for(packets), kThreads, 0, kStream>>>(
          packets, f, reinterpret_cast<Rounded*>(out), reinterpret_cast<const Packet<T>*>(ins)...);
      MEGACPP_CUDA_CHECK_LAUNCH(map_to_bf16_packet_kernel);
      return;
    }
  }
  map_to_bf16_kernel<T><<<grid_for(n), kThreads, 0, kStream>>>(n, f, out, ins...);
  MEGACPP_CUDA_CHECK_LAUNCH(map_to_bf16_kernel);
}

template <class T, class F>
void update_in_place(index_t n, F f, T* a, T* b, T* c, const T* x, bf16* a_rounded) {
  if (n == 0) return;
  if constexpr (kHasPacket<T>) {
    constexpr index_t kSize = Packet<T>::kSize;
    if (fits_packets<T>(n, {a, b, c, x})) {  // a_rounded is written a bf16 at a time: any alignment
      const index_t packets = n / kSize;
      update_in_place_packet_kernel<T><<<grid_for(packets), kThreads, 0, kStream>>>(
          packets, f, reinterpret_cast<Packet<T>*>(a), reinterpret_cast<Packet<T>*>(b), reinterpret_cast<Packet<T>*>(c),
          reinterpret_cast<const Packet<T>*>(x), a_rounded);
      MEGACPP_CUDA_CHECK_LAUNCH(update_in_place_packet_kernel);
      return;
    }
  }
  update_in_place_kernel<T><<<grid_for(n), kThreads, 0, kStream>>>(n, f, a, b, c, x, a_rounded);
  MEGACPP_CUDA_CHECK_LAUNCH(update_in_place_kernel);
}

template <class T, class F>
void update_in_place(index_t n, F f, T* a, const T* x, bf16* a_rounded) {
  if (n == 0) return;
  if constexpr (kHasPacket<T>) {
    if (fits_packets<T>(n, {a, x})) {  // a_rounded is written a bf16 at a time: any alignment
      const index_t packets = n / Packet<T>::kSize;
      update_one_in_place_packet_kernel<T><<<grid_for(packets), kThreads, 0, kStream>>>(
          packets, f, reinterpret_cast<Packet<T>*>(a), reinterpret_cast<const Packet<T>*>(x), a_rounded);
      MEGACPP_CUDA_CHECK_LAUNCH(update_one_in_place_packet_kernel);
      return;
    }
  }
  update_one_in_place_kernel<T><<<grid_for(n), kThreads, 0, kStream>>>(n, f, a, x, a_rounded);
  MEGACPP_CUDA_CHECK_LAUNCH(update_one_in_place_kernel);
}

template <class T>
void expand(index_t outer, index_t n, index_t inner, T scale, const T* src, T beta, T* dst) {
  const index_t total = outer * n * inner;
  if (total == 0) return;
  expand_kernel<T><<<grid_for(total), kThreads, 0, kStream>>>(outer, n, inner, scale, src, beta, dst);
  MEGACPP_CUDA_CHECK_LAUNCH(expand_kernel);
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

template <class T>
void transpose(index_t outer, index_t d0, index_t mid, index_t d1, index_t inner, const T* src, T beta, T* dst) {
  const index_t total = outer * d0 * mid * d1 * inner;
  if (total == 0) return;
  transpose_kernel<T><<<grid_for(total), kThreads, 0, kStream>>>(outer, d0, mid, d1, inner, src, beta, dst);
  MEGACPP_CUDA_CHECK_LAUNCH(transpose_kernel);
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
  note_host_wait();
  MEGACPP_CUDA_CHECK(cudaMemcpy(host, result, sizeof(host), cudaMemcpyDeviceToHost));
  return {host[0], host[1]};
}

}  // namespace megacpp::cuda
