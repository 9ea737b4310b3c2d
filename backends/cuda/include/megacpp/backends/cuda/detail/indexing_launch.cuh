// CUDA backend: the launches of the index-driven kernels (detail/indexing.cuh): grids, block
// sizes, and the embedding scatter-add's stable sort of the rows by id (CUB). Kept apart from the
// kernels so that the host emulation of the CUDA execution model (tests/cuda_emulation) compiles
// those unchanged.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/indexing.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"
#include "megacpp/core/config.hpp"

namespace megacpp::cuda {

template <class T>
void gather_rows(index_t n, index_t dim, const T* table, const std::int32_t* idx, T* out) {
  if (n == 0 || dim == 0) return;
  gather_rows_kernel<T><<<grid_for(n * dim), kThreads, 0, kStream>>>(n, dim, table, idx, out);
  MEGACPP_CUDA_CHECK_LAUNCH(gather_rows_kernel);
}

template <class T>
void scatter_add_rows(index_t n, index_t dim, const T* gout, const std::int32_t* idx, T* gtable) {
  if (n == 0 || dim == 0) return;
  check(n <= std::numeric_limits<int>::max(), "cuda::scatter_add_rows", n, " rows exceed CUB's int item count");
  const auto count = static_cast<std::size_t>(n);
  const DeviceBuffer<std::int32_t> rows_in(count), rows(count), sorted_idx(count);  // (n) each
  iota_kernel<std::int32_t><<<grid_for(n), kThreads, 0, kStream>>>(n, rows_in.get());
  MEGACPP_CUDA_CHECK_LAUNCH(iota_kernel);
  const int items = static_cast<int>(n);
  std::size_t temp_bytes = 0;
  MEGACPP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, idx, sorted_idx.get(), rows_in.get(), rows.get(),
                                                     items, 0, 32, kStream));
  const DeviceBuffer<unsigned char> temp(temp_bytes);
  MEGACPP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, idx, sorted_idx.get(), rows_in.get(),
                                                     rows.get(), items, 0, 32, kStream));
  scatter_add_sorted_runs_kernel<T><<<grid_per_item(n), kScatterColumnThreads, 0, kStream>>>(n, dim, gout, sorted_idx.get(),
                                                                                      rows.get(), gtable);
  MEGACPP_CUDA_CHECK_LAUNCH(scatter_add_sorted_runs_kernel);
}

template <class T>
void rope(index_t tokens, index_t heads, index_t dim, const std::int32_t* positions, const T* inv_freq, int sign,
          const T* x, T beta, T* y) {
  const index_t pairs = tokens * (dim / 2);
  if (pairs == 0 || heads == 0) return;
  rope_kernel<T><<<grid_for(pairs), kThreads, 0, kStream>>>(tokens, heads, dim, positions, inv_freq, sign, x, beta, y);
  MEGACPP_CUDA_CHECK_LAUNCH(rope_kernel);
}

template <class T>
void cross_entropy(index_t rows, index_t vocab, const T* logits, const std::int32_t* targets, const T* mask, T* losses,
                   T* lse) {
  if (rows == 0) return;
  cross_entropy_kernel<T><<<grid_per_item(rows), kThreads, 0, kStream>>>(rows, vocab, logits, targets, mask, losses, lse);
  MEGACPP_CUDA_CHECK_LAUNCH(cross_entropy_kernel);
}

template <class T>
void cross_entropy_backward(index_t rows, index_t vocab, const T* logits, const T* lse, const std::int32_t* targets,
                            const T* mask, T scale, T* glogits) {
  if (rows == 0) return;
  cross_entropy_backward_kernel<T><<<grid_per_item(rows), kThreads, 0, kStream>>>(rows, vocab, logits, lse, targets,
                                                                                   mask, scale, glogits);
  MEGACPP_CUDA_CHECK_LAUNCH(cross_entropy_backward_kernel);
}

template <class T>
void softcap_cross_entropy(index_t rows, index_t vocab, T cap, T* logits, const std::int32_t* targets, const T* mask,
                           T scale, T* losses, T* lse, T* grad) {
  if (rows == 0) return;
  softcap_cross_entropy_kernel<T><<<grid_per_item(rows), kThreads, 0, kStream>>>(rows, vocab, cap, logits, targets, mask,
                                                                                  scale, losses, lse, grad);
  MEGACPP_CUDA_CHECK_LAUNCH(softcap_cross_entropy_kernel);
}

}  // namespace megacpp::cuda
