/// \file
/// megacpp/autograd/ops/reduce.hpp: sum and mean over one axis or over everything.
#pragma once

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/ops/shape.hpp"
#include "megacpp/core/functors.hpp"

namespace megacpp {

namespace detail {
// y[o, i] = scale * sum_j x[o, j, i], x viewed as (outer, n, inner) around `axis`.
template <class T, Backend B>
Var<T, B> reduce_axis(const char* name, const Var<T, B>& x, int axis, bool keepdim, bool mean) {
  const Shape& s = x.shape();
  const int a = s.normalize_axis(axis);
  const index_t outer = s.prod(0, a), n = s[a], inner = s.prod(a + 1, s.rank());
  check(!mean || n > 0, name, "mean over an empty axis ", axis, " of shape ", s);
  const T scale = mean ? T(1) / static_cast<T>(n) : T(1);
  Tensor<T, B> y(keepdim ? s.with(a, 1) : s.without(a));
  B::template reduce<T>(outer, n, inner, fn::Identity{}, scale, T(0), y.data(), In<T>{x.value().data()});
  return make_result(name, std::move(y), [x, outer, n, inner, scale](const Tensor<T, B>& g) mutable {
    const GradSink<T> gx = x.grad_sink();
    B::template expand<T>(outer, n, inner, scale, g.data(), gx.beta, gx.data);
  }, x);
}
}  // namespace detail

/// Sum over `axis` (negative counts from the end); keepdim keeps it as size 1.
template <class T, Backend B>
Var<T, B> sum(const Var<T, B>& x, int axis, bool keepdim = false) { return detail::reduce_axis("sum", x, axis, keepdim, false); }
/// Mean over `axis` (negative counts from the end); keepdim keeps it as size 1.
template <class T, Backend B>
Var<T, B> mean(const Var<T, B>& x, int axis, bool keepdim = false) { return detail::reduce_axis("mean", x, axis, keepdim, true); }

/// Sum / mean of every element: a one-element result of shape ().
template <class T, Backend B>
Var<T, B> sum(const Var<T, B>& x) {
  return detail::reduce_axis("sum", reshape_all(x), 0, false, false);
}
/// Mean of every element: a one-element result of shape () (throws for an empty x).
template <class T, Backend B>
Var<T, B> mean(const Var<T, B>& x) {
  check(x.numel() > 0, "mean", "mean of an empty tensor (shape ", x.shape(), ")");
  return detail::reduce_axis("mean", reshape_all(x), 0, false, true);
}

}  // namespace megacpp
