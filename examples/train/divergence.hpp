// examples/train/divergence.hpp: how megacpp-train notices that a run has diverged or stalled.
//
// Diverged: after each optimizer step every parameter is scanned for NaN / inf, and the
// gradients were already checked by clipping (NonFinitePolicy::skip). Either stops the run with
// exit 3 before the state is evaluated or checkpointed, so `latest` always names a finite
// checkpoint. The scan reads each parameter once per step: for the tiny model ~0.2M floats, for
// the 877M model about as much memory traffic as one AdamW update, against a step of seconds. On
// CUDA the scan runs on the device and one number per parameter is copied back.
//
// Stalled: a loss that is bitwise the same for N consecutive steps (a learning rate so large that
// the weights saturate, e.g. Muon at 1e30, leaves the logits frozen while every value stays finite)
// is reported by LossPlateau; the run goes on, since stalling is not a fault of the input.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "megacpp/core.hpp"
#include "megacpp/optim/param_group.hpp"

namespace megacpp::examples {

/// Names of the parameters whose values (or, with `gradients`, gradients) hold a NaN or an
/// infinity. CPU tensors are read in place. On a device (CUDA) each tensor is reduced there to the
/// sum of 0 * x, which is NaN exactly when some x is NaN or infinite (never an overflow, unlike a
/// sum of squares), and only those sums, one number per parameter, come back to the host.
template <class T, Backend B>
std::vector<std::string> non_finite_values(const std::vector<optim::ParamRef<T, B>>& params, bool gradients) {
  std::vector<std::string> names;
  if constexpr (B::host_accessible) {
    for (const auto& p : params) {
      if (gradients && !p.has_grad()) continue;
      const T* v = gradients ? p.grad().data() : p.var.value().data();
      const std::int64_t n = p.shape().numel();
      bool finite = true;
#pragma omp parallel for reduction(&& : finite) schedule(static)
      for (std::int64_t i = 0; i < n; ++i) finite = finite && std::isfinite(static_cast<double>(v[i]));
      if (!finite) names.push_back(p.name);
    }
  } else {
    if (params.empty()) return names;
    Tensor<T, B> sums = Tensor<T, B>::zeros(Shape{static_cast<index_t>(params.size())});
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      if ((gradients && !p.has_grad()) || p.shape().numel() == 0) continue;
      const T* v = gradients ? p.grad().data() : p.var.value().data();
      B::template reduce<T>(1, p.shape().numel(), 1, fn::Scale{0.0}, T(1), T(0), sums.data() + i, In<T>{v});
    }
    const std::vector<T> host = sums.to_host();
    for (std::size_t i = 0; i < host.size(); ++i)
      if (!std::isfinite(static_cast<double>(host[i]))) names.push_back(params[i].name);
  }
  return names;
}

/// "'a', 'b', 'c' and 2 more": at most `shown` names, quoted.
inline std::string list_names(const std::vector<std::string>& names, std::size_t shown = 6) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) out += (i ? ", '" : "'") + names[i] + "'";
  if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
  return out.empty() ? "none" : out;
}

/// Counts consecutive steps whose loss is bitwise equal.
class LossPlateau {
 public:
  /// Records the loss of the next step; returns how many consecutive steps (this one included)
  /// have had exactly this loss.
  std::int64_t observe(double loss) {
    run_ = (run_ > 0 && loss == last_) ? run_ + 1 : 1;
    last_ = loss;
    return run_;
  }

 private:
  double last_ = 0;
  std::int64_t run_ = 0;
};

}  // namespace megacpp::examples
