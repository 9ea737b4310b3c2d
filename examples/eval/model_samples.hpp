// examples/eval/model_samples.hpp: k sampled completions per problem from a megacpp model, with the
// decoding of megacpp-generate (nn/model/sampling.hpp: the model's KV / state caches, temperature
// and top-k), cut at the end of the function (problems.hpp truncate_completion).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/bpe_option.hpp"
#include "eval/problems.hpp"
#include "megacpp/nn/model/sampling.hpp"

namespace megacpp::examples {

/// How completions are sampled.
struct SampleSettings {
  std::int64_t samples = 1;     ///< completions per problem (k)
  index_t max_tokens = 128;     ///< new tokens at most per completion
  double temperature = 0.8;     ///< softmax temperature (0: greedy)
  index_t top_k = 40;           ///< sample among the k most likely tokens (0: all)
  std::uint64_t seed = 0;       ///< sample s of problem p uses Rng(seed + 1000003 p + s)
};

/// `settings.samples` completions of every problem, problem by problem; a generation stops at the
/// end-of-document token, at the function's closing brace, or after max_tokens. Throws when a
/// prompt plus max_tokens exceeds the model's context.
template <class Model>
std::vector<Completion> sample_completions(const Model& model, const SampleCodec& codec, const std::vector<Problem>& problems,
                                           const SampleSettings& settings, std::int32_t bos, std::int32_t eos) {
  std::vector<Completion> out;
  const SamplingOptions so{settings.temperature, settings.top_k};
  for (std::size_t p = 0; p < problems.size(); ++p) {
    const Problem& problem = problems[p];
    const auto prompt = codec.prompt(problem.prompt);
    check(static_cast<index_t>(prompt.size()) + settings.max_tokens <= Model::dims.max_seq, "megacpp-eval", "problem \"",
          problem.task_id, "\": its prompt's ", prompt.size(), " tokens + ", settings.max_tokens,
          " new tokens exceed the model's context of ", Model::dims.max_seq);
    for (std::int64_t s = 0; s < settings.samples; ++s) {
      Rng rng(settings.seed + 1000003ull * p + static_cast<std::uint64_t>(s));
      std::string text;
      bool complete = false;
      generate(model, prompt, settings.max_tokens, so, rng, bos, [&](std::int32_t t) {
        if (t == eos) return false;
        text += codec.text(t);
        truncate_completion(text, problem, complete);
        return !complete;
      });
      out.push_back({problem.task_id, truncate_completion(text, problem, complete)});
    }
  }
  return out;
}

}  // namespace megacpp::examples
