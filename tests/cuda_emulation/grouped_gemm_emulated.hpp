// tests/cuda_emulation/grouped_gemm_emulated.hpp: the CUDA backend's one-launch grouped products on
// bf16 operands (detail/grouped_gemm.cuh: the MoE experts' forward, dX and dW, one grid over every
// group) run on the emulator, with host pointers as device memory, spelled as GroupedGemm<B>'s
// calls so a test runs the same code on the CPU backend. Mirrors grouped_forward_bf16 and
// grouped_backward_bf16 of detail/grouped_gemm_launch.cuh, launched as they launch.
#pragma once

#include <vector>

#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/kernels/grouped_gemm.hpp"

namespace megacpp::cuda_emulation {

struct EmulatedGroupedGemm {
  /// Y_g = X_g W_g^T (throws unless the shape fits the one-launch products).
  static void forward(const kernels::GroupedGemmParams& p, const kernels::GroupedGemmArgs<float, bf16>& a);
  /// dX_g += dY_g W_g, dW_g += dY_g^T X_g (either may be null).
  static void backward(const kernels::GroupedGemmParams& p, const kernels::GroupedGemmArgs<float, bf16>& a,
                       const kernels::GroupedGemmGrads<float, bf16>& d);
};

/// Whether the one-launch products take this shape with these operands and output (the backend's test).
bool grouped_product_fits(const kernels::GroupedGemmParams& p, const bf16* x, const bf16* w, const bf16* dy,
                          const float* out, const float* other_out);

/// Blocks of one product's grid (product 0: forward, 1: dX, 2: dW; 0 blocks: nothing launched).
index_t grouped_product_blocks(int product, const kernels::GroupedGemmParams& p);

/// The groups in the grid's order (most rows first).
std::vector<index_t> grouped_product_slots(const kernels::GroupedGemmParams& p);

}  // namespace megacpp::cuda_emulation
