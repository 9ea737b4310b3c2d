// CUDA backend, bf16 tensor-core attention: the bf16 copies its kernels read (attention_mma.cuh),
// made once per call: q, k and v by the forward (kept for the backward), dO with D = rowsum(bf16(dO)
// o O) by the backward's first kernel. Rows of bf16_row_width(dim) (attention_mma_tiles.cuh).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>
#include <type_traits>

#include "megacpp/backends/cuda/detail/attention.cuh"
#include "megacpp/backends/cuda/detail/attention_mma_tiles.cuh"

namespace megacpp::cuda::flash::tensor_core {

// Rounds rows of `dim` floats to bf16 rows of `width` (>= dim, a multiple of kRowAlign = 8) with
// zero columns from dim on: the copies of q, k and v the kernels read (stage_rows; dO's comes from
// grad_output_rows_kernel, the same bits). One thread
// per 8 outputs (one 16-byte store; two float4 loads where dim is a multiple of 4 and src is 16-byte
// aligned), so the copy runs near the memory's bandwidth; launch over bf16_row_pieces(rows, width)
// threads. (A template, as every kernel of a header: a plain __global__ defined here would be
// defined again by every .cu file.)
template <class T>
__global__ void to_bf16_rows_kernel(index_t rows, index_t dim, index_t width, const T* src, nv_bf16* dst) {
  const index_t pieces_per_row = width / kRowAlign;
  const bool vector_loads =
      std::is_same_v<T, float> && dim % 4 == 0 && reinterpret_cast<std::uintptr_t>(src) % 16 == 0;
  for (index_t idx = global_thread(); idx < rows * pieces_per_row; idx += grid_stride()) {
    const index_t r = idx / pieces_per_row, e0 = idx % pieces_per_row * kRowAlign;
    const T* from = src + r * dim + e0;
    float x[kRowAlign];
    if (vector_loads && e0 + kRowAlign <= dim) {
      const float4 lo = reinterpret_cast<const float4*>(from)[0], hi = reinterpret_cast<const float4*>(from)[1];
      x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w, x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
    } else {
#pragma unroll
      for (int e = 0; e < kRowAlign; ++e) x[e] = e0 + e < dim ? static_cast<float>(from[e]) : 0.0f;
    }
    reinterpret_cast<uint4*>(dst)[idx] = uint4{pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]),
                                               pack_bf16(x[6], x[7])};
  }
}

// ---- backward, step 0: the bf16 copy of dO and D = rowsum(bf16(dO) o O), in one pass --------------
// dP = dO V^T is formed from the bf16 dO the tiles hold, so D takes the same dO: then
// sum_j P_ij (dP_ij - D_i) = 0 holds for the rounded problem as in exact arithmetic (with the fp32
// dO, D would be off by ~2^-9 |dO| |O| and every dS by P times that). Reading dO once for both
// saves a pass over it and a launch (FlashAttention-2's backward preprocess computes D alone).
// kGradRowLanes lanes per row, two rows per warp: lane l rounds the 8-element pieces l, l + 16, ...
// of its row (to_bf16_rows_kernel's pieces, so the same bits), stores them, and sums their
// products with O in element order; the xor butterfly over the row's lanes then gives every lane
// the same D. Launch over grad_row_threads(rows) threads, whole warps per block.
inline constexpr int kGradRowLanes = 16;  // >= the pieces of the widest row (128 / 8)
__host__ __device__ constexpr index_t grad_row_threads(index_t rows) { return (rows + 1) / 2 * 32; }

template <class T>
__global__ void grad_output_rows_kernel(index_t rows, index_t dim, index_t width, const T* grad_o, const T* o,
                                        nv_bf16* grad_o_rows, T* drow) {
  static_assert(std::is_same_v<T, float>, "megacpp_mma_float_only: the tensor-core attention takes float tensors");
  const index_t pieces_per_row = width / kRowAlign;
  const bool vector_loads = dim % 4 == 0 && reinterpret_cast<std::uintptr_t>(grad_o) % 16 == 0 &&
                            reinterpret_cast<std::uintptr_t>(o) % 16 == 0;
  const index_t lane = global_thread() % kGradRowLanes, half = global_thread() / kGradRowLanes % 2;
  // every lane of a warp takes the loop the same number of times (the butterfly needs all 32)
  for (index_t pair = global_thread() / 32; 2 * pair < rows; pair += grid_stride() / 32) {
    const index_t r = 2 * pair + half;
    float sum = 0.0f;
    for (index_t piece = lane; r < rows && piece < pieces_per_row; piece += kGradRowLanes) {
      const index_t e0 = piece * kRowAlign;
      float x[kRowAlign], y[kRowAlign];
      if (vector_loads && e0 + kRowAlign <= dim) {
        const float4* dx = reinterpret_cast<const float4*>(grad_o + r * dim + e0);
        const float4* oy = reinterpret_cast<const float4*>(o + r * dim + e0);
        const float4 x0 = dx[0], x1 = dx[1], y0 = oy[0], y1 = oy[1];
        x[0] = x0.x, x[1] = x0.y, x[2] = x0.z, x[3] = x0.w, x[4] = x1.x, x[5] = x1.y, x[6] = x1.z, x[7] = x1.w;
        y[0] = y0.x, y[1] = y0.y, y[2] = y0.z, y[3] = y0.w, y[4] = y1.x, y[5] = y1.y, y[6] = y1.z, y[7] = y1.w;
      } else {
#pragma unroll
        for (int e = 0; e < kRowAlign; ++e) {
          x[e] = e0 + e < dim ? grad_o[r * dim + e0 + e] : 0.0f;
          y[e] = e0 + e < dim ? o[r * dim + e0 + e] : 0.0f;
        }
      }
#pragma unroll
      for (int e = 0; e < kRowAlign; ++e) x[e] = __bfloat162float(__float2bfloat16_rn(x[e]));
      reinterpret_cast<uint4*>(grad_o_rows)[r * pieces_per_row + piece] =
          uint4{pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]), pack_bf16(x[4], x[5]), pack_bf16(x[6], x[7])};
#pragma unroll
      for (int e = 0; e < kRowAlign; ++e) sum += x[e] * y[e];
    }
    sum = row_sum<kGradRowLanes>(sum);
    if (r < rows && lane == 0) drow[r] = sum;
  }
}

}  // namespace megacpp::cuda::flash::tensor_core
