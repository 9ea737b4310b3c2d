// megacpp/nn/linear.hpp: y = x W^T (+ b), W stored (out_features, in_features).
//
// The (out, in) layout matches PyTorch checkpoints and makes Muon's shape scale
// sqrt(max(1, rows / cols)) read as sqrt(max(1, out / in)) (modded-nanogpt).
#pragma once

#include <cmath>
#include <string>

#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/matmul.hpp"
#include "megacpp/autograd/module.hpp"

namespace megacpp {

/// How a Linear layer's weight starts.
enum class LinearInit {
  normal,  ///< N(0, 1/in_features): unit-variance outputs for unit-variance inputs
  zeros,   ///< all zero: residual-branch output projections (modded-nanogpt), so blocks start as identity
};

/// A fully connected layer: y = x W^T (+ b), x (..., in) -> y (..., out).
template <class T, Backend B>
struct Linear {
  Param<T, B> weight;  ///< (out_features, in_features), Role::matrix by default
  Param<T, B> bias;    ///< (out_features), Role::bias; undefined when the layer has no bias

  Linear() = default;
  /// Builds the layer; `role` lets the LM head or MTP projections carry their own Role.
  Linear(index_t in_features, index_t out_features, Rng& rng, LinearInit init = LinearInit::normal,
         bool with_bias = false, Role role = Role::matrix) {
    check(in_features > 0 && out_features > 0, "Linear", "features must be positive, got in ", in_features,
          ", out ", out_features);
    const Shape shape{out_features, in_features};
    weight = init == LinearInit::zeros ? Param<T, B>::zeros(shape, role)
                                       : Param<T, B>::normal(shape, role, rng, 1.0 / std::sqrt(static_cast<double>(in_features)));
    if (with_bias) bias = Param<T, B>::zeros(Shape{out_features}, role == Role::mtp ? Role::mtp : Role::bias);
  }

  /// Size of the input's last dimension (columns of weight).
  index_t in_features() const { return weight.shape()[1]; }
  /// Size of the output's last dimension (rows of weight).
  index_t out_features() const { return weight.shape()[0]; }

  /// x (..., in) -> (..., out); the product's operands are fp32 or bf16 as the model's precision
  /// policy says (autograd/precision.hpp), the weight and the result fp32 either way.
  Var<T, B> forward(const Var<T, B>& x) const {
    check(x.rank() >= 1 && x.shape()[-1] == in_features(), "Linear", "input last dim ", x.shape(),
          " does not match in_features ", in_features());
    Var<T, B> y = matmul(x, weight.var, false, true);
    return bias.var.defined() ? y + bias.var : y;
  }

  /// Visits "weight" (and "bias") under `prefix`.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    visit(child_name(prefix, "weight"), weight);
    if (bias.var.defined()) visit(child_name(prefix, "bias"), bias);
  }
};

}  // namespace megacpp
