/// \file
/// megacpp/autograd/ops/rope.hpp: rotary position embedding, rotate-half layout.
///
/// RoFormer (Su et al. 2021), in the GPT-NeoX/Llama "rotate half" layout: pairs (i, i + D/2) of
/// each head rotate by angle pos * inv_freq_i, inv_freq_i = theta^(-2i/D). Positions are passed in
/// (per-document positions restart at each document under packing). The frequency table is a
/// tensor so that YaRN or half-truncated RoPE are just other tables. The backward is the inverse
/// rotation (rotation matrices are orthogonal).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "megacpp/autograd/function.hpp"

namespace megacpp {

/// inv_freq_i = theta^(-2i / head_dim), i in [0, head_dim / 2).
template <class T, Backend B>
Tensor<T, B> rope_inv_freq(index_t head_dim, double theta) {
  check(head_dim > 0 && head_dim % 2 == 0, "rope", "head_dim must be even and positive, got ", head_dim);
  check(theta > 0, "rope", "theta must be positive, got ", theta);
  std::vector<T> f(static_cast<std::size_t>(head_dim / 2));
  for (index_t i = 0; i < head_dim / 2; ++i)
    f[i] = static_cast<T>(std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim)));
  return Tensor<T, B>::from_host(Shape{head_dim / 2}, f);
}

/// x (..., heads, head_dim), positions (...) with one position per token, inv_freq (head_dim / 2).
template <class T, Backend B>
Var<T, B> rope(const Var<T, B>& x, const Tensor<std::int32_t, B>& positions, const Tensor<T, B>& inv_freq) {
  check(x.rank() >= 2, "rope", "x must be (..., heads, head_dim), got shape ", x.shape());
  const index_t dim = x.shape()[-1], heads = x.shape()[-2], tokens = x.shape().prod(0, x.rank() - 2);
  check(dim % 2 == 0, "rope", "head_dim must be even, got ", dim, " (shape ", x.shape(), ")");
  check(positions.numel() == tokens, "rope", "positions ", positions.shape(), " do not give one position per token of ",
        x.shape());
  check(inv_freq.shape() == Shape{dim / 2}, "rope", "inv_freq shape ", inv_freq.shape(), " must be (", dim / 2, ")");
  Tensor<T, B> y(x.shape());
  B::template rope<T>(tokens, heads, dim, positions.data(), inv_freq.data(), +1, x.value().data(), T(0), y.data());
  return make_result("rope", std::move(y), [x, positions, inv_freq, tokens, heads, dim](const Tensor<T, B>& g) mutable {
    const GradSink<T> gx = x.grad_sink();
    B::template rope<T>(tokens, heads, dim, positions.data(), inv_freq.data(), -1, g.data(), gx.beta, gx.data);
  }, x);
}
/// Same, with the standard table rope_inv_freq(head_dim, theta).
template <class T, Backend B>
Var<T, B> rope(const Var<T, B>& x, const Tensor<std::int32_t, B>& positions, double theta = 10000.0) {
  check(x.rank() >= 2, "rope", "x must be (..., heads, head_dim), got shape ", x.shape());
  return rope(x, positions, rope_inv_freq<T, B>(x.shape()[-1], theta));
}

}  // namespace megacpp
