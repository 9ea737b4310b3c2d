// megacpp/plasticity/dash.hpp: DASH, shrinking the rows a gradient keeps pushing against.
//
// DASH (Direction-Aware SHrinking: Shin, Oh, Cho, Yun, "DASH: Warm-Starting Neural Network
// Training in Stationary Settings without Loss of Plasticity", NeurIPS 2024, arXiv 2410.23495)
// multiplies each neuron's weights by max(lambda, cos(w, -grad)): the less a neuron agrees with
// the descent direction, the more it shrinks. Here that is a thresholded, bounded row rule; per
// row i of a 2-D weight W with gradient G (the gradient itself, not its negative, so a high
// cosine is a row the descent direction disagrees with):
//   cos_i = <W_i, G_i> / (||W_i|| ||G_i||)
//   cos_i >  threshold:  W_i <- s_i W_i,   s_i = max(min_factor, 1 - (cos_i - threshold))
//   otherwise (and for a zero W_i or G_i):  W_i unchanged, bitwise
// A row whose gradient points along the row (cos near 1) is one the loss wants smaller; shrinking
// it is the step the optimiser would take anyway, done at once and bounded: s_i is 1 at the
// threshold (continuous) and never below min_factor. Rows are shrunk, never reinitialised.
// DASH is periodic and low-frequency (every `--dash_every` steps, phase 1 by default).
//
// Shards: a rank passes its own rows of W and the gradient rows of the same slice; a gradient
// whose shape differs from the weight's local rows is refused (the cosine of a weight row with
// someone else's gradient row means nothing). Each row needs only itself, so no statistic
// crosses ranks and world N gives bitwise the rows of world 1.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "megacpp/optim/param_group.hpp"
#include "megacpp/optim/state.hpp"
#include "megacpp/plasticity/shard.hpp"
#include "megacpp/plasticity/state_repair.hpp"

namespace megacpp::plasticity {

/// DASH's knobs.
struct DashOptions {
  double threshold = 0.3;   ///< rows with cos(W_i, G_i) above it are shrunk
  double min_factor = 0.5;  ///< lower bound of the shrink factor s_i
  bool repair_state = true; ///< clear the optimiser state of the shrunk rows (dash())
};

/// The factor a row with cosine `cos` is multiplied by (1 when it is not shrunk).
inline double dash_factor(double cos, const DashOptions& o) {
  return cos > o.threshold ? std::max(o.min_factor, 1.0 - (cos - o.threshold)) : 1.0;
}

/// Shrinks the rows of `w_local` ((range.size(), C), rows [range.begin, range.end) of a weight)
/// whose cosine with the same rows of the gradient `g_local` exceeds the threshold. Returns the
/// global indices of the shrunk rows.
template <class T, Backend B>
std::vector<index_t> dash_rows(Tensor<T, B>& w_local, const Tensor<T, B>& g_local, RowRange range, const DashOptions& o = {}) {
  check(w_local.rank() == 2, "dash", "DASH takes 2-D weights only, got shape ", w_local.shape());
  check(g_local.defined() && g_local.shape() == w_local.shape(), "dash", "the gradient ",
        g_local.defined() ? g_local.shape().to_string() : std::string("(none)"), " does not describe the weight's owned rows ",
        w_local.shape(), ": pass the gradient rows of the same slice");
  check(range.size() == w_local.size(0), "dash", "owned range [", range.begin, ", ", range.end, ") has ", range.size(),
        " rows but the local weight has ", w_local.size(0));
  check(o.threshold >= -1 && o.threshold < 1, "dash", "threshold must be in [-1, 1), got ", o.threshold);
  check(o.min_factor > 0 && o.min_factor <= 1, "dash", "min_factor must be in (0, 1], got ", o.min_factor);
  const index_t n = w_local.size(0), c = w_local.size(1);
  std::vector<T> w = w_local.to_host();
  const std::vector<T> g = g_local.to_host();
  std::vector<index_t> shrunk;
  for (index_t i = 0; i < n; ++i) {
    double wg = 0, ww = 0, gg = 0;
    for (index_t j = 0; j < c; ++j) {
      const auto k = static_cast<std::size_t>(i * c + j);
      const double a = static_cast<double>(w[k]), b = static_cast<double>(g[k]);
      wg += a * b;
      ww += a * a;
      gg += b * b;
    }
    if (ww == 0 || gg == 0) continue;
    const double s = dash_factor(wg / std::sqrt(ww * gg), o);
    if (s == 1.0) continue;
    for (index_t j = 0; j < c; ++j) {
      T& x = w[static_cast<std::size_t>(i * c + j)];
      x = static_cast<T>(static_cast<double>(x) * s);
    }
    shrunk.push_back(range.begin + i);
  }
  if (!shrunk.empty()) w_local.assign(Tensor<T, B>::from_host(w_local.shape(), w));
  return shrunk;
}

/// One matrix of a DASH pass.
struct DashEntry {
  std::string name;                 ///< parameter
  index_t rows = 0;                 ///< rows of the parameter
  std::vector<index_t> shrunk;      ///< rows shrunk
};

/// DASH over every 2-D Role::matrix parameter of `params` that has a gradient (world size 1);
/// with o.repair_state the optimiser state of exactly the shrunk rows is cleared. Call it after
/// backward and before the optimiser step, so the gradients are this step's.
template <class T, Backend B, optim::Optimizer Opt>
std::vector<DashEntry> dash(std::vector<optim::ParamRef<T, B>>& params, Opt& opt, const DashOptions& o = {}) {
  std::vector<DashEntry> out;
  for (optim::ParamRef<T, B>& p : params) {
    if (p.role != Role::matrix || p.shape().rank() != 2 || !p.has_grad()) continue;
    check(!o.repair_state || opt.owns(p.name), "dash", "'", p.name, "' is not owned by the optimiser whose state DASH must clear");
    DashEntry e{p.name, p.shape()[0], dash_rows<T, B>(p.value(), p.grad(), all_rows(p.shape()[0]), o)};
    if (o.repair_state && !e.shrunk.empty()) clear_state_rows(opt, p.name, e.shrunk);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace megacpp::plasticity
