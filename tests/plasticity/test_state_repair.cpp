// Optimiser-state repair: without it, the next step pulls a rewritten row back along its stale
// momentum; with it, the row moves only by its own new gradient. And it clears nothing else.
#include "plasticity_testing.hpp"

using namespace megacpp;
using namespace megacpp::plasticity;

namespace {
// Trains a (rows, cols) matrix for a few steps under a constant gradient G (momentum builds up
// along -G), rewinds row `row` to its starting value A, optionally repairs its state, then takes
// one step with a zero gradient. Returns (A, the row before the rewind B, the row after the step).
template <class MakeOpt>
auto pull_back(MakeOpt make_opt, bool repair) {
  constexpr index_t rows = 6, cols = 4, row = 2;
  Param<float, Cpu> w(megacpp::testing::random_matrix<float>(rows, cols, 1, 0.5), Role::matrix);
  std::vector<optim::ParamRef<float, Cpu>> params{optim::make_param_ref("w", w)};
  auto opt = make_opt(params);
  const auto g = megacpp::testing::random_matrix<float>(rows, cols, 2);
  const auto row_of = [&](const std::vector<float>& m) {
    return std::vector<double>(m.begin() + row * cols, m.begin() + (row + 1) * cols);
  };
  const std::vector<float> start = w.value().to_host();
  for (int s = 0; s < 5; ++s) {
    params[0].grad_buffer().assign(g);
    opt.step();
  }
  std::vector<float> m = w.value().to_host();
  const std::vector<double> trained = row_of(m);
  for (index_t j = 0; j < cols; ++j) m[static_cast<std::size_t>(row * cols + j)] = start[static_cast<std::size_t>(row * cols + j)];
  w.var.mutable_value().assign(Tensor<float, Cpu>::from_host(Shape{rows, cols}, m));  // the intervention's rewrite
  if (repair) CHECK(clear_state_rows(opt, "w", {row}) >= 1);
  params[0].grad_buffer().assign(Tensor<float, Cpu>::zeros(Shape{rows, cols}));
  opt.step();
  return std::tuple{row_of(start), trained, row_of(w.value().to_host())};
}

double dot_delta(const std::vector<double>& from, const std::vector<double>& to, const std::vector<double>& toward) {
  double d = 0;
  for (std::size_t j = 0; j < from.size(); ++j) d += (to[j] - from[j]) * (toward[j] - from[j]);
  return d;
}

auto make_muon = [](std::vector<optim::ParamRef<float, Cpu>>& p) { return optim::Muon<float, Cpu>(p, {.lr = 0.05}); };
auto make_adamw = [](std::vector<optim::ParamRef<float, Cpu>>& p) { return optim::AdamW<float, Cpu>(p, {.lr = 0.05}); };
}  // namespace

TEST_CASE("State repair: without it the next step pulls the rewritten row back; with it the row stays", "[plasticity][repair]") {
  SECTION("Muon") {
    const auto [start, trained, stale] = pull_back(make_muon, false);
    CHECK(dot_delta(start, stale, trained) > 0);  // moved toward the pre-rewrite row
    const auto [start2, trained2, repaired] = pull_back(make_muon, true);
    CHECK(repaired == start2);                    // zero momentum, zero gradient: not moved
  }
  SECTION("AdamW") {
    const auto [start, trained, stale] = pull_back(make_adamw, false);
    CHECK(dot_delta(start, stale, trained) > 0);
    const auto [start2, trained2, repaired] = pull_back(make_adamw, true);
    CHECK(repaired == start2);
  }
}

TEST_CASE("State repair: clears exactly the chosen rows or columns of every state tensor", "[plasticity][repair]") {
  Param<float, Cpu> a(megacpp::testing::random_matrix<float>(5, 3, 1), Role::matrix);
  Param<float, Cpu> b(megacpp::testing::random_matrix<float>(5, 3, 2), Role::embedding);
  std::vector<optim::ParamRef<float, Cpu>> params{optim::make_param_ref("a", a), optim::make_param_ref("b", b)};
  optim::Hybrid<float, Cpu> opt(params);
  Rng rng(3);
  for (auto& p : params) p.grad_buffer().assign(randn<float, Cpu>(p.shape(), rng, 1.0));
  opt.step();
  const auto before = optim::save_state(opt);
  CHECK(clear_state_rows(opt, "a", {1, 4}) == 1);  // Muon: the momentum buffer
  CHECK(clear_state_cols(opt, "b", {2}) == 2);     // AdamW: exp_avg and exp_avg_sq
  const auto after = optim::save_state(opt);
  for (const auto& [name, t] : after.tensors) {
    CAPTURE(name);
    const auto x = t.to_host(), x0 = before.tensors.at(name).to_host();
    for (index_t i = 0; i < 5; ++i)
      for (index_t j = 0; j < 3; ++j) {
        const auto k = static_cast<std::size_t>(i * 3 + j);
        const bool cleared = (name == "momentum_buffer.a" && (i == 1 || i == 4)) || (name.ends_with(".b") && j == 2);
        CHECK(x[k] == (cleared ? 0.0f : x0[k]));
      }
  }
  CHECK(after.counters == before.counters);  // step counters belong to the whole parameter
  CHECK_THROWS_WITH(clear_state_rows(opt, "c", {0}), Catch::Contains("no parameter named 'c'"));
  CHECK_THROWS_WITH(clear_state_rows(opt, "a", {5}), Catch::Contains("line 5 is out of range"));
}
