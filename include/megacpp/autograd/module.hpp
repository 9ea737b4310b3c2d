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
#pragma once

#include <concepts>
#include <string>
#include <string_view>

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

}  // namespace megacpp
