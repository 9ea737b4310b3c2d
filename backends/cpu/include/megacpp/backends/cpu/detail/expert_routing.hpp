// CPU backend: the MoE expert routing (contract: megacpp/core/kernels/expert_routing.hpp).
//
//   selected[t, j] = the j-th largest score[t, e] + bias[e], ties to the lower expert index
//                    (kernels::top_k_experts, the scan CUDA runs too)
//   a stable counting sort of the pairs t k + j by selected expert
//
// Threads own whole tokens for the choice (each token's k experts depend on its own row only, so
// the result is the same on every thread count); the counting sort is one pass in pair order,
// which is what makes it stable.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/kernels/expert_routing.hpp"

namespace megacpp::cpu::moe {

template <class T>
kernels::RoutingFault route_experts(const kernels::ExpertRoutingParams& p, const kernels::ExpertRoutingArgs<T>& a) {
  const index_t tokens = p.tokens, E = p.experts, k = p.k, rows = p.rows();
  for (index_t i = 0; i < tokens * E; ++i)  // the first non-finite score, in (token, expert) order
    if (!std::isfinite(static_cast<double>(a.scores[i]))) return {i / E, i % E, static_cast<double>(a.scores[i])};

  std::vector<std::int32_t> selected(static_cast<std::size_t>(rows));
  parallel_for(tokens, E * k, [&](index_t t) {
    kernels::top_k_experts(a.scores + t * E, a.bias, E, k, selected.data() + t * k);
    for (index_t j = 0; j < k; ++j)
      a.score_index[t * k + j] = static_cast<std::int32_t>(t * E + selected[static_cast<std::size_t>(t * k + j)]);
  });

  index_t* offsets = a.offsets;  // counts per expert, then their exclusive prefix sums
  for (index_t e = 0; e <= E; ++e) offsets[e] = 0;
  for (std::int32_t e : selected) ++offsets[e + 1];
  for (index_t e = 0; e < E; ++e) offsets[e + 1] += offsets[e];
  std::vector<index_t> next(offsets, offsets + E);
  for (index_t pair = 0; pair < rows; ++pair) {  // pair order: stable
    const index_t r = next[static_cast<std::size_t>(selected[static_cast<std::size_t>(pair)])]++;
    const index_t t = pair / k, j = pair % k;
    a.token_of_row[r] = static_cast<std::int32_t>(t);
    a.row_of_slot[j * tokens + t] = static_cast<std::int32_t>(r);
  }
  return {};
}

}  // namespace megacpp::cpu::moe
