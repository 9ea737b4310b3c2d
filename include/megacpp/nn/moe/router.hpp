// megacpp/nn/moe/router.hpp: the MoE router, logits = x W_r^T, and its deterministic top-k.
//
// The router is a bias-free Linear (d_model -> experts) whose weight has Role::router, so the
// hybrid optimiser gives it to AdamW (optim/hybrid.hpp: every Role but matrix goes to AdamW).
// Selection happens on the host: the group layout of the grouped product is host data anyway.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "megacpp/nn/linear.hpp"

namespace megacpp {

/// Router: x (tokens, d_model) -> logits (tokens, experts).
template <class T, Backend B>
struct Router {
  Linear<T, B> proj;  ///< (experts, d_model), Role::router, no bias

  Router() = default;
  /// N(0, 1/d_model) weights, Role::router.
  Router(index_t d_model, index_t experts, Rng& rng)
      : proj(d_model, experts, rng, LinearInit::normal, false, Role::router) {}

  /// Number of experts routed over.
  index_t experts() const { return proj.out_features(); }
  /// x (tokens, d_model) -> logits (tokens, experts).
  Var<T, B> forward(const Var<T, B>& x) const { return proj.forward(x); }

  /// Visits "weight" under `prefix`.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    proj.for_each_param(visit, prefix);
  }
};

/// The k experts of one token with the largest `score[e] + bias[e]` (bias may be null), best
/// first, written to out[0..k). Ties go to the lower expert index: the scan is in index order and
/// only a strictly larger key replaces the best so far, so equal scores (a zero router, a
/// saturated sigmoid) always pick the same experts. Throws on a non-finite score.
template <class T>
void top_k_experts(const T* score, const double* bias, index_t experts, index_t k, index_t token, std::int32_t* out) {
  for (index_t e = 0; e < experts; ++e)
    check(std::isfinite(static_cast<double>(score[e])), "MoE router", "score of token ", token, " for expert ", e,
          " is ", static_cast<double>(score[e]), ": the router's input or weights are not finite");
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

}  // namespace megacpp
