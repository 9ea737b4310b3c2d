// CUDA backend: axis reductions over functors, the kernels (launched by reduce_launch.cuh).
// Semantics: cpu::reduce in cpu/detail/elementwise.hpp:
//   out[o, i] = beta * out[o, i] + scale * sum_j f(ins[o, j, i]...)   (x viewed as (outer, n, inner))
// accumulated in double like the CPU. Each output is summed by a fixed set of threads in a
// fixed order (no atomics), so results are bitwise reproducible run to run; they differ from
// the CPU's serial j order only by rounding.
//
// Split sums. The outputs alone can leave most of the GPU idle: a bias's or a norm weight's
// gradient is one output row of a few hundred columns summed over every token (outer 1, inner
// 512, n 4,096: 16 blocks, each thread a chain of 512 loads), and ||x||^2 or a loss is one sum of
// everything (one block). Then j is cut into chunks (`ReduceSplit`): the first pass sums each
// (output, chunk) into a double partial on its own block, the second reduces the partials
// (viewed as (outer, chunks, inner)) with the same kernel, which adds them in a fixed order and
// applies scale and beta. The cut depends on the shape alone, so the bits are still the same run
// to run; a shape whose outputs fill the GPU is one pass, as before. The same two-level pattern as
// token_runs.cuh's sums over tokens.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <algorithm>

#include "megacpp/backends/cuda/detail/block_reduce.cuh"
#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/operand.cuh"
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

// ---- the split of j --------------------------------------------------------------------------

// Blocks a reduction should give the GPU before it is worth a second pass: about four per SM of
// a 132-SM H100 (kThreads threads each).
inline constexpr index_t kReduceTargetBlocks = 512;
// At most this many chunks, so the second pass is short: 16 partials per stripe (inner > 1), or
// one per thread of a block (inner == 1).
inline constexpr index_t kMaxReduceChunks = 128;
// The shortest chunk: 16 rows per stripe (inner > 1), or 32 elements per thread of a 256-thread
// block (inner == 1). A shorter one costs more in the extra pass than it gains.
inline constexpr index_t kMinStridedChunk = 16 * kReduceStripes;
inline constexpr index_t kMinContiguousChunk = 32 * 256;

// j < n cut into `count` chunks as even as integers allow: chunk k is [k n / count, (k + 1) n /
// count), floor(n / count) or ceil(n / count) long. One chunk is the whole of j.
struct ReduceSplit {
  index_t n = 0, count = 1;
  MEGACPP_HD index_t begin(index_t k) const { return k * n / count; }
  MEGACPP_HD index_t end(index_t k) const { return (k + 1) * n / count; }
  index_t longest() const { return (n + count - 1) / count; }
};

// The cut for a reduction whose outputs alone make `blocks` blocks: enough chunks to bring the
// first pass to about kReduceTargetBlocks, none shorter than min_chunk, at most kMaxReduceChunks.
inline ReduceSplit reduce_split(index_t blocks, index_t n, index_t min_chunk) {
  const index_t wanted = (kReduceTargetBlocks + blocks - 1) / std::max<index_t>(blocks, 1);
  return {n, std::max<index_t>(1, std::min({wanted, n / min_chunk, kMaxReduceChunks}))};
}

MEGACPP_HD index_t reduce_col_blocks(index_t inner) { return (inner + kReduceCols - 1) / kReduceCols; }

// The cut reduce (reduce_launch.cuh) takes for x viewed as (outer, n, inner).
inline ReduceSplit reduce_split_for(index_t outer, index_t n, index_t inner) {
  return inner == 1 ? reduce_split(outer, n, kMinContiguousChunk)
                    : reduce_split(outer * reduce_col_blocks(inner), n, kMinStridedChunk);
}

// ---- the kernels -----------------------------------------------------------------------------

// inner > 1. Block items are (o, chunk k, 32 columns), columns fastest. With `partials` null
// (one chunk) the sum is stored in out; otherwise it goes to partials[(o, k, i)], for the second
// pass over (outer, split.count, inner).
template <class T, class F, class... Ins>
__global__ void reduce_strided_kernel(index_t outer, index_t n, index_t inner, ReduceSplit split, F f, T scale, T beta,
                                      T* out, double* partials, Ins... ins) {
  __shared__ double partial[kReduceStripes][kReduceCols + 1];  // +1: no bank conflicts on the column read
  const index_t col_blocks = reduce_col_blocks(inner);
  for (index_t blk = blockIdx.x; blk < outer * split.count * col_blocks; blk += gridDim.x) {
    const index_t o = blk / (split.count * col_blocks), k = blk / col_blocks % split.count;
    const index_t i = (blk % col_blocks) * kReduceCols + threadIdx.x;
    double acc = 0;
    if (i < inner) {
      for (index_t j = split.begin(k) + threadIdx.y; j < split.end(k); j += kReduceStripes)
        acc += static_cast<double>(f(operand_at(ins, (o * n + j) * inner + i, i)...));
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && i < inner) {
      double total = 0;
      for (int s = 0; s < kReduceStripes; ++s) total += partial[s][threadIdx.x];
      if (partials) partials[(o * split.count + k) * inner + i] = total;
      else store_reduced(out + o * inner + i, total, scale, beta);
    }
    __syncthreads();  // partial is reused by the next block of this loop
  }
}

// inner == 1 (sums along the last axis, or of everything): one block per (o, chunk k), its threads
// split the chunk round-robin and block_reduce combines them in a fixed tree. `partials` as above,
// at (o, k).
template <class T, class F, class... Ins>
__global__ void reduce_contiguous_kernel(index_t outer, index_t n, ReduceSplit split, F f, T scale, T beta, T* out,
                                         double* partials, Ins... ins) {
  for (index_t blk = blockIdx.x; blk < outer * split.count; blk += gridDim.x) {
    const index_t o = blk / split.count, k = blk % split.count;
    double acc = 0;
    for (index_t j = split.begin(k) + threadIdx.x; j < split.end(k); j += blockDim.x)
      acc += static_cast<double>(f(operand_at(ins, o * n + j, 0)...));
    acc = block_sum(acc);
    if (threadIdx.x == 0) {
      if (partials) partials[blk] = acc;
      else store_reduced(out + o, acc, scale, beta);
    }
  }
}

// Threads per block for reduce_contiguous_kernel: a chunk's length rounded up to a power of two in
// [32, 256], so short rows do not leave most of a 256-thread block idle.
inline int contiguous_reduce_threads(index_t n) {
  int threads = 32;
  while (threads < kThreads && threads < n) threads *= 2;
  return threads;
}

}  // namespace megacpp::cuda
