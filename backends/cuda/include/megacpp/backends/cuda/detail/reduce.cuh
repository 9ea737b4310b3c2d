// CUDA backend: axis reductions over functors. Semantics: cpu::reduce in
// cpu/detail/elementwise.hpp:
//   out[o, i] = beta * out[o, i] + scale * sum_j f(ins[o, j, i]...)   (x viewed as (outer, n, inner))
// accumulated in double like the CPU. Each output is summed by a fixed set of threads in a
// fixed order (no atomics), so results are bitwise reproducible run to run; they differ from
// the CPU's serial j order only by rounding.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include "megacpp/backends/cuda/detail/block_reduce.cuh"
#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/elementwise.cuh"
#include "megacpp/core/backend.hpp"

namespace megacpp::cuda {

template <class T>
__device__ inline void store_reduced(T* dst, double sum, T scale, T beta) {
  const T s = static_cast<T>(static_cast<double>(scale) * sum);
  *dst = beta == T(0) ? s : beta * *dst + s;
}

// inner > 1: a block is 32 adjacent outputs (x, coalesced reads along i) times kStripes
// threads (y) that split j round-robin; the stripes' partial sums are added in stripe order.
inline constexpr int kReduceCols = 32;
inline constexpr int kReduceStripes = 8;

template <class T, class F, class... Ins>
__global__ void reduce_strided_kernel(index_t outer, index_t n, index_t inner, F f, T scale, T beta, T* out, Ins... ins) {
  __shared__ double partial[kReduceStripes][kReduceCols + 1];  // +1: no bank conflicts on the column read
  const index_t col_blocks = (inner + kReduceCols - 1) / kReduceCols;
  for (index_t blk = blockIdx.x; blk < outer * col_blocks; blk += gridDim.x) {
    const index_t o = blk / col_blocks;
    const index_t i = (blk % col_blocks) * kReduceCols + threadIdx.x;
    double acc = 0;
    if (i < inner) {
      for (index_t j = threadIdx.y; j < n; j += kReduceStripes)
        acc += static_cast<double>(f(operand_at(ins, (o * n + j) * inner + i, i)...));
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      double total = 0;
      for (int s = 0; s < kReduceStripes; ++s) total += partial[s][threadIdx.x];
      store_reduced(out + o * inner + i, total, scale, beta);
    }
    __syncthreads();  // partial is reused by the next block of this loop
  }
}

// inner == 1 (sums along the last axis, or of everything): one block per output, its threads
// split j round-robin and block_reduce combines them in a fixed tree.
template <class T, class F, class... Ins>
__global__ void reduce_contiguous_kernel(index_t outer, index_t n, F f, T scale, T beta, T* out, Ins... ins) {
  for (index_t o = blockIdx.x; o < outer; o += gridDim.x) {
    double acc = 0;
    for (index_t j = threadIdx.x; j < n; j += blockDim.x) acc += static_cast<double>(f(operand_at(ins, o * n + j, 0)...));
    acc = block_sum(acc);
    if (threadIdx.x == 0) store_reduced(out + o, acc, scale, beta);
  }
}

// Threads per block for reduce_contiguous_kernel: n rounded up to a power of two in [32, 256],
// so short rows do not leave most of a 256-thread block idle.
inline int contiguous_reduce_threads(index_t n) {
  int threads = 32;
  while (threads < kThreads && threads < n) threads *= 2;
  return threads;
}

template <class T, class F, class... Ins>
void reduce(index_t outer, index_t n, index_t inner, F f, T scale, T beta, T* out, Ins... ins) {
  if (outer == 0 || inner == 0) return;
  if (inner == 1) {
    reduce_contiguous_kernel<T><<<grid_per_item(outer), contiguous_reduce_threads(n), 0, kStream>>>(outer, n, f, scale,
                                                                                                    beta, out, ins...);
    MEGACPP_CUDA_CHECK_LAUNCH(reduce_contiguous_kernel);
    return;
  }
  const index_t blocks = outer * ((inner + kReduceCols - 1) / kReduceCols);
  reduce_strided_kernel<T><<<grid_per_item(blocks), dim3(kReduceCols, kReduceStripes), 0, kStream>>>(
      outer, n, inner, f, scale, beta, out, ins...);
  MEGACPP_CUDA_CHECK_LAUNCH(reduce_strided_kernel);
}

}  // namespace megacpp::cuda
