// megacpp/nn/param.hpp: a trainable parameter with its Role, and the naming/visiting convention.
//
// Every parameter carries a Role, and optimizers route by role, never by guessing from shapes
// (RECIPE.md "Optimizers": Muon for 2-D hidden matrices; AdamW for embeddings, the head, 1-D
// tensors, biases, norm gains and every MTP parameter).
//
// Layers are structs whose parameters are visited by
//   template <class Visitor> void for_each_param(Visitor&& visit, const std::string& prefix = "");
// calling visit(name, param) with stable dotted names ("blocks.3.attn.wq"), the names used by
// checkpoints and optimizer routing. `child_name(prefix, "wq")` joins the parts.
#pragma once

#include <concepts>
#include <string>
#include <string_view>

#include "megacpp/autograd/var.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp {

enum class Role {
  matrix,     // 2-D hidden weight (projections, MLP, mixers): Muon
  embedding,  // token / value embeddings: AdamW, no weight decay
  head,       // LM head (tied or not): AdamW
  norm_gain,  // RMSNorm gains: AdamW, no weight decay
  bias,       // additive biases: AdamW, no weight decay
  scalar,     // learned scalars and small vectors (lambdas, dt_bias, A_log, D): AdamW, no decay
  router,     // MoE router: AdamW
  mtp,        // anything inside the multi-token-prediction module: AdamW, never Muon
};

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

template <class T, Backend B>
struct Param {
  Var<T, B> var;
  Role role = Role::matrix;

  Param() = default;
  Param(Tensor<T, B> value, Role r) : var(Var<T, B>::parameter(std::move(value))), role(r) {}

  // Normal(0, std) initialisation, deterministic in the Rng's state.
  static Param normal(Shape shape, Role role, Rng& rng, double std) { return Param(randn<T, B>(shape, rng, std), role); }
  static Param zeros(Shape shape, Role role) { return Param(Tensor<T, B>::zeros(shape), role); }
  static Param filled(Shape shape, Role role, T value) { return Param(Tensor<T, B>::full(shape, value), role); }

  const Shape& shape() const { return var.shape(); }
  index_t numel() const { return var.numel(); }
  const Tensor<T, B>& value() const { return var.value(); }
  const Tensor<T, B>& grad() const { return var.grad(); }
};

// "blocks.3" + "attn" -> "blocks.3.attn"; an empty prefix yields the name alone.
inline std::string child_name(const std::string& prefix, std::string_view name) {
  return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

// A layer: visits its parameters with dotted names.
template <class M, class T, class B>
concept Module = requires(M& m) {
  m.for_each_param([](const std::string&, Param<T, B>&) {}, std::string());
};

}  // namespace megacpp
