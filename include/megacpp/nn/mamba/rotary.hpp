// megacpp/nn/mamba/rotary.hpp: Mamba-3's data-dependent rotary angles as differentiable ops.
//
// Mamba-3 (arXiv 2603.15569, "complex-valued state through rotary angles on B/C"; reference
// mamba_ssm/modules/mamba3.py and `mamba3_siso_step_ref`):
//   theta_t = theta_{t-1} + pi * tanh(angle_t) * dt_t    per head (dt is per head), wrapped to
//             [0, 2 pi); theta = 0 before each document's first token (docs/recipe.md "Document masking")
//   k = rotate(RMSNorm(B) + B_bias_h, theta),  q = rotate(RMSNorm(C) + C_bias_h, theta)
// where rotate turns pairs (2i, 2i+1), i < n_angles, by theta_i and leaves the rest. Rotating q_t
// and k_s by theta_t and theta_s makes q_t . k_s depend on theta_t - theta_s: a complex diagonal
// state written with real numbers.
//
// Two graph nodes: rotary_angles produces (cos, sin) of theta once per layer call (the trig is
// the costly part, shared by q and k); rotary_qk adds the per-head bias and rotates.
#pragma once

#include "megacpp/autograd/function.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/ssm_rotary.hpp"

namespace megacpp {

/// cossin (batch, seq, heads, S, 2) = (cos, sin) of theta from the raw angle projections
/// `angle` (batch, seq, S), shared by all heads, and `dt` (batch, seq, heads).
template <class T, Backend B>
Var<T, B> rotary_angles(const Var<T, B>& angle, const Var<T, B>& dt, const DocumentLayout<B>& docs) {
  check(angle.rank() == 3 && dt.rank() == 3, "rotary_angles", "angle must be (batch, seq, S) and dt (batch, seq, heads), got ",
        angle.shape(), " and ", dt.shape());
  const index_t batch = angle.shape()[0], seq = angle.shape()[1], S = angle.shape()[2], heads = dt.shape()[2];
  check(dt.shape()[0] == batch && dt.shape()[1] == seq, "rotary_angles", "dt ", dt.shape(), " and angle ", angle.shape(),
        " disagree on (batch, seq)");
  check(docs.batch == batch && docs.seq == seq, "rotary_angles", "document layout (", docs.batch, ", ", docs.seq,
        ") does not match (batch, seq) = (", batch, ", ", seq, ")");
  Tensor<T, B> cossin(Shape{batch, seq, heads, S, 2});
  const kernels::RotaryAnglesParams p{batch, seq, heads, S};
  kernels::SsmRotary<B>::template angles_forward<T>(p, docs, {angle.value().data(), dt.value().data(), cossin.data()});
  return make_result("rotary_angles", cossin, [angle, dt, cossin, docs, p](const Tensor<T, B>& g) mutable {
    kernels::SsmRotary<B>::template angles_backward<T>(
        p, docs, {angle.value().data(), dt.value().data(), nullptr},
        {cossin.data(), g.data(), angle.requires_grad() ? angle.grad_buffer().data() : nullptr,
         dt.requires_grad() ? dt.grad_buffer().data() : nullptr});
  }, angle, dt);
}

/// y (batch, seq, heads, R, N) = rotate(x + bias_h) with x (batch, seq, R, N) shared by every head,
/// bias (heads, R, N) and cossin (batch, seq, heads, S, 2) from rotary_angles; 2 S <= N.
template <class T, Backend B>
Var<T, B> rotary_qk(const Var<T, B>& x, const Var<T, B>& bias, const Var<T, B>& cossin) {
  check(x.rank() == 4 && bias.rank() == 3 && cossin.rank() == 5, "rotary_qk",
        "x must be (batch, seq, R, N), bias (heads, R, N), cossin (batch, seq, heads, S, 2); got ", x.shape(), ", ",
        bias.shape(), ", ", cossin.shape());
  const index_t batch = x.shape()[0], seq = x.shape()[1], R = x.shape()[2], N = x.shape()[3];
  const index_t heads = bias.shape()[0], S = cossin.shape()[3];
  check(bias.shape()[1] == R && bias.shape()[2] == N, "rotary_qk", "bias ", bias.shape(), " must be (heads, ", R, ", ", N, ")");
  check(cossin.shape() == Shape{batch, seq, heads, S, 2}, "rotary_qk", "cossin ", cossin.shape(), " must be (", batch,
        ", ", seq, ", ", heads, ", S, 2)");
  check(2 * S <= N, "rotary_qk", "2 * angles (", 2 * S, ") exceeds d_state ", N);
  Tensor<T, B> y(Shape{batch, seq, heads, R, N});
  const kernels::RotaryQKParams p{batch, seq, heads, R, N, S};
  kernels::SsmRotary<B>::template qk_forward<T>(p, {x.value().data(), bias.value().data(), cossin.value().data(), y.data()});
  return make_result("rotary_qk", std::move(y), [x, bias, cossin, p](const Tensor<T, B>& g) mutable {
    kernels::SsmRotary<B>::template qk_backward<T>(
        p, {x.value().data(), bias.value().data(), cossin.value().data(), nullptr},
        {g.data(), x.requires_grad() ? x.grad_buffer().data() : nullptr,
         bias.requires_grad() ? bias.grad_buffer().data() : nullptr,
         cossin.requires_grad() ? cossin.grad_buffer().data() : nullptr});
  }, x, bias, cossin);
}

}  // namespace megacpp
