// CUDA backend: one decode step of attention over a KV cache (contract and formulas:
// megacpp/core/kernels/attention_decode.hpp; CPU kernel: cpu/detail/attention/decode.hpp).
//
// One block per (head, row), kDecodeThreads threads, in double like the CPU kernel:
//   1. the group's first head writes the row's new key and value into slot position % slots;
//   2. scores: warps take keys in turn (key j on warp j % warps), lanes split head_dim and one
//      warp_reduce sums the dot product; lane 0 caps it and stores s_j in `scores` (global
//      scratch, one row of `slots` per block) and keeps its running maximum;
//   3. block_max -> m; threads over keys: s_j <- exp(s_j - m), block_sum -> l;
//   4. o: head_dim columns at a time, each column's keys split into `groups` interleaved
//      subsets summed in key order, the subsets' sums then added in subset order, / l.
// The new token's key and value are read from k_new and v_new, never from the slot being written:
// the visible positions [i - n + 1, i] are n <= slots consecutive positions, so no other visible
// key shares slot i % slots, and no block reads what another writes. Every sum has a fixed order
// for a fixed block size (block_reduce's trees; the subsets), so a step is bitwise reproducible;
// against the CPU, which sums keys one by one, it differs by double rounding only.
// The rows' DecodeRow entries (host memory) travel by value, kRowsPerLaunch per launch.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cmath>

#include <cuda/std/limits>

#include "megacpp/backends/cuda/detail/block_reduce.cuh"
#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/core/kernels/attention_decode.hpp"

namespace megacpp::cuda::decode {

inline constexpr int kDecodeThreads = 256;     // threads per (head, row) block: 8 warps
inline constexpr index_t kRowsPerLaunch = 64;  // DecodeRow entries a launch takes by value (1 KiB)

// The rows of one launch, by value (kernel parameters, no host-to-device copy).
struct RowChunk {
  kernels::DecodeRow rows[kRowsPerLaunch];
};

// Grid (heads, rows of the chunk), kDecodeThreads threads; the chunk's rows are first_row,
// first_row + 1, ... `scores`: (rows of the chunk, heads, slots) doubles of scratch.
template <class T>
__global__ void __launch_bounds__(kDecodeThreads)
    attention_decode_kernel(kernels::AttentionDecodeParams p, index_t first_row, RowChunk chunk,
                            kernels::AttentionDecodeArgs<T> a, double* scores) {
  using std::exp, std::tanh;  // the double overloads (device ones under nvcc), not megacpp's ops on Var
  const index_t h = blockIdx.x, r = blockIdx.y, b = first_row + r;
  const index_t Hkv = p.kv_heads, D = p.head_dim, kvh = h / p.group();
  const index_t i = chunk.rows[r].position, n = chunk.rows[r].visible, first = i - n + 1;
  const index_t row_base = b * p.slots * Hkv * D;
  const T* k_new = a.k_new + (b * Hkv + kvh) * D;
  const T* v_new = a.v_new + (b * Hkv + kvh) * D;
  const auto in_cache = [&](T* cache, index_t position) { return cache + row_base + (position % p.slots * Hkv + kvh) * D; };
  // 1. the new key and value into their slot, once per kv head
  if (h % p.group() == 0)
    for (index_t e = threadIdx.x; e < D; e += blockDim.x) {
      in_cache(a.k, i)[e] = k_new[e];
      in_cache(a.v, i)[e] = v_new[e];
    }
  const auto key = [&](index_t j) -> const T* { return j == n - 1 ? k_new : in_cache(a.k, first + j); };
  const auto value = [&](index_t j) -> const T* { return j == n - 1 ? v_new : in_cache(a.v, first + j); };

  // 2. scores
  double* s = scores + (r * p.heads + h) * p.slots;
  const T* q = a.q + (b * p.heads + h) * D;
  const index_t lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  double m = -::cuda::std::numeric_limits<double>::infinity();
  for (index_t j = warp; j < n; j += warps) {
    const T* k = key(j);
    double dot = 0;
    for (index_t d = lane; d < D; d += 32) dot += static_cast<double>(q[d]) * static_cast<double>(k[d]);
    dot = warp_reduce(dot, SumOp{});
    double sj = p.scale * dot;
    if (p.softcap > 0) sj = p.softcap * tanh(sj / p.softcap);
    if (lane == 0) {
      s[j] = sj;
      m = MaxOp{}(m, sj);
    }
  }
  // 3. softmax numerators in place (block_reduce's barriers order the scratch's writes and reads)
  m = block_max(m);
  double part = 0;
  for (index_t j = threadIdx.x; j < n; j += blockDim.x) {
    const double e = exp(s[j] - m);
    s[j] = e;
    part += e;
  }
  const double l = block_sum(part);

  // 4. o = sum_j p_j v_j / l, `columns` of head_dim per pass, keys in `groups` interleaved subsets
  __shared__ double subset_sums[kDecodeThreads];
  const index_t columns = D < blockDim.x ? D : blockDim.x, groups = blockDim.x / columns;
  const index_t c = threadIdx.x % columns, g = threadIdx.x / columns;
  for (index_t d0 = 0; d0 < D; d0 += columns) {
    const index_t d = d0 + c;
    if (g < groups && d < D) {
      double acc = 0;
      for (index_t j = g; j < n; j += groups) acc += s[j] * static_cast<double>(value(j)[d]);
      subset_sums[g * columns + c] = acc;
    }
    __syncthreads();
    if (g == 0 && d < D) {
      double total = 0;
      for (index_t t = 0; t < groups; ++t) total += subset_sums[t * columns + c];
      a.o[(b * p.heads + h) * D + d] = static_cast<T>(total / l);
    }
    __syncthreads();  // the next pass rewrites subset_sums
  }
}

// The launch shape: grid (heads, rows of a chunk), the chunk's rows by value.
inline RowChunk row_chunk(const kernels::DecodeRow* rows, index_t first_row, index_t count) {
  RowChunk chunk{};
  for (index_t r = 0; r < count; ++r) chunk.rows[r] = rows[first_row + r];
  return chunk;
}

}  // namespace megacpp::cuda::decode
