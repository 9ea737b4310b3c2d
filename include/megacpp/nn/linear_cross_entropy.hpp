// megacpp/nn/linear_cross_entropy.hpp: fused LM head + softcap + cross-entropy.
//
//   z = h W^T (N, V),  zc = cap * tanh(z / cap) (Gemma 2 final-logit softcap, docs/recipe.md: cap 30),
//   loss = sum_r mask_r (logsumexp(zc_r) - zc_r[t_r]) / sum_r mask_r
// computed over row chunks so the (N, V) logits never exist whole (docs/recipe.md "Precision":
// "never materialise [B*T, V] logits"). As in Liger-Kernel's fused linear cross-entropy
// (Hsu et al. 2024, arXiv 2410.10989), the gradients are computed during the forward, while each
// chunk's logits are at hand (3 GEMMs per chunk instead of 4 with a recompute):
//   dzc = mask_r (softmax(zc_r) - onehot(t_r)) / count,  dz = dzc (1 - (zc / cap)^2),
//   dh_chunk = dz W,  dW += dz^T h_chunk,
// and the backward scales them by the upstream gradient. The softcap, the loss and dz of a chunk
// come from one row kernel (the SoftcapCrossEntropy contract, megacpp/core/kernels/cross_entropy.hpp)
// that overwrites the chunk's logits with dz while each row is in cache. Peak extra memory: one
// (chunk, V) buffer plus dh (N, d) and dW (V, d).
// Under MatmulPrecision::bf16 (autograd/precision.hpp; float only) the three products take bf16
// copies of h, W (rounded once per call) and of each chunk's dz, with fp32 sums; the logits, the
// softcap, the loss and the gradients stay fp32. Extra memory then: h, W and one chunk in bf16.
// Targets come as BoundedIds (core/bounded_ids.hpp: checked on the host before their upload, so
// no pass over them here and, on a GPU, no read back in the middle of the step) or as a Tensor,
// checked by one pass; the mask likewise as a LossMask with its sum (core/loss_mask.hpp) or as a
// Tensor, summed by one pass. On a device backend the backward reads its upstream gradient where
// it lies (a one-element tensor in device memory), not through the host.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/ops/cross_entropy.hpp"
#include "megacpp/autograd/precision.hpp"
#include "megacpp/core/bounded_ids.hpp"
#include "megacpp/core/functors.hpp"
#include "megacpp/core/kernels/cross_entropy.hpp"
#include "megacpp/core/loss_mask.hpp"

