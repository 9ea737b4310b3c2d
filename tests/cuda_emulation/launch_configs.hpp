// tests/cuda_emulation/launch_configs.hpp: the launch shapes the CUDA backend's launch headers use
// most, as emulator LaunchConfigs, for the files that mirror those launches: a grid-stride loop
// over n items sized by grid_for, and a block per item by grid_per_item (kThreads threads each).
#pragma once

#include "emulator/launch.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as megacpp/backends/cuda.cuh does around its detail headers
#include "megacpp/backends/cuda/detail/check.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {

// kernel<<<grid_for(n), kThreads>>>: a grid-stride loop over n items.
inline LaunchConfig grid_stride_launch(index_t n) { return {dim3(cuda::grid_for(n)), dim3(cuda::kThreads), 0}; }

// kernel<<<grid_per_item(items), kThreads>>>: a block per item (a row, an output).
inline LaunchConfig block_per_item_launch(index_t items) {
  return {dim3(cuda::grid_per_item(items)), dim3(cuda::kThreads), 0};
}

}  // namespace megacpp::cuda_emulation
