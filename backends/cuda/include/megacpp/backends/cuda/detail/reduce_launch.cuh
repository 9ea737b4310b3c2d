// CUDA backend: the launches of reduce.cuh's axis reductions. Apart from the kernels, as the SSM
// scan's are (ssm/scan_launch.cuh), so that the CUDA emulation (tests/cuda_emulation) compiles
// the kernels with a host compiler and launches them as this file does.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"
#include "megacpp/backends/cuda/detail/reduce.cuh"
#include "megacpp/core/functors.hpp"

namespace megacpp::cuda {

// One pass of the reduction: over the whole of j into out (partials null), or over split's chunks
// into partials.
template <class T, class F, class... Ins>
void launch_reduce_pass(index_t outer, index_t n, index_t inner, const ReduceSplit& split, F f, T scale, T beta, T* out,
                        double* partials, Ins... ins) {
  if (inner == 1) {
    reduce_contiguous_kernel<T><<<grid_per_item(outer * split.count), contiguous_reduce_threads(split.longest()), 0,
                                  kStream>>>(outer, n, split, f, scale, beta, out, partials, ins...);
    MEGACPP_CUDA_CHECK_LAUNCH(reduce_contiguous_kernel);
    return;
  }
  reduce_strided_kernel<T><<<grid_per_item(outer * split.count * reduce_col_blocks(inner)),
                             dim3(kReduceCols, kReduceStripes), 0, kStream>>>(outer, n, inner, split, f, scale, beta, out,
                                                                              partials, ins...);
  MEGACPP_CUDA_CHECK_LAUNCH(reduce_strided_kernel);
}

// A sum over `split`'s chunks of the summed axis, outputs (outer, inner): first_pass(partials)
// launches the first pass, into out itself when the split is one chunk (partials null), else into
// (outer, split.count, inner) double partials, which a second pass sums in chunk order into out
// with scale and beta. Shared by the reductions and RMSNorm's gain gradient (rows_launch.cuh),
// whose first passes differ.
template <class T, class FirstPass>
void reduce_in_passes(index_t outer, index_t inner, const ReduceSplit& split, T scale, T beta, T* out,
                      FirstPass first_pass) {
  if (split.count == 1) {
    first_pass(static_cast<double*>(nullptr));
    return;
  }
  const DeviceBuffer<double> partials(static_cast<std::size_t>(outer * split.count * inner));
  first_pass(partials.get());
  launch_reduce_pass<T>(outer, split.count, inner, ReduceSplit{split.count, 1}, fn::Identity{}, scale, beta, out, nullptr,
                        In<double>{partials.get()});
}

template <class T, class F, class... Ins>
void reduce(index_t outer, index_t n, index_t inner, F f, T scale, T beta, T* out, Ins... ins) {
  if (outer == 0 || inner == 0) return;
  const ReduceSplit split = reduce_split_for(outer, n, inner);
  reduce_in_passes<T>(outer, inner, split, scale, beta, out, [&](double* partials) {
    launch_reduce_pass<T>(outer, n, inner, split, f, scale, beta, out, partials, ins...);
  });
}

}  // namespace megacpp::cuda
