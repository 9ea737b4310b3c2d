/// \file
/// megacpp/autograd/ops/relu2_linear.hpp: the MLP's second half under bf16 products,
/// y = bf16(relu(u)^2) bf16(W)^T, with the hidden activation saved in bf16 only; the whole MLP as
/// one op (relu2_mlp_bf16, which also rounds relu2's gradient where it computes it); and the MoE
/// experts' second half and whole MLP, the same with the grouped product (relu2_grouped_matmul_bf16,
/// relu2_grouped_mlp_bf16).
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

// h16 = bf16(relu(u)^2) in one pass: h is never stored, only its bf16 rounding (map_to_bf16, the
// bits of relu2's map then convert).
template <Backend B>
Tensor<bf16, B> relu2_as_bf16(const Tensor<float, B>& u) {
  Tensor<bf16, B> h16(u.shape());
  B::template map_to_bf16<float>(u.numel(), fn::Relu2{}, h16.data(), u.data());
  return h16;
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
  const Tensor<bf16, B> h16 = detail::relu2_as_bf16(u.value());
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

/// The whole MLP under bf16 products, relu(x W_fc^T)^2 W_proj^T (x (..., d), W_fc (hidden, d),
/// W_proj (out, hidden) -> (..., out)), as one node:
///   forward   u = x16 W_fc16^T (fp32, kept),  h16 = bf16(relu(u)^2),  y = h16 W_proj16^T
///   backward  dh = bf16(dy) W_proj16,  du16 = bf16([u > 0] 2 u dh)  (one pass, no fp32 du),
///             dx += du16 W_fc16,  dW_fc += du16^T x16,  dW_proj += bf16(dy)^T h16
/// Apart, relu2's gradient wrote du in fp32 and fc's product read it back to round it (a write
/// and a read of the (tokens, hidden) gradient, the model's largest, and a launch); here it is
/// rounded where it is computed. Equal, bitwise, to relu2_linear_bf16(matmul(x, W_fc, false, true), W_proj) under
/// MatmulPrecision::bf16: the same gemm_bf16 calls on the same operands, the same roundings.
/// The node keeps h16 and bf16(dy) through fc's gradient products (apart, the projection's node
/// dropped them first); the backward's peak is still lower, by du's fp32 bytes less its rounding's.
template <Backend B>
Var<float, B> relu2_mlp_bf16(const Var<float, B>& x, const Var<float, B>& w_fc, const Var<float, B>& w_proj) {
  check(x.rank() >= 2 && w_fc.rank() == 2 && w_proj.rank() == 2 && x.shape()[-1] == w_fc.shape()[1] &&
            w_proj.shape()[1] == w_fc.shape()[0],
        "relu2_mlp_bf16", "x ", x.shape(), ", W_fc ", w_fc.shape(), " and W_proj ", w_proj.shape(),
        " do not give (..., d) x (hidden, d)^T x (out, hidden)^T (x needs at least 2 dims, as matmul's operands)");
  const index_t d = w_fc.shape()[1], hidden = w_fc.shape()[0], out = w_proj.shape()[0];
  const index_t rows = x.numel() / std::max<index_t>(d, 1);
  const Shape lead = x.shape().prefix(x.rank() - 1);
  const Tensor<bf16, B> x16 = x.value_as_bf16(), fc16 = w_fc.value_as_bf16(), proj16 = w_proj.value_as_bf16();
  Tensor<float, B> u(lead.concat(Shape{hidden}));
  B::gemm_bf16(GemmArgs::dense(false, true, rows, hidden, d), 1.0f, x16.data(), fc16.data(), 0.0f, u.data());
  const Tensor<bf16, B> h16 = detail::relu2_as_bf16(u);
  Tensor<float, B> y(lead.concat(Shape{out}));
  B::gemm_bf16(GemmArgs::dense(false, true, rows, out, hidden), 1.0f, h16.data(), proj16.data(), 0.0f, y.data());
  return make_result("relu2_mlp_bf16", std::move(y), [x, w_fc, w_proj, x16, fc16, proj16, u, h16, rows, d, hidden,
                                                      out](const Tensor<float, B>& dy) {
    const Tensor<bf16, B> dy16 = dy.template to<bf16>();
    if (x.requires_grad() || w_fc.requires_grad()) {
      Tensor<bf16, B> du16(u.shape());
      {
        Tensor<float, B> dh(u.shape());  // dh = dy W_proj, then relu2's gradient rounded to bf16
        B::gemm_bf16(GemmArgs::dense(false, false, rows, hidden, out), 1.0f, dy16.data(), proj16.data(), 0.0f, dh.data());
        // Relu2Grad's third operand (relu2's result) is not read: u stands in for it
        B::template map_to_bf16<float>(u.numel(), fn::Relu2Grad{}, du16.data(), dh.data(), u.data(), u.data());
      }
      if (x.requires_grad()) {
        const GradSink<float> dx = x.grad_sink();
        B::gemm_bf16(GemmArgs::dense(false, false, rows, d, hidden), 1.0f, du16.data(), fc16.data(), dx.beta, dx.data);
      }
      if (w_fc.requires_grad()) {
        const GradSink<float> dw = w_fc.grad_sink();
        B::gemm_bf16(GemmArgs::dense(true, false, hidden, d, rows), 1.0f, du16.data(), x16.data(), dw.beta, dw.data);
      }
    }
    if (w_proj.requires_grad()) {
      const GradSink<float> dw = w_proj.grad_sink();
      B::gemm_bf16(GemmArgs::dense(true, false, out, hidden, rows), 1.0f, dy16.data(), h16.data(), dw.beta, dw.data);
    }
  }, x, w_fc, w_proj);
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
  const Tensor<bf16, B> h16 = detail::relu2_as_bf16(u.value());
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

/// The MoE experts' whole MLP under bf16 products, relu2_mlp_bf16's grouped form: per group g,
/// relu(x_g W_fc,g^T)^2 W_proj,g^T (x (M, d) sorted by group, w_fc (E, hidden, d), w_proj (E, out,
/// hidden), `offsets` as grouped_matmul's -> (M, out)), the hidden activation kept in bf16 only and
/// relu2's gradient rounded to bf16 where it is computed. Equal, bitwise, to
/// relu2_grouped_matmul_bf16(grouped_matmul(x, w_fc, offsets), w_proj, offsets) under
/// MatmulPrecision::bf16: the same GroupedGemm calls on the same operands, the same roundings.
template <Backend B>
Var<float, B> relu2_grouped_mlp_bf16(const Var<float, B>& x, const Var<float, B>& w_fc, const Var<float, B>& w_proj,
                                     std::vector<index_t> offsets) {
  const char* op = "relu2_grouped_mlp_bf16";
  detail::GroupedLayout l = detail::grouped_layout(op, x.shape(), w_fc.shape(), std::move(offsets));
  const kernels::GroupedGemmParams up_p = l.params;  // (M, d) -> (M, hidden)
  const std::shared_ptr<const std::vector<index_t>> layout = std::move(l.offsets);  // both params' offsets
  check(w_proj.rank() == 3 && w_proj.shape()[0] == up_p.groups && w_proj.shape()[2] == up_p.n, op, "W_proj ",
        w_proj.shape(), " must be (", up_p.groups, ", out, ", up_p.n, ") after W_fc ", w_fc.shape());
  const kernels::GroupedGemmParams down_p{up_p.groups, up_p.n, w_proj.shape()[1], layout->data()};  // (M, hidden) -> (M, out)
  down_p.validate(op);
  const index_t rows = x.shape()[0];
  const Tensor<bf16, B> x16 = x.value_as_bf16(), fc16 = w_fc.value_as_bf16(), proj16 = w_proj.value_as_bf16();
  Tensor<float, B> up(Shape{rows, up_p.n});
  kernels::GroupedGemm<B>::template forward<float, bf16>(up_p, {x16.data(), fc16.data(), up.data()});
  const Tensor<bf16, B> h16 = detail::relu2_as_bf16(up);
  Tensor<float, B> y(Shape{rows, down_p.n});
  kernels::GroupedGemm<B>::template forward<float, bf16>(down_p, {h16.data(), proj16.data(), y.data()});
  return make_result(op, std::move(y), [x, w_fc, w_proj, x16, fc16, proj16, up, h16, layout, up_p,
                                        down_p](const Tensor<float, B>& dy) {
    const Tensor<bf16, B> dy16 = dy.template to<bf16>();
    const bool up_gradient = x.requires_grad() || w_fc.requires_grad();
    Tensor<float, B> dh;  // dh = dy_g W_proj,g per group, summed from zero as grouped_matmul's gradient buffer is
    if (up_gradient) dh = Tensor<float, B>::zeros(up.shape());
    kernels::GroupedGemm<B>::template backward<float, bf16>(
        down_p, {h16.data(), proj16.data(), nullptr},
        {dy16.data(), up_gradient ? dh.data() : nullptr, w_proj.requires_grad() ? w_proj.grad_buffer().data() : nullptr});
    if (!up_gradient) return;
    Tensor<bf16, B> du16(up.shape());
    B::template map_to_bf16<float>(up.numel(), fn::Relu2Grad{}, du16.data(), dh.data(), up.data(), up.data());
    dh = Tensor<float, B>();
    kernels::GroupedGemm<B>::template backward<float, bf16>(
        up_p, {x16.data(), fc16.data(), nullptr},
        {du16.data(), x.requires_grad() ? x.grad_buffer().data() : nullptr,
         w_fc.requires_grad() ? w_fc.grad_buffer().data() : nullptr});
  }, x, w_fc, w_proj);
}

}  // namespace megacpp
