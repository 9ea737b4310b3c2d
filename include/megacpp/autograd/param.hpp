/// \file
/// megacpp/nn/param.hpp: a trainable parameter with its Role, and the naming/visiting convention.
///
/// Every parameter carries a Role, and optimizers route by role, never by guessing from shapes
/// (RECIPE.md "Optimizers": Muon for 2-D hidden matrices; AdamW for embeddings, the head, 1-D
/// tensors, biases, norm gains and every MTP parameter).
///
/// Layers are structs whose parameters are visited by
///
///     template <class Visitor> void for_each_param(Visitor&& visit, const std::string& prefix = "");
///
/// calling visit(name, param) with stable dotted names ("blocks.3.attn.wq"), the names used by
/// checkpoints and optimizer routing. `child_name(prefix, "wq")` joins the parts.
#pragma once

#include <concepts>
#include <string>
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

/// "blocks.3" + "attn" -> "blocks.3.attn"; an empty prefix yields the name alone.
inline std::string child_name(const std::string& prefix, std::string_view name) {
  return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

/// A layer: visits its parameters with dotted names.
template <class M, class T, class B>
concept Module = requires(M& m) {
  m.for_each_param([](const std::string&, Param<T, B>&) {}, std::string());
};

}  // namespace megacpp
