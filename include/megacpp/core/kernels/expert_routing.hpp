/// \file
/// megacpp/core/kernels/expert_routing.hpp: the ExpertRouting kernel contract, the MoE layer's
/// choice of each token's k experts and the permutation that sorts the (token, slot) pairs by
/// expert, on the backend that holds the router's scores.
///
/// With scores (tokens, E) and an optional choice bias (E):
///
///   selected[t, j]  = the j-th largest key_e = score[t, e] + bias[e] of token t, over the experts
///                     not yet selected; ties go to the lower expert index
///   sort            the pairs p = t k + j stably by selected[p]: row r of the sorted buffer holds
///                   pair slot_of_row[r]; group e's rows are [offsets[e], offsets[e + 1])
///
/// and written for the layer:
///
///   score_index[t, j]        = t E + selected[t, j]        the gate's entry of scores (tokens E, flat)
///   token_of_row[r]          = slot_of_row[r] / k          the token a sorted row copies
///   row_of_slot[j tokens + t] = r where slot_of_row[r] = t k + j
///   offsets (host)           = the group layout of kernels::GroupedGemm
///
/// The key is formed in double on every backend (score rounded to double, plus the double bias),
/// compared with a strict `>` in expert order, so every backend picks the same experts; the sort
/// is stable (within an expert, pairs in (token, slot) order), so the permutation is a function of
/// the selections alone. Both are what a token's output needs to depend only on its own scores
/// (the document-masking invariant, docs/recipe.md). A non-finite score is reported, not chosen:
/// route returns the first one in (token, expert) order, and the outputs are then unspecified.
#pragma once

#include <cstdint>
#include <limits>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/kernel.hpp"

namespace megacpp::kernels {

/// Sizes of one routing step.
struct ExpertRoutingParams {
  index_t tokens = 0;   ///< tokens routed
  index_t experts = 0;  ///< routed experts E
  index_t k = 0;        ///< experts per token

  /// Rows of the sorted buffer: tokens * k.
  index_t rows() const { return tokens * k; }

  /// Throws unless tokens >= 0, 1 <= k <= experts, and tokens * experts fits the int32 indices.
  void validate(const char* op) const {
    check(tokens >= 0 && experts > 0 && k > 0 && k <= experts, op, "tokens must be >= 0 and 1 <= k <= experts, got tokens ",
          tokens, ", experts ", experts, ", k ", k);
    check(tokens <= std::numeric_limits<std::int32_t>::max() / experts, op, "tokens * experts = ", tokens, " * ", experts,
          " exceeds the int32 indices");
    // The group offsets search for 0, 1, ..., experts as int32 expert ids.
    check(experts < std::numeric_limits<std::int32_t>::max(), op, "experts = ", experts, " exceeds the int32 expert ids");
  }
};

/// Data of one call: scores and bias in, the layer's indices out (backend memory, but offsets).
template <class T>
struct ExpertRoutingArgs {
  const T* scores = nullptr;               ///< (tokens, experts)
  const double* bias = nullptr;            ///< (experts), added for the choice only; null: none
  std::int32_t* score_index = nullptr;     ///< written: (tokens, k), t * experts + the j-th expert of t
  std::int32_t* token_of_row = nullptr;    ///< written: (rows), the token each sorted row copies
  std::int32_t* row_of_slot = nullptr;     ///< written: (k, tokens), the sorted row of slot j of token t
  index_t* offsets = nullptr;              ///< written, HOST memory: experts + 1 entries
};

/// The first non-finite score in (token, expert) order, when route met one.
struct RoutingFault {
  index_t token = -1;   ///< -1: every score was finite
  index_t expert = -1;  ///< the expert whose score was not finite
  double score = 0;     ///< the score, in double

  /// True when a score was not finite.
  explicit operator bool() const { return token >= 0; }
};

/// The k experts of one token with the largest key score[e] + bias[e] (bias may be null), best
/// first, into out[0..k): the scan is in expert order and only a strictly larger key replaces the
/// best so far, so ties go to the lower index. The selection every backend runs (a host loop on
/// the CPU, a thread per token on CUDA); the scores must be finite.
template <class T>
MEGACPP_HD void top_k_experts(const T* score, const double* bias, index_t experts, index_t k, std::int32_t* out) {
  for (index_t j = 0; j < k; ++j) {
    std::int32_t best = -1;
    double best_key = 0;
    for (index_t e = 0; e < experts; ++e) {
      bool taken = false;
      for (index_t i = 0; i < j; ++i) taken = taken || out[i] == e;
      if (taken) continue;
      const double key = static_cast<double>(score[e]) + (bias ? bias[e] : 0.0);
      if (best < 0 || key > best_key) {
        best = static_cast<std::int32_t>(e);
        best_key = key;
      }
    }
    out[j] = best;
  }
}

/// The expert routing of backend B (contract: this file); CPU:
/// megacpp/backends/cpu/detail/expert_routing.hpp, CUDA: megacpp/backends/cuda/detail/expert_routing.cuh.
template <class B>
struct ExpertRouting {
  static constexpr bool available = false;  ///< B has no expert routing
  /// Selects, sorts and writes every output of `args`; returns the first non-finite score, if any.
  template <class T>
  static RoutingFault route(const ExpertRoutingParams&, const ExpertRoutingArgs<T>&) {
    require<ExpertRouting>();
    return {};
  }
};

}  // namespace megacpp::kernels
