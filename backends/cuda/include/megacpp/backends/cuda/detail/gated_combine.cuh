// CUDA backend: the MoE gated combine (contract: megacpp/core/kernels/gated_combine.hpp).
//
//   forward   y[t]        = sum_{j < k} gate[t, j] ys[r(t, j)]      slots in order
//   backward  dys[r(t,j)] += gate[t, j] dy[t],   dgate[t, j] += dy[t] . ys[r(t, j)]
//
// One block per token (grid-stride over tokens), threads over the row width: each thread adds
// its columns' k slots in slot order; every gradient row is written by one block (each sorted
// row belongs to one slot), so no atomics. The dot products reduce over the block (block_sum):
// a fixed tree for a fixed block size. Launched by gated_combine_launch.cuh.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>

#include "megacpp/backends/cuda/detail/block_reduce.cuh"
#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/core/config.hpp"

namespace megacpp::cuda {

template <class T>
__global__ void gated_combine_forward_kernel(index_t tokens, index_t k, index_t d, const std::int32_t* row_of_slot,
                                             const T* gate, const T* ys, T* y) {
  for (index_t t = blockIdx.x; t < tokens; t += gridDim.x)
    for (index_t c = threadIdx.x; c < d; c += blockDim.x) {
      T acc = 0;
      for (index_t j = 0; j < k; ++j)
        acc += gate[t * k + j] * ys[static_cast<index_t>(row_of_slot[j * tokens + t]) * d + c];
      y[t * d + c] = acc;
    }
}

template <class T>
__global__ void gated_combine_backward_kernel(index_t tokens, index_t k, index_t d, const std::int32_t* row_of_slot,
                                              const T* gate, const T* ys, const T* dy, T* dys, T* dgate) {
  for (index_t t = blockIdx.x; t < tokens; t += gridDim.x)
    for (index_t j = 0; j < k; ++j) {
      const index_t r = static_cast<index_t>(row_of_slot[j * tokens + t]);
      const T g = gate[t * k + j];
      T dot = 0;
      for (index_t c = threadIdx.x; c < d; c += blockDim.x) {
        if (dys) dys[r * d + c] += g * dy[t * d + c];
        dot += dy[t * d + c] * ys[r * d + c];
      }
      if (dgate) {
        const T total = block_sum(dot);  // every thread of the block takes part
        if (threadIdx.x == 0) dgate[t * k + j] += total;
      }
    }
}

}  // namespace megacpp::cuda
