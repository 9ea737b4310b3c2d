// CUDA backend: fused per-row kernels (softmax, log-softmax, RMSNorm). Semantics and formulas:
// cpu/detail/rows.hpp. Softmax and log-softmax take one block per row; RMSNorm one warp per row
// of up to kWarpRowMaxCols columns, one block per longer row. Row sums and maxima use
// block_reduce's or warp_sum's fixed trees, which make every result reproducible run to run.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cmath>

#include "megacpp/backends/cuda/detail/block_reduce.cuh"
#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/packet.cuh"
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

// ggain += sum_rows gy * xhat. A block owns 32 columns; its kRowStripes thread rows split the
// rows round-robin and their partial sums are added in stripe order: deterministic, no atomics.
inline constexpr int kRowStripes = 8;

template <class T>
__global__ void rmsnorm_backward_gain_kernel(index_t rows, index_t cols, const T* x, const T* rstd, const T* gy,
                                             T* ggain) {
  __shared__ T partial[kRowStripes][33];
  const index_t c = static_cast<index_t>(blockIdx.x) * 32 + threadIdx.x;
  T acc = 0;
  if (c < cols) {
    for (index_t r = threadIdx.y; r < rows; r += kRowStripes) acc += gy[r * cols + c] * x[r * cols + c] * rstd[r];
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    T total = 0;
    for (int s = 0; s < kRowStripes; ++s) total += partial[s][threadIdx.x];
    ggain[c] += total;
  }
}

template <class T>
void softmax(index_t rows, index_t cols, const T* x, T* y) {
  if (rows == 0 || cols == 0) return;
  softmax_kernel<T><<<grid_per_item(rows), kThreads, 0, kStream>>>(rows, cols, x, y);
  MEGACPP_CUDA_CHECK_LAUNCH(softmax_kernel);
}
template <class T>
void softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx) {
  if (rows == 0 || cols == 0) return;
  softmax_backward_kernel<T><<<grid_per_item(rows), kThreads, 0, kStream>>>(rows, cols, y, gy, gx);
  MEGACPP_CUDA_CHECK_LAUNCH(softmax_backward_kernel);
}
template <class T>
void log_softmax(index_t rows, index_t cols, const T* x, T* y) {
  if (rows == 0 || cols == 0) return;
  log_softmax_kernel<T><<<grid_per_item(rows), kThreads, 0, kStream>>>(rows, cols, x, y);
  MEGACPP_CUDA_CHECK_LAUNCH(log_softmax_kernel);
}
template <class T>
void log_softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx) {
  if (rows == 0 || cols == 0) return;
  log_softmax_backward_kernel<T><<<grid_per_item(rows), kThreads, 0, kStream>>>(rows, cols, y, gy, gx);
  MEGACPP_CUDA_CHECK_LAUNCH(log_softmax_backward_kernel);
}
template <class T>
void rmsnorm(index_t rows, index_t cols, const T* x, const T* gain, T eps, T* y, T* rstd) {
  if (rows == 0 || cols == 0) return;
  if (cols <= kWarpRowMaxCols) {  // a warp per row, kThreads / 32 rows per block
    const unsigned blocks = grid_for(rows * 32);
    if (fits_packets<T>(cols, {x, gain, y}))  // whole rows of packets: every row starts aligned
      rmsnorm_warp_kernel<T, Packet<T>::kSize><<<blocks, kThreads, 0, kStream>>>(rows, cols, x, gain, eps, y, rstd);
    else
      rmsnorm_warp_kernel<T, 1><<<blocks, kThreads, 0, kStream>>>(rows, cols, x, gain, eps, y, rstd);
    MEGACPP_CUDA_CHECK_LAUNCH(rmsnorm_warp_kernel);
    return;
  }
  rmsnorm_kernel<T><<<grid_per_item(rows), kThreads, 0, kStream>>>(rows, cols, x, gain, eps, y, rstd);
  MEGACPP_CUDA_CHECK_LAUNCH(rmsnorm_kernel);
}
// gx and ggain may each be null (not needed).
template <class T>
void rmsnorm_backward(index_t rows, index_t cols, const T* x, const T* gain, const T* rstd, const T* gy, T* gx,
                      T* ggain) {
  if (rows == 0 || cols == 0) return;
  if (gx && cols <= kWarpRowMaxCols) {
    const unsigned blocks = grid_for(rows * 32);
    if (fits_packets<T>(cols, {x, gain, gy, gx}))
      rmsnorm_backward_x_warp_kernel<T, Packet<T>::kSize><<<blocks, kThreads, 0, kStream>>>(rows, cols, x, gain, rstd, gy, gx);
    else
      rmsnorm_backward_x_warp_kernel<T, 1><<<blocks, kThreads, 0, kStream>>>(rows, cols, x, gain, rstd, gy, gx);
    MEGACPP_CUDA_CHECK_LAUNCH(rmsnorm_backward_x_warp_kernel);
  } else if (gx) {
    rmsnorm_backward_x_kernel<T><<<grid_per_item(rows), kThreads, 0, kStream>>>(rows, cols, x, gain, rstd, gy, gx);
    MEGACPP_CUDA_CHECK_LAUNCH(rmsnorm_backward_x_kernel);
  }
  if (ggain) {
    rmsnorm_backward_gain_kernel<T><<<grid_per_item((cols + 31) / 32), dim3(32, kRowStripes), 0, kStream>>>(
        rows, cols, x, rstd, gy, ggain);
    MEGACPP_CUDA_CHECK_LAUNCH(rmsnorm_backward_gain_kernel);
  }
}

}  // namespace megacpp::cuda
