// megacpp/optim/clip.hpp: gradient clipping by global norm (docs/recipe.md: default 1.0, everywhere).
//
//   norm = sqrt(sum_p ||g_p||^2);  if norm > max_norm: g_p *= max_norm / (norm + 1e-6)
// (PyTorch clip_grad_norm_: the 1e-6 keeps the coefficient finite; the returned norm is the one
// before clipping). A norm at or below max_norm leaves the gradients bitwise untouched. A non-finite norm is never applied silently: by default it throws naming the
// parameters whose gradients are not finite; NonFinitePolicy::skip instead returns a result whose
// skip_step() is true and leaves the gradients untouched, for loops that skip such steps.
//
// Each parameter's ||g||^2 is summed on the device (sum_of_squares.hpp) into one small tensor,
// which is copied to the host once: one synchronisation per call, needed to return the norm.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "megacpp/core/functors.hpp"
#include "megacpp/optim/param_group.hpp"
#include "megacpp/optim/sum_of_squares.hpp"

namespace megacpp::optim {

/// What clip_grad_norm does when the global norm is NaN or infinite.
enum class NonFinitePolicy {
  error,  ///< throw megacpp::Error naming the parameters with non-finite gradients
  skip,   ///< leave the gradients untouched and report skip_step() == true
};

/// The outcome of clip_grad_norm.
struct ClipResult {
  double norm = 0.0;     ///< global gradient norm before clipping
  double scale = 1.0;    ///< factor the gradients were multiplied by (1 when not clipped)
  bool clipped = false;  ///< true when norm > max_norm and the gradients were scaled
  bool finite = true;    ///< false when the norm was NaN or infinite (NonFinitePolicy::skip)
  /// True when the optimiser step must be skipped (non-finite gradients under NonFinitePolicy::skip).
  bool skip_step() const { return !finite; }
};

/// Scales the gradients of `params` so that their global L2 norm is at most `max_norm`, and
/// returns the norm before clipping. Parameters without a gradient count as zero.
template <class T, Backend B>
[[nodiscard]] ClipResult clip_grad_norm(const std::vector<ParamRef<T, B>>& params, double max_norm = 1.0,
                                        NonFinitePolicy policy = NonFinitePolicy::error) {
  check(std::isfinite(max_norm) && max_norm > 0, "clip_grad_norm", "max_norm must be finite and > 0, got ", max_norm);
  std::vector<const ParamRef<T, B>*> with_grad;
  index_t max_rows = 1;
  for (const ParamRef<T, B>& p : params) {
    if (!p.has_grad()) continue;
    check(p.grad().shape() == p.shape(), "clip_grad_norm", "gradient of '", p.name, "' has shape ", p.grad().shape(),
          " but the parameter is ", p.shape());
    with_grad.push_back(&p);
    max_rows = std::max(max_rows, sum_of_squares_view(p.shape()).first);
  }
  ClipResult result;
  if (with_grad.empty()) return result;
  // sums[i] = ||g_i||^2: (parameters with a gradient)
  Tensor<T, B> sums(Shape{static_cast<index_t>(with_grad.size())});
  Tensor<T, B> row_sums(Shape{max_rows});
  for (std::size_t i = 0; i < with_grad.size(); ++i) {
    const auto [rows, cols] = sum_of_squares_view(with_grad[i]->shape());
    if (rows * cols == 0) {
      B::template fill<T>(sums.data() + i, 1, T(0));
      continue;
    }
    sum_of_squares<T, B>(rows, cols, with_grad[i]->grad().data(), row_sums.data(), sums.data() + i);
  }
  const std::vector<T> host = sums.to_host();
  double total = 0.0;  // summed in parameter order: the same on every run and every backend
  for (T s : host) total += static_cast<double>(s);
  result.norm = std::sqrt(total);
  if (!std::isfinite(result.norm)) {
    result.finite = false;
    if (policy == NonFinitePolicy::skip) return result;
    std::string names;
    for (std::size_t i = 0; i < host.size(); ++i)
      if (!std::isfinite(static_cast<double>(host[i]))) names += (names.empty() ? "'" : ", '") + with_grad[i]->name + "'";
    fail("clip_grad_norm", "gradient norm is ", result.norm, " (not finite); non-finite gradients in ",
         names.empty() ? std::string("the sum of squares (overflow)") : names,
         ": skip this step (NonFinitePolicy::skip) or find the source; the gradients were not changed");
  }
  // Only a norm above max_norm is clipped (PyTorch also scales norms within 1e-6 below it).
  if (result.norm > max_norm) {
    const double coef = max_norm / (result.norm + 1e-6);
    for (const ParamRef<T, B>* p : with_grad) {
      T* g = p->grad_buffer().data();
      B::template map<T>(1, p->shape().numel(), fn::Scale{coef}, g, In<T>{g});
    }
    result.clipped = true;
    result.scale = coef;
  }
  return result;
}

/// clip_grad_norm over every parameter of `model` (for_each_param; tied weights once).
template <class T, Backend B, class Model>
  requires Module<Model, T, B>
[[nodiscard]] ClipResult clip_grad_norm(Model& model, double max_norm = 1.0, NonFinitePolicy policy = NonFinitePolicy::error) {
  return clip_grad_norm(collect_params<T, B>(model), max_norm, policy);
}

}  // namespace megacpp::optim
