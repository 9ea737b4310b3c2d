// CUDA backend: fused per-row kernels (softmax, log-softmax, RMSNorm), launched by rows_launch.cuh.
// Semantics and formulas: cpu/detail/rows.hpp. Softmax and log-softmax take one block per row; RMSNorm one warp per row
// of up to kWarpRowMaxCols columns, one block per longer row. Row sums and maxima use
// block_reduce's or warp_sum's fixed trees, which make every result reproducible run to run.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cmath>

#include "megacpp/backends/cuda/detail/block_reduce.cuh"
#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/packet.cuh"
#include "megacpp/backends/cuda/detail/reduce.cuh"
#include "megacpp/core/config.hpp"

namespace megacpp::cuda {

template <class T>
__device__ T row_max(const T* x, index_t cols) {
  T m = lowest_value<T>();
  for (index_t c = threadIdx.x; c < cols; c += blockDim.x) m = x[c] > m ? x[c] : m;
  return block_max(m);
}

// y = exp(x - max) / sum(exp(x - max)) per row; an all -inf (fully masked) row gives y = 0.
template <class T>
__global__ void softmax_kernel(index_t rows, index_t cols, const T* x, T* y) {
  using std::exp;  // CUDA's device overloads; unqualified exp would find megacpp::exp (Var)
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = row_max(xr, cols);
    if (m == lowest_value<T>()) {  // uniform across the block: every thread sees the same m
      for (index_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = T(0);
      continue;
    }
    T sum = 0;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) sum += (yr[c] = exp(xr[c] - m));
    const T inv = T(1) / block_sum(sum);
    // Each thread rescales exactly the elements it wrote, so no barrier is needed between.
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] *= inv;
  }
}

// gx += y * (gy - sum(gy * y))
template <class T>
__global__ void softmax_backward_kernel(index_t rows, index_t cols, const T* y, const T* gy, T* gx) {
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * cols;
    const T* gr = gy + r * cols;
    T* gxr = gx + r * cols;
    T dot = 0;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) dot += gr[c] * yr[c];
    dot = block_sum(dot);
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) gxr[c] += yr[c] * (gr[c] - dot);
  }
}

// y = x - max - log(sum(exp(x - max)))
template <class T>
__global__ void log_softmax_kernel(index_t rows, index_t cols, const T* x, T* y) {
  using std::exp, std::log;
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = row_max(xr, cols);
    T sum = 0;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) sum += exp(xr[c] - m);
    const T lse = m + log(block_sum(sum));
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] - lse;
  }
}

// gx += gy - exp(y) * sum(gy)
template <class T>
__global__ void log_softmax_backward_kernel(index_t rows, index_t cols, const T* y, const T* gy, T* gx) {
  using std::exp;
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* yr = y + r * cols;
    const T* gr = gy + r * cols;
    T* gxr = gx + r * cols;
    T sum = 0;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) sum += gr[c];
    sum = block_sum(sum);
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) gxr[c] += gr[c] - exp(yr[c]) * sum;
  }
}

// RMSNorm (Zhang & Sennrich 2019): rstd = 1 / sqrt(mean(x^2) + eps); y = x * rstd * gain.
// `gain` may be null (no learned gain).
template <class T>
__global__ void rmsnorm_kernel(index_t rows, index_t cols, const T* x, const T* gain, T eps, T* y, T* rstd) {
  using std::sqrt;
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T ss = 0;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
    const T s = T(1) / sqrt(block_sum(ss) / static_cast<T>(cols) + eps);
    if (threadIdx.x == 0) rstd[r] = s;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = gain ? xr[c] * s * gain[c] : xr[c] * s;
  }
}

// With xhat = x * rstd and gh = gy * gain:  gx += rstd * (gh - xhat * mean(gh * xhat))
template <class T>
__global__ void rmsnorm_backward_x_kernel(index_t rows, index_t cols, const T* x, const T* gain, const T* rstd,
                                          const T* gy, T* gx) {
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    const T* gr = gy + r * cols;
    T* gxr = gx + r * cols;
    const T s = rstd[r];
    T dot = 0;
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) dot += gr[c] * (gain ? gain[c] : T(1)) * xr[c] * s;
    dot = block_sum(dot) / static_cast<T>(cols);
    for (index_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T gh = gr[c] * (gain ? gain[c] : T(1));
      gxr[c] += s * (gh - xr[c] * s * dot);
    }
  }
}

// The same two kernels a warp per row, each lane taking Vec<T, N>s of the row (a 16-byte packet
// when the row allows, else single elements), for rows of at most kWarpRowMaxCols. A block per
// row of the model's width (512 columns: 2 elements per thread of 256) spent its time in the
// block reduction's barriers and ran at 1.3-1.5 TB/s on an H100 (ncu, the bf16 training step).
// Each element's arithmetic is the block kernels'; only the order of the row's sum differs.
inline constexpr index_t kWarpRowMaxCols = 8192;

