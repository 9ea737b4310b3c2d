// megacpp/nn/mamba/conv1d.hpp: Mamba-2's causal depthwise conv1d that stays inside documents.
//
//   y[b, t, c] = bias[c] + sum_{j < K} w[c, j] x[b, t - (K - 1) + j, c]
// where a tap reaching a token of another document (or before the row) reads zero (docs/recipe.md "Document masking";
// Dao-AILab/causal-conv1d's `seq_idx` rule; a run of padding counts as a document). One graph node with a hand-written backward; the
// kernel contract is megacpp/core/kernels/causal_conv1d.hpp. conv_window_step is its decode step
// (Mamba-2's and M2RNN's), through the same contract.
#pragma once

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/ops/shape.hpp"
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

/// One decode step of the convolution: x (batch, channels), this token's inputs; `window` (batch,
/// width - 1, channels), each row's last width - 1 inputs, oldest first, moved on by one token in
/// place; `window_docs`, a layout of (batch, width) with one document per row. Returns the conv's
/// output for the token (batch, channels), before any activation: causal_conv1d over [window, x]
/// as one document, its last token, so the same kernel and taps in the same order as the forward.
/// A zeroed window (a row's new document) adds w * 0 where the forward skips the tap. No gradients.
template <class T, Backend B>
Var<T, B> conv_window_step(Tensor<T, B>& window, const DocumentLayout<B>& window_docs, const Var<T, B>& x,
                           const Var<T, B>& weight, const Var<T, B>& bias) {
  NoGrad no_grad;
  check(x.rank() == 2 && weight.rank() == 2, "conv_window_step", "x must be (batch, channels) and weight (channels, width), got ",
        x.shape(), " and ", weight.shape());
  const index_t batch = x.shape()[0], channels = x.shape()[1], width = weight.shape()[1];
  check(window.shape() == Shape{batch, width - 1, channels}, "conv_window_step", "window ", window.shape(), " must be (",
        batch, ", ", width - 1, ", ", channels, ") for x ", x.shape(), " and weight ", weight.shape());
  const Var<T, B> token = reshape(x, Shape{batch, 1, channels});
  const Var<T, B> taps = width > 1 ? concat<T, B>({Var<T, B>(window), token}, 1) : token;  // (batch, width, channels)
  const Var<T, B> y = causal_conv1d(taps, weight, bias, window_docs);
  if (width > 1) window.assign(slice(taps, 1, 1, width).value());
  return reshape(slice(y, 1, width - 1, width), Shape{batch, channels});
}

}  // namespace megacpp
