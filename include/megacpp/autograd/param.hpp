/// \file
/// megacpp/autograd/param.hpp: a trainable parameter with its Role.
///
/// Every parameter carries a Role, and optimizers route by role, never by guessing from shapes
/// (docs/systems/muon.md: Muon for 2-D hidden matrices; AdamW for embeddings, the head, 1-D
/// tensors, biases, norm gains and every MTP parameter). Param and Role live below the layers so
/// that optimizers, checkpoints and plasticity depend on nothing above autograd; how layers name
/// and visit their parameters is megacpp/autograd/module.hpp.
#pragma once

#include <string_view>

#include "megacpp/autograd/var.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp {

/// What a parameter is, which decides its optimizer (and weight decay) in a Hybrid optimizer.
enum class Role {
  matrix,     ///< 2-D hidden weight (projections, MLP, mixers): Muon
  embedding,  ///< token / value embeddings: AdamW, no weight decay
  head,       ///< LM head (tied or not): AdamW
  norm_gain,  ///< RMSNorm gains: AdamW, no weight decay
  bias,       ///< additive biases: AdamW, no weight decay
  scalar,     ///< learned scalars and small vectors (lambdas, dt_bias, A_log, D): AdamW, no decay
  router,     ///< MoE router: AdamW
  mtp,        ///< anything inside the multi-token-prediction module: AdamW, never Muon
};

/// The role's name as written in code ("matrix", "norm_gain", ...), for routing tables and logs.
constexpr std::string_view role_name(Role r) {
  switch (r) {
    case Role::matrix: return "matrix";
    case Role::embedding: return "embedding";
    case Role::head: return "head";
    case Role::norm_gain: return "norm_gain";
    case Role::bias: return "bias";
    case Role::scalar: return "scalar";
    case Role::router: return "router";
    case Role::mtp: return "mtp";
  }
  return "unknown";
}

/// A trainable parameter: a leaf Var that collects gradients, and the Role optimizers route by.
template <class T, Backend B>
struct Param {
  Var<T, B> var;  ///< the leaf (requires_grad)
  Role role = Role::matrix;  ///< decides the optimizer

  Param() = default;  ///< undefined var
  /// A parameter holding `value` with role `r`.
  Param(Tensor<T, B> value, Role r) : var(Var<T, B>::parameter(std::move(value))), role(r) {}

  /// Normal(0, std) initialisation, deterministic in the Rng's state.
  static Param normal(Shape shape, Role role, Rng& rng, double std) { return Param(randn<T, B>(shape, rng, std), role); }
  /// Zero initialisation (biases, zero-initialised output projections).
  static Param zeros(Shape shape, Role role) { return Param(Tensor<T, B>::zeros(shape), role); }
  /// Every element `value` (norm gains start at 1).
  static Param filled(Shape shape, Role role, T value) { return Param(Tensor<T, B>::full(shape, value), role); }

  /// The value's shape.
  const Shape& shape() const { return var.shape(); }
  /// The value's number of elements.
  index_t numel() const { return var.numel(); }
  /// The value.
  const Tensor<T, B>& value() const { return var.value(); }
  /// The accumulated gradient (undefined before the first backward).
  const Tensor<T, B>& grad() const { return var.grad(); }
};

}  // namespace megacpp
