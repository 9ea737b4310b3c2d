// megacpp/nn/attention/yarn.hpp: RoPE frequency tables, plain and YaRN-extended.
//
// RoPE (Su et al., RoFormer 2021): inv_freq_d = theta^(-2d / D), d in [0, D/2).
// YaRN (Peng et al., "YaRN: Efficient Context Window Extension of Large Language Models", 2023,
// section 3; also HF transformers `_compute_yarn_parameters`), for a context extension factor s
// over an original context L:
//   wavelength  lambda_d = 2 pi / inv_freq_d;  rotations over L: r_d = L / lambda_d
//   ramp        gamma(r) = 0 if r < alpha, 1 if r > beta, (r - alpha) / (beta - alpha) otherwise,
//               alpha = beta_slow = 1, beta = beta_fast = 32
//   frequency   h_d = (1 - gamma(r_d)) inv_freq_d / s + gamma(r_d) inv_freq_d
// so high-frequency dims (many rotations over L) are kept, low-frequency ones interpolated by s.
// Attention factor sqrt(1/t) = 0.1 ln s + 1 multiplies both q and k (paper eq. 22; HF applies it
// to cos and sin), i.e. the scores by (0.1 ln s + 1)^2; the layer folds that into its scale.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <numbers>
#include <string>
#include <vector>

#include "megacpp/core/error.hpp"
#include "megacpp/core/tensor.hpp"

namespace megacpp {

/// YaRN context extension; factor 1 (the default) is plain RoPE.
struct Yarn {
  double factor = 1.0;              ///< s: context extension factor (1: off)
  index_t original_context = 4096;  ///< L: context the model was trained at before extension
  double beta_fast = 32.0;          ///< beta: at least this many rotations over L -> frequency kept
  double beta_slow = 1.0;           ///< alpha: at most this many rotations over L -> frequency / s

  /// True when YaRN changes anything (factor > 1).
  bool enabled() const { return factor > 1.0; }
  /// sqrt(1/t) = 0.1 ln s + 1, the factor applied to q and to k (1 when off).
  double attention_factor() const { return enabled() ? 0.1 * std::log(factor) + 1.0 : 1.0; }
  /// Throws unless the options are usable: factor >= 1, L > 0, beta_fast > beta_slow > 0.
  void validate(const std::string& op) const {
    check(factor >= 1.0 && std::isfinite(factor), op, "YaRN factor must be >= 1 (1: off), got ", factor);
    check(original_context > 0, op, "YaRN original_context must be positive, got ", original_context);
    check(beta_slow > 0 && beta_fast > beta_slow, op, "YaRN needs beta_fast > beta_slow > 0, got beta_fast ", beta_fast,
          ", beta_slow ", beta_slow);
  }
};

/// A mixer with rotary positions whose base and YaRN extension can change between phases
/// (Attention does); LM::set_rope_theta and LM::set_yarn reach every such layer.
template <class M>
concept RotaryMixer = requires(M& m, const M& cm, double theta, const Yarn& yarn) {
  { cm.uses_rope() } -> std::convertible_to<bool>;
  m.set_rope_theta(theta);
  m.set_yarn(yarn);
};

/// inv_freq (head_dim / 2) for RoPE at base `theta`, extended by YaRN when `yarn.enabled()`.
template <class T, Backend B>
Tensor<T, B> rope_frequencies(index_t head_dim, double theta, const Yarn& yarn = {}) {
  check(head_dim > 0 && head_dim % 2 == 0, "rope", "head_dim must be even and positive for RoPE, got ", head_dim);
  check(theta > 0, "rope", "theta must be positive, got ", theta);
  yarn.validate("rope");
  std::vector<T> f(static_cast<std::size_t>(head_dim / 2));
  for (index_t d = 0; d < head_dim / 2; ++d) {
    const double inv_freq = std::pow(theta, -2.0 * static_cast<double>(d) / static_cast<double>(head_dim));
    double h = inv_freq;
    if (yarn.enabled()) {
      const double rotations = static_cast<double>(yarn.original_context) * inv_freq / (2.0 * std::numbers::pi);
      const double gamma = std::clamp((rotations - yarn.beta_slow) / (yarn.beta_fast - yarn.beta_slow), 0.0, 1.0);
      h = (1.0 - gamma) * inv_freq / yarn.factor + gamma * inv_freq;
    }
    f[static_cast<std::size_t>(d)] = static_cast<T>(h);
  }
  return Tensor<T, B>::from_host(Shape{head_dim / 2}, f);
}

}  // namespace megacpp
