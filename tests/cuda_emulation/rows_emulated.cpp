// tests/cuda_emulation/rows_emulated.cpp: the launches of detail/rows_launch.cuh on the emulator,
// mirrored call for call (the launch header's <<<>>> is not host C++): the same kernels, grids,
// block sizes, packet choices and chunk partials (filled with NaN, as the device allocation leaves
// them uninitialized).
#include "rows_emulated.hpp"

#include "emulator/launch.hpp"
#include "launch_configs.hpp"
#include "reduce_pass_emulated.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as megacpp/backends/cuda.cuh does around its detail headers
#include "megacpp/backends/cuda/detail/rows.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {
namespace {

// A block per row (softmax, log-softmax, RMSNorm past kWarpRowMaxCols columns).
LaunchConfig block_per_row(index_t rows) { return block_per_item_launch(rows); }
// A warp per row (RMSNorm up to kWarpRowMaxCols columns).
LaunchConfig warp_per_row(index_t rows) { return grid_stride_launch(rows * 32); }

}  // namespace

template <class T>
void emulated_softmax(index_t rows, index_t cols, const T* x, T* y) {
  if (rows == 0 || cols == 0) return;
  launch(cuda::softmax_kernel<T>, block_per_row(rows), rows, cols, x, y);
}
template <class T>
void emulated_softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx) {
  if (rows == 0 || cols == 0) return;
  launch(cuda::softmax_backward_kernel<T>, block_per_row(rows), rows, cols, y, gy, gx);
}
template <class T>
void emulated_log_softmax(index_t rows, index_t cols, const T* x, T* y) {
  if (rows == 0 || cols == 0) return;
  launch(cuda::log_softmax_kernel<T>, block_per_row(rows), rows, cols, x, y);
}
template <class T>
void emulated_log_softmax_backward(index_t rows, index_t cols, const T* y, const T* gy, T* gx) {
  if (rows == 0 || cols == 0) return;
  launch(cuda::log_softmax_backward_kernel<T>, block_per_row(rows), rows, cols, y, gy, gx);
}

template <class T>
void emulated_rmsnorm(index_t rows, index_t cols, const T* x, const T* gain, T eps, T* y, T* rstd) {
  if (rows == 0 || cols == 0) return;
  if (cols <= cuda::kWarpRowMaxCols) {
    if (cuda::fits_packets<T>(cols, {x, gain, y}))
      launch(cuda::rmsnorm_warp_kernel<T, cuda::Packet<T>::kSize>, warp_per_row(rows), rows, cols, x, gain, eps, y, rstd);
    else
      launch(cuda::rmsnorm_warp_kernel<T, 1>, warp_per_row(rows), rows, cols, x, gain, eps, y, rstd);
    return;
  }
  launch(cuda::rmsnorm_kernel<T>, block_per_row(rows), rows, cols, x, gain, eps, y, rstd);
}

template <class T>
void emulated_rmsnorm_backward(index_t rows, index_t cols, const T* x, const T* gain, const T* rstd, const T* gy, T* gx,
                               T* ggain) {
  if (rows == 0 || cols == 0) return;
  if (gx && cols <= cuda::kWarpRowMaxCols) {
    if (cuda::fits_packets<T>(cols, {x, gain, gy, gx}))
      launch(cuda::rmsnorm_backward_x_warp_kernel<T, cuda::Packet<T>::kSize>, warp_per_row(rows), rows, cols, x, gain,
             rstd, gy, gx);
    else
      launch(cuda::rmsnorm_backward_x_warp_kernel<T, 1>, warp_per_row(rows), rows, cols, x, gain, rstd, gy, gx);
  } else if (gx) {
    launch(cuda::rmsnorm_backward_x_kernel<T>, block_per_row(rows), rows, cols, x, gain, rstd, gy, gx);
  }
  if (ggain) {
    const index_t col_blocks = cuda::reduce_col_blocks(cols);
    const cuda::ReduceSplit split = cuda::reduce_split(col_blocks, rows, cuda::kMinStridedChunk);
    const dim3 block(cuda::kReduceCols, cuda::kReduceStripes);
    emulated_reduce_in_passes<T>(1, cols, split, T(1), T(1), ggain, [&](double* partials) {
      launch(cuda::rmsnorm_backward_gain_kernel<T>, {dim3(cuda::grid_per_item(split.count * col_blocks)), block, 0}, cols,
             split, x, rstd, gy, ggain, partials);
    });
  }
}

index_t rmsnorm_gain_chunks(index_t rows, index_t cols) {
  return cuda::reduce_split(cuda::reduce_col_blocks(cols), rows, cuda::kMinStridedChunk).count;
}

#define MEGACPP_EMULATED_ROWS(T)                                                                                       \
  template void emulated_softmax<T>(index_t, index_t, const T*, T*);                                                   \
  template void emulated_softmax_backward<T>(index_t, index_t, const T*, const T*, T*);                                \
  template void emulated_log_softmax<T>(index_t, index_t, const T*, T*);                                               \
  template void emulated_log_softmax_backward<T>(index_t, index_t, const T*, const T*, T*);                            \
  template void emulated_rmsnorm<T>(index_t, index_t, const T*, const T*, T, T*, T*);                                  \
  template void emulated_rmsnorm_backward<T>(index_t, index_t, const T*, const T*, const T*, const T*, T*, T*);
MEGACPP_EMULATED_ROWS(float)
MEGACPP_EMULATED_ROWS(double)
#undef MEGACPP_EMULATED_ROWS

}  // namespace megacpp::cuda_emulation
