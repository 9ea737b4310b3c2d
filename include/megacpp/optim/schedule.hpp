// megacpp/optim/schedule.hpp: learning-rate schedules with absolute warmup, Muon momentum warmup.
//
// A schedule maps the index of the step about to be taken (0, 1, ...) to a multiplier of every
// group's lr (optimizer.set_lr_scale(schedule(step))). Warmup is an absolute step count
// (`--warmup_steps`, e.g. 500), never a ratio of the total: a 10% ratio over 1.4M SFT steps once
// warmed up for 142,000 steps and collapsed the model (docs/recipe.md "Optimizers"). Passing a fraction
// where a step count is expected fails to compile.
//
//   warmup      step < W:          (step + 1) / W           (reaches 1 at step W - 1)
//   constant    step >= W:         1
//   cosine      p = (step - W) / (T - W), clamped to [0, 1]:  f + (1 - f) (1 + cos(pi p)) / 2
//   linear      same p:            1 - (1 - f) p
//   wsd         warmup-stable-decay (Hu et al., MiniCPM, arXiv 2404.06395): 1 until T - D,
//               then linear to f over the last D steps
// with W = warmup_steps, T = total_steps, f = final_ratio, D = decay_steps; from step T on the
// value stays at f. Muon momentum warmup (modded-nanogpt): m = (1 - x) 0.85 + x 0.95,
// x = min(step / steps, 1).
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <numbers>
#include <string_view>

#include "megacpp/core/error.hpp"

namespace megacpp::optim {

/// The shape of the schedule after warmup.
enum class Decay { constant, cosine, linear, wsd };

/// "constant", "cosine", "linear" or "wsd".
constexpr std::string_view decay_name(Decay d) {
  switch (d) {
    case Decay::constant: return "constant";
    case Decay::cosine: return "cosine";
    case Decay::linear: return "linear";
    case Decay::wsd: return "wsd";
  }
  return "unknown";
}

namespace detail {
template <class>
inline constexpr bool always_false = false;
}

/// A learning-rate multiplier per step: absolute warmup, then constant, cosine, linear or
/// warmup-stable-decay.
class LrSchedule {
 public:
  /// Everything a schedule needs; step counts are integers (a ratio does not convert).
  struct Options {
    std::int64_t warmup_steps = 0;  ///< W: absolute steps of linear warmup
    std::int64_t total_steps = 0;   ///< T: the step at which decay ends (unused by constant)
    Decay decay = Decay::constant;  ///< the shape after warmup
    double final_ratio = 0.0;       ///< f: the multiplier reached at step T
    std::int64_t decay_steps = 0;   ///< D: length of the final decay (wsd only)
  };

  /// A schedule from `o`; throws naming the offending values when they are inconsistent.
  explicit LrSchedule(Options o) : o_(o) {
    check(o.warmup_steps >= 0, "LrSchedule", "warmup_steps must be >= 0, got ", o.warmup_steps);
    check(std::isfinite(o.final_ratio) && o.final_ratio >= 0 && o.final_ratio <= 1, "LrSchedule",
          "final_ratio must be in [0, 1], got ", o.final_ratio);
    if (o.decay != Decay::constant)
      check(o.total_steps > o.warmup_steps, "LrSchedule", decay_name(o.decay), " needs total_steps > warmup_steps, got total ",
            o.total_steps, " and warmup ", o.warmup_steps);
    if (o.decay == Decay::wsd)
      check(o.decay_steps > 0 && o.decay_steps <= o.total_steps - o.warmup_steps, "LrSchedule",
            "wsd needs 0 < decay_steps <= total_steps - warmup_steps, got decay ", o.decay_steps, " with total ",
            o.total_steps, " and warmup ", o.warmup_steps);
  }

