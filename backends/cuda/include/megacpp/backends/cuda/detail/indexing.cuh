// CUDA backend: index-driven kernels (embedding gather/scatter, RoPE, cross-entropy, the LM head's
// fused softcap + cross-entropy rows), launched by indexing_launch.cuh.
// Semantics and formulas: cpu/detail/indexing.hpp. Indices are validated by the calling op
// (megacpp::Error at the API boundary); the kernels assume them in range.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cmath>
#include <cstdint>

#include "megacpp/backends/cuda/detail/block_reduce.cuh"
#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/rows.cuh"
#include "megacpp/core/config.hpp"

namespace megacpp::cuda {

// out[r, :] = table[idx[r], :]
template <class T>
__global__ void gather_rows_kernel(index_t n, index_t dim, const T* table, const std::int32_t* idx, T* out) {
  for (index_t i = global_thread(); i < n * dim; i += grid_stride())
    out[i] = table[static_cast<index_t>(idx[i / dim]) * dim + i % dim];
}

// out[i] = i (a template, so that every translation unit may hold its instantiation).
template <class I>
__global__ void iota_kernel(index_t n, I* out) {
  for (index_t i = global_thread(); i < n; i += grid_stride()) out[i] = static_cast<I>(i);
}

// gtable[idx[r], :] += gout[r, :], repeated indices accumulating in row order exactly as the CPU
// does (bitwise equal to it; no floating-point atomics). The rows are first stably sorted by index
// (CUB's radix sort: stable, so equal indices keep their row order), then one block per sorted
// position that starts a run of equal indices adds that run's rows into its table row, columns
// over kScatterColumnThreads threads. Parallel over the distinct indices and the columns: the
// embedding backward of a 4096-token batch took 1.98 ms on an H100 with one thread per column
// walking every row; sorted, it dropped below the step's dozen longest kernels (each over 0.12 ms).
inline constexpr int kScatterColumnThreads = 128;

template <class T>
__global__ void scatter_add_sorted_runs_kernel(index_t n, index_t dim, const T* gout, const std::int32_t* sorted_idx,
                                               const std::int32_t* rows, T* gtable) {
  for (index_t start = blockIdx.x; start < n; start += gridDim.x) {
    const std::int32_t id = sorted_idx[start];
    if (start > 0 && sorted_idx[start - 1] == id) continue;  // not the first row of its run
    T* dst = gtable + static_cast<index_t>(id) * dim;
    for (index_t c = threadIdx.x; c < dim; c += blockDim.x) {
      T acc = dst[c];
      for (index_t i = start; i < n && sorted_idx[i] == id; ++i) acc += gout[static_cast<index_t>(rows[i]) * dim + c];
      dst[c] = acc;
    }
  }
}

// Rotary embedding, rotate-half layout (GPT-NeoX / Llama; Su et al., RoFormer 2021):
//   y[i]         = x[i] cos - x[i + dim/2] sin
//   y[i + dim/2] = x[i + dim/2] cos + x[i] sin,     angle_i = pos * inv_freq_i
// sign = -1 rotates by -angle (the backward). y = beta * y + rotated x. Angles are formed and
// their sine and cosine taken in double (pos * inv_freq reaches 6e4 rad at 64K context), then
// rounded to T, as on the CPU. One thread per (token, i) pair computes them once for all heads,
// and loads kRopeHeadsAtOnce heads' pairs before it stores any: head by head, each thread waited
// for one load after another (10.6 us per call on an H100 for the queries of 4096 tokens x 8 heads
// x 64, 1.6 TB/s; recomputing the angle per head instead cost more, in double sin and cos). A
// thread reads and writes only its own pairs, so x may be y (in place).
inline constexpr int kRopeHeadsAtOnce = 4;

template <class T>
__global__ void rope_kernel(index_t tokens, index_t heads, index_t dim, const std::int32_t* positions, const T* inv_freq,
                            int sign, const T* x, T beta, T* y) {
  const index_t half = dim / 2;
  for (index_t idx = global_thread(); idx < tokens * half; idx += grid_stride()) {
    const index_t t = idx / half, i = idx % half;
    const double angle = static_cast<double>(positions[t]) * static_cast<double>(inv_freq[i]);
    const T cos_a = static_cast<T>(::cos(angle));
    const T sin_a = static_cast<T>(sign * ::sin(angle));
    for (index_t h0 = 0; h0 < heads; h0 += kRopeHeadsAtOnce) {
      T x1[kRopeHeadsAtOnce], x2[kRopeHeadsAtOnce];
#pragma unroll
      for (int j = 0; j < kRopeHeadsAtOnce; ++j)
        if (h0 + j < heads) {
          const T* xr = x + (t * heads + h0 + j) * dim;
          x1[j] = xr[i];
          x2[j] = xr[i + half];
        }
#pragma unroll
      for (int j = 0; j < kRopeHeadsAtOnce; ++j)
        if (h0 + j < heads) {
          T* yr = y + (t * heads + h0 + j) * dim;
          const T y1 = x1[j] * cos_a - x2[j] * sin_a;
          const T y2 = x2[j] * cos_a + x1[j] * sin_a;
          yr[i] = beta == T(0) ? y1 : beta * yr[i] + y1;
          yr[i + half] = beta == T(0) ? y2 : beta * yr[i + half] + y2;
        }
    }
  }
}

// Per-row cross-entropy, one block per row: lse[r] = logsumexp(logits[r, :]);
// losses[r] = mask[r] * (lse[r] - logits[r, targets[r]]). `mask` may be null (all ones).
template <class T>
__global__ void cross_entropy_kernel(index_t rows, index_t vocab, const T* logits, const std::int32_t* targets,
                                     const T* mask, T* losses, T* lse) {
  using std::exp, std::log;
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* z = logits + r * vocab;
    const T m = row_max(z, vocab);
    T sum = 0;
    for (index_t v = threadIdx.x; v < vocab; v += blockDim.x) sum += exp(z[v] - m);
    sum = block_sum(sum);
    if (threadIdx.x == 0) {
      const T row_lse = m + log(sum);
      lse[r] = row_lse;
      const T w = mask ? mask[r] : T(1);
      losses[r] = w == T(0) ? T(0) : w * (row_lse - z[targets[r]]);
    }
  }
}

