// Hybrid: the Role-routed Muon + AdamW split. The routing table for a model is printed and
// checked; MTP -> Muon is a hard error naming the parameter; weight decay is 0 on everything
// that is not a decaying 2-D tensor; state round trip, reset (FIRE), distributed step.
#include <algorithm>
#include <iostream>
#include <map>
#include <thread>
#include <vector>

#include "optim_testing.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;
using optim::OptimizerKind;

namespace {

optim::HybridOptions test_options() {
  optim::HybridOptions o;
  o.muon = {.lr = 0.02, .weight_decay = 0.05};
  o.adamw = {.lr = 0.008, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-10, .weight_decay = 0.1};
  o.adamw_by_role[Role::embedding] = {.lr = 0.3};
  o.adamw_by_role[Role::scalar] = {.lr = 0.04, .beta1 = 0.9};
  return o;
}

// Visits one tensor twice with different Roles (an embedding tied to a Role::head parameter).
struct BadTie {
  Param<float, Cpu> embed = Param<float, Cpu>::zeros({4, 2}, Role::embedding);
  template <class V>
  void for_each_param(V&& visit, const std::string& = "") {
    Param<float, Cpu> head = embed;
    head.role = Role::head;
    visit("embed", embed);
    visit("lm_head", head);
  }
};

struct Expected {
  OptimizerKind kind;
  std::string group;
  double lr, wd;
};

}  // namespace

TEST_CASE("Hybrid routes by Role: the routing table of a model", "[optim][hybrid]") {
  ToyLM<float> model(1, /*tie=*/false);
  optim::Hybrid<float, Cpu> opt(model, test_options());
  const std::string table = opt.routing_table();
  std::cout << table;  // the table a training log shows

  using K = OptimizerKind;
  const std::map<std::string, Expected> expected{
      {"embed", {K::adamw, "adamw.embedding", 0.3, 0.0}},
      {"blocks.0.attn_norm", {K::adamw, "adamw.norm_gain", 0.008, 0.0}},
      {"blocks.0.wq", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.0.wk", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.0.wv", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.0.wo", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.0.mlp_norm", {K::adamw, "adamw.norm_gain", 0.008, 0.0}},
      {"blocks.0.w1", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.0.w2", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.1.attn_norm", {K::adamw, "adamw.norm_gain", 0.008, 0.0}},
      {"blocks.1.wq", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.1.wk", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.1.wv", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.1.wo", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.1.mlp_norm", {K::adamw, "adamw.norm_gain", 0.008, 0.0}},
      {"blocks.1.w1", {K::muon, "muon", 0.02, 0.05}},
      {"blocks.1.w2", {K::muon, "muon", 0.02, 0.05}},
      {"final_norm", {K::adamw, "adamw.norm_gain", 0.008, 0.0}},
      {"router", {K::adamw, "adamw.router", 0.008, 0.1}},
      {"router_bias", {K::adamw, "adamw.bias", 0.008, 0.0}},
      {"lambdas", {K::adamw, "adamw.scalar", 0.04, 0.0}},
      {"mtp.proj", {K::adamw, "adamw.mtp.decay", 0.008, 0.1}},
      {"mtp.norm", {K::adamw, "adamw.mtp.no_decay", 0.008, 0.0}},
      {"lm_head", {K::adamw, "adamw.head", 0.008, 0.1}},
  };
  REQUIRE(opt.routes().size() == expected.size());
  for (const optim::RouteEntry& r : opt.routes()) {
    INFO(r.name);
    REQUIRE(expected.count(r.name) == 1);
    const Expected& e = expected.at(r.name);
    CHECK(r.optimizer == e.kind);
    CHECK(r.group == e.group);
    CHECK(r.lr == e.lr);
    CHECK(r.weight_decay == e.wd);
    // the rule itself: decay only on 2-D tensors that are not embeddings
    if (r.shape.rank() != 2 || r.role == Role::embedding) CHECK(r.weight_decay == 0.0);
    CHECK(table.find(r.name) != std::string::npos);
  }
  CHECK(opt.muon().size() == 12);
  CHECK(opt.adamw().size() == 12);
  CHECK(table.find("Muon<ns5, sqrt_aspect> for 12 parameters, AdamW for 12") != std::string::npos);
  CHECK(table.find("blocks.0.w1") != std::string::npos);
  // the scalar group took its beta1 override; the others keep the base
  for (const auto& g : opt.adamw().groups()) CHECK(g.options.beta1 == (g.name == "adamw.scalar" ? 0.9 : 0.8));
}

