/// \file
/// megacpp/train/gspo.hpp: Group Sequence Policy Optimization (GSPO; Zheng et al. 2025,
/// "Group Sequence Policy Optimization", arXiv 2507.18071), the reinforcement-learning stage
/// after SFT (docs/recipe.md), on rewards a verifier gives (e.g. the evaluation harness's
/// pass/fail of compiled candidates).
///
/// For each prompt x, G completions y_1..y_G are sampled from the current policy (pi_old) and
/// scored r_i. With |y_i| the completion's length in tokens:
///
///   advantage        A_i = (r_i - mean_j r_j) / std_j r_j                     (paper eq. 6)
///   sequence ratio   s_i = (pi(y_i | x) / pi_old(y_i | x))^(1 / |y_i|)         (eq. 7)
///                        = exp( (1/|y_i|) sum_t [log pi(y_i,t | x, y_i,<t) - log pi_old(...)] )
///   objective        J = mean_i min( s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i )   (eq. 5)
///   gradient         grad J = mean_i [unclipped_i] s_i A_i (1/|y_i|) sum_t grad log pi(y_i,t | ...)  (eq. 10)
///
/// Unlike GRPO's per-token ratios, the ratio and the clipping act on whole sequences, which is
/// why the paper's clipping ranges are tiny (eps_low 3e-4, eps_high 4e-4, section 5.1). A term
/// is clipped (no gradient) when A_i > 0 and s_i > 1 + eps_high, or A_i < 0 and s_i < 1 - eps_low.
///
/// `gspo_loss` returns a scalar whose gradient is -grad J exactly (tested against finite
/// differences of J): L = sum_{i,t} w_i log pi(y_i,t | ...) over completion tokens, with the
/// weight w_i = -[unclipped_i] s_i A_i / (|y_i| rows) held constant (s_i is evaluated, not
/// differentiated: grad s_i = s_i grad log s_i gives eq. 10). Its value is not J; J, the mean
/// ratio and the clipped share are returned beside it for logging. std is the population
/// standard deviation of the group; a group whose rewards are all equal has no signal (A = 0).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/reduce.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/random.hpp"
#include "megacpp/nn/model/sampling.hpp"

namespace megacpp {

/// GSPO's settings; the clipping ranges are the paper's (section 5.1).
struct GspoOptions {
  index_t group_size = 8;           ///< G: completions sampled per prompt
  index_t max_new_tokens = 64;      ///< longest completion
  double clip_low = 3e-4;           ///< eps_low: s below 1 - eps_low is clipped for A < 0
  double clip_high = 4e-4;          ///< eps_high: s above 1 + eps_high is clipped for A > 0
  SamplingOptions sampling{};       ///< how completions are drawn (temperature 1: the policy itself)

  /// Throws megacpp::Error naming the value unless group_size >= 2, max_new_tokens >= 1 and
  /// both clipping ranges are finite, >= 0 and clip_low < 1.
  void validate() const {
    check(group_size >= 2, "GSPO", "group_size must be >= 2 (advantages compare a group's completions), got ", group_size);
    check(max_new_tokens >= 1, "GSPO", "max_new_tokens must be >= 1, got ", max_new_tokens);
    check(std::isfinite(clip_low) && clip_low >= 0 && clip_low < 1, "GSPO", "clip_low must be in [0, 1), got ", clip_low);
    check(std::isfinite(clip_high) && clip_high >= 0, "GSPO", "clip_high must be finite and >= 0, got ", clip_high);
  }
};

/// Group-normalised advantages (eq. 6): rewards in groups of `group_size` consecutive entries.
inline std::vector<double> group_advantages(const std::vector<double>& rewards, index_t group_size) {
  check(group_size >= 1 && static_cast<index_t>(rewards.size()) % group_size == 0, "group_advantages", rewards.size(),
        " rewards do not split into groups of ", group_size);
  std::vector<double> advantages(rewards.size(), 0.0);
  const auto G = static_cast<std::size_t>(group_size);
  for (std::size_t begin = 0; begin < rewards.size(); begin += G) {
    double mean = 0, var = 0;
    for (std::size_t i = begin; i < begin + G; ++i) {
      check(std::isfinite(rewards[i]), "group_advantages", "reward ", i, " is ", rewards[i], ", not a finite number");
      mean += rewards[i];
    }
    mean /= static_cast<double>(G);
    for (std::size_t i = begin; i < begin + G; ++i) var += (rewards[i] - mean) * (rewards[i] - mean);
    const double std_dev = std::sqrt(var / static_cast<double>(G));
    if (std_dev == 0) continue;  // every completion scored the same: nothing to prefer
    for (std::size_t i = begin; i < begin + G; ++i) advantages[i] = (rewards[i] - mean) / std_dev;
  }
  return advantages;
}

/// Prompts with their sampled completions as one padded batch (rows = prompts x G), plus the
/// old policy's log-probabilities of the completion tokens.
struct Rollout {
  index_t rows = 0;                                 ///< prompts * group_size
  index_t seq = 0;                                  ///< padded length (longest prompt + completion - 1)
  std::vector<std::vector<std::int32_t>> prompts;   ///< rows: the prompt of each row
  std::vector<std::vector<std::int32_t>> completions;  ///< rows: the sampled tokens
  std::vector<std::int32_t> input_ids;              ///< (rows, seq): prompt + completion, padded with BOS
  std::vector<std::int32_t> targets;                ///< (rows, seq): the next token
  std::vector<double> completion_mask;              ///< (rows, seq): 1 where the target is a completion token
  std::vector<double> old_log_prob;                 ///< (rows, seq): log pi_old(target), 0 outside the mask
  std::int32_t bos_id = 0;                          ///< padding and document start

