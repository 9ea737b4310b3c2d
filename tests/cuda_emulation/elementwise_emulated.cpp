// tests/cuda_emulation/elementwise_emulated.cpp: the launches of detail/elementwise_launch.cuh on
// the emulator, mirrored call for call (the launch header's <<<>>> is not host C++): the same
// kernels, grids, block sizes and packet choices. What the launches hand to the CUDA runtime (a
// plain copy to cudaMemcpyAsync / cudaMemcpy2DAsync, a zero fill to cudaMemsetAsync) is done here
// by the host's memcpy and memset, which is what those calls do.
#include "elementwise_emulated.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "emulator/launch.hpp"
#include "launch_configs.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as megacpp/backends/cuda.cuh does around its detail headers
#include "megacpp/backends/cuda/detail/elementwise.cuh"
#include "megacpp/backends/cuda/detail/inline_upload.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {

template <class T, class F, class... Ins>
void EmulatedElementwise::map(index_t rows, index_t cols, F f, T* out, Ins... ins) {
  const index_t total = rows * cols;
  if (total == 0) return;
  const bool any_broadcast = (ins.broadcast || ... || false);
  if constexpr (cuda::kHasPacket<T>) {
    constexpr index_t kSize = cuda::Packet<T>::kSize;
    if (cuda::fits_packets<T>(total, {out, ins.data...}) && (!any_broadcast || cols % kSize == 0)) {
      const index_t packets = total / kSize;
      launch(cuda::map_packet_kernel<T, F, Ins...>, grid_stride_launch(packets), packets, cols, any_broadcast, f,
             reinterpret_cast<cuda::Packet<T>*>(out), ins...);
      return;
    }
  }
  launch(cuda::map_kernel<T, F, Ins...>, grid_stride_launch(total), total, cols, any_broadcast, f, out, ins...);
}

template <class T, class F, class... Ins>
void EmulatedElementwise::map_to_bf16(index_t n, F f, bf16* out, const Ins*... ins) {
  if (n == 0) return;
  if constexpr (cuda::kHasPacket<T>) {
    using P = cuda::Packet<T>;
    using Rounded = cuda::Vec<bf16, P::kSize>;
    if (cuda::fits_packets<T>(n, {ins...}) && reinterpret_cast<std::uintptr_t>(out) % alignof(Rounded) == 0) {
      const index_t packets = n / P::kSize;
      launch(cuda::map_to_bf16_packet_kernel<T, F, std::conditional_t<true, P, Ins>...>, grid_stride_launch(packets), packets,
             f, reinterpret_cast<Rounded*>(out), reinterpret_cast<const P*>(ins)...);
      return;
    }
  }
  launch(cuda::map_to_bf16_kernel<T, F, Ins...>, grid_stride_launch(n), n, f, out, ins...);
}

template <class T, class F>
void EmulatedElementwise::update_in_place(index_t n, F f, T* a, T* b, T* c, const T* x, bf16* a_rounded) {
  if (n == 0) return;
  using P = cuda::Packet<T>;
  if (cuda::fits_packets<T>(n, {a, b, c, x})) {
    const index_t packets = n / P::kSize;
    launch(cuda::update_in_place_packet_kernel<T, F>, grid_stride_launch(packets), packets, f,
           reinterpret_cast<P*>(a), reinterpret_cast<P*>(b), reinterpret_cast<P*>(c), reinterpret_cast<const P*>(x),
           a_rounded);
    return;
  }
  launch(cuda::update_in_place_kernel<T, F>, grid_stride_launch(n), n, f, a, b, c, x, a_rounded);
}

template <class T, class F>
void EmulatedElementwise::update_in_place(index_t n, F f, T* a, const T* x, bf16* a_rounded) {
  if (n == 0) return;
  using P = cuda::Packet<T>;
  if (cuda::fits_packets<T>(n, {a, x})) {
    const index_t packets = n / P::kSize;
    launch(cuda::update_one_in_place_packet_kernel<T, F>, grid_stride_launch(packets), packets, f, reinterpret_cast<P*>(a),
           reinterpret_cast<const P*>(x), a_rounded);
    return;
  }
  launch(cuda::update_one_in_place_kernel<T, F>, grid_stride_launch(n), n, f, a, x, a_rounded);
}

template <class T>
void EmulatedElementwise::expand(index_t outer, index_t n, index_t inner, T scale, const T* src, T beta, T* dst) {
  const index_t total = outer * n * inner;
  if (total == 0) return;
  launch(cuda::expand_kernel<T>, grid_stride_launch(total), outer, n, inner, scale, src, beta, dst);
}