TEST_CASE("Hybrid: a tied head is updated once, listed as an alias", "[optim][hybrid]") {
  ToyLM<float> model(2, /*tie=*/true);
  optim::Hybrid<float, Cpu> opt(model, test_options());
  const auto& routes = opt.routes();
  const auto embed = std::find_if(routes.begin(), routes.end(), [](const auto& r) { return r.name == "embed"; });
  REQUIRE(embed != routes.end());
  CHECK(embed->aliases == std::vector<std::string>{"lm_head"});
  CHECK(opt.routing_table().find("embed = lm_head") != std::string::npos);
  CHECK(opt.adamw().size() == 11);
  CHECK_FALSE(opt.owns("lm_head"));
  // tying tensors of different Roles is refused by name
  BadTie bad;
  CHECK_THROWS_WITH((optim::collect_params<float, Cpu>(bad)), Contains("'lm_head'") && Contains("'embed'"));
}

TEST_CASE("Hybrid: an MTP parameter routed to Muon is a hard error naming it", "[optim][hybrid]") {
  ToyLM<float> model(3);
  optim::HybridOptions o = test_options();
  // a route that sends every 2-D tensor to Muon, as a shape-guessing optimiser would
  o.route = [](const std::string&, Role, const Shape& shape) { return shape.rank() == 2 ? OptimizerKind::muon : OptimizerKind::adamw; };
  CHECK_THROWS_WITH((optim::Hybrid<float, Cpu>(model, o)), Contains("'embed'"));  // the first 2-D non-matrix
  // only the MTP parameter is misrouted: the error names it and its Role
  o.route = [](const std::string& name, Role role, const Shape&) {
    return role == Role::matrix || name == "mtp.proj" ? OptimizerKind::muon : OptimizerKind::adamw;
  };
  CHECK_THROWS_WITH((optim::Hybrid<float, Cpu>(model, o)), Contains("'mtp.proj'") && Contains("Role::mtp") && Contains("AdamW"));
  // a matrix may be sent to AdamW on purpose
  o.route = [](const std::string& name, Role role, const Shape&) {
    return role == Role::matrix && name != "blocks.0.wq" ? OptimizerKind::muon : OptimizerKind::adamw;
  };
  optim::Hybrid<float, Cpu> opt(model, o);
  CHECK(opt.adamw().owns("blocks.0.wq"));
  CHECK(opt.routes()[2].name == "blocks.0.wq");
  CHECK(opt.routes()[2].group == "adamw.matrix");
  CHECK(opt.routes()[2].weight_decay == 0.1);
}

TEST_CASE("Hybrid: weight decay 0 on non-2-D tensors, embeddings and norms, shown by a zero-gradient step", "[optim][hybrid]") {
  // With zero gradients AdamW's update is 0 / (0 + eps) = 0, so a parameter changes only by its
  // decay p (1 - lr wd): bitwise unchanged where wd = 0.
  ToyLM<float> model(4, /*tie=*/false);
  optim::Hybrid<float, Cpu> opt(model, test_options());
  const auto& params = opt.params();
  const auto before = snapshot_values(params);
  for (const auto& p : params)
    if (opt.adamw().owns(p.name)) p.grad_buffer().fill(0.0f);
  opt.step();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& r = opt.routes()[i];
    if (r.optimizer != OptimizerKind::adamw) continue;
    INFO(r.name << " wd " << r.weight_decay);
    if (r.weight_decay == 0.0) {
      CHECK(bitwise_equal(params[i].var.value(), before[i]));
    } else {
      const auto now = params[i].var.value().to_host(), was = before[i].to_host();
      const float decay = static_cast<float>(1.0 - r.lr * r.weight_decay);
      for (std::size_t j = 0; j < now.size(); ++j) CHECK(now[j] == was[j] * decay);
    }
  }
}

TEST_CASE("Hybrid step equals its halves built by hand, with the schedule scale applied to both", "[optim][hybrid]") {
  ToyLM<float> a(5), b(5);
  optim::Hybrid<float, Cpu> hybrid(a, test_options());
  // the same split by hand on model b
  auto refs = optim::collect_params<float, Cpu>(b);
  std::vector<optim::ParamRef<float, Cpu>> matrices;
  std::map<std::string, std::vector<optim::ParamRef<float, Cpu>>> by_group;
  for (const auto& r : hybrid.routes()) {
    const auto it = std::find_if(refs.begin(), refs.end(), [&](const auto& p) { return p.name == r.name; });
    if (r.optimizer == OptimizerKind::muon) matrices.push_back(*it);
    else by_group[r.group].push_back(*it);
  }
  optim::Muon<float, Cpu> muon(matrices, test_options().muon);
  std::vector<optim::AdamW<float, Cpu>::Group> groups;
  for (const auto& g : hybrid.adamw().groups()) groups.push_back({g.name, g.options, by_group[g.name]});
  optim::AdamW<float, Cpu> adamw(groups);
  for (std::uint64_t s = 0; s < 3; ++s) {
    const double scale = optim::LrSchedule::cosine(1, 4)(static_cast<std::int64_t>(s));
    hybrid.set_lr_scale(scale);
    muon.set_lr_scale(scale);
    adamw.set_lr_scale(scale);
    set_random_grads(hybrid.params(), 700 + s);
    set_random_grads(refs, 700 + s);
    hybrid.step();
    muon.step();
    adamw.step();
  }
  const auto& ha = hybrid.params();
  for (std::size_t i = 0; i < ha.size(); ++i) {
    INFO(ha[i].name);
    CHECK(bitwise_equal(ha[i].var.value(), refs[i].var.value()));
  }
}

