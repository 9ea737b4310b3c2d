// FIRE: orthogonality of the result at the kept scale, the kept RMS, target selection, the
// one-shot-per-phase rule and the optimiser state of exactly the rewritten parameters.
#include "plasticity_testing.hpp"

using namespace megacpp;
using namespace megacpp::plasticity;
using megacpp::testing::orthogonality_error;
using megacpp::testing::random_matrix;

TEST_CASE("FIRE: W^T W (tall) or W W^T (wide) is s^2 I to 1e-4 in fp32, with ||W||_F kept", "[plasticity][fire]") {
  for (const auto& [rows, cols] : std::vector<std::pair<index_t, index_t>>{{64, 64}, {256, 64}, {64, 256}, {16, 64}, {37, 23}}) {
    CAPTURE(rows, cols);
    auto w = random_matrix<float>(rows, cols, static_cast<std::uint64_t>(rows * 1000 + cols), 0.02);
    const std::vector<float> before = w.to_host();
    const FireResult r = fire_matrix(w);
    REQUIRE_FALSE(r.skipped);
    const std::vector<float> after = w.to_host();
    CHECK(orthogonality_error(after, rows, cols, r.scale) <= 1e-4);
    double ss_before = 0, ss_after = 0;
    for (std::size_t i = 0; i < after.size(); ++i) {
      ss_before += double(before[i]) * before[i];
      ss_after += double(after[i]) * after[i];
    }
    CHECK(std::sqrt(ss_after) == Approx(std::sqrt(ss_before)).epsilon(1e-4));  // the RMS is kept
    CHECK(r.scale == Approx(std::sqrt(ss_before / double(std::min(rows, cols)))).epsilon(1e-9));
    CHECK(r.steps >= 1);
  }
}

TEST_CASE("FIRE: NS5 alone is not orthogonal to 1e-4, which is why the cubic iteration follows", "[plasticity][fire]") {
  auto w = random_matrix<float>(64, 64, 9, 0.02);
  auto only_ns5 = w.clone();
  FireOptions o;
  o.max_steps = 1;
  o.tolerance = 1e9;  // stop after the first cubic step: NS5's 5 steps and one cubic step
  const FireResult one = fire_matrix(only_ns5, o);
  const FireResult full = fire_matrix(w);
  CHECK(orthogonality_error(only_ns5.to_host(), 64, 64, one.scale) > 1e-3);
  CHECK(orthogonality_error(w.to_host(), 64, 64, full.scale) <= 1e-4);
}

TEST_CASE("FIRE: a zero matrix is skipped and left unchanged; a non-2-D tensor is refused", "[plasticity][fire]") {
  auto z = Tensor<float, Cpu>::zeros(Shape{8, 4});
  CHECK(fire_matrix(z).skipped);
  CHECK(z.to_host() == std::vector<float>(32, 0.0f));
  auto v = Tensor<float, Cpu>::zeros(Shape{8});
  CHECK_THROWS_WITH(fire_matrix(v), Catch::Contains("2-D"));
}

TEST_CASE("FIRE targets: attention_qk picks wq/wk matrices, aggressive every 2-D Role::matrix", "[plasticity][fire]") {
  const Shape m{8, 8};
  CHECK(is_fire_target("blocks.0.mixer.wq.weight", Role::matrix, m, FireTargets::attention_qk));
  CHECK(is_fire_target("blocks.1.mixer.wk.weight", Role::matrix, m, FireTargets::attention_qk));
  CHECK_FALSE(is_fire_target("blocks.1.mixer.wo.weight", Role::matrix, m, FireTargets::attention_qk));
  CHECK(is_fire_target("blocks.1.mixer.wo.weight", Role::matrix, m, FireTargets::aggressive));
  CHECK_FALSE(is_fire_target("blocks.0.ffn.fc.weight", Role::matrix, m, FireTargets::attention_qk));
  CHECK_FALSE(is_fire_target("blocks.0.mixer.xwq.weight", Role::matrix, m, FireTargets::attention_qk));
  CHECK(is_fire_target("blocks.0.ffn.fc.weight", Role::matrix, m, FireTargets::aggressive));
  CHECK_FALSE(is_fire_target("embedding.weight", Role::embedding, m, FireTargets::aggressive));
  CHECK_FALSE(is_fire_target("blocks.0.mixer.wq.weight", Role::mtp, m, FireTargets::aggressive));
  CHECK_FALSE(is_fire_target("blocks.0.mixer.D", Role::matrix, Shape{8}, FireTargets::aggressive));
  CHECK(parse_fire_targets("aggressive") == FireTargets::aggressive);
  CHECK_THROWS_WITH(parse_fire_targets("all"), Catch::Contains("'all'"));
}

