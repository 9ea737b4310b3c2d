// CUDA backend: deterministic block-wide reductions (sum, max, min) for the row kernels.
//
// Each warp folds its values with a fixed shuffle tree, then warp 0 folds the per-warp results
// the same way: the combination order depends only on blockDim, never on scheduling, so a
// kernel gives bitwise the same result on every run (no atomics on floating point).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cuda/std/limits>

#include "megacpp/backends/cuda/detail/check.cuh"

namespace megacpp::cuda {

struct SumOp {
  template <class T> __device__ T operator()(T a, T b) const { return a + b; }
};
// Same comparison as the CPU's row_max (a NaN never replaces the running maximum).
struct MaxOp {
  template <class T> __device__ T operator()(T a, T b) const { return b > a ? b : a; }
};
struct MinOp {
  template <class T> __device__ T operator()(T a, T b) const { return b < a ? b : a; }
};

template <class T>
__device__ inline T lowest_value() {
  if constexpr (::cuda::std::numeric_limits<T>::has_infinity) return -::cuda::std::numeric_limits<T>::infinity();
  else return ::cuda::std::numeric_limits<T>::lowest();
}

template <class T, class Op>
__device__ T warp_reduce(T v, Op op) {
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_down_sync(0xFFFFFFFFu, v, offset));
  return v;
}

// Reduces one value per thread over the block; every thread gets the result. blockDim.x must
// be a multiple of 32 (at most 1024) and every thread of the block must call it.
template <class T, class Op>
__device__ T block_reduce(T v, Op op, T identity) {
  __shared__ T warp_results[32];
  const unsigned lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v, op);
  __syncthreads();  // the previous call's readers are done with warp_results
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / 32 ? warp_results[lane] : identity;
    v = warp_reduce(v, op);
    if (lane == 0) warp_results[0] = v;
  }
  __syncthreads();
  return warp_results[0];
}

template <class T>
__device__ T block_sum(T v) { return block_reduce(v, SumOp{}, T(0)); }
template <class T>
__device__ T block_max(T v) { return block_reduce(v, MaxOp{}, lowest_value<T>()); }

}  // namespace megacpp::cuda
