// megacpp/nn/moe/router.hpp: the MoE router, logits = x W_r^T.
//
// The router is a bias-free Linear (d_model -> experts) whose weight has Role::router, so the
// hybrid optimiser gives it to AdamW (optim/hybrid.hpp: every Role but matrix goes to AdamW).
// Each token's k experts are chosen by the ExpertRouting kernel (nn/moe/dispatch.hpp), on the
// backend that holds the logits.
#pragma once

#include <string>

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

}  // namespace megacpp
