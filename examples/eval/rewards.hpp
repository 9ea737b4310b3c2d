// examples/eval/rewards.hpp: a candidate's harness result as a reinforcement-learning reward.
//
//   pass     1 when the tests pass, else 0: the binary execution reward (GSPO, Zheng et al. 2025,
//            sec. 5, rewards verifiable correctness).
//   coderl   CodeRL's graded reward (Le et al. 2022, "CodeRL: Mastering Code Generation through
//            Pretrained Models and Deep Reinforcement Learning", sec. 3.2): -1 when the program
//            does not compile, -0.6 on a runtime error (a crash other than a failed assertion, a
//            timeout), -0.3 when it runs but fails a test (a non-zero exit or a failed assert,
//            SIGABRT), +1 when every test passes. It separates candidates that the binary reward
//            scores alike, so a model that never passes still gets a signal from compiling.
#pragma once

#include <csignal>
#include <string>

#include "common/cli.hpp"
#include "eval/harness.hpp"

namespace megacpp::examples {

/// The reward of `r` under `scheme` ("pass" or "coderl"; throws naming another).
inline double execution_reward(const CandidateResult& r, const std::string& scheme) {
  if (scheme == "pass") return r.passed ? 1.0 : 0.0;
  check(scheme == "coderl", "execution_reward", "unknown reward \"", scheme, "\": pass or coderl");
  if (r.passed) return 1.0;
  if (!r.compiled()) return -1.0;
  if (r.status == "failed" || r.status == "signal " + std::to_string(SIGABRT)) return -0.3;
  return -0.6;  // timeout, or a crash by another signal
}

}  // namespace megacpp::examples
