/// \file
/// megacpp/autograd/ops/relu2_linear.hpp: the MLP's second half under bf16 products,
/// y = bf16(relu(u)^2) bf16(W)^T, with the hidden activation saved in bf16 only.
///
/// Under MatmulPrecision::bf16 the unfused path (relu2, then matmul) keeps the hidden activation
/// h = relu(u)^2 three times until the backward: h in fp32 (the relu2 result's value, which its
/// node and the product's input both hold), and its bf16 copy, the product's operand. Neither
/// backward reads the fp32 h: relu2's gradient needs u, and the product's gradient needs the bf16
/// copy. This op forms h transiently, keeps only its bf16 rounding (half of h's fp32 bytes,
/// instead of one and a half times them) and computes exactly what the unfused path computes:
///   forward   h16 = bf16(relu(u)^2),       y  = h16 W16^T             (Backend::gemm_bf16)
///   backward  dh  = bf16(dy) W16,           du += relu2'(dh, u) = [u > 0] 2 u dh
///             dW += bf16(dy)^T h16
/// with the same kernels, operands and accumulation as relu2 and matmul (tested bitwise
/// against them). Mixed precision: Micikevicius et al. 2018, arXiv 1710.03740 (autograd/precision.hpp).
#pragma once

#include <algorithm>

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/ops/matmul.hpp"
#include "megacpp/core/error.hpp"

namespace megacpp {

/// relu(u)^2 W^T with bf16 product operands and fp32 sums (u (..., hidden), W (out, hidden) ->
/// (..., out)), the hidden activation kept for the backward in bf16 only. Equal, bitwise, to
/// matmul(relu2(u), W, false, true) under MatmulPrecision::bf16 (see the file comment).
template <Backend B>
Var<float, B> relu2_linear_bf16(const Var<float, B>& u, const Var<float, B>& w) {
  check(u.rank() >= 1 && w.rank() == 2 && u.shape()[-1] == w.shape()[1], "relu2_linear_bf16", "u ", u.shape(),
        " and W ", w.shape(), " do not give (..., hidden) x (out, hidden)^T");
  const index_t hidden = w.shape()[1], out = w.shape()[0], rows = u.numel() / std::max<index_t>(hidden, 1);
  Tensor<bf16, B> h16;
  {
    Tensor<float, B> h(u.shape());  // transient: only its bf16 rounding is kept
    B::template map<float>(1, u.numel(), fn::Relu2{}, h.data(), In<float>{u.value().data()});
    h16 = h.template to<bf16>();
  }
  const Tensor<bf16, B> w16 = w.value_as_bf16();
  Tensor<float, B> y(u.shape().prefix(u.rank() - 1).concat(Shape{out}));
  B::gemm_bf16(GemmArgs::dense(false, true, rows, out, hidden), 1.0f, h16.data(), w16.data(), 0.0f, y.data());
  return make_result("relu2_linear_bf16", std::move(y), [u, w, h16, w16, rows, hidden, out](const Tensor<float, B>& dy) {
    const Tensor<bf16, B> dy16 = dy.template to<bf16>();
    if (u.requires_grad()) {
      Tensor<float, B> dh(u.shape());  // dh = dy W, then relu2's gradient into u
      B::gemm_bf16(GemmArgs::dense(false, false, rows, hidden, out), 1.0f, dy16.data(), w16.data(), 0.0f, dh.data());
      // relu2's third operand (its result) is not read by Relu2Grad: u stands in for it
      put_gradient<float, B>(u.grad_sink(), 1, u.numel(), fn::Relu2Grad{}, In<float>{dh.data()},
                             In<float>{u.value().data()}, In<float>{u.value().data()});
    }
    if (w.requires_grad()) {
      const GradSink<float> dw = w.grad_sink();
      B::gemm_bf16(GemmArgs::dense(true, false, out, hidden, rows), 1.0f, dy16.data(), h16.data(), dw.beta, dw.data);
    }
  }, u, w);
}

}  // namespace megacpp