template <class T>
void EmulatedElementwise::copy_2d(index_t rows, index_t cols, const T* src, index_t src_ld, T beta, T* dst, index_t dst_ld) {
  if (rows == 0 || cols == 0) return;
  if (beta == T(0)) {  // cudaMemcpyAsync, or cudaMemcpy2DAsync within its pitch limit
    const auto bytes = [](index_t elems) { return static_cast<std::size_t>(elems) * sizeof(T); };
    if (rows == 1 || (src_ld == cols && dst_ld == cols)) {
      std::memcpy(dst, src, bytes(rows * cols));
      return;
    }
    constexpr std::size_t kMaxPitch = (std::size_t{1} << 31) - 1;
    if (bytes(src_ld) <= kMaxPitch && bytes(dst_ld) <= kMaxPitch) {
      for (index_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_ld, src + r * src_ld, bytes(cols));
      return;
    }
  }
  launch(cuda::copy_2d_kernel<T>, grid_stride_launch(rows * cols), rows, cols, src, src_ld, beta, dst, dst_ld);
}

template <class T>
void EmulatedElementwise::transpose(index_t outer, index_t d0, index_t mid, index_t d1, index_t inner, const T* src, T beta, T* dst) {
  const index_t total = outer * d0 * mid * d1 * inner;
  if (total == 0) return;
  launch(cuda::transpose_kernel<T>, grid_stride_launch(total), outer, d0, mid, d1, inner, src, beta, dst);
}

template <class From, class To>
void EmulatedElementwise::convert(std::size_t n, const From* src, To* dst) {
  if (n == 0) return;
  const auto count = static_cast<index_t>(n);
  const bool aligned = reinterpret_cast<std::uintptr_t>(src) % sizeof(cuda::ConvertVector<From>) == 0 &&
                       reinterpret_cast<std::uintptr_t>(dst) % sizeof(cuda::ConvertVector<To>) == 0;
  if (aligned && count % cuda::kConvertVector == 0) {
    const index_t vectors = count / cuda::kConvertVector;
    launch(cuda::convert_vector_kernel<From, To>, grid_stride_launch(vectors), vectors,
           reinterpret_cast<const cuda::ConvertVector<From>*>(src), reinterpret_cast<cuda::ConvertVector<To>*>(dst));
    return;
  }
  launch(cuda::convert_kernel<From, To>, grid_stride_launch(count), count, src, dst);
}

template <class T>
void EmulatedElementwise::fill(T* dst, std::size_t n, T value) {
  if (n == 0) return;
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  bool zero = true;
  for (const unsigned char b : bytes) zero = zero && b == 0;
  if (zero) {  // cudaMemsetAsync
    std::memset(static_cast<void*>(dst), 0, n * sizeof(T));
    return;
  }
  const auto count = static_cast<index_t>(n);
  using P = cuda::Packet<T>;
  if (cuda::fits_packets<T>(count, {dst})) {
    P packet;
    for (int e = 0; e < P::kSize; ++e) packet.e[e] = value;
    const index_t packets = count / P::kSize;
    launch(cuda::fill_packet_kernel<T>, grid_stride_launch(packets), packets, packet, reinterpret_cast<P*>(dst));
    return;
  }
  launch(cuda::fill_kernel<T>, grid_stride_launch(count), count, value, dst);
}

std::pair<std::int32_t, std::int32_t> EmulatedElementwise::minmax_index(index_t n, const std::int32_t* idx) {
  std::int32_t result[2] = {std::numeric_limits<std::int32_t>::max(), std::numeric_limits<std::int32_t>::min()};
  if (n == 0) return {result[0], result[1]};
  launch(cuda::minmax_index_kernel<std::int32_t>, grid_stride_launch(n), n, idx, result);
  return {result[0], result[1]};
}

