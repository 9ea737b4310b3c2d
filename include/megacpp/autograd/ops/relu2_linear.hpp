/// \file
/// megacpp/autograd/ops/relu2_linear.hpp: the MLP's second half under bf16 products,
/// y = bf16(relu(u)^2) bf16(W)^T, with the hidden activation saved in bf16 only; and the MoE
/// experts' second half, the same with the grouped product (relu2_grouped_matmul_bf16).
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
#include <memory>
#include <utility>
#include <vector>

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/ops/grouped_matmul.hpp"
#include "megacpp/autograd/ops/matmul.hpp"
#include "megacpp/core/error.hpp"

namespace megacpp {

namespace detail {

// h16 = bf16(relu(u)^2): h is formed transiently, only its bf16 rounding is kept.
template <Backend B>
Tensor<bf16, B> relu2_as_bf16(const Var<float, B>& u) {
  Tensor<float, B> h(u.shape());
  B::template map<float>(1, u.numel(), fn::Relu2{}, h.data(), In<float>{u.value().data()});
  return h.template to<bf16>();
}

// du += relu2'(dh, u) = [u > 0] 2 u dh: relu2's gradient, whose third operand (its result) is
// not read by Relu2Grad, so u stands in for it.
template <Backend B>
void add_relu2_gradient(const Var<float, B>& u, const Tensor<float, B>& dh) {
  put_gradient<float, B>(u.grad_sink(), 1, u.numel(), fn::Relu2Grad{}, In<float>{dh.data()},
                         In<float>{u.value().data()}, In<float>{u.value().data()});
}

}  // namespace detail

/// relu(u)^2 W^T with bf16 product operands and fp32 sums (u (..., hidden), W (out, hidden) ->
/// (..., out)), the hidden activation kept for the backward in bf16 only. Equal, bitwise, to
/// matmul(relu2(u), W, false, true) under MatmulPrecision::bf16 (see the file comment).
template <Backend B>
Var<float, B> relu2_linear_bf16(const Var<float, B>& u, const Var<float, B>& w) {
  check(u.rank() >= 1 && w.rank() == 2 && u.shape()[-1] == w.shape()[1], "relu2_linear_bf16", "u ", u.shape(),
        " and W ", w.shape(), " do not give (..., hidden) x (out, hidden)^T");
  const index_t hidden = w.shape()[1], out = w.shape()[0], rows = u.numel() / std::max<index_t>(hidden, 1);
  const Tensor<bf16, B> h16 = detail::relu2_as_bf16(u);
  const Tensor<bf16, B> w16 = w.value_as_bf16();
  Tensor<float, B> y(u.shape().prefix(u.rank() - 1).concat(Shape{out}));
  B::gemm_bf16(GemmArgs::dense(false, true, rows, out, hidden), 1.0f, h16.data(), w16.data(), 0.0f, y.data());
  return make_result("relu2_linear_bf16", std::move(y), [u, w, h16, w16, rows, hidden, out](const Tensor<float, B>& dy) {
    const Tensor<bf16, B> dy16 = dy.template to<bf16>();
    if (u.requires_grad()) {
      Tensor<float, B> dh(u.shape());  // dh = dy W, then relu2's gradient into u
      B::gemm_bf16(GemmArgs::dense(false, false, rows, hidden, out), 1.0f, dy16.data(), w16.data(), 0.0f, dh.data());
      detail::add_relu2_gradient(u, dh);
    }
    if (w.requires_grad()) {
      const GradSink<float> dw = w.grad_sink();
      B::gemm_bf16(GemmArgs::dense(true, false, out, hidden, rows), 1.0f, dy16.data(), h16.data(), dw.beta, dw.data);
    }
  }, u, w);
}

/// relu(u)^2 through the experts' grouped product with bf16 operands and fp32 sums (u (M, hidden)
/// sorted by group, w (E, out, hidden), `offsets` as grouped_matmul's -> (M, out)), the hidden
/// activation kept for the backward in bf16 only. Equal, bitwise, to
/// grouped_matmul(relu2(u), w, offsets) under MatmulPrecision::bf16: the same GroupedGemm calls on
/// the same operands, dh summed from zero as the unfused path's gradient buffer is.
template <Backend B>
Var<float, B> relu2_grouped_matmul_bf16(const Var<float, B>& u, const Var<float, B>& w, std::vector<index_t> offsets) {
  detail::GroupedLayout l = detail::grouped_layout("relu2_grouped_matmul_bf16", u.shape(), w.shape(), std::move(offsets));
  const kernels::GroupedGemmParams p = l.params;
  const std::shared_ptr<const std::vector<index_t>> layout = std::move(l.offsets);  // p.offsets' storage
  const Tensor<bf16, B> h16 = detail::relu2_as_bf16(u);
  const Tensor<bf16, B> w16 = w.value_as_bf16();
  Tensor<float, B> y(Shape{u.shape()[0], p.n});
  kernels::GroupedGemm<B>::template forward<float, bf16>(p, {h16.data(), w16.data(), y.data()});
  return make_result("relu2_grouped_matmul_bf16", std::move(y), [u, w, h16, w16, layout, p](const Tensor<float, B>& dy) {
    const Tensor<bf16, B> dy16 = dy.template to<bf16>();
    Tensor<float, B> dh;  // dh = dy_g W_g per group, then relu2's gradient into u
    if (u.requires_grad()) dh = Tensor<float, B>::zeros(u.shape());
    kernels::GroupedGemm<B>::template backward<float, bf16>(
        p, {h16.data(), w16.data(), nullptr},
        {dy16.data(), u.requires_grad() ? dh.data() : nullptr, w.requires_grad() ? w.grad_buffer().data() : nullptr});
    if (u.requires_grad()) detail::add_relu2_gradient(u, dh);
  }, u, w);
}

}  // namespace megacpp
