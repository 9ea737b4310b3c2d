// megacpp/nn/mamba/functors.hpp: elementwise functors the Mamba mixers need beyond core/functors.hpp.
//
// Same convention as megacpp/core/functors.hpp: a forward functor y = f(x) and a gradient
// contribution functor (g, x, y) -> g * dy/dx, all MEGACPP_HD so the same structs run in the CPU
// backend's OpenMP loops and in CUDA kernels through B::map.
#pragma once

#include <cmath>

#include "megacpp/core/config.hpp"

namespace megacpp::fn {

/// softplus(x) = log(1 + exp(x)), and exactly x above the threshold 20 (PyTorch's F.softplus
/// default, which mamba_ssm's `dt = softplus(dd_dt + dt_bias)` uses): exp(20) would lose nothing
/// but risks overflow further up.
struct Softplus {
  /// log(1 + exp(x)), x itself above 20.
  template <class T> MEGACPP_HD T operator()(T x) const {
    using std::exp;
    using std::log1p;
    return x > T(20) ? x : log1p(exp(x));
  }
};
/// d softplus / dx = sigmoid(x) (exactly 1 where the forward is the identity).
struct SoftplusGrad {
  /// g * sigmoid(x) (g above 20).
  template <class T> MEGACPP_HD T operator()(T g, T x, T) const {
    using std::exp;
    return x > T(20) ? g : g / (T(1) + exp(-x));
  }
};

/// The heavy-tail activation of Mamba-3's data-dependent A (state-spaces/mamba mamba3.py
/// `heavy_tail_activation`, commit c69aaab): phi(x) = 1 + x for x >= 0, 1 / (1 - x) for x < 0.
/// Positive and continuously differentiable (phi(0) = 1, phi'(0) = 1 from both sides); its
/// negative tail decays like 1/|x| where softplus decays like exp(x), so -phi(x) keeps A away from 0.
struct HeavyTail {
  /// 1 + x for x >= 0, 1 / (1 - x) below.
  template <class T> MEGACPP_HD T operator()(T x) const { return x >= T(0) ? T(1) + x : T(1) / (T(1) - x); }
};
/// d phi / dx: 1 for x >= 0, 1 / (1 - x)^2 below.
struct HeavyTailGrad {
  /// g for x >= 0, g / (1 - x)^2 below.
  template <class T> MEGACPP_HD T operator()(T g, T x, T) const {
    if (x >= T(0)) return g;
    const T r = T(1) / (T(1) - x);
    return g * r * r;
  }
};

/// min(x, cap): the Mamba-3 clamp A <= -A_floor.
struct ClampMax {
  double cap;  ///< the largest value passed through
  /// min(x, cap).
  template <class T> MEGACPP_HD T operator()(T x) const { return x < static_cast<T>(cap) ? x : static_cast<T>(cap); }
};
/// Gradient of min(x, cap): passes where x < cap, zero where clamped.
struct ClampMaxGrad {
  double cap;  ///< the forward's cap
  /// g where x < cap, else 0.
  template <class T> MEGACPP_HD T operator()(T g, T x, T) const { return x < static_cast<T>(cap) ? g : T(0); }
};

}  // namespace megacpp::fn
