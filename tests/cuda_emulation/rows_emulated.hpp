// tests/cuda_emulation/rows_emulated.hpp: the CUDA backend's row kernels (softmax, log-softmax,
// RMSNorm: detail/rows.cuh) run on the emulator, with host pointers as device memory. Each mirrors
// the function of the same name in detail/rows_launch.cuh, launched as it launches.
#pragma once

#include "megacpp/core/config.hpp"

namespace megacpp::cuda_emulation {

template <class T>
void emulated_softmax(index_t rows, index_t cols, const T* x, T* y);
template <class T>
void emulated_softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx);
template <class T>
void emulated_log_softmax(index_t rows, index_t cols, const T* x, T* y);
template <class T>
void emulated_log_softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx);
template <class T>
void emulated_rmsnorm(index_t rows, index_t cols, const T* x, const T* gain, T eps, T* y, T* rstd);
template <class T>
void emulated_rmsnorm_backward(index_t rows, index_t cols, const T* x, const T* gain, const T* rstd, const T* gy, T* gx,
                               T* ggain);

/// How many chunks of rows the RMSNorm gain gradient of (rows, cols) is cut into (1: one pass).
index_t rmsnorm_gain_chunks(index_t rows, index_t cols);

}  // namespace megacpp::cuda_emulation
