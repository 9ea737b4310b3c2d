// CUDA backend: one decode step of Mamba-3's recurrence (contract and formulas:
// megacpp/core/kernels/ssm_step.hpp; CPU kernel: cpu/detail/ssm/step.hpp).
//
// One block per (row, head), kStepThreads threads:
//   1. threads over the S angles: theta advanced in the cache, cos and sin into shared memory;
//   2. threads over the R x N elements: the rotated k and q into shared memory
//      (kernels::rotated_element, the CPU's arithmetic);
//   3. threads over the P columns: kernels::ssm_step_column, the contract's column of the state,
//      of y and of v_prev, each element's operations in the CPU's order;
//   4. once every column has read the old k_prev: k_prev <- k.
// So each output takes the CPU kernel's operations in its order (bitwise the CPU's on the emulator;
// on a GPU nvcc's default -fmad=true fuses multiply-adds and the device's tanh, cos, sin and exp
// round their own way, so the GPU tests compare within a tolerance), and a row's outputs read
// only its own cache. Shared memory: (2 S + 2 R N) elements of T (step_shared_bytes).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cmath>
#include <cstddef>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/core/kernels/ssm_step.hpp"

namespace megacpp::cuda::ssm {

inline constexpr int kStepThreads = 128;  // threads per (row, head): P = 64 columns take half a block

// Dynamic shared memory of one block: cos, sin (S each), k and q (R N each).
template <class T>
std::size_t step_shared_bytes(const kernels::SsmStepParams& p) {
  return static_cast<std::size_t>(2 * p.angles + 2 * p.rank * p.d_state) * sizeof(T);
}

// Grid-stride over the batch * heads (row, head) pairs, one block each.
template <class T>
__global__ void __launch_bounds__(kStepThreads) ssm_step_kernel(kernels::SsmStepParams p, kernels::SsmStepArgs<T> a) {
  using std::cos, std::exp, std::sin, std::tanh;  // the element type's overloads (device ones under nvcc)
  extern __shared__ __align__(16) unsigned char step_shared[];
  const index_t H = p.heads, R = p.rank, N = p.d_state, P = p.head_dim, S = p.angles;
  T* cos_theta = reinterpret_cast<T*>(step_shared);
  T* sin_theta = cos_theta + S;
  T* k = sin_theta + S;
  T* q = k + R * N;
  for (index_t bh = blockIdx.x; bh < p.batch * H; bh += gridDim.x) {
    const index_t b = bh / H, h = bh % H;
    for (index_t s = threadIdx.x; s < S; s += blockDim.x) {
      T& theta = a.theta[bh * S + s];
      theta = kernels::advance_angle<T>(theta, tanh(a.angle[b * S + s]), a.dt[bh]);
      cos_theta[s] = cos(theta);
      sin_theta[s] = sin(theta);
    }
    __syncthreads();
    const index_t group = p.group_offset(b, h);
    for (index_t i = threadIdx.x; i < R * N; i += blockDim.x) {
      const index_t r = i / N, n = i % N;
      k[i] = kernels::rotated_element(a.b + group + r * N, a.b_bias + (h * R + r) * N, n, S, cos_theta, sin_theta);
      q[i] = kernels::rotated_element(a.c + group + r * N, a.c_bias + (h * R + r) * N, n, S, cos_theta, sin_theta);
    }
    __syncthreads();
    const T alpha = exp(a.log_alpha[bh]), beta = a.shift[bh] * alpha;
    for (index_t col = threadIdx.x; col < P; col += blockDim.x)
      kernels::ssm_step_column<T>(R, N, P, col, a.state + bh * N * P, a.k_prev + bh * R * N, a.v_prev + bh * R * P, q, k,
                                  a.v + bh * R * P, alpha, beta, a.gamma[bh], a.D[h], a.y + bh * R * P);
    __syncthreads();  // every column has read the old k_prev
    for (index_t i = threadIdx.x; i < R * N; i += blockDim.x) a.k_prev[bh * R * N + i] = k[i];
    __syncthreads();  // the next pair rewrites the shared k and q
  }
}

}  // namespace megacpp::cuda::ssm
