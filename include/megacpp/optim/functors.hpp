// megacpp/optim/functors.hpp: the elementwise functors of the optimiser updates.
//
// Like megacpp/core/functors.hpp, each is a struct with a MEGACPP_HD call operator, so the same
// update runs in the CPU's OpenMP loops and in CUDA kernels (B::map / B::reduce). Hyper-parameters
// are held as double and converted to the element type at the point of use, as fn::Scale does;
// per-step scalars (bias corrections, learning rates) are computed on the host in double.
#pragma once

#include <cmath>

#include "megacpp/core/config.hpp"

namespace megacpp::fn {

/// Linear interpolation `a + w (b - a)`, evaluated as PyTorch's `torch.lerp` does (ATen
/// `lerp` kernel: `b - (b - a)(1 - w)` when w >= 0.5), so that w = 1 returns b exactly.
/// Used for EMA updates: `buf.lerp_(g, 1 - m)` is `buf = m buf + (1 - m) g`.
struct Lerp {
  double weight;  ///< w
  /// Returns lerp(a, b, w).
  template <class T> MEGACPP_HD T operator()(T a, T b) const {
    const T w = static_cast<T>(weight);
    return weight < 0.5 ? a + w * (b - a) : b - (b - a) * (T(1) - w);
  }
};

/// Adam's second moment: `v = beta2 v + (1 - beta2) g^2` (PyTorch `exp_avg_sq.mul_(beta2)
/// .addcmul_(g, g, value = 1 - beta2)`; Kingma & Ba 2015, Algorithm 1).
struct EmaSquare {
  double beta;  ///< beta2
  /// Returns the updated second moment from (v, g).
  template <class T> MEGACPP_HD T operator()(T v, T g) const {
    return v * static_cast<T>(beta) + static_cast<T>(1.0 - beta) * (g * g);
  }
};

/// AdamW parameter update with decoupled weight decay (Loshchilov & Hutter 2019, Algorithm 2;
/// the order of operations of PyTorch's single-tensor AdamW):
///   p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps),  bc_i = 1 - beta_i^t.
struct AdamWUpdate {
  double decay;      ///< 1 - lr * weight_decay
  double step_size;  ///< lr / bc1
  double sqrt_bc2;   ///< sqrt(bc2)
  double eps;        ///< eps, added after the bias-corrected square root
  /// Returns the updated parameter from (p, m, v).
  template <class T> MEGACPP_HD T operator()(T p, T m, T v) const {
    using std::sqrt;
    const T denom = sqrt(v) / static_cast<T>(sqrt_bc2) + static_cast<T>(eps);
    return p * static_cast<T>(decay) - static_cast<T>(step_size) * (m / denom);
  }
};

/// One AdamW step of one element in one pass (B::update_in_place): the three updates above in
/// their order, m from g, v from g, then p from m and v (PyTorch's fused AdamW kernel does the
/// same per element).
struct AdamWStep {
  Lerp first_moment;       ///< m = lerp(m, g, 1 - beta1)
  EmaSquare second_moment;  ///< v = beta2 v + (1 - beta2) g^2
  AdamWUpdate update;       ///< p from (p, m, v)
  /// Updates p, m and v in place from the gradient g.
  template <class T> MEGACPP_HD void operator()(T& p, T& m, T& v, T g) const {
    m = first_moment(m, g);
    v = second_moment(v, g);
    p = update(p, m, v);
  }
};

/// Newton-Schulz pre-normalisation `X = G / (s ||G||_F + eps)` with `||G||_F^2` read from a
/// broadcast one-element operand, so the norm never leaves the device.
struct DivideByFrobenius {
  double norm_scale;  ///< s (1 for NS5; 1.02 for Polar Express's safety factor)
  double eps;         ///< eps (1e-7 for NS5, as modded-nanogpt)
  /// Returns g / (s sqrt(sum_sq) + eps).
  template <class T> MEGACPP_HD T operator()(T g, T sum_sq) const {
    using std::sqrt;
    return g / (static_cast<T>(norm_scale) * sqrt(sum_sq) + static_cast<T>(eps));
  }
};

/// The small-side polynomial of one quintic Newton-Schulz step, completed in place:
/// given P = c A A, returns `P + b A + a I`, so that X' = (a I + b A + c A^2) X is one GEMM.
struct QuinticTail {
  double a;  ///< coefficient of X
  double b;  ///< coefficient of A X
  /// Returns p + b * gram + a * identity from (p, gram, identity).
  template <class T> MEGACPP_HD T operator()(T p, T gram, T identity) const {
    return p + static_cast<T>(b) * gram + static_cast<T>(a) * identity;
  }
};

/// Muon's parameter update with decoupled weight decay: `p = p (1 - lr wd) - lr s O`, where s is
/// the shape scale and O the orthogonalised update.
struct MuonUpdate {
  double decay;      ///< 1 - lr * weight_decay
  double step_size;  ///< lr * shape scale
  /// Returns the updated parameter from (p, o).
  template <class T> MEGACPP_HD T operator()(T p, T o) const {
    return p * static_cast<T>(decay) - static_cast<T>(step_size) * o;
  }
};

/// Muon's update of one weight element in place (B::update_in_place's one-state form, which can
/// write the weight's bf16 rounding in the same pass): p = MuonUpdate(p, o).
struct MuonStep {
  MuonUpdate update;  ///< p from (p, o)
  /// Updates p in place from the orthogonalised update o.
  template <class T> MEGACPP_HD void operator()(T& p, T o) const { p = update(p, o); }
};

}  // namespace megacpp::fn
