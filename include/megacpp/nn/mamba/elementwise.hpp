// megacpp/nn/mamba/elementwise.hpp: softplus and clamp_max as differentiable ops.
//
// Both are plain elementwise maps through B::map with the functors of nn/mamba/functors.hpp, so
// they run on any backend. Each records one graph node whose backward adds g * dy/dx.
#pragma once

#include "megacpp/autograd/function.hpp"
#include "megacpp/core/functors.hpp"
#include "megacpp/nn/mamba/functors.hpp"

namespace megacpp {

namespace detail {
// y = Forward(x); backward: dx += Grad(g, x, y).
template <class T, Backend B, class Forward, class Grad>
Var<T, B> mamba_unary(const char* name, const Var<T, B>& x, Forward forward, Grad grad) {
  Tensor<T, B> y(x.shape());
  B::template map<T>(1, x.numel(), forward, y.data(), In<T>{x.value().data()});
  return make_result(name, y, [x, y, grad](const Tensor<T, B>& g) mutable {
    T* gx = x.grad_buffer().data();
    B::template map<T>(1, x.numel(), fn::AccumulateOf<Grad>{grad}, gx, In<T>{gx}, In<T>{g.data()},
                       In<T>{x.value().data()}, In<T>{y.data()});
  }, x);
}
}  // namespace detail

/// softplus(x) = log(1 + exp(x)) elementwise (x above 20 passes through unchanged).
template <class T, Backend B>
Var<T, B> softplus(const Var<T, B>& x) {
  return detail::mamba_unary("softplus", x, fn::Softplus{}, fn::SoftplusGrad{});
}

/// min(x, cap) elementwise; the gradient is zero where the cap is active.
template <class T, Backend B>
Var<T, B> clamp_max(const Var<T, B>& x, double cap) {
  return detail::mamba_unary("clamp_max", x, fn::ClampMax{cap}, fn::ClampMaxGrad{cap});
}

}  // namespace megacpp
