// megacpp/nn/model/sampling.hpp: next-token sampling and autoregressive generation.
//
//   sample_token:  temperature 0 -> argmax (lowest index on ties); otherwise keep the top_k largest
//                  logits (all when top_k = 0), p_i = softmax(z_i / temperature) over them, and
//                  draw one index by inverse CDF with one Rng::uniform() (the same seed gives the
//                  same tokens on every backend: the draw happens on the host).
//   generate:      prefill the prompt one token at a time through LM::step_logits (the KV cache
//                  and Mamba state grow as the training forward would see them), then sample and
//                  feed each new token.
//   generate_full_forward: the reference: re-run logits(hidden(whole sequence)) every step and
//                  take the last position. O(n^2) per token, for tests only.
// A generated BOS starts a new document in both (DocumentLayout and step_logits agree: docs/recipe.md "Document masking").
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp {

/// How sample_token picks a token from logits.
struct SamplingOptions {
  double temperature = 1.0;  ///< softmax(z / temperature); 0: greedy argmax (no random draw)
  index_t top_k = 0;         ///< sample among the top_k largest logits only; 0: the whole vocabulary
};

/// One token id drawn from `logits` (vocab values on the host) under `options`. Greedy
/// (temperature 0) takes the lowest index among equal maxima and leaves `rng` untouched; otherwise
/// exactly one rng.uniform() is drawn, so a seed fixes the whole generated sequence.
template <std::floating_point L>
std::int32_t sample_token(const L* logits, index_t vocab, const SamplingOptions& options, Rng& rng) {
  const char* op = "sample_token";
  check(vocab > 0, op, "vocab must be positive, got ", vocab);
  check(options.temperature >= 0 && std::isfinite(options.temperature), op,
        "temperature must be finite and >= 0 (0: greedy), got ", options.temperature);
  check(options.top_k >= 0, op, "top_k must be >= 0 (0: no filtering), got ", options.top_k);
  for (index_t i = 0; i < vocab; ++i)
    check(!std::isnan(logits[i]), op, "logit ", i, " is NaN");
  if (options.temperature == 0) return static_cast<std::int32_t>(std::max_element(logits, logits + vocab) - logits);

  // candidates: the top_k largest logits, ties broken towards the lower index; kept in index
  // order so the inverse-CDF walk does not depend on the sort
  std::vector<index_t> candidates(static_cast<std::size_t>(vocab));
  for (index_t i = 0; i < vocab; ++i) candidates[static_cast<std::size_t>(i)] = i;
  if (options.top_k > 0 && options.top_k < vocab) {
    const auto larger = [&](index_t a, index_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::nth_element(candidates.begin(), candidates.begin() + options.top_k, candidates.end(), larger);
    candidates.resize(static_cast<std::size_t>(options.top_k));
    std::sort(candidates.begin(), candidates.end());
  }
  double z_max = -std::numeric_limits<double>::infinity();
  for (index_t i : candidates) z_max = std::max(z_max, static_cast<double>(logits[i]));
  check(std::isfinite(z_max), op, "no candidate has a finite logit (largest: ", z_max, ")");
  std::vector<double> weight(candidates.size());
  double total = 0;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    weight[c] = std::exp((static_cast<double>(logits[candidates[c]]) - z_max) / options.temperature);
    total += weight[c];
  }
  const double u = rng.uniform() * total;
  double cumulative = 0;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    cumulative += weight[c];
    if (u < cumulative && weight[c] > 0) return static_cast<std::int32_t>(candidates[c]);
  }
  // u landed on the rounding gap at the top of the CDF: the last candidate with weight
  for (std::size_t c = candidates.size(); c-- > 0;)
    if (weight[c] > 0) return static_cast<std::int32_t>(candidates[c]);
  return static_cast<std::int32_t>(candidates.front());
}

