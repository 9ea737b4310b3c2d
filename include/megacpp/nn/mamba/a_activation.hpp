// megacpp/nn/mamba/a_activation.hpp: how Mamba-3 maps the projection dd_A to its decay rate A.
//
// Per token and head, A = min(-phi(dd_A), -A_floor) and alpha = exp(A dt). The reference
// (state-spaces/mamba mamba_ssm/modules/mamba3.py) first used phi = softplus; commit c69aaab
// ("Stabilize data-dependent A with heavy-tail activation", #962) replaced it with
//
//   phi(x) = 1 + x        x >= 0
//          = 1 / (1 - x)  x < 0
//
// because softplus sends A towards 0 for negative dd_A, which made training unstable at high
// learning rates with WSD schedules. The rule is a policy of Mamba3<T, B, Policy, AAct>:
// HeavyTailA (the reference today, the default) or SoftplusA (the earlier rule).
#pragma once

#include <string_view>

#include "megacpp/nn/mamba/elementwise.hpp"

namespace megacpp {

/// phi = the heavy-tail activation (the reference since commit c69aaab; the default).
struct HeavyTailA {
  static constexpr const char* name = "heavy-tail";  ///< policy name (part of the model's type id)
  /// phi(dd_A), elementwise and differentiable.
  template <class T, Backend B>
  static Var<T, B> phi(const Var<T, B>& dd_A) { return heavy_tail(dd_A); }
};

/// phi = softplus (the reference before commit c69aaab). Checkpoints written before the A rule was
/// a policy were trained with it; their type id loads into a model built with SoftplusA.
struct SoftplusA {
  static constexpr const char* name = "softplus";  ///< policy name
  /// softplus(dd_A), elementwise and differentiable.
  template <class T, Backend B>
  static Var<T, B> phi(const Var<T, B>& dd_A) { return softplus(dd_A); }
};

/// A policy giving Mamba-3's positive activation phi (A = min(-phi(dd_A), -A_floor)): a `name`
/// and a static template `phi(const Var<T, B>&) -> Var<T, B>` (checked where Mamba3 calls it).
template <class P>
concept MambaAActivation = requires { { std::string_view(P::name) }; };

}  // namespace megacpp
