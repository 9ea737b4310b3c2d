// tests/cuda_emulation/reduce_pass_emulated.hpp: launch_reduce_pass (detail/reduce_launch.cuh) on
// the emulator, mirrored launch for launch: the same kernel, grid and block for one pass of a
// reduction, and reduce_in_passes: one pass, or partials then the second pass. For the emulated
// reductions (reduce_emulated.cpp) and the RMSNorm gain gradient (rows_emulated.cpp).
#pragma once

#include <vector>

#include "emulator/launch.hpp"
#include "host_arrays.hpp"

#include "megacpp/core/functors.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as megacpp/backends/cuda.cuh does around its detail headers
#include "megacpp/backends/cuda/detail/reduce.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {

// Mirrors cuda::launch_reduce_pass: over the whole of j into out (partials null), or over split's
// chunks into partials.
template <class T, class F, class... Ins>
void emulated_reduce_pass(index_t outer, index_t n, index_t inner, const cuda::ReduceSplit& split, F f, T scale, T beta,
                          T* out, double* partials, Ins... ins) {
  if (inner == 1) {
    const LaunchConfig config{dim3(cuda::grid_per_item(outer * split.count)),
                              dim3(static_cast<unsigned>(cuda::contiguous_reduce_threads(split.longest()))), 0};
    launch(cuda::reduce_contiguous_kernel<T, F, Ins...>, config, outer, n, split, f, scale, beta, out, partials, ins...);
    return;
  }
  const LaunchConfig config{dim3(cuda::grid_per_item(outer * split.count * cuda::reduce_col_blocks(inner))),
                            dim3(cuda::kReduceCols, cuda::kReduceStripes), 0};
  launch(cuda::reduce_strided_kernel<T, F, Ins...>, config, outer, n, inner, split, f, scale, beta, out, partials, ins...);
}

// Mirrors cuda::reduce_in_passes, the partials starting as NaN (device memory is not initialized).
template <class T, class FirstPass>
void emulated_reduce_in_passes(index_t outer, index_t inner, const cuda::ReduceSplit& split, T scale, T beta, T* out,
                               FirstPass first_pass) {
  if (split.count == 1) {
    first_pass(static_cast<double*>(nullptr));
    return;
  }
  std::vector<double> partials = uninitialized_device<double>(outer * split.count * inner);
  first_pass(partials.data());
  emulated_reduce_pass<T>(outer, split.count, inner, cuda::ReduceSplit{split.count, 1}, fn::Identity{}, scale, beta, out,
                          nullptr, In<double>{partials.data()});
}

}  // namespace megacpp::cuda_emulation