namespace detail {
// Calls on_token(token); true unless the callback returned false (stop generating).
template <class OnToken>
bool emit_token(OnToken& on_token, std::int32_t token) {
  if constexpr (std::is_same_v<std::invoke_result_t<OnToken&, std::int32_t>, bool>) return std::invoke(on_token, token);
  else {
    std::invoke(on_token, token);
    return true;
  }
}
// Throws unless a generation request is usable.
inline void check_generation(const char* op, const std::vector<std::int32_t>& prompt, index_t n_new, index_t vocab) {
  check(!prompt.empty(), op, "the prompt is empty: start it with at least one token (usually BOS)");
  check(n_new >= 0, op, "n_new must be >= 0, got ", n_new);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    check(prompt[i] >= 0 && prompt[i] < vocab, op, "prompt token ", i, " has id ", prompt[i],
          ", outside the vocabulary [0, ", vocab, ")");
}
}  // namespace detail

/// A callback for generate() that ignores every token.
struct IgnoreTokens {
  /// Does nothing.
  void operator()(std::int32_t) const {}
};

/// Generates `n_new` tokens after `prompt` with the model's decode caches (one row): returns the
/// prompt followed by the new tokens. `on_token(id)` sees each new token as it is chosen; if it
/// returns bool, false stops generation early (e.g. at an end-of-text token).
/// `Model` needs make_cache(batch, capacity), step_logits(tokens, cache, bos_id) and dims.vocab
/// (LM does).
template <class Model, class OnToken = IgnoreTokens>
std::vector<std::int32_t> generate(const Model& model, std::vector<std::int32_t> prompt, index_t n_new,
                                   const SamplingOptions& options, Rng& rng, std::int32_t bos_id,
                                   OnToken on_token = {}) {
  NoGrad no_grad;
  const index_t vocab = Model::dims.vocab;
  detail::check_generation("generate", prompt, n_new, vocab);
  std::vector<std::int32_t> sequence = std::move(prompt);
  const std::size_t prompt_size = sequence.size();
  auto cache = model.make_cache(1, static_cast<index_t>(prompt_size) + n_new);
  std::vector<typename Model::value_type> logits;
  // The prompt's tokens fill the caches; only the last one's logits are read back (a read waits
  // for the device's work on a GPU backend).
  for (std::size_t i = 0; i < prompt_size; ++i) {
    const auto step = model.step_logits({sequence[i]}, cache, bos_id);
    if (i + 1 == prompt_size) logits = step.value().to_host();
  }
  for (index_t n = 0; n < n_new; ++n) {
    const std::int32_t next = sample_token(logits.data(), vocab, options, rng);
    sequence.push_back(next);
    if (!detail::emit_token(on_token, next)) break;
    if (n + 1 < n_new) logits = model.step_logits({next}, cache, bos_id).value().to_host();
  }
  return sequence;
}

/// The reference generate(): the same sampling, but each step re-runs the full forward
/// logits(hidden(sequence)) over the whole sequence (documents from LM::documents with `bos_id`)
/// and samples from its last position. Quadratic in the length: for tests.
template <class Model, class OnToken = IgnoreTokens>
std::vector<std::int32_t> generate_full_forward(const Model& model, std::vector<std::int32_t> prompt, index_t n_new,
                                                const SamplingOptions& options, Rng& rng, std::int32_t bos_id,
                                                OnToken on_token = {}) {
  using B = typename Model::backend_type;
  NoGrad no_grad;
  const index_t vocab = Model::dims.vocab;
  detail::check_generation("generate_full_forward", prompt, n_new, vocab);
  std::vector<std::int32_t> sequence = std::move(prompt);
  for (index_t n = 0; n < n_new; ++n) {
    const index_t len = static_cast<index_t>(sequence.size());
    const auto ids = Tensor<std::int32_t, B>::from_host(Shape{1, len}, sequence);
    const auto logits = model.logits(model.hidden(ids, Model::documents(sequence, 1, len, bos_id))).value().to_host();
    const std::int32_t next = sample_token(logits.data() + (len - 1) * vocab, vocab, options, rng);
    sequence.push_back(next);
    if (!detail::emit_token(on_token, next)) break;
  }
  return sequence;
}

}  // namespace megacpp
