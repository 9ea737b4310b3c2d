// megacpp/optim/muon_scale.hpp: how Muon scales its orthogonalised update by the matrix shape.
//
// An orthogonalised (R, C) update has unit singular values whatever the shape, so its RMS
// entry size depends on the shape; the scale rule decides what a given lr means per matrix.
// Shapes are the parameter's (rows, cols) as stored.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <string_view>

#include "megacpp/core/config.hpp"

namespace megacpp::optim {

/// modded-nanogpt's rule: W -= lr sqrt(max(1, R / C)) O (Jordan et al., Muon; modded-nanogpt's
/// `max(1, p.size(-2) / p.size(-1))**0.5`).
struct SqrtAspectScale {
  static constexpr std::string_view name = "sqrt_aspect";  ///< shown in routing tables and benches
  /// sqrt(max(1, rows / cols)).
  static double factor(index_t rows, index_t cols) {
    return std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols)));
  }
};

/// Moonlight's rule (Liu et al., "Muon is Scalable for LLM Training", arXiv 2502.16982): match
/// AdamW's update RMS (about 0.2) so AdamW's lr and weight decay carry over:
/// W -= lr 0.2 sqrt(max(R, C)) O.
struct MoonlightScale {
  static constexpr std::string_view name = "moonlight";  ///< shown in routing tables and benches
  /// 0.2 sqrt(max(rows, cols)).
  static double factor(index_t rows, index_t cols) {
    return 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
  }
};

/// A shape-scale policy: a name and factor(rows, cols).
template <class P>
concept MuonShapeScale = requires(index_t r) {
  { P::name } -> std::convertible_to<std::string_view>;
  { P::factor(r, r) } -> std::convertible_to<double>;
};

}  // namespace megacpp::optim
