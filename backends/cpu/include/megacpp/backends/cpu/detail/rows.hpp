// CPU backend: fused per-row kernels (softmax, log-softmax, RMSNorm), one row per iteration.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <cmath>
#include <limits>

#include "megacpp/backends/cpu/detail/packet_math.hpp"
#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/config.hpp"

namespace megacpp::cpu {

template <class T>
T row_max(const T* x, index_t cols) {
  T m = -std::numeric_limits<T>::infinity();
  for (index_t c = 0; c < cols; ++c) m = x[c] > m ? x[c] : m;
  return m;
}

// y = exp(x - max) / sum(exp(x - max)) per row. A row that is entirely -inf (fully masked)
// gives y = 0 rather than NaN.
template <class T>
void softmax(index_t rows, index_t cols, const T* x, T* y) {
  parallel_for(rows, cols * 8, [&](index_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = row_max(xr, cols);
    if (m == -std::numeric_limits<T>::infinity()) {
      for (index_t c = 0; c < cols; ++c) yr[c] = T(0);
      return;
    }
    T sum = 0;
    for (index_t c = 0; c < cols; ++c) sum += (yr[c] = std::exp(xr[c] - m));
    const T inv = T(1) / sum;
    for (index_t c = 0; c < cols; ++c) yr[c] *= inv;
  });
}

// gx += y * (gy - sum(gy * y))
template <class T>
void softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx) {
  parallel_for(rows, cols * 3, [&](index_t r) {
    const T* yr = y + r * cols;
    const T* gr = gy + r * cols;
    T* gxr = gx + r * cols;
    T dot = 0;
    for (index_t c = 0; c < cols; ++c) dot += gr[c] * yr[c];
    for (index_t c = 0; c < cols; ++c) gxr[c] += yr[c] * (gr[c] - dot);
  });
}

// y = x - max - log(sum(exp(x - max)))
template <class T>
void log_softmax(index_t rows, index_t cols, const T* x, T* y) {
  parallel_for(rows, cols * 8, [&](index_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T m = row_max(xr, cols);
    T sum = 0;
    for (index_t c = 0; c < cols; ++c) sum += std::exp(xr[c] - m);
    const T lse = m + std::log(sum);
    for (index_t c = 0; c < cols; ++c) yr[c] = xr[c] - lse;
  });
}

// gx += gy - exp(y) * sum(gy)
template <class T>
void log_softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx) {
  parallel_for(rows, cols * 8, [&](index_t r) {
    const T* yr = y + r * cols;
    const T* gr = gy + r * cols;
    T* gxr = gx + r * cols;
    T sum = 0;
    for (index_t c = 0; c < cols; ++c) sum += gr[c];
    for (index_t c = 0; c < cols; ++c) gxr[c] += gr[c] - std::exp(yr[c]) * sum;
  });
}

// RMSNorm (Zhang & Sennrich 2019): rstd = 1 / sqrt(mean(x^2) + eps); y = x * rstd * gain.
// `gain` may be null (no learned gain). rstd (rows) is saved for the backward.
template <class T>
void rmsnorm(index_t rows, index_t cols, const T* x, const T* gain, T eps, T* y, T* rstd) {
  parallel_for(rows, cols * 3, [&](index_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const T ss = packet_dot(cols, xr, xr);
    const T s = T(1) / std::sqrt(ss / static_cast<T>(cols) + eps);
    rstd[r] = s;
    if (gain) for (index_t c = 0; c < cols; ++c) yr[c] = xr[c] * s * gain[c];
    else for (index_t c = 0; c < cols; ++c) yr[c] = xr[c] * s;
  });
}

// With xhat = x * rstd and gh = gy * gain:
//   gx    += rstd * (gh - xhat * mean(gh * xhat))
//   ggain += sum_rows gy * xhat
// gx and ggain may each be null (not needed). ggain is summed over rows in row order per
// column block, so it does not depend on the thread count.
template <class T>
void rmsnorm_backward(index_t rows, index_t cols, const T* x, const T* gain, const T* rstd,
                      const T* gy, T* gx, T* ggain) {
  if (gx) {
    parallel_for(rows, cols * 6, [&](index_t r) {
      const T* xr = x + r * cols;
      const T* gr = gy + r * cols;
      T* gxr = gx + r * cols;
      const T s = rstd[r];
      const T dot = packet_dot(cols, gr, xr, gain) * s / static_cast<T>(cols);  // mean(gh * xhat)
      for (index_t c = 0; c < cols; ++c) {
        const T gh = gr[c] * (gain ? gain[c] : T(1));
        gxr[c] += s * (gh - xr[c] * s * dot);
      }
    });
  }
  if (ggain) {
    constexpr index_t kBlock = 64;
    const index_t blocks = (cols + kBlock - 1) / kBlock;
    parallel_for(blocks, rows * kBlock, [&](index_t b) {
      const index_t c0 = b * kBlock;
      const index_t width = std::min(kBlock, cols - c0);
      T acc[kBlock] = {};
      for (index_t r = 0; r < rows; ++r) {
        const T s = rstd[r];
        const T* xr = x + r * cols + c0;
        const T* gr = gy + r * cols + c0;
        for (index_t c = 0; c < width; ++c) acc[c] += gr[c] * xr[c] * s;
      }
      for (index_t c = 0; c < width; ++c) ggain[c0 + c] += acc[c];
    });
  }
}

}  // namespace megacpp::cpu
