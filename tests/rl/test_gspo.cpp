// GSPO (train/gspo.hpp): the advantages of eq. 6 on hand-computed groups, the rollout's padding
// and masks, the loss's gradient against finite differences of the objective J (eq. 5) with and
// without clipped terms, and a toy task with a verifiable reward on which the policy measurably
// improves.
#include "support/op_testing.hpp"

#include <algorithm>
#include <cmath>

#include "megacpp/nn/model.hpp"
#include "megacpp/optim.hpp"
#include "megacpp/train/gspo.hpp"

using namespace megacpp;
using Catch::Matchers::Contains;

namespace {
inline constexpr Dims kDims{.d_model = 16, .n_layers = 2, .vocab = 12, .max_seq = 32};
inline constexpr AttentionSizes kAttention{.n_heads = 2, .n_kv_heads = 1};
inline constexpr MambaSizes kMamba{.d_state = 4, .headdim = 8, .expand = 2};
template <class T>
using PolicyLM = RecipeLM<T, Cpu, kDims, "AM", kAttention, kMamba>;
constexpr std::int32_t kBos = 0;

// Every matrix drawn at scale 0.3 so the policy is far from uniform (the zero-initialised output
// projections would otherwise make every position's distribution the same).
template <class Model>
void randomise(Model& model, std::uint64_t seed) {
  Rng rng(seed);
  model.for_each_param([&](const std::string&, auto& p) {
    if (p.var.value().rank() == 2)
      p.var.mutable_value().assign(randn<typename Model::value_type, Cpu>(p.var.value().shape(), rng, 0.3));
  });
}

// J (eq. 5) of `rollout` under `model`, the objective gspo_loss reports.
template <class Model>
double objective(const Model& model, const Rollout& r, const std::vector<double>& adv, const GspoOptions& o) {
  NoGrad no_grad;
  return gspo_loss(model, r, adv, o).objective;
}
}  // namespace

TEST_CASE("GSPO: group advantages are (r - mean) / std per group, zero for a group without spread", "[rl][gspo]") {
  const auto a = group_advantages({1, 0, 0, 1, 2, 2, 2, 2, 3, 0, 0, 0}, 4);
  const std::vector<double> want{1, -1, -1, 1, 0, 0, 0, 0, std::sqrt(3.0), -1 / std::sqrt(3.0), -1 / std::sqrt(3.0),
                                 -1 / std::sqrt(3.0)};
  REQUIRE(a.size() == want.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(want[i]).margin(1e-12));
  CHECK_THROWS_WITH(group_advantages({1, 0, 1}, 2), Contains("3 rewards do not split into groups of 2"));
  CHECK_THROWS_WITH(group_advantages({1, NAN}, 2), Contains("reward 1 is nan"));
  GspoOptions o;
  o.group_size = 1;
  CHECK_THROWS_WITH(o.validate(), Contains("group_size must be >= 2"));
}

TEST_CASE("GSPO: a rollout pads with BOS and masks exactly the completion targets", "[rl][gspo]") {
  PolicyLM<double> model(1);
  const Rollout r = make_rollout(model, {{kBos, 3}, {kBos, 4, 5}}, {{6, 7, 8}, {9}}, kBos);
  CHECK(r.rows == 2);
  CHECK(r.seq == 4);  // 2 + 3 - 1
  CHECK(r.input_ids == std::vector<std::int32_t>{kBos, 3, 6, 7, kBos, 4, 5, kBos});
  CHECK(r.targets == std::vector<std::int32_t>{3, 6, 7, 8, 4, 5, 9, kBos});
  CHECK(r.completion_mask == std::vector<double>{0, 1, 1, 1, 0, 0, 1, 0});
  CHECK(r.old_log_prob[0] == 0);
  CHECK(r.old_log_prob[1] < 0);
  CHECK_THROWS_WITH(make_rollout(model, {{kBos}}, {{}}, kBos), Contains("row 0 has an empty completion"));
}

