/// \file
/// megacpp/autograd/ops/softmax.hpp: softmax and log-softmax over the last axis.
///
///     softmax:     y = exp(x - max) / sum exp(x - max);   dx = y * (dy - sum(dy * y))
///     log_softmax: y = x - logsumexp(x);                  dx = dy - exp(y) * sum(dy)
///
/// A row that is entirely -inf (fully masked) has softmax 0, not NaN.
#pragma once

#include "megacpp/autograd/function.hpp"

namespace megacpp {

/// Softmax over the last axis (an all -inf row gives zeros, not NaN).
template <class T, Backend B>
Var<T, B> softmax(const Var<T, B>& x) {
  check(x.rank() >= 1, "softmax", "needs at least one dim, got shape ", x.shape());
  const index_t cols = x.shape()[-1], rows = cols ? x.numel() / cols : 0;
  Tensor<T, B> y(x.shape());
  B::template softmax<T>(rows, cols, x.value().data(), y.data());
  return make_result("softmax", y, [x, y, rows, cols](const Tensor<T, B>& g) mutable {
    B::template softmax_backward<T>(rows, cols, y.data(), g.data(), x.grad_buffer().data());
  }, x);
}

/// x - logsumexp(x) over the last axis.
template <class T, Backend B>
Var<T, B> log_softmax(const Var<T, B>& x) {
  check(x.rank() >= 1, "log_softmax", "needs at least one dim, got shape ", x.shape());
  const index_t cols = x.shape()[-1], rows = cols ? x.numel() / cols : 0;
  Tensor<T, B> y(x.shape());
  B::template log_softmax<T>(rows, cols, x.value().data(), y.data());
  return make_result("log_softmax", y, [x, y, rows, cols](const Tensor<T, B>& g) mutable {
    B::template log_softmax_backward<T>(rows, cols, y.data(), g.data(), x.grad_buffer().data());
  }, x);
}

}  // namespace megacpp
