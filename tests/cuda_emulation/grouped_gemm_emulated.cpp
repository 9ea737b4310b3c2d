// tests/cuda_emulation/grouped_gemm_emulated.cpp: the launches of detail/grouped_gemm_launch.cuh on
// the emulator, mirrored call for call (its <<<>>> is not host C++): the same kernel per product,
// grid (a block per output tile, GroupTiles by value), 128 threads and dynamic shared memory.
#include "grouped_gemm_emulated.hpp"

#include <cstdint>
#include <vector>

#include "emulator/launch.hpp"

#include "megacpp/core/error.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as megacpp/backends/cuda.cuh does around its detail headers
#include "megacpp/backends/cuda/detail/grouped_gemm.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {
namespace {

namespace moe = megacpp::cuda::moe;

template <moe::GroupedProduct kProduct>
void launch_grouped_product(const kernels::GroupedGemmParams& p, const moe::GroupedProductArgs& args) {
  const moe::GroupTiles tiles = moe::group_tiles_of(kProduct, p);
  const std::int32_t blocks = tiles.first_tile[p.groups];
  if (blocks == 0) return;
  launch(moe::grouped_product_kernel<kProduct>,
         LaunchConfig{dim3(static_cast<unsigned>(blocks)), dim3(moe::kGroupedThreads), moe::kGroupedSharedBytes}, args,
         tiles);
}

}  // namespace

void EmulatedGroupedGemm::forward(const kernels::GroupedGemmParams& p, const kernels::GroupedGemmArgs<float, bf16>& a) {
  check(moe::grouped_product_fits(p, a.x, a.w, nullptr, a.y), "EmulatedGroupedGemm", "the shape does not fit");
  launch_grouped_product<moe::GroupedProduct::forward>(p, {p.n, p.k, a.x, a.w, nullptr, a.y});
}

void EmulatedGroupedGemm::backward(const kernels::GroupedGemmParams& p, const kernels::GroupedGemmArgs<float, bf16>& a,
                                   const kernels::GroupedGemmGrads<float, bf16>& d) {
  check(moe::grouped_product_fits(p, a.x, a.w, d.dy, d.dx, d.dw), "EmulatedGroupedGemm", "the shape does not fit");
  if (d.dx) launch_grouped_product<moe::GroupedProduct::dx>(p, {p.n, p.k, nullptr, a.w, d.dy, d.dx});
  if (d.dw) launch_grouped_product<moe::GroupedProduct::dw>(p, {p.n, p.k, a.x, nullptr, d.dy, d.dw});
}

bool grouped_product_fits(const kernels::GroupedGemmParams& p, const bf16* x, const bf16* w, const bf16* dy,
                          const float* out, const float* other_out) {
  return moe::grouped_product_fits(p, x, w, dy, out, other_out);
}

index_t grouped_product_blocks(int product, const kernels::GroupedGemmParams& p) {
  return moe::group_tiles_of(static_cast<moe::GroupedProduct>(product), p).first_tile[p.groups];
}

std::vector<index_t> grouped_product_slots(const kernels::GroupedGemmParams& p) {
  const moe::GroupTiles tiles = moe::group_tiles_of(moe::GroupedProduct::dw, p);
  return std::vector<index_t>(tiles.order, tiles.order + p.groups);
}

}  // namespace megacpp::cuda_emulation
