// megacpp/backends/cuda/kernels/attention_decode.cuh: DecodeAttention<Cuda>, one decode step of
// attention over a KV cache on the GPU (contract: megacpp/core/kernels/attention_decode.hpp;
// kernel: detail/attention_decode.cuh, one block per (head, row) in double). Included by
// megacpp/backends/cuda.cuh after `Cuda` is defined; including this header alone includes cuda.cuh
// first.
#pragma once

#include <algorithm>

#include "megacpp/backends/cuda.cuh"

#define MEGACPP_CUDA_BACKEND_INTERNAL
#include "megacpp/backends/cuda/detail/attention_decode.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

#include "megacpp/core/kernels/attention_decode.hpp"

namespace megacpp::kernels {

/// The CUDA decode-step attention: the cache stays on the device; the rows' positions travel as
/// kernel parameters, so a step makes no host-to-device copy and waits for nothing.
template <>
struct DecodeAttention<Cuda> {
  static constexpr bool available = true;  ///< implemented
  /// Writes each row's new key and value into its cache slot, then o.
  template <class T>
  static void step(const AttentionDecodeParams& p, const AttentionDecodeArgs<T>& a) {
    namespace decode = cuda::decode;
    const index_t chunk_rows = std::min(p.batch, decode::kRowsPerLaunch);
    cuda::DeviceBuffer<double> scores(static_cast<std::size_t>(chunk_rows * p.heads * p.slots));
    for (index_t first = 0; first < p.batch; first += decode::kRowsPerLaunch) {
      const index_t count = std::min(decode::kRowsPerLaunch, p.batch - first);
      const dim3 grid(static_cast<unsigned>(p.heads), static_cast<unsigned>(count));
      decode::attention_decode_kernel<T><<<grid, decode::kDecodeThreads, 0, cuda::kStream>>>(
          p, first, decode::row_chunk(a.rows, first, count), a, scores.get());
      MEGACPP_CUDA_CHECK_LAUNCH(attention_decode_kernel);
    }
  }
};

}  // namespace megacpp::kernels