namespace megacpp {

/// Options of the fused head.
struct LinearCrossEntropyOptions {
  double softcap = 30.0;    ///< final-logit soft cap; 0 disables it
  index_t chunk_rows = 1024;  ///< rows of logits materialised at a time
};

namespace detail {

// Every input of the fused head but the targets' values (their range is the caller's: BoundedIds)
// and the mask's weights (LossMask).
template <class T, Backend B>
void check_linear_cross_entropy_shapes(const char* op, const Var<T, B>& h, const Var<T, B>& weight,
                                       const Shape& targets, const Tensor<T, B>& loss_mask,
                                       const LinearCrossEntropyOptions& opt) {
  check(weight.rank() == 2 && weight.shape()[0] > 0, op, "weight must be (vocab, d) with vocab > 0, got shape ",
        weight.shape());
  const index_t d = weight.shape()[1];
  check(h.rank() >= 1 && h.shape()[-1] == d, op, "hidden ", h.shape(), " does not match weight ", weight.shape());
  check(opt.chunk_rows > 0, op, "chunk_rows must be positive, got ", opt.chunk_rows);
  check(opt.softcap >= 0, op, "softcap must be >= 0 (0 disables), got ", opt.softcap);
  check(d > 0, op, "empty batch: hidden shape ", h.shape());
  check_cross_entropy_rows(op, "hidden", h.shape(), h.numel() / d, targets,
                           loss_mask.defined() ? &loss_mask.shape() : nullptr);
}

// s x with s read from backend memory when the kernel runs: the backward's upstream gradient, a
// one-element tensor, scales the gradients without a read back (s x, as fn::Scale{s} gives).
template <class T>
struct ScaleByElement {
  const T* s;  ///< the factor's one element (backend memory)
  MEGACPP_HD T operator()(T x) const { return *s * x; }
};

}  // namespace detail

/// Mean cross-entropy of softcap(h W^T) against targets over tokens weighted by loss_mask.
/// h (..., d), weight (V, d) (e.g. the tied embedding), targets (...) bounded by at most V,
/// loss_mask (...) with its sum (core/loss_mask.hpp), or no mask.
template <class T, Backend B>
Var<T, B> linear_cross_entropy(const Var<T, B>& h, const Var<T, B>& weight, const BoundedIds<B>& targets,
                               const LossMask<T, B>& loss_mask, LinearCrossEntropyOptions opt = {}) {
  const char* op = "linear_cross_entropy";
  detail::check_linear_cross_entropy_shapes(op, h, weight, targets.ids().shape(), loss_mask.weights(), opt);
  const index_t vocab = weight.shape()[0], d = weight.shape()[1];
  targets.check_for(op, vocab, "target");
  const index_t rows = h.numel() / d;
  const T count = loss_mask.count_for(op, rows);  // no pass over the mask, nothing read back
  const T* mask = loss_mask.data();

  const bool want_grad = grad_enabled() && (h.requires_grad() || weight.requires_grad());
  const index_t chunk = std::min(opt.chunk_rows, rows);
  // One (chunk, V) buffer: z, then zc, then dz in place (the fused row kernel's contract)
  Tensor<T, B> logits(Shape{chunk, vocab});
  Tensor<T, B> losses(Shape{rows}), lse(Shape{rows});
  Tensor<T, B> dh = want_grad && h.requires_grad() ? Tensor<T, B>(Shape{rows, d}) : Tensor<T, B>();
  Tensor<T, B> dw = want_grad && weight.requires_grad() ? Tensor<T, B>(Shape{vocab, d}) : Tensor<T, B>();  // first chunk writes it
  const T* H = h.value().data();
  const T* W = weight.value().data();
  // Mixed precision: bf16 copies of the operands, each product still summed in fp32
  const bool use_bf16 = std::is_same_v<T, float> && matmul_precision() == MatmulPrecision::bf16;
  Tensor<bf16, B> h16, w16, dz16;
  if (use_bf16) {
    h16 = h.value_as_bf16();
    w16 = weight.value_as_bf16();
    if (want_grad) dz16 = Tensor<bf16, B>(Shape{chunk, vocab});
  }
  const auto at16 = [](const bf16* p, index_t offset) { return p ? p + offset : p; };  // null stays null
  // C = op(X) op(Y) (+ C when beta is 1), X and Y given in both precisions
  const auto product = [use_bf16](const GemmArgs& g, const T* x, const bf16* x16, const T* y, const bf16* y16, T beta,
                                  T* c) {
    if constexpr (std::is_same_v<T, float>) {
      if (use_bf16) return B::gemm_bf16(g, 1.0f, x16, y16, beta, c);
    } else {
      (void)use_bf16;  // false for double: only float products have a bf16 path (clang: a used capture)
    }
    B::template gemm<T>(g, T(1), x, y, beta, c);
  };

  for (index_t r0 = 0; r0 < rows; r0 += chunk) {
    const index_t n = std::min(chunk, rows - r0);
    // z = h_chunk W^T: (n, d) x (d, V)
    product(GemmArgs::dense(false, true, n, vocab, d), H + r0 * d, at16(h16.data(), r0 * d), W, w16.data(), T(0),
            logits.data());
    // zc = softcap(z), the rows' losses and, for the backward, dz = dzc (1 - (zc / cap)^2) in place
    // (the scale is formed in T, as the kernel uses it: exact through double)
    kernels::SoftcapCrossEntropy<B>::template forward<T>(
        {n, vocab, opt.softcap, static_cast<double>(T(1) / count)},
        {logits.data(), targets.data() + r0, mask ? mask + r0 : nullptr, losses.data() + r0, lse.data() + r0,
         want_grad ? logits.data() : nullptr});
    if (!want_grad) continue;
    if (use_bf16) B::template convert<T, bf16>(static_cast<std::size_t>(n * vocab), logits.data(), dz16.data());
    if (dh.defined()) {  // dh_chunk = dz W: (n, V) x (V, d)
      product(GemmArgs::dense(false, false, n, d, vocab), logits.data(), dz16.data(), W, w16.data(), T(0),
              dh.data() + r0 * d);
    }
    if (dw.defined()) {  // dW += dz^T h_chunk: (V, n) x (n, d)
      product(GemmArgs::dense(true, false, vocab, d, n), logits.data(), dz16.data(), H + r0 * d, at16(h16.data(), r0 * d),
              r0 == 0 ? T(0) : T(1), dw.data());
    }
  }
  Tensor<T, B> loss(Shape{});
  B::template reduce<T>(1, rows, 1, fn::Identity{}, T(1) / count, T(0), loss.data(), In<T>{losses.data()});
  if (!want_grad) return Var<T, B>(std::move(loss));
  return make_result(op, std::move(loss), [h, weight, dh, dw](const Tensor<T, B>& g) {
    const auto scale_gradients = [&](auto scale) {
      if (h.requires_grad()) put_gradient<T, B>(h.grad_sink(), 1, h.numel(), scale, In<T>{dh.data()});
      if (weight.requires_grad()) put_gradient<T, B>(weight.grad_sink(), 1, weight.numel(), scale, In<T>{dw.data()});
    };
    // The same product either way: on the host the factor is read once (a read the loop's stores
    // could alias would be repeated per element); elsewhere it is read where it lies.
    if constexpr (B::host_accessible) scale_gradients(fn::Scale{static_cast<double>(g.item())});
    else scale_gradients(detail::ScaleByElement<T>{g.data()});
  }, h, weight);
}

/// The same with loss_mask (...) from backend memory, or undefined: summed by one reduction (on a
/// GPU, a read back in the middle of the forward; LossMask::from_host avoids it).
template <class T, Backend B>
Var<T, B> linear_cross_entropy(const Var<T, B>& h, const Var<T, B>& weight, const BoundedIds<B>& targets,
                               const Tensor<T, B>& loss_mask = Tensor<T, B>(), LinearCrossEntropyOptions opt = {}) {
  detail::check_linear_cross_entropy_shapes("linear_cross_entropy", h, weight, targets.ids().shape(), loss_mask, opt);
  return linear_cross_entropy(h, weight, targets, LossMask<T, B>::counted(loss_mask), opt);
}

/// The same with targets (...) from backend memory: checked against [0, V) by one pass over them
/// (on a GPU, a read back of their range), then as above.
template <class T, Backend B>
Var<T, B> linear_cross_entropy(const Var<T, B>& h, const Var<T, B>& weight, const Tensor<std::int32_t, B>& targets,
                               const Tensor<T, B>& loss_mask = Tensor<T, B>(), LinearCrossEntropyOptions opt = {}) {
  const char* op = "linear_cross_entropy";
  detail::check_linear_cross_entropy_shapes(op, h, weight, targets.shape(), loss_mask, opt);
  return linear_cross_entropy(h, weight, BoundedIds<B>::checked(op, targets, weight.shape()[0], "target"), loss_mask, opt);
}

}  // namespace megacpp
