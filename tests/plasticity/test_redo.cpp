// ReDo: the hook leaves forward results unchanged and records only when enabled and in training
// forwards; exactly the units below the threshold are recycled, with the documented rewrite; a
// layer with no dormant unit is bitwise unchanged; too little history is a clear error.
#include "plasticity_testing.hpp"

using namespace megacpp;
using namespace megacpp::plasticity;
using megacpp::testing::random_matrix;

namespace {
constexpr index_t kD = 8, kHidden = 16;

// A dense MLP with a random (not zero) output projection, inside a Module with ReDo's names.
struct OneMlp {
  MLP<float, Cpu> mlp;
  explicit OneMlp(std::uint64_t seed) {
    Rng rng(seed);
    mlp = MLP<float, Cpu>(kD, rng, kHidden);
    mlp.proj.weight.var.mutable_value().assign(random_matrix<float>(kD, kHidden, seed + 1, 0.2));
  }
  template <class V>
  void for_each_param(V&& visit, const std::string& prefix = "") {
    mlp.for_each_param(visit, child_name(prefix, "blocks.0.ffn"));
  }
};

Var<float, Cpu> input(std::uint64_t seed) { return Var<float, Cpu>(random_matrix<float>(12, kD, seed)); }

// Zeroes incoming rows: relu^2(0 . x) = 0, so those units never fire.
void kill_units(OneMlp& m, const std::vector<index_t>& units) {
  std::vector<float> w = m.mlp.fc.weight.value().to_host();
  for (index_t u : units)
    for (index_t j = 0; j < kD; ++j) w[static_cast<std::size_t>(u * kD + j)] = 0;
  m.mlp.fc.weight.var.mutable_value().assign(Tensor<float, Cpu>::from_host(Shape{kHidden, kD}, w));
}
}  // namespace

TEST_CASE("ReDo hook: forward results are bitwise unchanged; recording only when enabled, with gradients", "[plasticity][redo]") {
  OneMlp m(1);
  const auto x = input(5);
  const auto plain = m.mlp.forward(x).value().to_host();
  ReDoTracker<float, Cpu> tracker(ReDoOptions{.min_history = 2});
  tracker.attach(m.mlp, "blocks.0.ffn");
  CHECK(m.mlp.forward(x).value().to_host() == plain);
  CHECK(tracker.layers()[0].history == 0);  // disabled: nothing recorded
  tracker.set_enabled(true);
  CHECK(m.mlp.forward(x).value().to_host() == plain);
  CHECK(tracker.layers()[0].history == 1);
  {
    NoGrad no_grad;  // evaluation forwards are not training evidence
    m.mlp.forward(x);
  }
  CHECK(tracker.layers()[0].history == 1);
  CHECK(tracker.layers()[0].incoming == "blocks.0.ffn.fc.weight");
  CHECK(tracker.layers()[0].outgoing == "blocks.0.ffn.proj.weight");
  // the recorded value is the mean |relu^2(x W1^T)| per unit
  const auto h = relu2(m.mlp.fc.forward(x)).value().to_host();
  for (index_t i = 0; i < kHidden; ++i) {
    double mean = 0;
    for (index_t r = 0; r < 12; ++r) mean += std::abs(double(h[static_cast<std::size_t>(r * kHidden + i)]));
    CHECK(tracker.layers()[0].ema[static_cast<std::size_t>(i)] == Approx(mean / 12).epsilon(1e-12));
  }
}

