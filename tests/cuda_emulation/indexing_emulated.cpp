// tests/cuda_emulation/indexing_emulated.cpp: the launches of detail/indexing_launch.cuh and
// detail/gated_combine_launch.cuh on the emulator, mirrored call for call (the launch headers'
// <<<>>> and CUB are not host C++): the same kernels, grids, block sizes and checks. The
// scatter-add's CUB SortPairs (int32 ids as keys over all 32 bits, iota's rows as values: a stable
// radix sort, signed keys in their numeric order) stands in as std::stable_sort of the positions
// by key, each carrying its value.
#include "indexing_emulated.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <numeric>
#include <vector>

#include "emulator/launch.hpp"
#include "launch_configs.hpp"

#include "megacpp/core/error.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as megacpp/backends/cuda.cuh does around its detail headers
#include "megacpp/backends/cuda/detail/gated_combine.cuh"
#include "megacpp/backends/cuda/detail/indexing.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {

template <class T>
void EmulatedIndexing::gather_rows(index_t n, index_t dim, const T* table, const std::int32_t* idx, T* out) {
  if (n == 0 || dim == 0) return;
  launch(cuda::gather_rows_kernel<T>, grid_stride_launch(n * dim), n, dim, table, idx, out);
}

template <class T>
void EmulatedIndexing::scatter_add_rows(index_t n, index_t dim, const T* gout, const std::int32_t* idx, T* gtable) {
  if (n == 0 || dim == 0) return;
  check(n <= std::numeric_limits<int>::max(), "cuda::scatter_add_rows", n, " rows exceed CUB's int item count");
  const auto count = static_cast<std::size_t>(n);
  std::vector<std::int32_t> rows_in(count, -1);
  launch(cuda::iota_kernel<std::int32_t>, grid_stride_launch(n), n, rows_in.data());
  // CUB's SortPairs(keys = idx, values = rows_in) into (sorted_idx, rows)
  std::vector<std::size_t> order(count);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return idx[a] < idx[b]; });
  std::vector<std::int32_t> sorted_idx(count), rows(count);
  for (std::size_t i = 0; i < count; ++i) sorted_idx[i] = idx[order[i]], rows[i] = rows_in[order[i]];
  launch(cuda::scatter_add_sorted_runs_kernel<T>,
         LaunchConfig{dim3(cuda::grid_per_item(n)), dim3(cuda::kScatterColumnThreads), 0}, n, dim, gout,
         sorted_idx.data(), rows.data(), gtable);
}

template <class T>
void EmulatedIndexing::rope(index_t tokens, index_t heads, index_t dim, const std::int32_t* positions, const T* inv_freq,
                            int sign, const T* x, T beta, T* y) {
  const index_t pairs = tokens * (dim / 2);
  if (pairs == 0 || heads == 0) return;
  launch(cuda::rope_kernel<T>, grid_stride_launch(pairs), tokens, heads, dim, positions, inv_freq, sign, x, beta, y);
}

template <class T>
void EmulatedIndexing::cross_entropy(index_t rows, index_t vocab, const T* logits, const std::int32_t* targets,
                                     const T* mask, T* losses, T* lse) {
  if (rows == 0) return;
  launch(cuda::cross_entropy_kernel<T>, block_per_item_launch(rows), rows, vocab, logits, targets, mask, losses, lse);
}

template <class T>
void EmulatedIndexing::cross_entropy_backward(index_t rows, index_t vocab, const T* logits, const T* lse,
                                              const std::int32_t* targets, const T* mask, T scale, T* glogits) {
  if (rows == 0) return;
  launch(cuda::cross_entropy_backward_kernel<T>, block_per_item_launch(rows), rows, vocab, logits, lse, targets, mask,
         scale, glogits);
}

template <class T>
void EmulatedSoftcapCrossEntropy::forward(const kernels::SoftcapCrossEntropyParams& p,
                                          const kernels::SoftcapCrossEntropyArgs<T>& a) {
  if (p.rows == 0) return;
  launch(cuda::softcap_cross_entropy_kernel<T>, block_per_item_launch(p.rows), p.rows, p.vocab, static_cast<T>(p.cap),
         a.logits, a.targets, a.mask, static_cast<T>(p.scale), a.losses, a.lse, a.grad);
}

template <class T>
void EmulatedGatedCombine::forward(const kernels::GatedCombineParams& p, const kernels::GatedCombineArgs<T>& a) {
  if (p.tokens == 0) return;
  launch(cuda::gated_combine_forward_kernel<T>, block_per_item_launch(p.tokens), p.tokens, p.k, p.d, a.row_of_slot,
         a.gate, a.ys, a.y);
}

template <class T>
void EmulatedGatedCombine::backward(const kernels::GatedCombineParams& p, const kernels::GatedCombineArgs<T>& a,
                                    const kernels::GatedCombineGrads<T>& g) {
  if (p.tokens == 0 || (!g.dys && !g.dgate)) return;
  launch(cuda::gated_combine_backward_kernel<T>, block_per_item_launch(p.tokens), p.tokens, p.k, p.d, a.row_of_slot,
         a.gate, a.ys, g.dy, g.dys, g.dgate);
}

#define MEGACPP_EMULATED_INDEXING(T)                                                                                   \
  template void EmulatedIndexing::gather_rows<T>(index_t, index_t, const T*, const std::int32_t*, T*);                 \
  template void EmulatedIndexing::scatter_add_rows<T>(index_t, index_t, const T*, const std::int32_t*, T*);            \
  template void EmulatedIndexing::rope<T>(index_t, index_t, index_t, const std::int32_t*, const T*, int, const T*, T,  \
                                          T*);                                                                         \
  template void EmulatedIndexing::cross_entropy<T>(index_t, index_t, const T*, const std::int32_t*, const T*, T*, T*); \
  template void EmulatedIndexing::cross_entropy_backward<T>(index_t, index_t, const T*, const T*,                      \
                                                            const std::int32_t*, const T*, T, T*);                     \
  template void EmulatedSoftcapCrossEntropy::forward<T>(const kernels::SoftcapCrossEntropyParams&,                     \
                                                        const kernels::SoftcapCrossEntropyArgs<T>&);                   \
  template void EmulatedGatedCombine::forward<T>(const kernels::GatedCombineParams&,                                   \
                                                 const kernels::GatedCombineArgs<T>&);                                 \
  template void EmulatedGatedCombine::backward<T>(const kernels::GatedCombineParams&,                                  \
                                                  const kernels::GatedCombineArgs<T>&,                                 \
                                                  const kernels::GatedCombineGrads<T>&);
MEGACPP_EMULATED_INDEXING(float)
MEGACPP_EMULATED_INDEXING(double)
#undef MEGACPP_EMULATED_INDEXING

}  // namespace megacpp::cuda_emulation
