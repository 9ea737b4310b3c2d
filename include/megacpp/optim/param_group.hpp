// megacpp/optim/param_group.hpp: the parameters an optimiser updates, and groups of them.
//
// An optimiser never owns parameters: it holds ParamRefs, handles on the same Var state as the
// model's Param (a Var is a shared handle), so updates written through a ParamRef are what the
// model sees. Names are the dotted names of for_each_param (megacpp/autograd/module.hpp); optimiser
// state is keyed by them ("exp_avg.blocks.0.attn.wq").
//
// Tied weights (an embedding visited again as the LM head) appear once: collect_params keeps the
// first name and records the others as aliases, so a tied matrix is updated once per step.
#pragma once

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "megacpp/autograd/module.hpp"

namespace megacpp::optim {

/// A parameter as an optimiser sees it: its name, a handle on its Var, its Role.
template <class T, Backend B>
struct ParamRef {
  std::string name;                  ///< dotted name from for_each_param ("blocks.0.attn.wq")
  Var<T, B> var;                     ///< shares state with the model's Param
  Role role = Role::matrix;          ///< how the optimiser split routes it
  std::vector<std::string> aliases;  ///< other names of the same Var (tied weights)

  /// The parameter's shape.
  const Shape& shape() const { return var.shape(); }
  /// The parameter's value, for in-place updates (no graph is recorded: tensors, not Vars).
  Tensor<T, B>& value() { return var.mutable_value(); }
  /// True when a backward pass has produced a gradient for this parameter.
  bool has_grad() const { return var.grad().defined(); }
  /// The accumulated gradient (check has_grad() first).
  const Tensor<T, B>& grad() const { return var.grad(); }
  /// The gradient storage, writable (gradient clipping scales it in place).
  Tensor<T, B>& grad_buffer() const { return var.grad_buffer(); }
};

/// A reference to a model's Param under `name`.
template <class T, Backend B>
ParamRef<T, B> make_param_ref(std::string name, const Param<T, B>& p) {
  return ParamRef<T, B>{std::move(name), p.var, p.role, {}};
}

/// Every parameter of `model` (any Module: megacpp/autograd/module.hpp) in visiting
/// order; a Var visited twice (tied weights) is kept once, under its first name, with the later
/// names as aliases. Throws when an alias's Role differs from the first name's Role, since the
/// optimiser split could not honour both.
template <class T, Backend B, class Model>
  requires Module<Model, T, B>
std::vector<ParamRef<T, B>> collect_params(Model& model, const std::string& prefix = "") {
  std::vector<ParamRef<T, B>> out;
  std::unordered_map<const void*, std::size_t> index_of;  // Var state -> position in out
  model.for_each_param(
      [&](const std::string& name, Param<T, B>& p) {
        check(p.var.defined(), "collect_params", "parameter '", name, "' has no value (default-constructed Param)");
        const auto [it, inserted] = index_of.emplace(p.var.id(), out.size());
        if (inserted) {
          out.push_back(make_param_ref(name, p));
          return;
        }
        ParamRef<T, B>& first = out[it->second];
        check(first.role == p.role, "collect_params", "parameter '", name, "' (Role::", role_name(p.role),
              ") is the same tensor as '", first.name, "' (Role::", role_name(first.role),
              "): tied parameters must share one Role, e.g. tie the LM head to the embedding with Role::embedding");
        first.aliases.push_back(name);
      },
      prefix);
  return out;
}

/// Parameters that share hyper-parameters: `Options` is AdamWOptions or MuonOptions.
template <class Options, class T, Backend B>
struct ParamGroup {
  std::string name;                    ///< shown in routing tables and error messages
  Options options;                     ///< lr, weight decay, betas or momentum of this group
  std::vector<ParamRef<T, B>> params;  ///< members, in update order
};

namespace detail {
/// Throws when two ParamRefs (possibly in different groups) name the same parameter or share a
/// Var: each parameter must be updated by exactly one group of one optimiser.
template <class Groups>
void check_unique_params(const char* optimizer, const Groups& groups) {
  std::unordered_map<std::string, std::string> group_of_name;
  std::unordered_map<const void*, std::string> name_of_var;
  for (const auto& g : groups) {
    for (const auto& p : g.params) {
      check(p.var.defined(), optimizer, "parameter '", p.name, "' in group '", g.name, "' has no value");
      const auto [n, new_name] = group_of_name.emplace(p.name, g.name);
      check(new_name, optimizer, "parameter '", p.name, "' appears twice (groups '", n->second, "' and '", g.name, "')");
      const auto [v, new_var] = name_of_var.emplace(p.var.id(), p.name);
      check(new_var, optimizer, "parameters '", v->second, "' and '", p.name,
            "' are the same tensor: list tied weights once (collect_params does this)");
    }
  }
}
}  // namespace detail

}  // namespace megacpp::optim
