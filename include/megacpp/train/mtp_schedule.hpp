// megacpp/train/mtp_schedule.hpp: the MTP loss weight lambda as a function of tokens seen, a
// training policy (docs/mtp.md): it lives above the layers and sets LM::mtp's weight.
//
//   lambda(tokens) = initial   while tokens < switch_tokens
//                  = final     from switch_tokens on
// A step, as DeepSeek-V3 trains it (arXiv 2412.19437, section 4.2: "0.3 for the first 10T tokens,
// and 0.1 for the remaining 4.8T tokens"): switch_tokens defaults to the same fraction of the run
// (10 / 14.8, about 0.68). lambda = 0 skips the MTP computation for those steps.
#pragma once

#include <cmath>
#include <cstdint>

#include "megacpp/core/error.hpp"

namespace megacpp {

/// DeepSeek-V3's switch point as a fraction of the run's tokens: 10T of 14.8T.
inline constexpr double kMtpSwitchFraction = 10.0 / 14.8;

/// lambda by tokens seen: `initial` before `switch_tokens`, `final_weight` from there on.
struct MtpWeightSchedule {
  double initial = 0.3;             ///< lambda for the first switch_tokens tokens
  double final_weight = 0.1;        ///< lambda after them
  std::int64_t switch_tokens = 0;   ///< tokens seen at which lambda becomes final_weight

  /// Throws megacpp::Error naming the value unless both weights are finite and >= 0 and
  /// switch_tokens >= 0.
  void validate() const {
    check(std::isfinite(initial) && initial >= 0, "MtpWeightSchedule", "initial MTP weight lambda must be finite and "
          ">= 0, got ", initial);
    check(std::isfinite(final_weight) && final_weight >= 0, "MtpWeightSchedule", "final MTP weight lambda must be "
          "finite and >= 0, got ", final_weight);
    check(switch_tokens >= 0, "MtpWeightSchedule", "switch_tokens must be >= 0, got ", switch_tokens);
  }

  /// lambda for a step taken after `tokens_seen` tokens.
  double operator()(std::int64_t tokens_seen) const { return tokens_seen < switch_tokens ? initial : final_weight; }

  /// The schedule of a run of `run_tokens` tokens switching at DeepSeek-V3's fraction.
  static MtpWeightSchedule deepseek_v3(std::int64_t run_tokens, double initial = 0.3, double final_weight = 0.1) {
    MtpWeightSchedule s{initial, final_weight,
                        static_cast<std::int64_t>(std::llround(kMtpSwitchFraction * static_cast<double>(run_tokens)))};
    s.validate();
    return s;
  }
};

}  // namespace megacpp