TEST_CASE("ReDo: exactly the dormant units are recycled: incoming row redrawn, outgoing column scaled, state cleared",
          "[plasticity][redo]") {
  OneMlp m(2);
  auto params = optim::collect_params<float, Cpu>(m);
  optim::Hybrid<float, Cpu> opt(params);
  Rng rng(7);
  for (auto& p : params) p.grad_buffer().assign(randn<float, Cpu>(p.shape(), rng, 1.0));
  opt.step();  // every entry now has optimiser state
  kill_units(m, {3, 11});
  ReDoTracker<float, Cpu> tracker(ReDoOptions{.min_history = 4});
  tracker.attach(m.mlp, "blocks.0.ffn");
  tracker.set_enabled(true);
  for (int s = 0; s < 3; ++s) m.mlp.forward(input(10 + static_cast<std::uint64_t>(s)));
  CHECK_THROWS_WITH(tracker.recycle(params, opt), Catch::Contains("3 recorded passes, fewer than min_history 4"));
  m.mlp.forward(input(20));
  REQUIRE(tracker.ready());
  const auto fc = m.mlp.fc.weight.value().to_host(), proj = m.mlp.proj.weight.value().to_host();
  const auto state = optim::save_state(opt);
  const auto entries = tracker.recycle(params, opt);
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].units == std::vector<index_t>{3, 11});
  const auto fc2 = m.mlp.fc.weight.value().to_host(), proj2 = m.mlp.proj.weight.value().to_host();
  for (index_t u = 0; u < kHidden; ++u) {
    const bool recycled = u == 3 || u == 11;
    for (index_t j = 0; j < kD; ++j) {
      const auto k = static_cast<std::size_t>(u * kD + j);
      if (recycled) CHECK(fc2[k] != 0.0f);
      else CHECK(fc2[k] == fc[k]);
    }
    for (index_t r = 0; r < kD; ++r) {
      const auto k = static_cast<std::size_t>(r * kHidden + u);
      CHECK(proj2[k] == (recycled ? static_cast<float>(double(proj[k]) * 0.1) : proj[k]));
    }
  }
  // optimiser state: exactly fc rows 3, 11 and proj columns 3, 11 are zero, the rest unchanged
  const auto after = optim::save_state(opt);
  const auto fc_m = after.tensors.at("momentum_buffer.blocks.0.ffn.fc.weight").to_host();
  const auto fc_m0 = state.tensors.at("momentum_buffer.blocks.0.ffn.fc.weight").to_host();
  const auto pr_m = after.tensors.at("momentum_buffer.blocks.0.ffn.proj.weight").to_host();
  const auto pr_m0 = state.tensors.at("momentum_buffer.blocks.0.ffn.proj.weight").to_host();
  for (index_t u = 0; u < kHidden; ++u)
    for (index_t j = 0; j < kD; ++j) {
      const bool recycled = u == 3 || u == 11;
      const auto kf = static_cast<std::size_t>(u * kD + j), kp = static_cast<std::size_t>(j * kHidden + u);
      CHECK(fc_m[kf] == (recycled ? 0.0f : fc_m0[kf]));
      CHECK(pr_m[kp] == (recycled ? 0.0f : pr_m0[kp]));
    }
  // the statistics restart: a new recycle needs fresh history
  CHECK(tracker.layers()[0].history == 0);
  CHECK_THROWS_WITH(tracker.recycle(params, opt), Catch::Contains("fewer than min_history"));
}

TEST_CASE("ReDo: a layer with no dormant unit is bitwise unchanged, weights and optimiser state", "[plasticity][redo]") {
  OneMlp m(3);
  auto params = optim::collect_params<float, Cpu>(m);
  optim::Hybrid<float, Cpu> opt(params);
  Rng rng(8);
  for (auto& p : params) p.grad_buffer().assign(randn<float, Cpu>(p.shape(), rng, 1.0));
  opt.step();
  ReDoTracker<float, Cpu> tracker(ReDoOptions{.tau = 1e-6, .min_history = 2});
  tracker.attach(m.mlp, "blocks.0.ffn");
  tracker.set_enabled(true);
  for (int s = 0; s < 2; ++s) m.mlp.forward(input(30 + static_cast<std::uint64_t>(s)));
  const auto fc = m.mlp.fc.weight.value().to_host(), proj = m.mlp.proj.weight.value().to_host();
  const auto state = optim::save_state(opt);
  const auto entries = tracker.recycle(params, opt);
  CHECK(entries[0].units.empty());
  CHECK(megacpp::testing::bitwise_equal(m.mlp.fc.weight.value().to_host(), fc));
  CHECK(megacpp::testing::bitwise_equal(m.mlp.proj.weight.value().to_host(), proj));
  const auto after = optim::save_state(opt);
  for (const auto& [name, t] : after.tensors) CHECK(megacpp::testing::bitwise_equal(t.to_host(), state.tensors.at(name).to_host()));
}

TEST_CASE("ReDo: dormant_units takes exactly the units whose score is at most tau", "[plasticity][redo]") {
  // mean = 4 / 5 = 0.8 in both; tau 0.025 -> units with ema <= 0.02
  dist::SingleProcess single;
  CHECK(dormant_units<Cpu>({0.01, 1, 2, 0.99, 0}, 0.025, single) == std::vector<index_t>{0, 4});
  CHECK(dormant_units<Cpu>({0.03, 1, 2, 0.97, 0}, 0.025, single) == std::vector<index_t>{4});
  CHECK(dormant_units<Cpu>({0, 0, 0}, 0.025, single) == std::vector<index_t>{0, 1, 2});
}
