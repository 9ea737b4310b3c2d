// examples/generate/generate_run.hpp: megacpp-generate's run of one model on one backend.
//
// main.cpp parses the flags and reads the checkpoint's state; generate_on_backend<B> loads the
// checkpoint's weights into the registry's model on backend B (models.hpp) and samples. The CPU
// instantiation is main.cpp's; --device cuda's is generate_cuda.cu's, compiled by nvcc when the
// build has the CUDA backend (MEGACPP_TRAIN_CUDA), so the same code decodes on either backend.
// Sampling happens on the host from each step's logits (sampling.hpp), so a seed gives the same
// draws on both; the decode caches live in B's memory.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/bpe_option.hpp"
#include "common/cli.hpp"
#include "megacpp/nn/model/sampling.hpp"
#include "megacpp/train/curriculum.hpp"
#include "models.hpp"
#include "run_checkpoint.hpp"
#include "trained_model.hpp"

namespace megacpp::examples {

inline const std::string kGenerateTool = "megacpp-generate";

/// What megacpp-generate was asked for (main.cpp checks every field before a model is loaded).
struct GenerateOptions {
  std::string checkpoint, prompt = "#include <", tokenizer, special_tokens = kDefaultSpecialTokens;
  std::string device = "cpu";  ///< where the model and its decode caches live: cpu | cuda
  index_t tokens = 200, top_k = 40;
  double temperature = 0.8;
  std::uint64_t seed = 0;
  bool verify = false, stop_at_eos = true, stats = false;
};

/// Samples from the checkpoint `dir` (its state.json read into `state`) with Model; returns the
/// process exit code (common/cli.hpp).
template <class Model>
int generate_with(const GenerateOptions& o, const fs::path& dir, const TrainingState& state, const ModelDefaults& d) {
  using Clock = std::chrono::steady_clock;
  using B = typename Model::backend_type;
  const SampleCodec codec(kGenerateTool, o.tokenizer, o.special_tokens, state.shards);
  check(codec.available(), kGenerateTool, dir.string(), " was trained on BPE shards (", state.shards.tokenizer_hash,
        "): pass their tokenizer.json with --tokenizer");
  const auto prompt = codec.prompt(o.prompt);
  // The prompt (BOS + its tokens) and the new tokens must fit the model's context (the decode
  // caches are sized for it: an unchecked count would ask for terabytes).
  const auto prompt_tokens = static_cast<index_t>(prompt.size());
  check_flag(prompt_tokens + o.tokens <= Model::dims.max_seq, kGenerateTool, "tokens", o.tokens, " + the prompt's ",
             prompt_tokens, " tokens exceed the context of \"", state.model, "\" (max_seq ", Model::dims.max_seq, ")");
  check_flag(o.top_k <= Model::dims.vocab, kGenerateTool, "top_k", o.top_k, " exceeds the vocabulary of \"",
             state.model, "\" (", Model::dims.vocab, ")");
  Model model(0);
  load_trained_model(kGenerateTool, dir, state, d, model);
  const std::int32_t bos = state.shards.special.bos, eos = state.shards.special.eos;
  const SamplingOptions so{o.temperature, o.top_k};
  std::fputs(o.prompt.c_str(), stdout);
  Rng rng(o.seed);
  const auto start = Clock::now();
  const auto tokens = generate(model, prompt, o.tokens, so, rng, bos, [&](std::int32_t t) {
    codec.print(t);
    return !(o.stop_at_eos && t == eos);
  });
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("\n");
  if (o.stats) {
    // every token (prompt and new) is one decode step; the time includes the prompt's
    const auto generated = static_cast<double>(tokens.size() - prompt.size());
    std::fprintf(stderr, "generated %.0f tokens after a %lld-token prompt in %.3f s, prompt included (%.1f tokens/s) on %s\n",
                 generated, static_cast<long long>(prompt_tokens), seconds, generated / seconds,
                 device_description<B>().c_str());
  }
  if (!o.verify) return kExitOk;
  Rng reference_rng(o.seed);
  const auto reference = generate_full_forward(model, prompt, o.tokens, so, reference_rng, bos,
                                               [&](std::int32_t t) { return !(o.stop_at_eos && t == eos); });
  std::size_t first_difference = 0;
  while (first_difference < tokens.size() && first_difference < reference.size() &&
         tokens[first_difference] == reference[first_difference])
    ++first_difference;
  if (tokens == reference) {
    std::printf("verify: %zu tokens, cached decoding == full forward at every step\n", tokens.size() - prompt.size());
    return kExitOk;
  }
  std::fprintf(stderr, "verify: cached decoding and full forward differ at token %zu (of %zu / %zu)\n",
               first_difference, tokens.size(), reference.size());
  return kExitVerify;
}

/// generate_with for the checkpoint's model on backend B. (A class rather than a generic lambda:
/// one fewer thing for nvcc's front end.)
template <class B>
struct GenerateOnBackend {
  const GenerateOptions& o;     ///< the flags
  const fs::path& dir;          ///< the checkpoint
  const TrainingState& state;   ///< its state.json
  /// Samples with the registry's Model.
  template <class Model>
  int operator()(std::type_identity<Model>, const ModelDefaults& d) const {
    return generate_with<Model>(o, dir, state, d);
  }
};

/// Samples from checkpoint `dir` with its model on backend B.
template <class B>
int generate_on_backend(const GenerateOptions& o, const fs::path& dir, const TrainingState& state) {
  return with_model<B>(state.model, GenerateOnBackend<B>{o, dir, state});
}

/// The same on the GPU: defined in generate_cuda.cu (nvcc), built with the CUDA backend.
int generate_on_cuda(const GenerateOptions& o, const fs::path& dir, const TrainingState& state);

}  // namespace megacpp::examples