  /// |y_i|: completion tokens of row i.
  index_t completion_length(index_t row) const {
    return static_cast<index_t>(completions[static_cast<std::size_t>(row)].size());
  }
};

namespace detail {
// The batch tensors of `r` and log pi(target) per position under `model` (rows, seq), as a Var.
template <class Model>
auto completion_log_probs(const Model& model, const Rollout& r) {
  using B = typename Model::backend_type;
  const Tensor<std::int32_t, B> ids = Tensor<std::int32_t, B>::from_host(Shape{r.rows, r.seq}, r.input_ids);
  const Tensor<std::int32_t, B> targets = Tensor<std::int32_t, B>::from_host(Shape{r.rows, r.seq}, r.targets);
  const auto docs = DocumentLayout<B>::from_tokens(r.input_ids, r.rows, r.seq, r.bos_id);
  return scale(model.per_token_loss(ids, targets, docs), -1.0);
}
}  // namespace detail

/// Builds the padded batch of `prompts` (each row's prompt) and `completions`, and records
/// pi_old's log-probabilities with `model` as it is now (the policy that sampled them).
template <class Model>
Rollout make_rollout(const Model& model, std::vector<std::vector<std::int32_t>> prompts,
                     std::vector<std::vector<std::int32_t>> completions, std::int32_t bos_id) {
  check(!prompts.empty() && prompts.size() == completions.size(), "make_rollout", prompts.size(), " prompts for ",
        completions.size(), " completions");
  Rollout r;
  r.rows = static_cast<index_t>(prompts.size());
  r.bos_id = bos_id;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    check(!prompts[i].empty() && !completions[i].empty(), "make_rollout", "row ", i, " has an empty ",
          prompts[i].empty() ? "prompt" : "completion");
    r.seq = std::max(r.seq, static_cast<index_t>(prompts[i].size() + completions[i].size()) - 1);
  }
  check(r.seq <= Model::dims.max_seq, "make_rollout", "the longest prompt + completion needs ", r.seq,
        " positions, the model has ", Model::dims.max_seq);
  const auto n = static_cast<std::size_t>(r.rows * r.seq);
  r.input_ids.assign(n, bos_id);
  r.targets.assign(n, bos_id);
  r.completion_mask.assign(n, 0.0);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    std::vector<std::int32_t> all = prompts[i];
    all.insert(all.end(), completions[i].begin(), completions[i].end());
    const std::size_t row = i * static_cast<std::size_t>(r.seq);
    for (std::size_t t = 0; t + 1 < all.size(); ++t) {
      r.input_ids[row + t] = all[t];
      r.targets[row + t] = all[t + 1];
      if (t + 1 >= prompts[i].size()) r.completion_mask[row + t] = 1.0;
    }
  }
  r.prompts = std::move(prompts);
  r.completions = std::move(completions);
  NoGrad no_grad;
  const auto log_prob = detail::completion_log_probs(model, r).value().to_host();
  r.old_log_prob.assign(n, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    if (r.completion_mask[i] != 0) r.old_log_prob[i] = static_cast<double>(log_prob[i]);
  return r;
}

