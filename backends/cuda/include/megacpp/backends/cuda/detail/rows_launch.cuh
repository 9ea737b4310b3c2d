// CUDA backend: the launches of rows.cuh's row kernels. Apart from the kernels, as the SSM scan's
// are (ssm/scan_launch.cuh), so that the CUDA emulation (tests/cuda_emulation) compiles the kernels
// with a host compiler and launches them as this file does.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/packet.cuh"
#include "megacpp/backends/cuda/detail/reduce_launch.cuh"
#include "megacpp/backends/cuda/detail/rows.cuh"

namespace megacpp::cuda {

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
  if (ggain) {  // a sum over every row: chunks of rows when the columns alone make few blocks (reduce.cuh)
    const index_t col_blocks = reduce_col_blocks(cols);
    const ReduceSplit split = reduce_split(col_blocks, rows, kMinStridedChunk);
    const dim3 block(kReduceCols, kReduceStripes);
    reduce_in_passes<T>(1, cols, split, T(1), T(1), ggain, [&](double* partials) {
      rmsnorm_backward_gain_kernel<T><<<grid_per_item(split.count * col_blocks), block, 0, kStream>>>(
          cols, split, x, rstd, gy, ggain, partials);
      MEGACPP_CUDA_CHECK_LAUNCH(rmsnorm_backward_gain_kernel);
    });
  }
}

}  // namespace megacpp::cuda