  /// Warmup for `warmup_steps`, then 1.
  static LrSchedule constant(std::int64_t warmup_steps) { return LrSchedule({warmup_steps, 0, Decay::constant, 1.0, 0}); }
  /// Warmup, then cosine from 1 to `final_ratio` at `total_steps`.
  static LrSchedule cosine(std::int64_t warmup_steps, std::int64_t total_steps, double final_ratio = 0.0) {
    return LrSchedule({warmup_steps, total_steps, Decay::cosine, final_ratio, 0});
  }
  /// Warmup, then linear from 1 to `final_ratio` at `total_steps`.
  static LrSchedule linear(std::int64_t warmup_steps, std::int64_t total_steps, double final_ratio = 0.0) {
    return LrSchedule({warmup_steps, total_steps, Decay::linear, final_ratio, 0});
  }
  /// Warmup, 1 until `total_steps - decay_steps`, then linear to `final_ratio` at `total_steps`.
  static LrSchedule wsd(std::int64_t warmup_steps, std::int64_t total_steps, std::int64_t decay_steps,
                        double final_ratio = 0.0) {
    return LrSchedule({warmup_steps, total_steps, Decay::wsd, final_ratio, decay_steps});
  }
  /// Rejected at compile time: warmup is a step count, never a fraction of the run.
  template <std::floating_point F, class... Rest>
  static LrSchedule cosine(F, Rest...) {
    static_assert(detail::always_false<F>,
                  "megacpp_warmup_is_absolute_steps: pass warmup as an integer step count (e.g. 500), not a ratio "
                  "of total steps (docs/recipe.md: warmup is never a ratio)");
    return constant(0);
  }
  /// Rejected at compile time: warmup is a step count, never a fraction of the run.
  template <std::floating_point F, class... Rest>
  static LrSchedule linear(F, Rest...) {
    static_assert(detail::always_false<F>,
                  "megacpp_warmup_is_absolute_steps: pass warmup as an integer step count (e.g. 500), not a ratio "
                  "of total steps (docs/recipe.md: warmup is never a ratio)");
    return constant(0);
  }
  /// Rejected at compile time: warmup is a step count, never a fraction of the run.
  template <std::floating_point F, class... Rest>
  static LrSchedule wsd(F, Rest...) {
    static_assert(detail::always_false<F>,
                  "megacpp_warmup_is_absolute_steps: pass warmup as an integer step count (e.g. 500), not a ratio "
                  "of total steps (docs/recipe.md: warmup is never a ratio)");
    return constant(0);
  }
  /// Rejected at compile time: warmup is a step count, never a fraction of the run.
  template <std::floating_point F>
  static LrSchedule constant(F) {
    static_assert(detail::always_false<F>,
                  "megacpp_warmup_is_absolute_steps: pass warmup as an integer step count (e.g. 500), not a ratio "
                  "of total steps (docs/recipe.md: warmup is never a ratio)");
    return constant(std::int64_t{0});
  }

  /// The lr multiplier for the step with index `step` (0-based).
  double operator()(std::int64_t step) const {
    check(step >= 0, "LrSchedule", "step must be >= 0, got ", step);
    const std::int64_t w = o_.warmup_steps;
    if (step < w) return static_cast<double>(step + 1) / static_cast<double>(w);
    const double f = o_.final_ratio;
    switch (o_.decay) {
      case Decay::constant: return 1.0;
      case Decay::cosine: {
        const double p = progress(step, w, o_.total_steps);
        return f + (1.0 - f) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
      }
      case Decay::linear: return 1.0 - (1.0 - f) * progress(step, w, o_.total_steps);
      case Decay::wsd: return 1.0 - (1.0 - f) * progress(step, o_.total_steps - o_.decay_steps, o_.total_steps);
    }
    return 1.0;
  }

  /// The options this schedule was built from.
  const Options& options() const { return o_; }

 private:
  // (step - begin) / (end - begin), clamped to [0, 1].
  static double progress(std::int64_t step, std::int64_t begin, std::int64_t end) {
    return std::clamp(static_cast<double>(step - begin) / static_cast<double>(end - begin), 0.0, 1.0);
  }
  Options o_;
};

/// Muon momentum warmup (modded-nanogpt): from `from` to `to` linearly over `steps` steps.
struct MomentumWarmup {
  double from = 0.85;        ///< momentum at step 0
  double to = 0.95;          ///< momentum from step `steps` on
  std::int64_t steps = 300;  ///< absolute warmup length

  /// The momentum for the step with index `step`: (1 - x) from + x to, x = min(step / steps, 1).
  double operator()(std::int64_t step) const {
    check(step >= 0, "MomentumWarmup", "step must be >= 0, got ", step);
    check(steps >= 0, "MomentumWarmup", "steps must be >= 0, got ", steps);
    const double x = steps == 0 ? 1.0 : std::min(static_cast<double>(step) / static_cast<double>(steps), 1.0);
    return (1.0 - x) * from + x * to;
  }
};

}  // namespace megacpp::optim
