// megacpp/nn/mamba/elementwise.hpp: softplus, heavy_tail and clamp_max as differentiable ops.
//
// All are plain elementwise maps through B::map with the functors of nn/mamba/functors.hpp, so
// they run on any backend. Each records one graph node (autograd's unary_op) whose backward adds
// g * dy/dx.
#pragma once

#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/core/functors.hpp"
#include "megacpp/nn/mamba/functors.hpp"

namespace megacpp {

/// softplus(x) = log(1 + exp(x)) elementwise (x above 20 passes through unchanged).
template <class T, Backend B>
Var<T, B> softplus(const Var<T, B>& x) {
  return detail::unary_op("softplus", x, fn::Softplus{}, fn::SoftplusGrad{});
}

/// phi(x) = 1 + x for x >= 0, 1 / (1 - x) for x < 0, elementwise (Mamba-3's heavy-tail A activation).
template <class T, Backend B>
Var<T, B> heavy_tail(const Var<T, B>& x) {
  return detail::unary_op("heavy_tail", x, fn::HeavyTail{}, fn::HeavyTailGrad{});
}

/// min(x, cap) elementwise; the gradient is zero where the cap is active.
template <class T, Backend B>
Var<T, B> clamp_max(const Var<T, B>& x, double cap) {
  return detail::unary_op("clamp_max", x, fn::ClampMax{cap}, fn::ClampMaxGrad{cap});
}

}  // namespace megacpp
