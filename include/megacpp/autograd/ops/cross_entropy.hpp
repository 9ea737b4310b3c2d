/// \file
/// megacpp/autograd/ops/cross_entropy.hpp: cross-entropy over logits with a per-token loss mask.
///
///     loss_r = mask_r * (logsumexp(z_r) - z_r[target_r])
///     cross_entropy = sum_r loss_r / sum_r mask_r     (mean over unmasked tokens)
///     d/dz_r = g_r * mask_r * (softmax(z_r) - onehot(target_r))
///
/// Every target must be a valid id in [0, vocab), masked or not. An all-masked batch has no mean:
/// it is an error, never a NaN.
#pragma once

#include <cstdint>

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/ops/embedding.hpp"
#include "megacpp/core/functors.hpp"
#include "megacpp/core/loss_mask.hpp"

namespace megacpp {

namespace detail {
// One target (and one loss-mask weight, when given) per row of the input named `what`, whose
// shape is `input`: `rows` of them, at least one. Shared with the fused head
// (nn/linear_cross_entropy.hpp), whose rows are the hidden states'.
inline void check_cross_entropy_rows(const char* op, const char* what, const Shape& input, index_t rows,
                                     const Shape& targets, const Shape* mask) {
  check(rows > 0, op, "empty batch: ", what, " shape ", input);
  check(targets.numel() == rows, op, "targets ", targets, " do not match ", what, " ", input);
  if (mask) check(mask->numel() == rows, op, "loss_mask ", *mask, " does not match targets ", targets);
}

template <class T, Backend B>
void check_cross_entropy_inputs(const char* op, const Shape& logits, const Tensor<std::int32_t, B>& targets,
                                const Tensor<T, B>* mask) {
  check(logits.rank() >= 1 && logits[-1] > 0, op, "logits must be (..., vocab), got shape ", logits);
  check_cross_entropy_rows(op, "logits", logits, logits.numel() / logits[-1], targets.shape(),
                           mask ? &mask->shape() : nullptr);
  check_ids(op, targets, logits[-1], "target");
}
}  // namespace detail

/// Per-token losses (...), masked tokens give 0. No reduction.
template <class T, Backend B>
Var<T, B> cross_entropy_per_token(const Var<T, B>& logits, const Tensor<std::int32_t, B>& targets,
                                  const Tensor<T, B>& loss_mask = Tensor<T, B>()) {
  const Tensor<T, B>* mask = loss_mask.defined() ? &loss_mask : nullptr;
  detail::check_cross_entropy_inputs("cross_entropy", logits.shape(), targets, mask);
  const index_t vocab = logits.shape()[-1], rows = logits.numel() / vocab;
  Tensor<T, B> losses(targets.shape()), lse(Shape{rows});
  B::template cross_entropy<T>(rows, vocab, logits.value().data(), targets.data(), mask ? mask->data() : nullptr,
                               losses.data(), lse.data());
  return make_result("cross_entropy", std::move(losses), [logits, targets, loss_mask, lse, rows, vocab](const Tensor<T, B>& g) mutable {
    // Per-row weights g_r * mask_r, passed to the kernel as its mask.
    Tensor<T, B> weights = g.clone();
    if (loss_mask.defined())
      B::template map<T>(1, rows, fn::Mul{}, weights.data(), In<T>{weights.data()}, In<T>{loss_mask.data()});
    B::template cross_entropy_backward<T>(rows, vocab, logits.value().data(), lse.data(), targets.data(), weights.data(),
                                          T(1), logits.grad_buffer().data());
  }, logits);
}

/// Mean loss over the tokens whose loss_mask is non-zero (all tokens when no mask is given).
template <class T, Backend B>
Var<T, B> cross_entropy(const Var<T, B>& logits, const Tensor<std::int32_t, B>& targets,
                        const Tensor<T, B>& loss_mask = Tensor<T, B>()) {
  const Tensor<T, B>* mask = loss_mask.defined() ? &loss_mask : nullptr;
  detail::check_cross_entropy_inputs("cross_entropy", logits.shape(), targets, mask);
  const index_t vocab = logits.shape()[-1], rows = logits.numel() / vocab;
  const T count = LossMask<T, B>::counted(loss_mask).count_for("cross_entropy", rows);
  Tensor<T, B> losses(Shape{rows}), lse(Shape{rows}), loss(Shape{});
  B::template cross_entropy<T>(rows, vocab, logits.value().data(), targets.data(), mask ? mask->data() : nullptr,
                               losses.data(), lse.data());
  B::template reduce<T>(1, rows, 1, fn::Identity{}, T(1) / count, T(0), loss.data(), In<T>{losses.data()});
  return make_result("cross_entropy", std::move(loss), [logits, targets, loss_mask, lse, rows, vocab, count](const Tensor<T, B>& g) mutable {
    const T scale = g.item() / count;
    B::template cross_entropy_backward<T>(rows, vocab, logits.value().data(), lse.data(), targets.data(),
                                          loss_mask.defined() ? loss_mask.data() : nullptr, scale,
                                          logits.grad_buffer().data());
  }, logits);
}

}  // namespace megacpp
