// CUDA backend: the launches of the one-launch grouped products on bf16 operands
// (detail/grouped_gemm.cuh), and the option that chooses them. Apart from the kernels so that the
// host emulation of the CUDA execution model (tests/cuda_emulation) compiles those unchanged.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/grouped_gemm.cuh"
#include "megacpp/backends/cuda/detail/thread_option.cuh"
#include "megacpp/core/kernels/grouped_gemm.hpp"

namespace megacpp::cuda::moe {

/// While alive, GroupedGemm<Cuda> on bf16 operands runs each of its products (forward, dX, dW) as
/// one launch over every group (detail/grouped_gemm.cuh) where grouped_product_fits, instead of
/// one cuBLAS product per group. Off unless asked for: whether the hand-written tensor-core tiles
/// beat cuBLAS's per-group launches depends on the group sizes, and is measured by
/// bench_moe_cuda (`cuda_one_launch_vs_per_group_bf16` on 8 experts, `..._E64` on 64) on a GPU.
using OneLaunchGroupedProducts = ThreadOption<struct OneLaunchGroupedProductsTag>;

template <GroupedProduct kProduct>
void launch_grouped_product(const kernels::GroupedGemmParams& p, const GroupedProductArgs& args) {
  const GroupTiles tiles = group_tiles_of(kProduct, p);
  const std::int32_t blocks = tiles.first_tile[p.groups];
  if (blocks == 0) return;
  grouped_product_kernel<kProduct>
      <<<static_cast<unsigned>(blocks), kGroupedThreads, kGroupedSharedBytes, kStream>>>(args, tiles);
  MEGACPP_CUDA_CHECK_LAUNCH(grouped_product_kernel);
}

/// Y_g = X_g W_g^T for every group, in one launch.
inline void grouped_forward_bf16(const kernels::GroupedGemmParams& p, const kernels::GroupedGemmArgs<float, bf16>& a) {
  launch_grouped_product<GroupedProduct::forward>(p, {p.n, p.k, a.x, a.w, nullptr, a.y});
}

/// dX_g += dY_g W_g and dW_g += dY_g^T X_g for every group (either may be null), one launch each.
inline void grouped_backward_bf16(const kernels::GroupedGemmParams& p, const kernels::GroupedGemmArgs<float, bf16>& a,
                                  const kernels::GroupedGemmGrads<float, bf16>& d) {
  if (d.dx) launch_grouped_product<GroupedProduct::dx>(p, {p.n, p.k, nullptr, a.w, d.dy, d.dx});
  if (d.dw) launch_grouped_product<GroupedProduct::dw>(p, {p.n, p.k, a.x, nullptr, d.dy, d.dw});
}

}  // namespace megacpp::cuda::moe
