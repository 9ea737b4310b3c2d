// CUDA backend: the MoE expert routing's own kernels (steps 1 and 4 of detail/expert_routing.cuh,
// which launches them around CUB's sort and Thrust's search). Apart from those libraries so the
// host emulation (tests/cuda_emulation/routing_emulated.cpp) compiles and runs them unmodified.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstdint>
#include <limits>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/core/kernels/expert_routing.hpp"

namespace megacpp::cuda::moe {

inline constexpr unsigned long long kNoFault = std::numeric_limits<unsigned long long>::max();

// The bits of the largest expert id, E - 1 (at least 1, at most 31): the radix sort's end_bit, so
// it makes ceil(bits / 8) passes rather than 4.
constexpr int expert_key_bits(index_t experts) {
  int bits = 1;
  while (bits < 31 && (index_t{1} << bits) < experts) ++bits;
  return bits;
}

// selected (tokens, k) and score_index (tokens, k): token t's k experts, best first.
template <class T>
__global__ void top_k_experts_kernel(index_t tokens, index_t experts, index_t k, const T* scores, const double* bias,
                                     std::int32_t* selected, std::int32_t* score_index, unsigned long long* first_fault) {
  for (index_t t = global_thread(); t < tokens; t += grid_stride()) {
    const T* score = scores + t * experts;
    bool finite = true;
    for (index_t e = 0; e < experts && finite; ++e)
      if (!isfinite(static_cast<double>(score[e]))) {
        atomicMin(first_fault, static_cast<unsigned long long>(t * experts + e));
        finite = false;
      }
    if (!finite) continue;
    std::int32_t* out = selected + t * k;
    kernels::top_k_experts(score, bias, experts, k, out);
    for (index_t j = 0; j < k; ++j) score_index[t * k + j] = static_cast<std::int32_t>(t * experts + out[j]);
  }
}

// token_of_row[r] = t and row_of_slot[j * tokens + t] = r for the pair t k + j sorted to row r.
template <class I>
__global__ void rows_of_slots_kernel(index_t rows, index_t tokens, index_t k, const I* slot_of_row, I* token_of_row,
                                     I* row_of_slot) {
  for (index_t r = global_thread(); r < rows; r += grid_stride()) {
    const index_t pair = slot_of_row[r], t = pair / k, j = pair % k;
    token_of_row[r] = static_cast<I>(t);
    row_of_slot[j * tokens + t] = static_cast<I>(r);
  }
}

}  // namespace megacpp::cuda::moe