TEST_CASE("Hybrid state: save -> new optimiser -> load -> bitwise identical next step, and reset of chosen params",
          "[optim][hybrid][state]") {
  ToyLM<float> model(6);
  optim::Hybrid<float, Cpu> first(model, test_options());
  for (std::uint64_t s = 0; s < 3; ++s) {
    set_random_grads(first.params(), 800 + s);
    first.step();
  }
  const auto saved = optim::save_state(first);
  CHECK(saved.tensors.count("momentum_buffer.blocks.1.w2") == 1);
  CHECK(saved.tensors.count("exp_avg.embed") == 1);
  CHECK(saved.counters.at("step.mtp.proj") == 3);
  CHECK(saved.tensors.size() == 12 + 2 * 11);

  ToyLM<float> copy(6);  // same initial values; then copy the trained values in
  optim::Hybrid<float, Cpu> second(copy, test_options());
  for (std::size_t i = 0; i < first.params().size(); ++i) {
    optim::ParamRef<float, Cpu> p = second.params()[i];  // a handle: writes reach the model
    p.value().assign(first.params()[i].var.value());
  }
  optim::load_state(second, saved);
  set_random_grads(first.params(), 900);
  set_random_grads(second.params(), 900);
  first.step();
  second.step();
  for (std::size_t i = 0; i < first.params().size(); ++i) {
    INFO(first.params()[i].name);
    CHECK(bitwise_equal(first.params()[i].var.value(), second.params()[i].var.value()));
  }

  // FIRE on attention Q/K: clear exactly those parameters' state
  const auto before = optim::save_state(first);
  first.reset_state({"blocks.0.wq", "blocks.0.wk", "blocks.1.wq", "blocks.1.wk", "lambdas"});
  const auto after = optim::save_state(first);
  for (const auto& [name, t] : after.tensors) {
    INFO(name);
    const bool cleared = name.find(".wq") != std::string::npos || name.find(".wk") != std::string::npos || name.ends_with(".lambdas");
    if (cleared) {
      for (float v : t.to_host()) CHECK(v == 0.0f);
    } else {
      CHECK(bitwise_equal(t, before.tensors.at(name)));
    }
  }
  CHECK(after.counters.at("step.lambdas") == 0);
  CHECK(after.counters.at("step.embed") == 4);
  CHECK_THROWS_WITH(first.reset_state({"blocks.0.wq", "lm_head"}), Contains("'lm_head'"));
}

TEST_CASE("Hybrid distributed step: world size 2 (in-process fake) equals world size 1 bitwise", "[optim][hybrid][distributed]") {
  const auto train = [](ToyLM<float>& model, auto& comm) {
    optim::Hybrid<float, Cpu> opt(model, test_options());
    for (std::uint64_t s = 0; s < 2; ++s) {
      set_random_grads(opt.params(), 1000 + s);
      opt.step(comm);
    }
  };
  ToyLM<float> single(7);
  dist::SingleProcess one;
  train(single, one);
  ToyLM<float> r0(7), r1(7);
  dist::InProcessGroup group(2);
  std::thread t0([&] {
    auto comm = group.comm(0);
    train(r0, comm);
  });
  std::thread t1([&] {
    auto comm = group.comm(1);
    train(r1, comm);
  });
  t0.join();
  t1.join();
  const auto p = optim::collect_params<float, Cpu>(single), q0 = optim::collect_params<float, Cpu>(r0),
             q1 = optim::collect_params<float, Cpu>(r1);
  for (std::size_t i = 0; i < p.size(); ++i) {
    INFO(p[i].name);
    CHECK(bitwise_equal(p[i].var.value(), q0[i].var.value()));
    CHECK(bitwise_equal(p[i].var.value(), q1[i].var.value()));
  }
}