/// Samples options.group_size completions of each prompt from `model` (generate(); a completion
/// ends after max_new_tokens or at `stop_id`, which it keeps) and builds their Rollout.
template <class Model>
Rollout sample_rollout(const Model& model, const std::vector<std::vector<std::int32_t>>& prompts,
                       const GspoOptions& options, Rng& rng, std::int32_t bos_id, std::int32_t stop_id) {
  options.validate();
  std::vector<std::vector<std::int32_t>> row_prompts, completions;
  for (const auto& prompt : prompts)
    for (index_t g = 0; g < options.group_size; ++g) {
      const auto sequence = generate(model, prompt, options.max_new_tokens, options.sampling, rng, bos_id,
                                     [stop_id](std::int32_t id) { return id != stop_id; });
      row_prompts.push_back(prompt);
      completions.emplace_back(sequence.begin() + static_cast<std::ptrdiff_t>(prompt.size()), sequence.end());
    }
  return make_rollout(model, std::move(row_prompts), std::move(completions), bos_id);
}

/// One GSPO loss evaluation: `loss` to differentiate (its gradient is -grad J; backward() it) and what to log.
template <class T, class B>
struct GspoLoss {
  Var<T, B> loss;                 ///< sum_{i,t} w_i log pi_i,t (file comment): pass it to backward()
  double objective = 0;           ///< J, eq. 5
  double mean_ratio = 0;          ///< mean_i s_i
  double clipped_fraction = 0;    ///< share of rows whose term is clipped (no gradient)
  std::vector<double> ratios;     ///< s_i per row
};

/// GSPO's loss for `rollout` under `model`'s current parameters, with `advantages` (one per row,
/// from group_advantages) and the clipping ranges of `options`.
template <class Model>
auto gspo_loss(const Model& model, const Rollout& rollout, const std::vector<double>& advantages,
               const GspoOptions& options) {
  using T = typename Model::value_type;
  using B = typename Model::backend_type;
  options.validate();
  check(static_cast<index_t>(advantages.size()) == rollout.rows, "gspo_loss", advantages.size(), " advantages for ",
        rollout.rows, " rows");
  const Var<T, B> log_prob = detail::completion_log_probs(model, rollout);
  const std::vector<T> now = log_prob.value().to_host();
  GspoLoss<T, B> out;
  std::vector<T> weight(now.size(), T(0));
  const double rows = static_cast<double>(rollout.rows);
  index_t clipped = 0;
  for (index_t i = 0; i < rollout.rows; ++i) {
    const auto row = static_cast<std::size_t>(i * rollout.seq);
    const double length = static_cast<double>(rollout.completion_length(i));
    double log_ratio = 0;
    for (index_t t = 0; t < rollout.seq; ++t)
      if (rollout.completion_mask[row + t] != 0) log_ratio += static_cast<double>(now[row + t]) - rollout.old_log_prob[row + t];
    const double s = std::exp(log_ratio / length), a = advantages[static_cast<std::size_t>(i)];
    const double s_clipped = std::clamp(s, 1.0 - options.clip_low, 1.0 + options.clip_high);
    out.objective += std::min(s * a, s_clipped * a) / rows;
    out.mean_ratio += s / rows;
    out.ratios.push_back(s);
    const bool is_clipped = (a > 0 && s > 1.0 + options.clip_high) || (a < 0 && s < 1.0 - options.clip_low);
    clipped += is_clipped ? 1 : 0;
    // d(-J)/d log pi(y_i,t) = -s_i A_i / (|y_i| rows) when unclipped; log_prob enters with that weight
    const double w = is_clipped ? 0.0 : -s * a / (length * rows);
    for (index_t t = 0; t < rollout.seq; ++t)
      if (rollout.completion_mask[row + t] != 0) weight[row + t] = static_cast<T>(w);
  }
  out.clipped_fraction = static_cast<double>(clipped) / rows;
  const Var<T, B> w(Tensor<T, B>::from_host(Shape{rollout.rows, rollout.seq}, weight));
  out.loss = sum(mul(log_prob, w));
  return out;
}

}  // namespace megacpp
