/// \file
/// megacpp/core/functors.hpp: elementwise functors shared by every backend's map/reduce kernels.
///
/// Each is a struct with a MEGACPP_HD call operator, so the same functor runs in the CPU's OpenMP
/// loops and in CUDA kernels. Forward functors take inputs; gradient functors take
/// (upstream gradient, x, y) and return their contribution to dL/dx; AccumulateOf adds it into a
/// gradient buffer within the same map kernel.
#pragma once

#include <cmath>

#include "megacpp/core/config.hpp"

namespace megacpp::fn {

// --- binary arithmetic ------------------------------------------------------------------------
/// Addition.
struct Add { /** a + b */ template <class T> MEGACPP_HD T operator()(T a, T b) const { return a + b; } };
/// Subtraction.
struct Sub { /** a - b */ template <class T> MEGACPP_HD T operator()(T a, T b) const { return a - b; } };
/// Multiplication.
struct Mul { /** a * b */ template <class T> MEGACPP_HD T operator()(T a, T b) const { return a * b; } };
/// Division.
struct Div { /** a / b */ template <class T> MEGACPP_HD T operator()(T a, T b) const { return a / b; } };
/// Negation.
struct Neg { /** -a */ template <class T> MEGACPP_HD T operator()(T a) const { return -a; } };
/// Square.
struct Square { /** a * a */ template <class T> MEGACPP_HD T operator()(T a) const { return a * a; } };

/// acc + f(xs...): turns any contribution functor into an accumulating one, so a single map
/// kernel computes a gradient term and adds it into the gradient buffer.
template <class F>
struct AccumulateOf {
  F f;  ///< the contribution functor
  /// acc + f(xs...)
  template <class T, class... Xs> MEGACPP_HD T operator()(T acc, Xs... xs) const { return acc + f(xs...); }
};
/// Identity.
struct Identity { /** x */ template <class T> MEGACPP_HD T operator()(T x) const { return x; } };
/// d(a/b)/db contribution: -g * a / b^2
struct DivRhsGrad { /** -g * a / b^2 */ template <class T> MEGACPP_HD T operator()(T g, T a, T b) const { return -g * a / (b * b); } };

// --- scalar ops -------------------------------------------------------------------------------
/// Multiplication by a scalar.
struct Scale {
  double s;  ///< the factor
  /// s * x
  template <class T> MEGACPP_HD T operator()(T x) const { return static_cast<T>(s) * x; }
};
/// gradient contribution (g, x, y) -> s * g of y = s * x (and of y = x + c with s = 1)
struct ScaleGrad {
  double s;  ///< the factor
  /// s * g
  template <class T> MEGACPP_HD T operator()(T g, T, T) const { return static_cast<T>(s) * g; }
};
/// Addition of a scalar.
struct AddScalar {
  double s;  ///< the added constant
  /// x + s
  template <class T> MEGACPP_HD T operator()(T x) const { return x + static_cast<T>(s); }
};

// --- unary activations: forward y = f(x), and gradient contribution (g, x, y) -> g * dy/dx ---
/// Exponential.
struct Exp { /** exp(x) */ template <class T> MEGACPP_HD T operator()(T x) const { using std::exp; return exp(x); } };
/// Gradient contribution of exp.
struct ExpGrad { /** g * y */ template <class T> MEGACPP_HD T operator()(T g, T, T y) const { return g * y; } };

/// Natural logarithm.
struct Log { /** log(x) */ template <class T> MEGACPP_HD T operator()(T x) const { using std::log; return log(x); } };
/// Gradient contribution of log.
struct LogGrad { /** g / x */ template <class T> MEGACPP_HD T operator()(T g, T x, T) const { return g / x; } };

/// Hyperbolic tangent.
struct Tanh { /** tanh(x) */ template <class T> MEGACPP_HD T operator()(T x) const { using std::tanh; return tanh(x); } };
/// Gradient contribution of tanh.
struct TanhGrad { /** g * (1 - y^2) */ template <class T> MEGACPP_HD T operator()(T g, T, T y) const { return g * (T(1) - y * y); } };

/// Logistic sigmoid.
struct Sigmoid {
  /// 1 / (1 + exp(-x))
  template <class T> MEGACPP_HD T operator()(T x) const { using std::exp; return T(1) / (T(1) + exp(-x)); }
};
/// Gradient contribution of sigmoid.
struct SigmoidGrad { /** g * y * (1 - y) */ template <class T> MEGACPP_HD T operator()(T g, T, T y) const { return g * y * (T(1) - y); } };

/// Rectified linear unit.
struct Relu { /** max(x, 0) */ template <class T> MEGACPP_HD T operator()(T x) const { return x > T(0) ? x : T(0); } };
/// Gradient contribution of relu.
struct ReluGrad { /** x > 0 ? g : 0 */ template <class T> MEGACPP_HD T operator()(T g, T x, T) const { return x > T(0) ? g : T(0); } };

/// relu(x)^2 (modded-nanogpt MLP activation; So et al., "Primer", 2021)
struct Relu2 { /** x > 0 ? x^2 : 0 */ template <class T> MEGACPP_HD T operator()(T x) const { return x > T(0) ? x * x : T(0); } };
/// Gradient contribution of relu2.
struct Relu2Grad { /** x > 0 ? 2 g x : 0 */ template <class T> MEGACPP_HD T operator()(T g, T x, T) const { return x > T(0) ? g * T(2) * x : T(0); } };

/// silu(x) = x * sigmoid(x) (Elfwing et al. 2017); d/dx = s (1 + x (1 - s))
struct Silu {
  /// x / (1 + exp(-x))
  template <class T> MEGACPP_HD T operator()(T x) const { using std::exp; return x / (T(1) + exp(-x)); }
};
/// Gradient contribution of silu.
struct SiluGrad {
  /// g * s * (1 + x (1 - s)), s = sigmoid(x)
  template <class T> MEGACPP_HD T operator()(T g, T x, T) const {
    using std::exp;
    const T s = T(1) / (T(1) + exp(-x));
    return g * s * (T(1) + x * (T(1) - s));
  }
};

/// softcap(x) = c * tanh(x / c) (Gemma 2 logit soft-capping); dy/dx = 1 - tanh^2(x / c) = 1 - (y / c)^2
struct Softcap {
  double cap;  ///< c
  /// c * tanh(x / c)
  template <class T> MEGACPP_HD T operator()(T x) const { using std::tanh; return static_cast<T>(cap) * tanh(x / static_cast<T>(cap)); }
};
/// Gradient contribution of softcap.
struct SoftcapGrad {
  double cap;  ///< c
  /// g * (1 - (y / c)^2)
  template <class T> MEGACPP_HD T operator()(T g, T, T y) const {
    const T t = y / static_cast<T>(cap);
    return g * (T(1) - t * t);
  }
};

}  // namespace megacpp::fn
