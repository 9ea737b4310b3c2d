/// \file
/// megacpp/autograd/function.hpp: recording an op with a hand-written backward as one graph node.
///
/// This is the one way ops enter the graph, built-in and user-defined alike (the role of
/// torch.autograd.Function): compute the forward value with backend kernels, then
///
///     return make_result("my_op", value, [=](const Tensor<T, B>& grad_out) mutable {
///       if (x.requires_grad()) { /* add d(loss)/dx into x.grad_buffer() */ }
///     }, x, w);
///
/// The backward receives the gradient of the result and adds its inputs' gradients into their
/// grad_buffer()s (or, when it writes a whole gradient at once, into grad_sink(): see
/// put_gradient). It is recorded only when gradients are enabled (no NoGrad scope) and some
/// input requires a gradient; otherwise the result is a constant and the closure is dropped.
#pragma once

#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/var.hpp"
#include "megacpp/core/functors.hpp"

namespace megacpp {

namespace detail {
template <class T, Backend B, class Fn>
struct FunctionNode final : Node {
  explicit FunctionNode(Fn fn) : backward_fn(std::move(fn)) {}
  void backward(VarStateBase& output) override {
    auto& out = static_cast<VarState<T, B>&>(output);
    // The documented form gets the result's gradient. The library's view-like ops (reshape, add)
    // take the result's state instead, to hand its gradient on without a copy; asked second, so a
    // user's generic lambda (const auto& g) is only ever instantiated with the Tensor.
    if constexpr (std::is_invocable_v<Fn&, const Tensor<T, B>&>) backward_fn(std::as_const(out.grad));
    else backward_fn(out);
  }
  Fn backward_fn;
};

template <class V>
void collect_input(std::vector<std::shared_ptr<VarStateBase>>& inputs, const V& v) {
  if (v.requires_grad()) inputs.push_back(v.state_base());
}
template <class V>
void collect_input(std::vector<std::shared_ptr<VarStateBase>>& inputs, const std::vector<V>& vs) {
  for (const auto& v : vs) collect_input(inputs, v);
}
}  // namespace detail

/// Puts the elementwise gradient f(ins...) over a (rows, cols) grid into `sink`: written on a new
/// buffer (beta 0), added to an existing one (beta 1). The one way elementwise backward
/// functions write, so that a first contribution never pays for a zero-fill.
template <class T, Backend B, class F, class... Ins>
void put_gradient(GradSink<T> sink, index_t rows, index_t cols, F f, Ins... ins) {
  if (sink.beta == T(0)) B::template map<T>(rows, cols, f, sink.data, ins...);
  else B::template map<T>(rows, cols, fn::AccumulateOf<F>{f}, sink.data, In<T>{sink.data}, ins...);
}

/// Hands the result's gradient on to `x` as x's gradient, without a copy, when nothing else can
/// see it: x has no gradient yet, the result does not retain its own, and no other tensor shares
/// its storage (the engine releases the result's gradient right after the node anyway). For
/// backward functions that take the result's state (reshape, add); true when handed on.
template <class T, Backend B>
bool hand_gradient_on(const Var<T, B>& x, detail::VarState<T, B>& result) {
  if (x.grad().defined() || result.retains_grad || !result.grad.sole_owner()) return false;
  x.take_grad(result.grad.reshape(x.shape()));
  result.release_grad();
  return true;
}

/// Wraps `value` as the result of op `name` whose inputs are `inputs` (Vars, of any element type,
/// or vectors of Vars). `backward` is called as backward(const Tensor<T, B>& grad_of_result).
template <class T, Backend B, class Fn, class... Inputs>
Var<T, B> make_result(std::string_view name, Tensor<T, B> value, Fn&& backward, const Inputs&... inputs) {
  std::vector<std::shared_ptr<detail::VarStateBase>> needing_grad;
  (detail::collect_input(needing_grad, inputs), ...);
  Var<T, B> result(std::move(value), false);
  if (!grad_enabled() || needing_grad.empty()) return result;
  auto node = std::make_shared<detail::FunctionNode<T, B, std::decay_t<Fn>>>(std::forward<Fn>(backward));
  node->name = name;
  node->inputs = std::move(needing_grad);
  detail::VarState<T, B>& state = detail::VarAccess::state(result);
  state.grad_fn = std::move(node);
  state.requires_grad = true;
  return result;
}

}  // namespace megacpp
