// CUDA backend: the MoE expert routing (contract: megacpp/core/kernels/expert_routing.hpp;
// semantics and reference: cpu/detail/expert_routing.hpp).
//
//   1. top_k_experts_kernel: one thread per token runs kernels::top_k_experts, the CPU's scan (keys
//      in double, a strict `>` in expert order), so both backends pick the same experts; a
//      non-finite score is recorded by atomicMin on its flat index, which leaves the first in
//      (token, expert) order on any schedule
//   2. CUB's radix sort of the (token, slot) pairs by expert over the bits of E - 1: stable, so
//      within an expert the pairs keep their order, as the CPU's counting sort does
//   3. Thrust's vectorised lower_bound of 0, 1, ..., E in the sorted experts: the group offsets
//   4. rows_of_slots_kernel: each sorted row's token, and the row of each (slot, token)
//   5. one copy of the offsets and the fault to the host: the grouped product's layout is host data
//
// The kernels of 1 and 4 are in expert_routing_kernels.cuh, apart from CUB and Thrust, so that the
// host emulation (tests/cuda_emulation) runs them unmodified.
//
// The router's scores stay on the device: what crosses to the host is E + 2 integers per MoE layer,
// where selecting on the host copied the whole (tokens, E) score matrix and sent the indices back.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cub/device/device_radix_sort.cuh>
#include <thrust/binary_search.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system_error.h>

#include <cstdint>
#include <limits>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/expert_routing_kernels.cuh"
#include "megacpp/backends/cuda/detail/indexing.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"
#include "megacpp/core/kernels/expert_routing.hpp"

namespace megacpp::cuda::moe {

template <class T>
kernels::RoutingFault route_experts(const kernels::ExpertRoutingParams& p, const kernels::ExpertRoutingArgs<T>& a) {
  const index_t tokens = p.tokens, E = p.experts, k = p.k, rows = p.rows();
  if (rows == 0) {
    for (index_t e = 0; e <= E; ++e) a.offsets[e] = 0;
    return {};
  }
  check(rows <= std::numeric_limits<int>::max(), "cuda::moe::route_experts", rows, " pairs exceed CUB's int item count");
  const auto count = static_cast<std::size_t>(rows);
  const DeviceBuffer<std::int32_t> selected(count), pairs(count), sorted_experts(count), slot_of_row(count);
  const DeviceBuffer<index_t> offsets(static_cast<std::size_t>(E + 1));
  const DeviceBuffer<unsigned long long> first_fault(1);
  MEGACPP_CUDA_CHECK(cudaMemsetAsync(first_fault.get(), 0xff, sizeof(unsigned long long), kStream));  // kNoFault

  top_k_experts_kernel<T><<<grid_for(tokens), kThreads, 0, kStream>>>(tokens, E, k, a.scores, a.bias, selected.get(),
                                                                       a.score_index, first_fault.get());
  MEGACPP_CUDA_CHECK_LAUNCH(top_k_experts_kernel);

  const int end_bit = expert_key_bits(E);
  iota_kernel<std::int32_t><<<grid_for(rows), kThreads, 0, kStream>>>(rows, pairs.get());
  MEGACPP_CUDA_CHECK_LAUNCH(iota_kernel);
  const int items = static_cast<int>(rows);
  std::size_t temp_bytes = 0;
  MEGACPP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, selected.get(), sorted_experts.get(), pairs.get(),
                                                     slot_of_row.get(), items, 0, end_bit, kStream));
  const DeviceBuffer<unsigned char> temp(temp_bytes);
  MEGACPP_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, selected.get(), sorted_experts.get(),
                                                     pairs.get(), slot_of_row.get(), items, 0, end_bit, kStream));

  try {  // Thrust reports its errors (a failed launch included) as thrust::system_error
    thrust::lower_bound(thrust::cuda::par_nosync.on(kStream), sorted_experts.get(), sorted_experts.get() + rows,
                        thrust::counting_iterator<std::int32_t>(0), thrust::counting_iterator<std::int32_t>(E + 1),
                        offsets.get());
  } catch (const thrust::system_error& e) {  // the backend's errors are megacpp::Error
    throw_cuda_error("thrust::lower_bound", e.what(), __FILE__, __LINE__);
  }
  rows_of_slots_kernel<std::int32_t><<<grid_for(rows), kThreads, 0, kStream>>>(rows, tokens, k, slot_of_row.get(),
                                                                               a.token_of_row, a.row_of_slot);
  MEGACPP_CUDA_CHECK_LAUNCH(rows_of_slots_kernel);

  unsigned long long fault = kNoFault;
  MEGACPP_CUDA_CHECK(cudaMemcpyAsync(a.offsets, offsets.get(), static_cast<std::size_t>(E + 1) * sizeof(index_t),
                                     cudaMemcpyDeviceToHost, kStream));
  MEGACPP_CUDA_CHECK(cudaMemcpyAsync(&fault, first_fault.get(), sizeof fault, cudaMemcpyDeviceToHost, kStream));
  note_host_wait();
  MEGACPP_CUDA_CHECK(cudaStreamSynchronize(kStream));
  if (fault == kNoFault) return {};
  const auto flat = static_cast<index_t>(fault);
  T score{};
  copy_to_host<T>(&score, a.scores + flat, 1);
  return {flat / E, flat % E, static_cast<double>(score)};
}

}  // namespace megacpp::cuda::moe
