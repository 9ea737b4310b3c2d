// tests/cuda_emulation/routing_emulated.cpp: ExpertRouting<Cuda>::route (detail/expert_routing.cuh)
// on the emulator. Its launches use <<<>>>, CUB and Thrust, which a host compiler does not take, so
// this file includes the kernels' header alone and mirrors route_experts step by step: the same
// kernels and grids, the gate choice's scratch filled with a value no expert has (the device
// allocation leaves it uninitialized: a slot read before it is written shows in the offsets), and
// the sort and search as the host algorithms with CUB's and Thrust's results.
#include "routing_emulated.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "emulator/launch.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as kernels/*.cuh do around their detail headers
#include "megacpp/backends/cuda/detail/expert_routing_kernels.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {
namespace {

namespace moe = megacpp::cuda::moe;

// The sort's key width: ids 0 .. E - 1 need the bits of E - 1 (one bit at least).
static_assert(moe::expert_key_bits(1) == 1 && moe::expert_key_bits(2) == 1 && moe::expert_key_bits(3) == 2 &&
              moe::expert_key_bits(256) == 8 && moe::expert_key_bits(257) == 9);

template <class T>
kernels::RoutingFault route(const kernels::ExpertRoutingParams& p, const kernels::ExpertRoutingArgs<T>& a) {
  p.validate("emulated_route_experts");
  const index_t tokens = p.tokens, E = p.experts, k = p.k, rows = p.rows();
  if (rows == 0) {
    for (index_t e = 0; e <= E; ++e) a.offsets[e] = 0;
    return {};
  }
  const auto count = static_cast<std::size_t>(rows);
  std::vector<std::int32_t> selected(count, -1);
  unsigned long long first_fault = moe::kNoFault;  // the cudaMemsetAsync of 0xff bytes

  // 1. the choice: a thread per token
  launch(moe::top_k_experts_kernel<T>, LaunchConfig{dim3(cuda::grid_for(tokens)), dim3(cuda::kThreads), 0}, tokens, E,
         k, a.scores, a.bias, selected.data(), a.score_index, &first_fault);

  // 2. CUB's SortPairs(keys = selected, values = 0, 1, ..., rows - 1) over bits [0, end_bit): a
  // stable LSD radix sort, so the pairs in order of those bits of the key, ties in pair order
  const std::uint32_t bits = (std::uint32_t{1} << moe::expert_key_bits(E)) - 1;
  const auto key = [&](std::int32_t pair) { return static_cast<std::uint32_t>(selected[static_cast<std::size_t>(pair)]) & bits; };
  std::vector<std::int32_t> slot_of_row(count);
  std::iota(slot_of_row.begin(), slot_of_row.end(), 0);
  std::stable_sort(slot_of_row.begin(), slot_of_row.end(), [&](std::int32_t x, std::int32_t y) { return key(x) < key(y); });
  std::vector<std::int32_t> sorted_experts(count);
  for (std::size_t r = 0; r < count; ++r) sorted_experts[r] = selected[static_cast<std::size_t>(slot_of_row[r])];

  // 3. Thrust's lower_bound of 0, 1, ..., E in the sorted experts
  for (index_t e = 0; e <= E; ++e)
    a.offsets[e] = std::lower_bound(sorted_experts.begin(), sorted_experts.end(), static_cast<std::int32_t>(e)) -
                   sorted_experts.begin();

  // 4. each sorted row's token and each slot's row: a thread per row
  launch(moe::rows_of_slots_kernel<std::int32_t>, LaunchConfig{dim3(cuda::grid_for(rows)), dim3(cuda::kThreads), 0},
         rows, tokens, k, slot_of_row.data(), a.token_of_row, a.row_of_slot);

  // 5. the fault, as the host reads it back
  if (first_fault == moe::kNoFault) return {};
  const auto flat = static_cast<index_t>(first_fault);
  return {flat / E, flat % E, static_cast<double>(a.scores[flat])};
}

}  // namespace

kernels::RoutingFault emulated_route_experts(const kernels::ExpertRoutingParams& p,
                                             const kernels::ExpertRoutingArgs<float>& a) {
  return route(p, a);
}
kernels::RoutingFault emulated_route_experts(const kernels::ExpertRoutingParams& p,
                                             const kernels::ExpertRoutingArgs<double>& a) {
  return route(p, a);
}

}  // namespace megacpp::cuda_emulation
