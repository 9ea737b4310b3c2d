// megacpp/nn/mlp.hpp: the feed-forward block, W2 act(W1 x), activation as a policy.
//
// Default (modded-nanogpt, KellerJordan/modded-nanogpt): hidden = 4 d, act = relu(.)^2
// (So et al., "Primer", 2021), output projection zero-initialised.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <type_traits>

#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/relu2_linear.hpp"
#include "megacpp/nn/linear.hpp"

namespace megacpp {

/// relu(x)^2 activation policy.
struct ReLU2 {
  /// relu(x)^2, elementwise.
  template <class T, Backend B>
  static Var<T, B> apply(const Var<T, B>& x) { return relu2(x); }
};
/// silu(x) activation policy.
struct SiLU {
  /// silu(x) = x * sigmoid(x), elementwise.
  template <class T, Backend B>
  static Var<T, B> apply(const Var<T, B>& x) { return silu(x); }
};

/// Feed-forward network: x (..., d) -> proj(Act(fc(x))) (..., d).
template <class T, Backend B, class Act = ReLU2>
struct MLP {
  using value_type = T;    ///< element type
  using backend_type = B;  ///< backend

  Linear<T, B> fc;    ///< (hidden, d)
  Linear<T, B> proj;  ///< (d, hidden), zero-initialised
  /// Called with the hidden activation act(fc(x)) (..., hidden) on every forward when set: ReDo's
  /// activation statistics (megacpp/plasticity/redo.hpp). It only reads; unset costs a branch.
  std::function<void(const Tensor<T, B>&)> hidden_observer;
  static constexpr std::string_view redo_incoming = "fc";   ///< ReDo: the projection into the hidden units
  static constexpr std::string_view redo_outgoing = "proj"; ///< ReDo: the projection out of them

  MLP() = default;
  /// hidden = 0 means 4 * d_model.
  MLP(index_t d_model, Rng& rng, index_t hidden = 0)
      : fc(d_model, hidden ? hidden : 4 * d_model, rng),
        proj(hidden ? hidden : 4 * d_model, d_model, rng, LinearInit::zeros) {}

  /// x (..., d) -> proj(Act(fc(x))) (..., d)
  Var<T, B> forward(const Var<T, B>& x) const {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Act, ReLU2>) {
      // bf16 products: the whole MLP as one op that keeps the hidden activation in bf16 only and
      // rounds relu2's gradient where it computes it (relu2_mlp_bf16; with an fc bias, relu2 and
      // the output projection as one op: relu2_linear_bf16), the same bits as the separate ops
      // (autograd/ops/relu2_linear.hpp). ReDo's observer reads the fp32 activation, so it keeps them.
      if (matmul_precision() == MatmulPrecision::bf16 && !hidden_observer && !proj.bias.var.defined()) {
        if (!fc.bias.var.defined()) {
          check(x.rank() >= 1 && x.shape()[-1] == fc.in_features(), "Linear", "input last dim ", x.shape(),
                " does not match in_features ", fc.in_features());  // Linear's own check, as fc.forward would make
          return relu2_mlp_bf16(x, fc.weight.var, proj.weight.var);
        }
        return relu2_linear_bf16(fc.forward(x), proj.weight.var);
      }
    }
    Var<T, B> hidden = Act::apply(fc.forward(x));
    if (hidden_observer) hidden_observer(hidden.value());
    return proj.forward(hidden);
  }

  /// Visits the parameters of fc and proj under "fc" and "proj", within `prefix`.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    fc.for_each_param(visit, child_name(prefix, "fc"));
    proj.for_each_param(visit, child_name(prefix, "proj"));
  }
};

}  // namespace megacpp
