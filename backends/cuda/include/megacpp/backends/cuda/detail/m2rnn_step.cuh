// CUDA backend: one decode step of the M2RNN recurrence (contract and formulas:
// megacpp/core/kernels/m2rnn_step.hpp; CPU kernel: cpu/detail/m2rnn_step.hpp).
//
// One block per (row, head), kM2RNNStepThreads threads over the V columns. For each row i of the
// state, in order: the threads stage row i of H_{t-1} in shared memory, then each thread writes
// its columns of row i of H_t (kernels::m2rnn_state_element, the CPU's arithmetic) over the old
// row. Then each thread reads out its columns of y from the new state (kernels::m2rnn_readout):
// the elements it wrote itself. So each output takes the CPU kernel's operations in its order
// (bitwise the CPU's on the emulator; on a GPU nvcc's default -fmad=true fuses multiply-adds and
// the device's tanh rounds its own way, so the GPU tests compare within a tolerance), and a row's
// outputs read only its own cache. Shared memory: V elements of T.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/core/kernels/m2rnn_step.hpp"

namespace megacpp::cuda::m2rnn {

inline constexpr int kM2RNNStepThreads = 128;  // threads per (row, head): V = 16 columns by default

// Dynamic shared memory of one block: one row of the old state.
template <class T>
std::size_t step_shared_bytes(const kernels::M2RNNStepParams& p) {
  return static_cast<std::size_t>(p.v_dim) * sizeof(T);
}

// Grid-stride over the batch * heads (row, head) pairs, one block each.
template <class T>
__global__ void __launch_bounds__(kM2RNNStepThreads) m2rnn_step_kernel(kernels::M2RNNStepParams p,
                                                                       kernels::M2RNNStepArgs<T> a) {
  extern __shared__ __align__(16) unsigned char m2rnn_step_shared[];
  T* h_prev_row = reinterpret_cast<T*>(m2rnn_step_shared);
  const index_t H = p.heads, K = p.k_dim, V = p.v_dim;
  for (index_t bh = blockIdx.x; bh < p.batch * H; bh += gridDim.x) {
    const index_t h = bh % H;
    const T *q = a.q + bh * K, *k = a.k + bh * K, *v = a.v + bh * V, *W = a.W + h * V * V;
    const T f = a.f[bh];
    T* state = a.state + bh * K * V;
    for (index_t i = 0; i < K; ++i) {
      T* h_row = state + i * V;
      for (index_t c = threadIdx.x; c < V; c += blockDim.x) h_prev_row[c] = h_row[c];
      __syncthreads();  // row i of H_{t-1} staged
      for (index_t c = threadIdx.x; c < V; c += blockDim.x)
        h_row[c] = kernels::m2rnn_state_element<T>(V, h_prev_row, W, k[i], v, f, c);
      __syncthreads();  // every column has read the staged row before the next one replaces it
    }
    // Column c of H_t was written by this thread (the same columns in every loop above).
    for (index_t c = threadIdx.x; c < V; c += blockDim.x) a.y[bh * V + c] = kernels::m2rnn_readout<T>(K, V, state, q, c);
  }
}

}  // namespace megacpp::cuda::m2rnn
