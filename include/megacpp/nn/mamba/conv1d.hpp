// megacpp/nn/mamba/conv1d.hpp: Mamba-2's causal depthwise conv1d that stays inside documents.
//
//   y[b, t, c] = bias[c] + sum_{j < K} w[c, j] x[b, t - (K - 1) + j, c]
// where a tap reaching a token of another document (or before the row) reads zero (docs/recipe.md "Document masking";
// Dao-AILab/causal-conv1d's `seq_idx` rule). One graph node with a hand-written backward; the
// kernel contract is megacpp/core/kernels/causal_conv1d.hpp.
#pragma once

#include "megacpp/autograd/function.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/causal_conv1d.hpp"

namespace megacpp {

/// x (batch, seq, channels), weight (channels, width), bias (channels) or undefined -> (batch, seq, channels).
template <class T, Backend B>
Var<T, B> causal_conv1d(const Var<T, B>& x, const Var<T, B>& weight, const Var<T, B>& bias, const DocumentLayout<B>& docs) {
  check(x.rank() == 3 && weight.rank() == 2, "causal_conv1d", "x must be (batch, seq, channels) and weight (channels, width), got ",
        x.shape(), " and ", weight.shape());
  const index_t batch = x.shape()[0], seq = x.shape()[1], channels = x.shape()[2], width = weight.shape()[1];
  check(weight.shape()[0] == channels, "causal_conv1d", "weight ", weight.shape(), " needs ", channels, " channels for x ", x.shape());
  check(width >= 1 && width <= kMaxConv1dWidth, "causal_conv1d", "width must be in [1, ", kMaxConv1dWidth, "], got ", width);
  if (bias.defined()) check(bias.shape() == Shape{channels}, "causal_conv1d", "bias ", bias.shape(), " must be (", channels, ")");
  check(docs.batch == batch && docs.seq == seq, "causal_conv1d", "document layout (", docs.batch, ", ", docs.seq,
        ") does not match (batch, seq) = (", batch, ", ", seq, ")");
  Tensor<T, B> y(x.shape());
  const kernels::Conv1dParams p{batch, seq, channels, width};
  kernels::CausalConv1d<B>::template forward<T>(
      p, docs, {x.value().data(), weight.value().data(), bias.defined() ? bias.value().data() : nullptr, y.data()});
  auto backward = [x, weight, bias, docs, p](const Tensor<T, B>& g) mutable {
    kernels::CausalConv1d<B>::template backward<T>(
        p, docs, {x.value().data(), weight.value().data(), nullptr, nullptr},
        {g.data(), x.requires_grad() ? x.grad_buffer().data() : nullptr,
         weight.requires_grad() ? weight.grad_buffer().data() : nullptr,
         bias.defined() && bias.requires_grad() ? bias.grad_buffer().data() : nullptr});
  };
  if (bias.defined()) return make_result("causal_conv1d", std::move(y), std::move(backward), x, weight, bias);
  return make_result("causal_conv1d", std::move(y), std::move(backward), x, weight);
}

}  // namespace megacpp
