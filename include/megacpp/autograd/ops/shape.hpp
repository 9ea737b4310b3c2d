/// \file
/// megacpp/autograd/ops/shape.hpp: reshape, transpose, slice, concat and element-type casts.
///
/// Tensors are contiguous, so reshape is a view while transpose, slice and concat copy (each
/// copy is one strided kernel; backward is the same kernel run the other way, accumulating).
#pragma once

#include <vector>

#include "megacpp/autograd/function.hpp"
#include "megacpp/core/functors.hpp"

namespace megacpp {

/// Same data, new shape (one dim may be -1).
///
/// Backward: the result's gradient is x's gradient viewed in x's shape. When x has none yet and
/// nothing else can see the result's gradient (it is not retained and no other tensor shares its
/// storage), x takes that storage instead of a copy: the engine releases the result's gradient
/// right after this node anyway. (The copy was ~0.8% of bench/train_step's dense step: the
/// attention's q, k, v and output reshapes.) Otherwise it is added like any other contribution.
template <class T, Backend B>
Var<T, B> reshape(const Var<T, B>& x, const Shape& shape) {
  Tensor<T, B> y = x.value().reshape(shape);
  return make_result("reshape", std::move(y), [x](detail::VarState<T, B>& out) mutable {
    if (hand_gradient_on(x, out)) return;
    put_gradient<T, B>(x.grad_sink(), 1, x.numel(), fn::Identity{}, In<T>{out.grad.data()});
  }, x);
}
/// Same, with the dims as a braced list: reshape(x, {-1, d}).
template <class T, Backend B>
Var<T, B> reshape(const Var<T, B>& x, std::initializer_list<index_t> dims) {
  return reshape(x, x.value().reshape(dims).shape());
}
/// Flattens to one dim.
template <class T, Backend B>
Var<T, B> reshape_all(const Var<T, B>& x) { return reshape(x, Shape{x.numel()}); }

/// Swaps two axes (copies).
template <class T, Backend B>
Var<T, B> transpose(const Var<T, B>& x, int axis0, int axis1) {
  const Shape& s = x.shape();
  int a0 = s.normalize_axis(axis0), a1 = s.normalize_axis(axis1);
  if (a0 == a1) return reshape(x, s);  // swapping an axis with itself: identity
  if (a0 > a1) std::swap(a0, a1);
  Shape out = s;
  out.set(a0, s[a1]);
  out.set(a1, s[a0]);
  const index_t outer = s.prod(0, a0), d0 = s[a0], mid = s.prod(a0 + 1, a1), d1 = s[a1],
                inner = s.prod(a1 + 1, s.rank());
  Tensor<T, B> y(out);
  B::template transpose<T>(outer, d0, mid, d1, inner, x.value().data(), T(0), y.data());
  return make_result("transpose", std::move(y), [x, outer, d0, mid, d1, inner](const Tensor<T, B>& g) mutable {
    const GradSink<T> gx = x.grad_sink();
    B::template transpose<T>(outer, d1, mid, d0, inner, g.data(), gx.beta, gx.data);
  }, x);
}

/// Elements [begin, end) along `axis` (copies).
template <class T, Backend B>
Var<T, B> slice(const Var<T, B>& x, int axis, index_t begin, index_t end) {
  const Shape& s = x.shape();
  const int a = s.normalize_axis(axis);
  check(0 <= begin && begin <= end && end <= s[a], "slice", "range [", begin, ", ", end,
        ") out of bounds for axis ", axis, " of shape ", s);
  const index_t outer = s.prod(0, a), n = s[a], inner = s.prod(a + 1, s.rank()), len = end - begin;
  Tensor<T, B> y(s.with(a, len));
  B::template copy_2d<T>(outer, len * inner, x.value().data() + begin * inner, n * inner, T(0), y.data(), len * inner);
  return make_result("slice", std::move(y), [x, outer, n, inner, begin, len](const Tensor<T, B>& g) mutable {
    B::template copy_2d<T>(outer, len * inner, g.data(), len * inner, T(1), x.grad_buffer().data() + begin * inner, n * inner);
  }, x);
}

/// Joins tensors along `axis`; all other dims must agree.
template <class T, Backend B>
Var<T, B> concat(const std::vector<Var<T, B>>& xs, int axis) {
  check(!xs.empty(), "concat", "needs at least one tensor");
  const Shape& s0 = xs[0].shape();
  const int a = s0.normalize_axis(axis);
  index_t total = 0;
  for (const auto& x : xs) {
    bool same = x.rank() == s0.rank();
    for (int d = 0; same && d < s0.rank(); ++d) same = d == a || x.shape()[d] == s0[d];
    check(same, "concat", "shape ", x.shape(), " does not match ", s0, " outside axis ", axis);
    total += x.shape()[a];
  }
  const index_t outer = s0.prod(0, a), inner = s0.prod(a + 1, s0.rank());
  Tensor<T, B> y(s0.with(a, total));
  index_t offset = 0;
  for (const auto& x : xs) {
    const index_t len = x.shape()[a];
    B::template copy_2d<T>(outer, len * inner, x.value().data(), len * inner, T(0), y.data() + offset * inner, total * inner);
    offset += len;
  }
  return make_result("concat", std::move(y), [xs, a, outer, inner, total](const Tensor<T, B>& g) mutable {
    index_t offset = 0;
    for (auto& x : xs) {
      const index_t len = x.shape()[a];
      if (x.requires_grad()) {
        const GradSink<T> gx = x.grad_sink();
        B::template copy_2d<T>(outer, len * inner, g.data() + offset * inner, total * inner, gx.beta, gx.data, len * inner);
      }
      offset += len;
    }
  }, xs);
}

/// Element-type conversion between compute types (float <-> double); the gradient converts back.
template <class U, class T, Backend B>
Var<U, B> cast(const Var<T, B>& x) {
  return make_result("cast", x.value().template to<U>(), [x](const Tensor<U, B>& g) mutable {
    const Tensor<T, B> gt = g.template to<T>();
    put_gradient<T, B>(x.grad_sink(), 1, x.numel(), fn::Identity{}, In<T>{gt.data()});
  }, x);
}

}  // namespace megacpp
