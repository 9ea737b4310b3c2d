/// \file
/// megacpp/core/kernels/cross_entropy.hpp: the SoftcapCrossEntropy kernel contract, the LM
/// head's loss rows fused in one pass over each row while it is in cache.
///
/// For each row r of raw logits z (rows, vocab):
///   zc = cap tanh(z / cap)                              (Gemma 2 final-logit softcap; cap 0: zc = z)
///   lse_r = logsumexp(zc_r),  loss_r = mask_r (lse_r - zc_r[t_r])
///   grad_r = scale mask_r (softmax(zc_r) - onehot(t_r)) (1 - (zc_r / cap)^2)   when grad is not null
/// zc overwrites the logits; grad may alias them (the fused linear + cross-entropy writes dz over
/// its chunk's logits, Liger-Kernel style, Hsu et al. 2024, arXiv 2410.10989). mask may be null
/// (every row counts). The naive reference is the separate softcap and cross-entropy ops.
#pragma once

#include <cstdint>

#include "megacpp/core/config.hpp"
#include "megacpp/core/kernels/kernel.hpp"

namespace megacpp::kernels {

/// Sizes and constants of one call.
struct SoftcapCrossEntropyParams {
  index_t rows = 0;    ///< rows of logits
  index_t vocab = 0;   ///< logits per row
  double cap = 0.0;    ///< soft cap (0: none)
  double scale = 1.0;  ///< factor of the gradient (1 / counted rows for a mean loss)
};

/// Data of one call (backend memory).
template <class T>
struct SoftcapCrossEntropyArgs {
  T* logits = nullptr;                  ///< (rows, vocab): raw z in, zc out
  const std::int32_t* targets = nullptr;  ///< (rows)
  const T* mask = nullptr;              ///< (rows) or null
  T* losses = nullptr;                  ///< (rows), written
  T* lse = nullptr;                     ///< (rows), written
  T* grad = nullptr;                    ///< (rows, vocab) or null; may alias logits
};

/// The fused head rows of backend B (contract: this file).
template <class B>
struct SoftcapCrossEntropy {
  static constexpr bool available = false;  ///< B has no fused head kernel
  /// zc, losses, lse and (when args.grad is not null) the gradient, row by row.
  template <class T>
  static void forward(const SoftcapCrossEntropyParams&, const SoftcapCrossEntropyArgs<T>&) {
    require<SoftcapCrossEntropy>();
  }
};

}  // namespace megacpp::kernels