TEST_CASE("GSPO: the loss's gradient is -grad J (finite differences), clipped terms contribute none", "[rl][gspo][gradcheck]") {
  PolicyLM<double> old_policy(2);
  randomise(old_policy, 3);
  const Rollout r = make_rollout(old_policy, {{kBos, 3}, {kBos, 3}, {kBos, 5}, {kBos, 5}},
                                 {{6, 7, 8}, {9, 2}, {4, 4, 4, 1}, {7}}, kBos);
  // The current policy differs from the one that sampled, so the ratios are not 1.
  PolicyLM<double> policy(2);
  randomise(policy, 3);
  Rng nudge(4);
  policy.for_each_param([&](const std::string&, auto& p) {
    auto v = p.var.value().to_host();
    for (auto& x : v) x += 0.02 * nudge.normal();
    p.var.mutable_value().assign(Tensor<double, Cpu>::from_host(p.var.value().shape(), v));
  });
  const std::vector<double> adv = group_advantages({1, 0, 0, 1}, 2);
  GspoOptions o;
  SECTION("wide clipping range: every term has its gradient") {
    o.clip_low = o.clip_high = 0.9;
  }
  SECTION("the paper's ranges: some terms are clipped") {}
  auto result = gspo_loss(policy, r, adv, o);
  INFO("clipped fraction " << result.clipped_fraction << ", mean ratio " << result.mean_ratio);
  if (o.clip_low == 0.9) CHECK(result.clipped_fraction == 0);
  else CHECK(result.clipped_fraction > 0);
  for (double s : result.ratios) CHECK(std::abs(s - 1) > 1e-4);  // away from the clip boundary's kink
  backward(result.loss);
  int checked = 0;
  double worst = 0;
  policy.for_each_param([&](const std::string& name, auto& p) {
    if (checked >= 6 || p.var.value().rank() != 2) return;
    auto v = p.var.value().to_host();
    const auto g = p.var.grad().to_host();
    for (std::size_t i = 0; i < v.size(); i += v.size() / 3 + 1) {
      const double h = 1e-6, keep = v[i];
      v[i] = keep + h;
      p.var.mutable_value().assign(Tensor<double, Cpu>::from_host(p.var.value().shape(), v));
      const double up = objective(policy, r, adv, o);
      v[i] = keep - h;
      p.var.mutable_value().assign(Tensor<double, Cpu>::from_host(p.var.value().shape(), v));
      const double down = objective(policy, r, adv, o);
      v[i] = keep;
      p.var.mutable_value().assign(Tensor<double, Cpu>::from_host(p.var.value().shape(), v));
      const double numeric = -(up - down) / (2 * h);
      INFO(name << "[" << i << "]: analytic " << g[i] << ", numeric " << numeric);
      CHECK(g[i] == Approx(numeric).margin(1e-7).epsilon(1e-5));
      worst = std::max(worst, std::abs(g[i]));
    }
    ++checked;
  });
  CHECK(worst > 1e-5);  // the gradients compared are not all zero
}

// The toy task: after BOS and a "question" token q in {3, 4, 5}, the completion (4 tokens, or
// fewer when it emits the stop token 1) earns reward 1 when it contains q + 5, 0 otherwise. The
// verifier is exact; a random policy scores about 1 - (11/12)^4 = 0.29.
TEST_CASE("GSPO: on a verifiable toy task the policy's reward rises", "[rl][gspo][slow]") {
  PolicyLM<float> policy(5);
  optim::AdamW<float, Cpu> opt(optim::collect_params<float, Cpu>(policy), optim::AdamWOptions{.lr = 2e-2});
  GspoOptions o;
  o.group_size = 8;
  o.max_new_tokens = 4;
  const std::vector<std::vector<std::int32_t>> prompts{{kBos, 3}, {kBos, 4}, {kBos, 5}};
  const auto reward = [](const std::vector<std::int32_t>& prompt, const std::vector<std::int32_t>& completion) {
    return std::find(completion.begin(), completion.end(), prompt[1] + 5) != completion.end() ? 1.0 : 0.0;
  };
  const auto mean_reward = [&](const Rollout& r) {
    double total = 0;
    for (index_t i = 0; i < r.rows; ++i)
      total += reward(r.prompts[static_cast<std::size_t>(i)], r.completions[static_cast<std::size_t>(i)]);
    return total / static_cast<double>(r.rows);
  };
  Rng rng(6);
  std::vector<double> curve;
  for (int iteration = 0; iteration < 40; ++iteration) {
    const Rollout r = sample_rollout(policy, prompts, o, rng, kBos, 1);
    std::vector<double> rewards;
    for (index_t i = 0; i < r.rows; ++i)
      rewards.push_back(reward(r.prompts[static_cast<std::size_t>(i)], r.completions[static_cast<std::size_t>(i)]));
    curve.push_back(mean_reward(r));
    const std::vector<double> adv = group_advantages(rewards, o.group_size);
    for (int update = 0; update < 2; ++update) {  // the second update sees ratios != 1
      auto step = gspo_loss(policy, r, adv, o);
      opt.zero_grad();
      backward(step.loss);
      opt.step();
    }
  }
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    first += curve[static_cast<std::size_t>(i)] / 5;
    last += curve[curve.size() - 1 - static_cast<std::size_t>(i)] / 5;
  }
  INFO("mean reward over the first 5 iterations " << first << ", over the last 5 " << last);
  CHECK(last > first + 0.3);
  CHECK(last > 0.75);
}
