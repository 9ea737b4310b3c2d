/// \file
/// megacpp/autograd/module.hpp: how layers name and visit their parameters.
///
/// Layers are structs whose parameters are visited by
///
///     template <class Visitor> void for_each_param(Visitor&& visit, const std::string& prefix = "");
///
/// calling visit(name, param) with stable dotted names ("blocks.3.mixer.wq.weight"), the names
/// checkpoints and optimizer routing share. `child_name(prefix, "wq")` joins the parts. Anything
/// with for_each_param is a Module: optimizers (collect_params), checkpoints and the masking
/// checker take any Module, not only the library's layers.
///
/// A layer with non-trainable state a checkpoint must carry (a balancing controller's per-expert
/// bias: changed outside the gradient, yet part of what the layer computes) also has
///
///     template <class Visitor> void for_each_state(Visitor&& visit, const std::string& prefix = "");
///
/// calling visit(name, std::vector<double>&). Composite layers forward it with visit_state, which
/// does nothing for a child without state, so only the layers that own some write the method.
#pragma once

#include <concepts>
#include <string>
#include <string_view>
#include <vector>

#include "megacpp/autograd/param.hpp"

namespace megacpp {

/// "blocks.3" + "attn" -> "blocks.3.attn"; an empty prefix yields the name alone.
inline std::string child_name(const std::string& prefix, std::string_view name) {
  return prefix.empty() ? std::string(name) : prefix + "." + std::string(name);
}

/// A visitor that does nothing: what the concepts below call for_each_param with. (A named type,
/// not a lambda: nvcc 13's front end rejects lambdas inside a concept's requires-expression.)
template <class T, class B>
struct ParamVisitorProbe {
  /// Ignores the parameter.
  void operator()(const std::string&, Param<T, B>&) const {}
};

/// A layer: visits its parameters with dotted names.
template <class M, class T, class B>
concept Module = requires(M& m) { m.for_each_param(ParamVisitorProbe<T, B>{}, std::string()); };

/// A visitor of non-trainable state that does nothing (what ModuleWithState probes with).
struct StateVisitorProbe {
  /// Ignores the state.
  void operator()(const std::string&, std::vector<double>&) const {}
};

/// A layer with non-trainable host state that checkpoints save beside the parameters.
template <class M>
concept ModuleWithState = requires(M& m) { m.for_each_state(StateVisitorProbe{}, std::string()); };

/// Calls child.for_each_state(visit, prefix) when the child has state; nothing otherwise.
template <class M, class Visitor>
void visit_state(M& child, Visitor& visit, const std::string& prefix) {
  if constexpr (ModuleWithState<M>) child.for_each_state(visit, prefix);
}

}  // namespace megacpp