// Sum over a warp by an xor butterfly: every lane ends with the same bits (a + b == b + a).
template <class T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
  return v;
}

template <class T, int N>
__global__ void rmsnorm_warp_kernel(index_t rows, index_t cols, const T* x, const T* gain, T eps, T* y, T* rstd) {
  using std::sqrt;
  using V = Vec<T, N>;
  const index_t vectors = cols / N, lane = threadIdx.x % 32;
  const auto* g = reinterpret_cast<const V*>(gain);
  for (index_t r = global_thread() / 32; r < rows; r += grid_stride() / 32) {  // the same r in every lane
    const auto* xr = reinterpret_cast<const V*>(x + r * cols);
    auto* yr = reinterpret_cast<V*>(y + r * cols);
    T ss = 0;
    for (index_t v = lane; v < vectors; v += 32) {
      const V a = xr[v];
#pragma unroll
      for (int e = 0; e < N; ++e) ss += a.e[e] * a.e[e];
    }
    const T s = T(1) / sqrt(warp_sum(ss) / static_cast<T>(cols) + eps);
    if (lane == 0) rstd[r] = s;
    for (index_t v = lane; v < vectors; v += 32) {
      const V a = xr[v];
      V out;
      if (gain) {
        const V w = g[v];
#pragma unroll
        for (int e = 0; e < N; ++e) out.e[e] = a.e[e] * s * w.e[e];
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) out.e[e] = a.e[e] * s;
      }
      yr[v] = out;
    }
  }
}

template <class T, int N>
__global__ void rmsnorm_backward_x_warp_kernel(index_t rows, index_t cols, const T* x, const T* gain, const T* rstd,
                                               const T* gy, T* gx) {
  using V = Vec<T, N>;
  const index_t vectors = cols / N, lane = threadIdx.x % 32;
  const auto* g = reinterpret_cast<const V*>(gain);
  for (index_t r = global_thread() / 32; r < rows; r += grid_stride() / 32) {
    const auto* xr = reinterpret_cast<const V*>(x + r * cols);
    const auto* gr = reinterpret_cast<const V*>(gy + r * cols);
    auto* gxr = reinterpret_cast<V*>(gx + r * cols);
    const T s = rstd[r];
    T dot = 0;
    for (index_t v = lane; v < vectors; v += 32) {
      const V a = xr[v], d = gr[v];
      if (gain) {
        const V w = g[v];
#pragma unroll
        for (int e = 0; e < N; ++e) dot += d.e[e] * w.e[e] * a.e[e] * s;
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) dot += d.e[e] * T(1) * a.e[e] * s;
      }
    }
    dot = warp_sum(dot) / static_cast<T>(cols);
    for (index_t v = lane; v < vectors; v += 32) {
      const V a = xr[v], d = gr[v];
      V out = gxr[v];
      if (gain) {
        const V w = g[v];
#pragma unroll
        for (int e = 0; e < N; ++e) out.e[e] += s * (d.e[e] * w.e[e] - a.e[e] * s * dot);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) out.e[e] += s * (d.e[e] * T(1) - a.e[e] * s * dot);
      }
      gxr[v] = out;
    }
  }
}

// ggain += sum_rows gy * x * rstd (= gy * xhat): a sum over every row of each column, the strided
// reduction of reduce.cuh with the row's rstd as a third factor. A block is 32 columns times
// kReduceStripes stripes of a chunk of rows (`split`: the whole of the rows, or one of the chunks
// that give a width of a few hundred columns more than a few blocks), in double, the stripes added
// in stripe order. One chunk adds into ggain; several write partials[(k, c)], which the launch
// adds in a fixed order (reduce_launch.cuh's second pass). Deterministic, no atomics.
template <class T>
__global__ void rmsnorm_backward_gain_kernel(index_t cols, ReduceSplit split, const T* x, const T* rstd,
                                             const T* gy, T* ggain, double* partials) {
  __shared__ double partial[kReduceStripes][kReduceCols + 1];  // +1: no bank conflicts on the column read
  const index_t col_blocks = reduce_col_blocks(cols);
  for (index_t blk = blockIdx.x; blk < split.count * col_blocks; blk += gridDim.x) {
    const index_t k = blk / col_blocks, c = (blk % col_blocks) * kReduceCols + threadIdx.x;
    double acc = 0;
    if (c < cols) {
      for (index_t r = split.begin(k) + threadIdx.y; r < split.end(k); r += kReduceStripes)
        acc += static_cast<double>(gy[r * cols + c] * x[r * cols + c] * rstd[r]);
    }
    partial[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
      double total = 0;
      for (int s = 0; s < kReduceStripes; ++s) total += partial[s][threadIdx.x];
      if (partials) partials[k * cols + c] = total;
      else store_reduced(ggain + c, total, T(1), T(1));
    }
    __syncthreads();  // partial is reused by the next block of this loop
  }
}

}  // namespace megacpp::cuda
