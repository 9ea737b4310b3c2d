/// \file
/// megacpp/autograd/backward.hpp: the reverse-mode engine.
///
/// backward(loss) orders the graph below `loss` topologically (iterative DFS, so deep graphs do
/// not overflow the stack), seeds d(loss)/d(loss) = 1 and runs each node once, outputs before
/// inputs. Leaves accumulate into their gradients across calls (gradient accumulation over
/// micro-batches; zero_grad() resets). Unless retain_graph is set, each node and each non-leaf
/// gradient is released as soon as it has been used, so peak memory is that of the forward.
#pragma once

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "megacpp/autograd/var.hpp"

namespace megacpp {

namespace detail {
// States reachable from `root` through grad_fn inputs, in topological order (inputs first).
// Shared ownership keeps every state alive while the pass releases the nodes that held them.
inline std::vector<std::shared_ptr<VarStateBase>> topological_order(std::shared_ptr<VarStateBase> root) {
  std::vector<std::shared_ptr<VarStateBase>> order;
  std::unordered_set<const VarStateBase*> visited{root.get()};
  std::vector<std::pair<std::shared_ptr<VarStateBase>, std::size_t>> stack{{std::move(root), 0}};
  while (!stack.empty()) {
    auto& [state, next] = stack.back();
    const Node* node = state->grad_fn.get();
    if (node && next < node->inputs.size()) {
      std::shared_ptr<VarStateBase> child = node->inputs[next++];
      if (visited.insert(child.get()).second) stack.emplace_back(std::move(child), 0);
    } else {
      order.push_back(std::move(state));
      stack.pop_back();
    }
  }
  return order;
}

inline void run_backward(std::shared_ptr<VarStateBase> root, bool retain_graph) {
  const VarStateBase* seeded = root.get();
  const auto order = topological_order(std::move(root));
  // Gradients flowing through non-leaves start from zero on every pass (a retained one from an
  // earlier pass would otherwise be propagated again); the root carries the seed.
  for (const auto& state : order)
    if (state->grad_fn && state.get() != seeded) state->release_grad();
  // Leaves with a gradient-ready hook: how many node inputs still feed each one. The hook runs
  // when the count reaches zero, i.e. right after the last op contributing to that gradient.
  std::unordered_map<VarStateBase*, int> pending;
  for (const auto& state : order)
    if (state->grad_ready && !state->grad_fn) pending.emplace(state.get(), 0);
  if (!pending.empty())
    for (const auto& state : order)
      if (state->grad_fn)
        for (const auto& input : state->grad_fn->inputs)
          if (auto it = pending.find(input.get()); it != pending.end()) ++it->second;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    VarStateBase& state = **it;
    if (!state.grad_fn) {
      check(!state.graph_freed, "backward",
            "the graph below this result was already freed by an earlier backward; "
            "pass retain_graph = true to the first call to backpropagate twice");
      continue;  // a leaf: its gradient stays
    }
    if (state.has_grad()) state.grad_fn->backward(state);
    if (!pending.empty())
      for (const auto& input : state.grad_fn->inputs)
        if (auto it = pending.find(input.get()); it != pending.end() && --it->second == 0) input->grad_ready();
    // A non-leaf's gradient is consumed here; keeping it would double-count on a retained
    // graph's next backward.
    if (!state.retains_grad) state.release_grad();
    if (!retain_graph) {
      state.grad_fn.reset();  // frees the tensors the node saved for its backward
      state.graph_freed = true;
    }
  }
}
}  // namespace detail

/// Backpropagates from a one-element `loss` (seed gradient 1).
template <class T, Backend B>
void backward(const Var<T, B>& loss, bool retain_graph = false) {
  check(loss.defined(), "backward", "loss is an undefined Var");
  check(loss.requires_grad(), "backward",
        "loss does not require a gradient: no input of its graph requires one, or it was computed under NoGrad");
  check(loss.numel() == 1, "backward", "loss must have one element, got shape ", loss.shape(),
        "; pass grad_output for a non-scalar result");
  auto state = loss.state_base();
  state->seed_grad_ones();
  detail::run_backward(std::move(state), retain_graph);
}

/// Backpropagates from any result with an explicit upstream gradient of the result's shape.
template <class T, Backend B>
void backward(Var<T, B>& result, const Tensor<T, B>& grad_output, bool retain_graph = false) {
  check(result.defined() && result.requires_grad(), "backward", "result does not require a gradient");
  check(grad_output.shape() == result.shape(), "backward", "grad_output shape ", grad_output.shape(),
        " differs from result shape ", result.shape());
  result.zero_grad();
  result.grad_buffer().assign(grad_output);
  detail::run_backward(result.state_base(), retain_graph);
}

}  // namespace megacpp
