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

namespace megacpp {

namespace detail {
template <class T, Backend B>
void check_cross_entropy_inputs(const char* op, const Shape& logits, const Tensor<std::int32_t, B>& targets,
                                const Tensor<T, B>* mask) {
  check(logits.rank() >= 1 && logits[-1] > 0, op, "logits must be (..., vocab), got shape ", logits);
  const index_t rows = logits.numel() / logits[-1];
  check(targets.numel() == rows, op, "targets ", targets.shape(), " do not match logits ", logits);
  check(rows > 0, op, "empty batch: logits shape ", logits);
  if (mask) check(mask->numel() == rows, op, "loss_mask ", mask->shape(), " does not match targets ", targets.shape());
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
  T count = static_cast<T>(rows);
  if (mask) {
    Tensor<T, B> total(Shape{});
    B::template reduce<T>(1, rows, 1, fn::Identity{}, T(1), T(0), total.data(), In<T>{mask->data()});
    count = total.item();
    check(count > T(0), "cross_entropy", "every token is masked (loss_mask sums to ", count, " over ", rows,
          " tokens): the mean loss is undefined");
  }
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
