// megacpp/core/functors.hpp: elementwise functors shared by every backend's map/reduce kernels.
//
// Each is a struct with a MEGACPP_HD call operator, so the same functor runs in the CPU's OpenMP
// loops and in CUDA kernels. Forward functors take inputs; gradient functors take
// (upstream gradient, x, y) and return their contribution to dL/dx; AccumulateOf adds it into a
// gradient buffer within the same map kernel.
#pragma once

#include <cmath>

#include "megacpp/core/config.hpp"

namespace megacpp::fn {

// --- binary arithmetic ------------------------------------------------------------------------
struct Add { template <class T> MEGACPP_HD T operator()(T a, T b) const { return a + b; } };
struct Sub { template <class T> MEGACPP_HD T operator()(T a, T b) const { return a - b; } };
struct Mul { template <class T> MEGACPP_HD T operator()(T a, T b) const { return a * b; } };
struct Div { template <class T> MEGACPP_HD T operator()(T a, T b) const { return a / b; } };
struct Neg { template <class T> MEGACPP_HD T operator()(T a) const { return -a; } };
struct Square { template <class T> MEGACPP_HD T operator()(T a) const { return a * a; } };

// acc + f(xs...): turns any contribution functor into an accumulating one, so a single map
// kernel computes a gradient term and adds it into the gradient buffer.
template <class F>
struct AccumulateOf {
  F f;
  template <class T, class... Xs> MEGACPP_HD T operator()(T acc, Xs... xs) const { return acc + f(xs...); }
};
struct Identity { template <class T> MEGACPP_HD T operator()(T x) const { return x; } };
// d(a/b)/db contribution: -g * a / b^2
struct DivRhsGrad { template <class T> MEGACPP_HD T operator()(T g, T a, T b) const { return -g * a / (b * b); } };

// --- scalar ops -------------------------------------------------------------------------------
struct Scale {
  double s;
  template <class T> MEGACPP_HD T operator()(T x) const { return static_cast<T>(s) * x; }
};
// gradient contribution (g, x, y) -> s * g of y = s * x (and of y = x + c with s = 1)
struct ScaleGrad {
  double s;
  template <class T> MEGACPP_HD T operator()(T g, T, T) const { return static_cast<T>(s) * g; }
};
struct AddScalar {
  double s;
  template <class T> MEGACPP_HD T operator()(T x) const { return x + static_cast<T>(s); }
};

// --- unary activations: forward y = f(x), and gradient contribution (g, x, y) -> g * dy/dx ---
struct Exp { template <class T> MEGACPP_HD T operator()(T x) const { using std::exp; return exp(x); } };
struct ExpGrad { template <class T> MEGACPP_HD T operator()(T g, T, T y) const { return g * y; } };

struct Log { template <class T> MEGACPP_HD T operator()(T x) const { using std::log; return log(x); } };
struct LogGrad { template <class T> MEGACPP_HD T operator()(T g, T x, T) const { return g / x; } };

struct Tanh { template <class T> MEGACPP_HD T operator()(T x) const { using std::tanh; return tanh(x); } };
struct TanhGrad { template <class T> MEGACPP_HD T operator()(T g, T, T y) const { return g * (T(1) - y * y); } };

struct Sigmoid {
  template <class T> MEGACPP_HD T operator()(T x) const { using std::exp; return T(1) / (T(1) + exp(-x)); }
};
struct SigmoidGrad { template <class T> MEGACPP_HD T operator()(T g, T, T y) const { return g * y * (T(1) - y); } };

struct Relu { template <class T> MEGACPP_HD T operator()(T x) const { return x > T(0) ? x : T(0); } };
struct ReluGrad { template <class T> MEGACPP_HD T operator()(T g, T x, T) const { return x > T(0) ? g : T(0); } };

// relu(x)^2 (modded-nanogpt MLP activation; So et al., "Primer", 2021)
struct Relu2 { template <class T> MEGACPP_HD T operator()(T x) const { return x > T(0) ? x * x : T(0); } };
struct Relu2Grad { template <class T> MEGACPP_HD T operator()(T g, T x, T) const { return x > T(0) ? g * T(2) * x : T(0); } };

// silu(x) = x * sigmoid(x) (Elfwing et al. 2017); d/dx = s (1 + x (1 - s))
struct Silu {
  template <class T> MEGACPP_HD T operator()(T x) const { using std::exp; return x / (T(1) + exp(-x)); }
};
struct SiluGrad {
  template <class T> MEGACPP_HD T operator()(T g, T x, T) const {
    using std::exp;
    const T s = T(1) / (T(1) + exp(-x));
    return g * s * (T(1) + x * (T(1) - s));
  }
};

// softcap(x) = c * tanh(x / c) (Gemma 2 logit soft-capping); dy/dx = 1 - tanh^2(x / c) = 1 - (y / c)^2
struct Softcap {
  double cap;
  template <class T> MEGACPP_HD T operator()(T x) const { using std::tanh; return static_cast<T>(cap) * tanh(x / static_cast<T>(cap)); }
};
struct SoftcapGrad {
  double cap;
  template <class T> MEGACPP_HD T operator()(T g, T, T y) const {
    const T t = y / static_cast<T>(cap);
    return g * (T(1) - t * t);
  }
};

}  // namespace megacpp::fn
