/// \file
/// megacpp/autograd/ops/rmsnorm.hpp: RMSNorm over the last axis, fused forward and backward.
///   y = x / sqrt(mean(x^2) + eps) * gain      (Zhang & Sennrich, "Root Mean Square Layer
///   Normalization", NeurIPS 2019; modded-nanogpt uses it without a gain)
#pragma once

#include "megacpp/autograd/function.hpp"

namespace megacpp {

namespace detail {
template <class T, Backend B>
Var<T, B> rmsnorm_impl(const Var<T, B>& x, const Var<T, B>* gain, double eps) {
  check(x.rank() >= 1 && x.shape()[-1] > 0, "rmsnorm", "needs a non-empty last dim, got shape ", x.shape());
  check(eps >= 0, "rmsnorm", "eps must be >= 0, got ", eps);
  const index_t cols = x.shape()[-1], rows = x.numel() / cols;
  if (gain)
    check(gain->shape() == Shape{cols}, "rmsnorm", "gain shape ", gain->shape(), " must be (", cols,
          ") for input ", x.shape());
  Tensor<T, B> y(x.shape());
  Tensor<T, B> rstd(Shape{rows});  // 1 / rms per row, saved for the backward
  const T* gp = gain ? gain->value().data() : nullptr;
  B::template rmsnorm<T>(rows, cols, x.value().data(), gp, static_cast<T>(eps), y.data(), rstd.data());
  Var<T, B> g = gain ? *gain : Var<T, B>();
  auto backward = [x, g, rstd, rows, cols](const Tensor<T, B>& gy) mutable {
    const T* gain_data = g.defined() ? g.value().data() : nullptr;
    T* gx = x.requires_grad() ? x.grad_buffer().data() : nullptr;
    T* ggain = g.defined() && g.requires_grad() ? g.grad_buffer().data() : nullptr;
    B::template rmsnorm_backward<T>(rows, cols, x.value().data(), gain_data, rstd.data(), gy.data(), gx, ggain);
  };
  if (gain) return make_result("rmsnorm", std::move(y), std::move(backward), x, *gain);
  return make_result("rmsnorm", std::move(y), std::move(backward), x);
}
}  // namespace detail

/// x / sqrt(mean(x^2) + eps) * gain over the last axis; gain has shape (last dim).
template <class T, Backend B>
Var<T, B> rmsnorm(const Var<T, B>& x, const Var<T, B>& gain, double eps = 1e-6) { return detail::rmsnorm_impl(x, &gain, eps); }
/// Without a learned gain (the modded-nanogpt default).
template <class T, Backend B>
Var<T, B> rmsnorm(const Var<T, B>& x, double eps = 1e-6) { return detail::rmsnorm_impl<T, B>(x, nullptr, eps); }

}  // namespace megacpp
