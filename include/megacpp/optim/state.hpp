// megacpp/optim/state.hpp: the Optimizer concept, optimiser state as named tensors, save/load.
//
// Every optimiser exposes its state through one visitor,
//   opt.for_each_state(visitor)  calling  visitor(name, Tensor<T, B>&)  for moment buffers and
//                                         visitor(name, std::int64_t&)  for step counters,
// with names "<kind>.<param name>" ("exp_avg.blocks.0.mlp.w1", "step.embed",
// "momentum_buffer.blocks.0.attn.wq"). A checkpoint writer (safetensors) visits once to write;
// a reader visits once to fill the same objects in place. Every state tensor exists from
// construction (zeros), so a fresh optimiser can be loaded before its first step.
//
// OptimizerState is an in-memory snapshot with that layout: save_state / load_state, and the
// round trip save -> new optimiser -> load gives a bitwise identical next step (tests/optim).
#pragma once

#include <concepts>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "megacpp/core/tensor.hpp"

namespace megacpp::optim {

/// What an optimiser offers a training loop (AdamW, Muon, Hybrid satisfy it).
template <class O>
concept Optimizer = requires(O& o, const std::vector<std::string>& names, const std::string& name) {
  typename O::value_type;
  typename O::backend_type;
  o.step();               // one update from the parameters' accumulated gradients
  o.zero_grad();          // forget the gradients (the next backward starts from zero)
  o.set_lr_scale(1.0);    // multiplier of every group's lr (the schedule's value this step)
  o.reset_state(names);   // zero the state of the named parameters (FIRE, ReDo)
  { o.owns(name) } -> std::same_as<bool>;
};

/// A snapshot of an optimiser's state: named tensors and named step counters.
template <class T, Backend B>
struct OptimizerState {
  std::map<std::string, Tensor<T, B>> tensors;    ///< "exp_avg.<param>" -> copy of the buffer
  std::map<std::string, std::int64_t> counters;  ///< "step.<param>" -> steps taken
};

/// Copies every state tensor and counter of `opt` (the tensors are clones, not views).
template <Optimizer O>
OptimizerState<typename O::value_type, typename O::backend_type> save_state(O& opt) {
  using T = typename O::value_type;
  using B = typename O::backend_type;
  OptimizerState<T, B> s;
  opt.for_each_state([&](const std::string& name, auto& item) {
    if constexpr (std::is_same_v<std::decay_t<decltype(item)>, std::int64_t>) s.counters.emplace(name, item);
    else s.tensors.emplace(name, item.clone());
  });
  return s;
}

/// Overwrites the state of `opt` with `saved`. The names must match exactly (none missing,
/// none extra) and every tensor's shape must match; otherwise throws naming the differences and
/// leaves the optimiser unchanged.
template <Optimizer O>
void load_state(O& opt, const OptimizerState<typename O::value_type, typename O::backend_type>& saved) {
  std::vector<std::string> missing, mismatched, extra;
  std::set<std::string> visited;
  opt.for_each_state([&](const std::string& name, auto& item) {
    visited.insert(name);
    if constexpr (std::is_same_v<std::decay_t<decltype(item)>, std::int64_t>) {
      if (!saved.counters.count(name)) missing.push_back(name);
    } else {
      const auto it = saved.tensors.find(name);
      if (it == saved.tensors.end()) missing.push_back(name);
      else if (!(it->second.shape() == item.shape()))
        mismatched.push_back(name + " " + it->second.shape().to_string() + " into " + item.shape().to_string());
    }
  });
  for (const auto& [name, t] : saved.tensors)
    if (!visited.count(name)) extra.push_back(name);
  for (const auto& [name, c] : saved.counters)
    if (!visited.count(name)) extra.push_back(name);
  const auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (std::size_t i = 0; i < names.size() && i < 8; ++i) s += (i ? ", " : "") + names[i];
    return names.size() > 8 ? s + ", ... (" + std::to_string(names.size()) + " in all)" : s;
  };
  check(missing.empty(), "load_state", "the saved state lacks ", missing.size(), " entries: ", list(missing));
  check(mismatched.empty(), "load_state", "saved shapes differ: ", list(mismatched));
  check(extra.empty(), "load_state", "the saved state has ", extra.size(), " entries this optimiser does not own (",
        list(extra), "): was it saved from a different model or routing?");
  opt.for_each_state([&](const std::string& name, auto& item) {
    if constexpr (std::is_same_v<std::decay_t<decltype(item)>, std::int64_t>) item = saved.counters.at(name);
    else item.assign(saved.tensors.at(name));
  });
}

}  // namespace megacpp::optim
