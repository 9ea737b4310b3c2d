/// \file
/// megacpp/core/loss_mask.hpp: per-token loss weights in backend memory with their sum known.
///
/// A mean loss over the learned tokens divides by sum_r mask_r. Summing a mask in backend memory
/// is one reduction, and on CUDA a read back of its result, which waits for the stream in the
/// middle of the forward (the loss's scale, 1 / count, is an argument of the row kernel). The
/// trainer has the mask on the host anyway, so the sum can travel with the mask, as the bound
/// travels with BoundedIds (core/bounded_ids.hpp), made in one of two ways:
///   - `from_host`: weights on the host, each checked finite and >= 0 and summed there (in
///     double), then copied to the backend: nothing read back;
///   - `counted`: weights already in backend memory, summed by one reduction (in T) and read back.
/// For 0/1 masks both sums are exact below 2^24 tokens, so the two give the same bits. An op
/// taking a LossMask compares the storage's write count (Tensor::write_count), so a mask written
/// after its sum was taken is refused, never divided by a stale count.
/// A default-constructed LossMask is no mask: every token weighs 1.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "megacpp/core/error.hpp"
#include "megacpp/core/functors.hpp"
#include "megacpp/core/tensor.hpp"

namespace megacpp {

/// Per-token loss weights (backend memory) with their sum (see the file comment).
template <class T, Backend B>
class LossMask {
 public:
  /// No mask: every token weighs 1.
  LossMask() = default;

  /// Host weights, each checked finite and >= 0 (throws naming `op`, the value and its position),
  /// summed in double, then copied to the backend: no pass over backend memory, nothing read back.
  static LossMask from_host(const char* op, const Shape& shape, std::vector<T> weights) {
    double sum = 0;
    for (std::size_t i = 0; i < weights.size(); ++i) {
      const double w = static_cast<double>(weights[i]);
      check(std::isfinite(w) && w >= 0, op, "loss_mask weight ", w, " at [", i, "] is not a finite value >= 0");
      sum += w;
    }
    LossMask out(Tensor<T, B>::from_host(shape, weights), sum);
    out.host_ = std::make_shared<const std::vector<T>>(std::move(weights));
    return out;
  }

  /// Weights in backend memory, summed by one reduction in T (on a GPU, a read back). An undefined
  /// tensor gives no mask.
  static LossMask counted(Tensor<T, B> weights) {
    if (!weights.defined()) return LossMask();
    Tensor<T, B> total(Shape{});
    const T* w = std::as_const(weights).data();  // a read: the write count stays
    B::template reduce<T>(1, weights.numel(), 1, fn::Identity{}, T(1), T(0), total.data(), In<T>{w});
    const double sum = static_cast<double>(total.item());
    return LossMask(std::move(weights), sum);
  }

  /// False for no mask.
  bool defined() const { return weights_.defined(); }
  /// The weights (undefined for no mask).
  const Tensor<T, B>& weights() const { return weights_; }
  /// Backend pointer to the first weight, read-only; null for no mask.
  const T* data() const { return weights_.defined() ? weights_.data() : nullptr; }
  /// sum_r mask_r as summed when the mask was made (0 for no mask: see count_for).
  double sum() const { return sum_; }
  /// The host weights this was uploaded from (`from_host`), for a consumer that needs them on the
  /// host (MTP's rolled mask) without a read back; null for `counted` masks and no mask. Valid
  /// while count_for passes (the backend copy not written since).
  const std::vector<T>* host() const { return host_.get(); }

  /// Throws naming `op` when the weights' storage was written since the sum was taken (then
  /// neither the sum nor host() describes them).
  void check_unwritten(const char* op) const {
    check(weights_.write_count() == writes_, op, "loss_mask was written after its sum was taken: count it again");
  }

  /// The divisor of a mean over `rows` tokens: `rows` with no mask, else the weights' sum, as T.
  /// Throws naming `op` when the mask does not hold `rows` weights, when its storage was written
  /// since the sum was taken, or when every token is masked (the mean loss is undefined: an
  /// error, never a NaN).
  T count_for(const char* op, index_t rows) const {
    if (!defined()) return static_cast<T>(rows);
    check(weights_.numel() == rows, op, "loss_mask ", weights_.shape(), " holds ", weights_.numel(),
          " weights for ", rows, " tokens");
    check_unwritten(op);
    const T count = static_cast<T>(sum_);
    check(std::isfinite(static_cast<double>(count)), op, "loss_mask sums to ", sum_, " over ", rows,
          " tokens: a weight is not finite or the sum overflows");
    check(count > T(0), op, "every token is masked (loss_mask sums to ", sum_, " over ", rows,
          " tokens): the mean loss is undefined");
    return count;
  }

 private:
  LossMask(Tensor<T, B> weights, double sum) : weights_(std::move(weights)), sum_(sum) {
    weights_.count_writes();
    writes_ = weights_.write_count();
  }

  Tensor<T, B> weights_;
  double sum_ = 0;
  std::uint64_t writes_ = 0;  // the storage's write count when the sum was taken
  std::shared_ptr<const std::vector<T>> host_;  // from_host's weights (shared by copies)
};

}  // namespace megacpp