// glogits[r, v] += scale * mask[r] * (softmax(logits[r])_v - [v == targets[r]]). The thread
// that owns the target column subtracts right after adding, the CPU's order of operations.
template <class T>
__global__ void cross_entropy_backward_kernel(index_t rows, index_t vocab, const T* logits, const T* lse,
                                              const std::int32_t* targets, const T* mask, T scale, T* glogits) {
  using std::exp;
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T w = scale * (mask ? mask[r] : T(1));
    if (w == T(0)) continue;  // uniform across the block
    const T* z = logits + r * vocab;
    T* g = glogits + r * vocab;
    const T row_lse = lse[r];
    const index_t target = targets[r];
    for (index_t v = threadIdx.x; v < vocab; v += blockDim.x) {
      T gv = g[v] + w * exp(z[v] - row_lse);
      if (v == target) gv -= w;
      g[v] = gv;
    }
  }
}

// The LM head's loss rows fused, one block per row (the CPU kernel's contract, cpu/detail/
// indexing.hpp): logits become zc = cap tanh(z / cap) (cap 0: z); lse, losses as cross_entropy;
// when grad is not null (it may alias logits) grad = scale mask (softmax(zc) - onehot(t))
// (1 - (zc / cap)^2). Each thread rewrites only the elements it read, and the barrier before the
// gradient pass keeps the target's zc readable for the loss until then.
template <class T>
__global__ void softcap_cross_entropy_kernel(index_t rows, index_t vocab, T cap, T* logits, const std::int32_t* targets,
                                             const T* mask, T scale, T* losses, T* lse, T* grad) {
  using std::exp, std::log, std::tanh;
  for (index_t r = blockIdx.x; r < rows; r += gridDim.x) {
    T* z = logits + r * vocab;
    T m = lowest_value<T>();
    for (index_t v = threadIdx.x; v < vocab; v += blockDim.x) {
      const T zc = cap > T(0) ? cap * tanh(z[v] / cap) : z[v];
      z[v] = zc;
      m = zc > m ? zc : m;
    }
    m = block_max(m);
    T sum = 0;
    for (index_t v = threadIdx.x; v < vocab; v += blockDim.x) sum += exp(z[v] - m);
    const T row_lse = m + log(block_sum(sum));  // block_sum's barrier: every zc is written
    const index_t target = targets[r];
    const T w = mask ? mask[r] : T(1);
    if (threadIdx.x == 0) {
      lse[r] = row_lse;
      losses[r] = w == T(0) ? T(0) : w * (row_lse - z[target]);
    }
    if (grad == nullptr) continue;
    __syncthreads();  // z[target] is read above before any thread overwrites it below
    T* g = grad + r * vocab;
    const T weight = scale * w;
    for (index_t v = threadIdx.x; v < vocab; v += blockDim.x) {
      const T zc = z[v];
      T gv = weight * exp(zc - row_lse);
      if (v == target) gv -= weight;
      if (cap > T(0)) {
        const T q = zc / cap;
        gv *= T(1) - q * q;
      }
      g[v] = weight == T(0) ? T(0) : gv;
    }
  }
}

}  // namespace megacpp::cuda