// memory.cuh's copy_from_host: up to kInlineUploadLaunches x kInlineUploadBytes as the parameters
// of one-block launches, one per kInlineUploadBytes; more through a pinned block and
// cudaMemcpyAsync, or cudaMemcpy (both the host's memcpy here; test_pinned_staging.cpp tests the
// staging's policy).
template <class T>
void EmulatedElementwise::copy_from_host(T* dst, const T* src, std::size_t n) {
  if (n == 0) return;
  const std::size_t bytes = n * sizeof(T);
  if (bytes <= cuda::kInlineUploadBytes * cuda::kInlineUploadLaunches) {
    const auto* from = reinterpret_cast<const unsigned char*>(src);
    auto* to = reinterpret_cast<unsigned char*>(dst);
    for (std::size_t at = 0; at < bytes; at += cuda::kInlineUploadBytes) {
      const std::size_t part = std::min(cuda::kInlineUploadBytes, bytes - at);
      cuda::InlineUpload payload{};
      std::memcpy(payload.bytes, from + at, part);
      launch(cuda::store_inline_upload_kernel<unsigned char>, {dim3(1), dim3(cuda::kThreads), 0}, payload,
             static_cast<index_t>(part), to + at);
    }
    return;
  }
  std::memcpy(static_cast<void*>(dst), static_cast<const void*>(src), bytes);
}

std::size_t EmulatedElementwise::inline_upload_bytes() { return cuda::kInlineUploadBytes; }
std::size_t EmulatedElementwise::inline_upload_limit() { return cuda::kInlineUploadBytes * cuda::kInlineUploadLaunches; }

#define MEGACPP_EMULATED_ELEMENTWISE(T)                                                                         \
  template void EmulatedElementwise::map<T, fn::Add, In<T>, In<T>>(index_t, index_t, fn::Add, T*, In<T>, In<T>); \
  template void EmulatedElementwise::map<T, fn::AccumulateOf<fn::Mul>, In<T>, In<T>, In<T>>(                    \
      index_t, index_t, fn::AccumulateOf<fn::Mul>, T*, In<T>, In<T>, In<T>);                                    \
  template void EmulatedElementwise::map<T, fn::Relu2, In<T>>(index_t, index_t, fn::Relu2, T*, In<T>);          \
  template void EmulatedElementwise::map<T, fn::MuonUpdate, In<T>, In<T>>(index_t, index_t, fn::MuonUpdate, T*, In<T>, \
                                                                          In<T>);                               \
  template void EmulatedElementwise::map_to_bf16<T, fn::Relu2, T>(index_t, fn::Relu2, bf16*, const T*);         \
  template void EmulatedElementwise::map_to_bf16<T, fn::Relu2Grad, T, T, T>(index_t, fn::Relu2Grad, bf16*, const T*, \
                                                                            const T*, const T*);                \
  template void EmulatedElementwise::update_in_place<T, fn::AdamWStep>(index_t, fn::AdamWStep, T*, T*, T*,      \
                                                                       const T*, bf16*);                        \
  template void EmulatedElementwise::update_in_place<T, fn::MuonStep>(index_t, fn::MuonStep, T*, const T*, bf16*); \
  template void EmulatedElementwise::expand<T>(index_t, index_t, index_t, T, const T*, T, T*);                  \
  template void EmulatedElementwise::copy_2d<T>(index_t, index_t, const T*, index_t, T, T*, index_t);           \
  template void EmulatedElementwise::transpose<T>(index_t, index_t, index_t, index_t, index_t, const T*, T, T*); \
  template void EmulatedElementwise::fill<T>(T*, std::size_t, T);
MEGACPP_EMULATED_ELEMENTWISE(float)
MEGACPP_EMULATED_ELEMENTWISE(double)
#undef MEGACPP_EMULATED_ELEMENTWISE
template void EmulatedElementwise::copy_from_host<float>(float*, const float*, std::size_t);
template void EmulatedElementwise::copy_from_host<double>(double*, const double*, std::size_t);
template void EmulatedElementwise::copy_from_host<std::int32_t>(std::int32_t*, const std::int32_t*, std::size_t);
template void EmulatedElementwise::copy_from_host<bf16>(bf16*, const bf16*, std::size_t);
template void EmulatedElementwise::copy_from_host<unsigned char>(unsigned char*, const unsigned char*, std::size_t);
template void EmulatedElementwise::convert<float, bf16>(std::size_t, const float*, bf16*);
template void EmulatedElementwise::convert<bf16, float>(std::size_t, const bf16*, float*);
template void EmulatedElementwise::convert<float, double>(std::size_t, const float*, double*);
template void EmulatedElementwise::convert<double, bf16>(std::size_t, const double*, bf16*);
template void EmulatedElementwise::convert<bf16, double>(std::size_t, const bf16*, double*);
template void EmulatedElementwise::convert<double, double>(std::size_t, const double*, double*);

}  // namespace megacpp::cuda_emulation
