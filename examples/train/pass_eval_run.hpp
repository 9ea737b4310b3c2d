// examples/train/pass_eval_run.hpp: megacpp-train's execution-based evaluation every N steps.
//
//   --eval_pass_every N        0: off. Every N steps and at the last step: sample --eval_samples
//                              completions of each problem of --eval_problems with the model being
//                              trained, compile and test them (eval/harness.hpp, docs/eval.md)
//   --eval_problems FILE       HumanEval-style C++ JSONL (default: the 20 shipped problems)
//   --eval_samples k           completions per problem (pass@k for every k up to it)
//   --eval_max_tokens, --eval_temperature   sampling (top-k is --top_k's)
// Every evaluation writes a metrics record {"step", "pass@1", ..., "ngram_match",
// "weighted_ngram_match", "syntax_match": null, ..., "eval_seconds"}; pass.svg plots pass@1.
// Everything is checked before training starts: the file, each prompt's length against the
// model's context, the tokenizer that encodes the prompts, and the compiler.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bpe_option.hpp"
#include "common/cli.hpp"
#include "eval/harness.hpp"
#include "eval/model_samples.hpp"

namespace megacpp::examples {

/// The --eval_pass_* flags of megacpp-train.
struct PassEvalFlags {
  std::int64_t every = 0;        ///< steps between evaluations (0: off)
  std::string problems;          ///< problems JSONL
  std::int64_t samples = 1;      ///< completions per problem
  index_t max_tokens = 128;      ///< new tokens at most per completion
  double temperature = 0.2;      ///< sampling temperature (Chen et al. 2021 report pass@1 at 0.2)
};

/// Checks the flags on their own (UsageError naming the flag).
inline void check_pass_eval_flags(const std::string& tool, const PassEvalFlags& f) {
  check_range(tool, "eval_pass_every", f.every, 0, std::int64_t{1} << 40, "0: off");
  check_range(tool, "eval_samples", f.samples, 1, 1 << 20);
  check_range(tool, "eval_max_tokens", f.max_tokens, 1, std::int64_t{1} << 30);
  check_real(tool, "eval_temperature", f.temperature, 0, 1e6);
}

/// The evaluations of one training run.
template <class Model>
class PassEvalRun {
 public:
  /// Reads and checks everything an evaluation needs (nothing when --eval_pass_every is 0).
  PassEvalRun(const std::string& tool, const PassEvalFlags& flags, const SampleCodec& codec, index_t top_k,
              std::uint64_t seed)
      : flags_(flags), codec_(codec) {
    if (flags.every == 0) return;
    check_flag(codec.available(), tool, "eval_pass_every", flags.every,
               ": the shards' tokenizer needs its tokenizer.json (--tokenizer) to encode the problems' prompts");
    problems_ = read_problems(flags.problems);
    for (const auto& p : problems_) {
      const auto tokens = static_cast<index_t>(codec.prompt(p.prompt).size());
      check_flag(tokens + flags.max_tokens <= Model::dims.max_seq, tool, "eval_max_tokens", flags.max_tokens,
                 " + the prompt of \"", p.task_id, "\" (", tokens, " tokens) exceed the model's context of ",
                 Model::dims.max_seq);
    }
    find_program(harness_.compiler);
    harness_.jobs = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 1024u));
    settings_ = {flags.samples, flags.max_tokens, flags.temperature, top_k, seed};
  }
  /// True when `step` (1-based) is an evaluation step of a run of `steps` steps.
  bool due(std::int64_t step, std::int64_t steps) const {
    return flags_.every > 0 && (step % flags_.every == 0 || step == steps);
  }
  /// Samples, compiles and tests; returns the metrics record of `step`.
  nlohmann::json run(const Model& model, std::int64_t step, std::int32_t bos, std::int32_t eos) const {
    const auto t0 = std::chrono::steady_clock::now();
    const auto completions = sample_completions(model, codec_, problems_, settings_, bos, eos);
    const EvalReport report = evaluate_completions(problems_, completions, harness_);
    nlohmann::json record = report.summary();
    record["eval_seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    record.erase("seconds");
    record["step"] = step;
    return record;
  }

 private:
  PassEvalFlags flags_;
  const SampleCodec& codec_;
  std::vector<Problem> problems_;
  HarnessOptions harness_;
  SampleSettings settings_;
};

}  // namespace megacpp::examples