namespace {
// Attention and MLP matrices plus an embedding, with a Hybrid optimiser over them.
struct FireModel {
  Param<float, Cpu> embed, wq, wk, fc;
  explicit FireModel(std::uint64_t seed) {
    Rng rng(seed);
    embed = Param<float, Cpu>::normal({10, 8}, Role::embedding, rng, 0.5);
    wq = Param<float, Cpu>::normal({8, 8}, Role::matrix, rng, 0.3);
    wk = Param<float, Cpu>::normal({4, 8}, Role::matrix, rng, 0.3);
    fc = Param<float, Cpu>::normal({16, 8}, Role::matrix, rng, 0.3);
  }
  template <class V>
  void for_each_param(V&& visit, const std::string& prefix = "") {
    visit(child_name(prefix, "embedding.weight"), embed);
    visit(child_name(prefix, "blocks.0.mixer.wq.weight"), wq);
    visit(child_name(prefix, "blocks.0.mixer.wk.weight"), wk);
    visit(child_name(prefix, "blocks.0.ffn.fc.weight"), fc);
  }
};
}  // namespace

TEST_CASE("FIRE pass: rewrites the targets, clears exactly their optimiser state, once per phase", "[plasticity][fire]") {
  FireModel model(3);
  auto params = optim::collect_params<float, Cpu>(model);
  optim::Hybrid<float, Cpu> opt(params);
  for (int s = 0; s < 3; ++s) {
    Rng rng(static_cast<std::uint64_t>(100 + s));
    for (auto& p : params) p.grad_buffer().assign(randn<float, Cpu>(p.shape(), rng, 1.0));
    opt.step();
  }
  const auto state_before = optim::save_state(opt);
  const auto fc_before = model.fc.value().to_host();
  FireLedger ledger;
  const auto entries = fire(params, FireTargets::attention_qk, 2, ledger, opt);
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].name == "blocks.0.mixer.wq.weight");
  CHECK(entries[1].name == "blocks.0.mixer.wk.weight");
  CHECK(model.fc.value().to_host() == fc_before);
  const auto state_after = optim::save_state(opt);
  for (const auto& [name, t] : state_after.tensors) {
    CAPTURE(name);
    const bool target = name.ends_with("wq.weight") || name.ends_with("wk.weight");
    if (target) CHECK(t.to_host() == std::vector<float>(static_cast<std::size_t>(t.numel()), 0.0f));
    else CHECK(t.to_host() == state_before.tensors.at(name).to_host());
  }
  // a second FIRE in phase 2 is an error before anything changes; forced, or in phase 3, it runs
  const auto wq = model.wq.value().to_host();
  CHECK_THROWS_WITH(fire(params, FireTargets::attention_qk, 2, ledger, opt), Catch::Contains("already orthogonalised in phase 2"));
  CHECK(model.wq.value().to_host() == wq);
  CHECK(fire(params, FireTargets::attention_qk, 2, ledger, opt, {}, true).size() == 2);
  CHECK(fire(params, FireTargets::attention_qk, 3, ledger, opt).size() == 2);
  CHECK(ledger.done("blocks.0.mixer.wq.weight", 3));
  CHECK_FALSE(ledger.done("blocks.0.ffn.fc.weight", 3));
}
