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
// Under ZeRO-1 (each rank holds only its owned parameters' averaged gradients) the form taking a
// communicator and the owners all-reduces that small tensor: the same norm, bitwise.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "megacpp/core/functors.hpp"
#include "megacpp/dist/comm.hpp"
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
  /// When not finite: the parameters whose gradient holds a NaN or an infinity (under the
  /// sharded form, every rank's owned ones); empty when only the sum of squares overflowed.
  std::vector<std::string> non_finite;
  /// True when the optimiser step must be skipped (non-finite gradients under NonFinitePolicy::skip).
  bool skip_step() const { return !finite; }
};

namespace detail {
// The clip over the parameters marked `mine` (they have a gradient): sums[i] = ||g_i||^2 for
// those, 0 for the rest; reduce(sums) combines the ranks' vectors (nothing on one process); the
// norm is summed over every index in order, so adding the zeros of the others leaves the
// single-process bits; only `mine` are scaled.
template <class T, Backend B, class Reduce>
ClipResult clip_marked(const std::vector<ParamRef<T, B>>& params, const std::vector<bool>& mine, double max_norm,
                       NonFinitePolicy policy, Reduce&& reduce) {
  check(std::isfinite(max_norm) && max_norm > 0, "clip_grad_norm", "max_norm must be finite and > 0, got ", max_norm);
  index_t max_rows = 1;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const ParamRef<T, B>& p = params[i];
    if (!p.has_grad()) continue;
    check(p.grad().shape() == p.shape(), "clip_grad_norm", "gradient of '", p.name, "' has shape ", p.grad().shape(),
          " but the parameter is ", p.shape());
    if (mine[i]) max_rows = std::max(max_rows, sum_of_squares_view(p.shape()).first);
  }
  ClipResult result;
  if (params.empty()) return result;  // the same on every rank: a collective is never left half-called
  Tensor<T, B> sums = Tensor<T, B>::zeros(Shape{static_cast<index_t>(params.size())});
  Tensor<T, B> row_sums(Shape{max_rows});
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!mine[i]) continue;
    const auto [rows, cols] = sum_of_squares_view(params[i].shape());
    if (rows * cols > 0) sum_of_squares<T, B>(rows, cols, params[i].grad().data(), row_sums.data(), sums.data() + i);
  }
  reduce(sums);
  const std::vector<T> host = sums.to_host();
  double total = 0.0;  // summed in parameter order: the same on every run, backend and world size
  for (T s : host) total += static_cast<double>(s);
  result.norm = std::sqrt(total);
  if (!std::isfinite(result.norm)) {
    result.finite = false;
    std::string names;
    for (std::size_t i = 0; i < host.size(); ++i)
      if (!std::isfinite(static_cast<double>(host[i]))) {
        result.non_finite.push_back(params[i].name);
        names += (names.empty() ? "'" : ", '") + params[i].name + "'";
      }
    if (policy == NonFinitePolicy::skip) return result;
    fail("clip_grad_norm", "gradient norm is ", result.norm, " (not finite); non-finite gradients in ",
         names.empty() ? std::string("the sum of squares (overflow)") : names,
         ": skip this step (NonFinitePolicy::skip) or find the source; the gradients were not changed");
  }
  // Only a norm above max_norm is clipped (PyTorch also scales norms within 1e-6 below it).
  if (result.norm > max_norm) {
    const double coef = max_norm / (result.norm + 1e-6);
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!mine[i]) continue;
      T* g = params[i].grad_buffer().data();
      B::template map<T>(1, params[i].shape().numel(), fn::Scale{coef}, g, In<T>{g});
    }
    result.clipped = true;
    result.scale = coef;
  }
  return result;
}
}  // namespace detail

/// Scales the gradients of `params` so that their global L2 norm is at most `max_norm`, and
/// returns the norm before clipping. Parameters without a gradient count as zero.
template <class T, Backend B>
[[nodiscard]] ClipResult clip_grad_norm(const std::vector<ParamRef<T, B>>& params, double max_norm = 1.0,
                                        NonFinitePolicy policy = NonFinitePolicy::error) {
  std::vector<bool> mine;
  for (const ParamRef<T, B>& p : params) mine.push_back(p.has_grad());
  return detail::clip_marked(params, mine, max_norm, policy, [](Tensor<T, B>&) {});
}

/// ZeRO-1 form, over the ranks of `comm`, when each rank holds the averaged gradient of only
/// the parameters it owns (owners[i] for params[i]: dist::DataParallelOptions::owners, whose
/// reduce-scatter leaves the other gradients local and unaveraged). Each rank sums the squares
/// of its owned gradients into a vector indexed by parameter, one all-reduce (sum) of that
/// vector gives every rank every parameter's term (each comes from one rank plus zeros, so it
/// is exact), and each rank scales only its owned gradients. The norm, the decision and the
/// owned gradients are bitwise those of clip_grad_norm over fully averaged gradients.
/// Collective: every rank of `comm` calls it with the same parameters and owners.
template <class T, Backend B, class C>
  requires dist::Comm<C, T, B>
[[nodiscard]] ClipResult clip_grad_norm(const std::vector<ParamRef<T, B>>& params, C& comm, const std::vector<int>& owners,
                                        double max_norm = 1.0, NonFinitePolicy policy = NonFinitePolicy::error) {
  check(owners.size() == params.size(), "clip_grad_norm", "owners has ", owners.size(), " entries for ", params.size(),
        " parameters");
  std::vector<bool> mine;
  for (std::size_t i = 0; i < params.size(); ++i) mine.push_back(params[i].has_grad() && owners[i] == comm.rank());
  return detail::clip_marked(params, mine, max_norm, policy, [&](Tensor<T, B>& sums) {
    comm.template all_reduce<T, B>(sums.data(), sums.numel(), dist::ReduceOp::sum);
  });
}

/// clip_grad_norm over every parameter of `model` (for_each_param; tied weights once).
template <class T, Backend B, class Model>
  requires Module<Model, T, B>
[[nodiscard]] ClipResult clip_grad_norm(Model& model, double max_norm = 1.0, NonFinitePolicy policy = NonFinitePolicy::error) {
  return clip_grad_norm(collect_params<T, B>(model), max_norm, policy);
}

}  // namespace megacpp::optim
