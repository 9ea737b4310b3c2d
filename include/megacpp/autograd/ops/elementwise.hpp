/// \file
/// megacpp/autograd/ops/elementwise.hpp: arithmetic with broadcasting, scalar ops, activations.
///
/// Broadcasting is over leading dims: the smaller operand's shape must equal the trailing dims of
/// the larger one (x (B, T, D) + bias (D)), or have one element. The gradient of a broadcast
/// operand is the sum over the broadcast rows.
#pragma once

#include "megacpp/autograd/function.hpp"
#include "megacpp/core/functors.hpp"

namespace megacpp {

namespace detail {

// The output is (rows, cols) flattened; a broadcast operand is indexed by the column only.
struct BroadcastPlan {
  Shape out;
  index_t rows = 0, cols = 0;
  bool a_broadcast = false, b_broadcast = false;
};

inline bool is_suffix(const Shape& small, const Shape& big) {
  if (small.rank() > big.rank()) return false;
  for (int i = 1; i <= small.rank(); ++i)
    if (small[-i] != big[-i]) return false;
  return true;
}

inline BroadcastPlan broadcast_plan(const char* op, const Shape& a, const Shape& b) {
  BroadcastPlan p;
  if (a == b) {
    p.out = a;
    p.rows = 1;
    p.cols = a.numel();
  } else if (b.numel() == 1 || (b.rank() < a.rank() && is_suffix(b, a))) {
    p.out = a;
    p.b_broadcast = true;
    p.cols = b.numel();
    p.rows = p.cols ? a.numel() / p.cols : 0;
  } else if (a.numel() == 1 || (a.rank() < b.rank() && is_suffix(a, b))) {
    p.out = b;
    p.a_broadcast = true;
    p.cols = a.numel();
    p.rows = p.cols ? b.numel() / p.cols : 0;
  } else {
    fail(op, "shapes ", a, " and ", b,
         " do not broadcast: one must equal the other's trailing dims or have one element");
  }
  return p;
}

// grad(dst) += contribution(operands...), summed over rows when dst is the broadcast operand.
template <class T, Backend B, class F, class... Ins>
void accumulate_broadcast_grad(const Var<T, B>& dst, bool dst_broadcast, const BroadcastPlan& p, F contribution,
                               Ins... operands) {
  const GradSink<T> g = dst.grad_sink();
  if (dst_broadcast) {
    B::template reduce<T>(1, p.rows, p.cols, contribution, T(1), g.beta, g.data, operands...);
  } else {
    put_gradient<T, B>(g, p.rows, p.cols, contribution, operands...);
  }
}

// forward(a, b) elementwise over the broadcast plan's grid.
template <class T, Backend B, class Forward>
Tensor<T, B> binary_forward(const BroadcastPlan& p, const Var<T, B>& a, const Var<T, B>& b, Forward forward) {
  Tensor<T, B> out(p.out);
  const In<T> ia{a.value().data(), p.a_broadcast}, ib{b.value().data(), p.b_broadcast};
  B::template map<T>(p.rows, p.cols, forward, out.data(), ia, ib);
  return out;
}

template <class T, Backend B, class Forward, class GradA, class GradB>
Var<T, B> binary_op(const char* name, const Var<T, B>& a, const Var<T, B>& b, Forward forward,
                    GradA grad_a, GradB grad_b) {
  const BroadcastPlan p = broadcast_plan(name, a.shape(), b.shape());
  Tensor<T, B> out = binary_forward(p, a, b, forward);
  return make_result(name, std::move(out), [a, b, p, grad_a, grad_b](const Tensor<T, B>& g) mutable {
    const In<T> ig{g.data(), false};
    const In<T> ia{a.value().data(), p.a_broadcast}, ib{b.value().data(), p.b_broadcast};
    if (a.requires_grad()) grad_a(a, p, ig, ia, ib);
    if (b.requires_grad()) grad_b(b, p, ig, ia, ib);
  }, a, b);
}

// y = F(x) elementwise with dL/dx += Grad(g, x, y).
template <class T, Backend B, class Forward, class Grad>
Var<T, B> unary_op(const char* name, const Var<T, B>& x, Forward forward, Grad grad) {
  Tensor<T, B> y(x.shape());
  B::template map<T>(1, x.numel(), forward, y.data(), In<T>{x.value().data()});
  return make_result(name, y, [x, y, grad](const Tensor<T, B>& g) mutable {
    put_gradient<T, B>(x.grad_sink(), 1, x.numel(), grad, In<T>{g.data()}, In<T>{x.value().data()}, In<T>{y.data()});
  }, x);
}

}  // namespace detail

// --- binary arithmetic -----------------------------------------------------------------------
/// a + b, broadcasting over leading dims (see the file comment).
///
/// Backward: both inputs receive the result's gradient g. b's copy (or sum over broadcast rows)
/// is made first; then a, when not broadcast and without a gradient yet, takes g's storage
/// instead of a second copy if nothing else can see it (the result's gradient is not retained
/// and shares its storage with no other tensor; the engine releases it after this node). That
/// halves the residual stream's gradient copies (reshape does the same, see shape.hpp).
template <class T, Backend B>
Var<T, B> add(const Var<T, B>& a, const Var<T, B>& b) {
  const detail::BroadcastPlan p = detail::broadcast_plan("add", a.shape(), b.shape());
  Tensor<T, B> out = detail::binary_forward(p, a, b, fn::Add{});
  return make_result("add", std::move(out), [a, b, p](detail::VarState<T, B>& result) mutable {
    const In<T> g{result.grad.data(), false};
    if (b.requires_grad()) detail::accumulate_broadcast_grad(b, p.b_broadcast, p, fn::Identity{}, g);
    if (!a.requires_grad()) return;
    // After b's contribution: add(x, x) gives a a gradient by now, and it accumulates.
    if (!p.a_broadcast && hand_gradient_on(a, result)) return;
    detail::accumulate_broadcast_grad(a, p.a_broadcast, p, fn::Identity{}, g);
  }, a, b);
}
/// a - b, broadcasting over leading dims.
template <class T, Backend B>
Var<T, B> sub(const Var<T, B>& a, const Var<T, B>& b) {
  return detail::binary_op("sub", a, b, fn::Sub{},
      [](auto& v, auto& p, auto g, auto, auto) { detail::accumulate_broadcast_grad(v, p.a_broadcast, p, fn::Identity{}, g); },
      [](auto& v, auto& p, auto g, auto, auto) { detail::accumulate_broadcast_grad(v, p.b_broadcast, p, fn::Neg{}, g); });
}
/// a * b elementwise, broadcasting over leading dims.
template <class T, Backend B>
Var<T, B> mul(const Var<T, B>& a, const Var<T, B>& b) {
  return detail::binary_op("mul", a, b, fn::Mul{},
      [](auto& v, auto& p, auto g, auto, auto ib) { detail::accumulate_broadcast_grad(v, p.a_broadcast, p, fn::Mul{}, g, ib); },
      [](auto& v, auto& p, auto g, auto ia, auto) { detail::accumulate_broadcast_grad(v, p.b_broadcast, p, fn::Mul{}, g, ia); });
}
/// a / b elementwise, broadcasting over leading dims.
template <class T, Backend B>
Var<T, B> div(const Var<T, B>& a, const Var<T, B>& b) {
  return detail::binary_op("div", a, b, fn::Div{},
      [](auto& v, auto& p, auto g, auto, auto ib) { detail::accumulate_broadcast_grad(v, p.a_broadcast, p, fn::Div{}, g, ib); },
      [](auto& v, auto& p, auto g, auto ia, auto ib) { detail::accumulate_broadcast_grad(v, p.b_broadcast, p, fn::DivRhsGrad{}, g, ia, ib); });
}

/// add(a, b)
template <class T, Backend B> Var<T, B> operator+(const Var<T, B>& a, const Var<T, B>& b) { return add(a, b); }
/// sub(a, b)
template <class T, Backend B> Var<T, B> operator-(const Var<T, B>& a, const Var<T, B>& b) { return sub(a, b); }
/// mul(a, b)
template <class T, Backend B> Var<T, B> operator*(const Var<T, B>& a, const Var<T, B>& b) { return mul(a, b); }
/// div(a, b)
template <class T, Backend B> Var<T, B> operator/(const Var<T, B>& a, const Var<T, B>& b) { return div(a, b); }

// --- scalar ops ------------------------------------------------------------------------------
/// y = s * x
template <class T, Backend B>
Var<T, B> scale(const Var<T, B>& x, double s) {
  return detail::unary_op("scale", x, fn::Scale{s}, fn::ScaleGrad{s});
}
/// y = x + s
template <class T, Backend B>
Var<T, B> add_scalar(const Var<T, B>& x, double s) {
  return detail::unary_op("add_scalar", x, fn::AddScalar{s}, fn::ScaleGrad{1.0});
}
/// scale(x, -1)
template <class T, Backend B> Var<T, B> operator-(const Var<T, B>& x) { return scale(x, -1.0); }
/// scale(x, s)
template <class T, Backend B> Var<T, B> operator*(const Var<T, B>& x, double s) { return scale(x, s); }
/// scale(x, s)
template <class T, Backend B> Var<T, B> operator*(double s, const Var<T, B>& x) { return scale(x, s); }

// --- activations -----------------------------------------------------------------------------
/// exp(x) elementwise.
template <class T, Backend B> Var<T, B> exp(const Var<T, B>& x) { return detail::unary_op("exp", x, fn::Exp{}, fn::ExpGrad{}); }
/// Natural log elementwise.
template <class T, Backend B> Var<T, B> log(const Var<T, B>& x) { return detail::unary_op("log", x, fn::Log{}, fn::LogGrad{}); }
/// tanh(x) elementwise.
template <class T, Backend B> Var<T, B> tanh(const Var<T, B>& x) { return detail::unary_op("tanh", x, fn::Tanh{}, fn::TanhGrad{}); }
/// 1 / (1 + exp(-x)) elementwise.
template <class T, Backend B> Var<T, B> sigmoid(const Var<T, B>& x) { return detail::unary_op("sigmoid", x, fn::Sigmoid{}, fn::SigmoidGrad{}); }
/// max(x, 0) elementwise.
template <class T, Backend B> Var<T, B> relu(const Var<T, B>& x) { return detail::unary_op("relu", x, fn::Relu{}, fn::ReluGrad{}); }
/// relu(x)^2 elementwise (the modded-nanogpt MLP activation).
template <class T, Backend B> Var<T, B> relu2(const Var<T, B>& x) { return detail::unary_op("relu2", x, fn::Relu2{}, fn::Relu2Grad{}); }
/// x * sigmoid(x) elementwise.
template <class T, Backend B> Var<T, B> silu(const Var<T, B>& x) { return detail::unary_op("silu", x, fn::Silu{}, fn::SiluGrad{}); }
/// c * tanh(x / c): Gemma 2 soft-capping (attention scores c = 50, final logits c = 30).
template <class T, Backend B>
Var<T, B> softcap(const Var<T, B>& x, double cap) {
  check(cap > 0, "softcap", "cap must be positive, got ", cap);
  return detail::unary_op("softcap", x, fn::Softcap{cap}, fn::SoftcapGrad{cap});
}

}  // namespace megacpp
