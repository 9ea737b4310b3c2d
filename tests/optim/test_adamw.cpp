// AdamW: steps equal hand-computed values (bias correction, decoupled weight decay, eps);
// groups carry their own hyper-parameters; state round trip and reset restart bias correction.
#include <cmath>
#include <vector>

#include "optim_testing.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

TEST_CASE("AdamW: two steps equal the hand-computed values", "[optim][adamw]") {
  // lr 0.01, betas (0.9, 0.999), eps 1e-8, weight decay 0.1; per element, at step t:
  //   m = m + 0.1 (g - m);  v = 0.999 v + 0.001 g^2;  bc1 = 1 - 0.9^t;  bc2 = 1 - 0.999^t
  //   p = p (1 - 0.001) - (0.01 / bc1) m / (sqrt(v) / sqrt(bc2) + 1e-8)
  // Expected values from that arithmetic in Python (double).
  Param<double, Cpu> p(Tensor<double, Cpu>::from_host({4}, {1.0, -2.0, 0.5, 0.0}), Role::norm_gain);
  optim::AdamW<double, Cpu> adamw({optim::make_param_ref("p", p)},
                                  {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1});
  set_grad(p, {0.1, -0.2, 0.3, 0.0});
  adamw.step();
  const std::vector<double> step1{0.9890000009999999, -1.9880000005, 0.4895000003333333, 0.0};
  for (int i = 0; i < 4; ++i) CHECK(p.value().to_host()[i] == Approx(step1[i]).epsilon(1e-15));
  set_grad(p, {-0.05, 0.4, 0.3, 1.0});
  adamw.step();
  const std::vector<double> step2{0.9853476309393391, -1.989673035654104, 0.4790105006663334, -0.0074413681304592956};
  const std::vector<double> m2{0.004, 0.022, 0.05699999999999999, 0.09999999999999998};
  const std::vector<double> v2{1.2490000000000014e-05, 0.00019996000000000022, 0.00017991000000000014, 0.0010000000000000009};
  const auto state = optim::save_state(adamw);
  for (int i = 0; i < 4; ++i) {
    CHECK(p.value().to_host()[i] == Approx(step2[i]).epsilon(1e-15));
    CHECK(state.tensors.at("exp_avg.p").to_host()[i] == Approx(m2[i]).epsilon(1e-15));
    CHECK(state.tensors.at("exp_avg_sq.p").to_host()[i] == Approx(v2[i]).epsilon(1e-15));
  }
  CHECK(state.counters.at("step.p") == 2);
}

TEST_CASE("AdamW in fp32 follows the same arithmetic to fp32 rounding", "[optim][adamw]") {
  Param<float, Cpu> p(Tensor<float, Cpu>::from_host({4}, {1.0f, -2.0f, 0.5f, 0.0f}), Role::norm_gain);
  optim::AdamW<float, Cpu> adamw({optim::make_param_ref("p", p)}, {.lr = 0.01, .weight_decay = 0.1});
  set_grad(p, {0.1f, -0.2f, 0.3f, 0.0f});
  adamw.step();
  set_grad(p, {-0.05f, 0.4f, 0.3f, 1.0f});
  adamw.step();
  const std::vector<double> step2{0.9853476309393391, -1.989673035654104, 0.4790105006663334, -0.0074413681304592956};
  for (int i = 0; i < 4; ++i) CHECK(p.value().to_host()[i] == Approx(step2[i]).epsilon(1e-6).margin(1e-7));
}

TEST_CASE("AdamW groups: each group uses its own lr, betas and weight decay", "[optim][adamw]") {
  // On the first step m_hat = g and v_hat = g^2, so p1 = p0 (1 - lr wd) - lr g / (|g| + eps)
  // (up to the rounding of sqrt(v) / sqrt(bc2)), whatever the betas.
  Param<double, Cpu> a(Tensor<double, Cpu>::from_host({2}, {1.0, 1.0}), Role::bias);
  Param<double, Cpu> b(Tensor<double, Cpu>::from_host({2}, {1.0, 1.0}), Role::head);
  using G = optim::AdamW<double, Cpu>::Group;
  optim::AdamW<double, Cpu> adamw(std::vector<G>{
      G{"slow", {.lr = 0.001, .beta1 = 0.8, .beta2 = 0.95, .weight_decay = 0.0}, {optim::make_param_ref("a", a)}},
      G{"fast", {.lr = 0.1, .beta1 = 0.5, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.5}, {optim::make_param_ref("b", b)}},
  });
  set_grad(a, {0.5, -2.0});
  set_grad(b, {0.5, -2.0});
  adamw.step();
  CHECK(a.value().to_host()[0] == Approx(1.0 - 0.001 * 0.5 / (0.5 + 1e-8)).epsilon(1e-14));
  CHECK(a.value().to_host()[1] == Approx(1.0 + 0.001 * 2.0 / (2.0 + 1e-8)).epsilon(1e-14));
  CHECK(b.value().to_host()[0] == Approx(1.0 * (1 - 0.1 * 0.5) - 0.1 * 0.5 / (0.5 + 1e-6)).epsilon(1e-14));
  CHECK(b.value().to_host()[1] == Approx(1.0 * (1 - 0.1 * 0.5) + 0.1 * 2.0 / (2.0 + 1e-6)).epsilon(1e-14));
  CHECK(adamw.groups()[1].name == "fast");
  // lr scale (the schedule) multiplies every group's lr
  adamw.set_lr_scale(0.0);
  const auto a1 = a.value().clone();
  adamw.step();
  CHECK(bitwise_equal(a.value(), a1));
}

TEST_CASE("AdamW skips parameters without a gradient (step count unchanged), rejects bad input", "[optim][adamw]") {
  Rng rng(5);
  auto a = Param<float, Cpu>::normal({3, 5}, Role::embedding, rng, 1.0);
  auto b = Param<float, Cpu>::normal({7}, Role::scalar, rng, 1.0);
  optim::AdamW<float, Cpu> adamw({optim::make_param_ref("a", a), optim::make_param_ref("b", b)});
  const auto b0 = b.value().clone();
  a.var.grad_buffer().fill(1.0f);
  adamw.step();
  CHECK(bitwise_equal(b.value(), b0));
  const auto state = optim::save_state(adamw);
  CHECK(state.counters.at("step.a") == 1);
  CHECK(state.counters.at("step.b") == 0);
  b.var.grad_buffer() = Tensor<float, Cpu>::zeros({8});
  CHECK_THROWS_WITH(adamw.step(), Contains("'b'") && Contains("(8)") && Contains("(7)"));
  using A = optim::AdamW<float, Cpu>;
  CHECK_THROWS_WITH(A({optim::make_param_ref("a", a)}, {.beta2 = 1.0}), Contains("beta2") && Contains("1"));
  CHECK_THROWS_WITH(A({optim::make_param_ref("a", a)}, {.eps = 0.0}), Contains("eps"));
  CHECK_THROWS_WITH(A({optim::make_param_ref("a", a)}, {.weight_decay = -0.1}), Contains("weight_decay") && Contains("-0.1"));
  CHECK_THROWS_WITH(adamw.set_lr_scale(-1.0), Contains("-1"));
}

TEST_CASE("AdamW state: names, bitwise round trip, reset restarts bias correction", "[optim][adamw][state]") {
  Rng rng(6);
  auto a = Param<float, Cpu>::normal({6, 4}, Role::head, rng, 1.0);
  auto b = Param<float, Cpu>::normal({4}, Role::norm_gain, rng, 1.0);
  std::vector<optim::ParamRef<float, Cpu>> refs{optim::make_param_ref("head", a), optim::make_param_ref("norm", b)};
  const optim::AdamWOptions options{.lr = 0.003, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-10, .weight_decay = 0.02};
  optim::AdamW<float, Cpu> first(refs, options);
  std::vector<std::string> names;
  first.for_each_state([&](const std::string& name, auto&) { names.push_back(name); });
  CHECK(names == std::vector<std::string>{"exp_avg.head", "exp_avg_sq.head", "step.head", "exp_avg.norm", "exp_avg_sq.norm",
                                          "step.norm"});
  for (std::uint64_t s = 0; s < 4; ++s) {
    set_random_grads(refs, 300 + s);
    first.step();
  }
  const auto saved = optim::save_state(first);
  Param<float, Cpu> a2(a.value().clone(), Role::head), b2(b.value().clone(), Role::norm_gain);
  std::vector<optim::ParamRef<float, Cpu>> refs2{optim::make_param_ref("head", a2), optim::make_param_ref("norm", b2)};
  optim::AdamW<float, Cpu> second(refs2, options);
  optim::load_state(second, saved);
  set_random_grads(refs, 400);
  set_random_grads(refs2, 400);
  first.step();
  second.step();
  CHECK(bitwise_equal(a.value(), a2.value()));
  CHECK(bitwise_equal(b.value(), b2.value()));

  // After reset, "head" steps exactly as in a fresh optimiser (step 1: bias correction restarts).
  first.reset_state({"head"});
  Param<float, Cpu> a3(a.value().clone(), Role::head);
  optim::AdamW<float, Cpu> fresh({optim::make_param_ref("head", a3)}, options);
  set_random_grads(refs, 500);
  a3.var.grad_buffer().assign(a.grad());
  first.step();
  fresh.step();
  CHECK(bitwise_equal(a.value(), a3.value()));
  CHECK(optim::save_state(first).counters.at("step.head") == 1);
  CHECK(optim::save_state(first).counters.at("step.norm") == 6);

  // load_state refuses a state that does not match, naming the entries, and changes nothing
  optim::AdamW<float, Cpu> other({optim::make_param_ref("norm", b2)}, options);
  CHECK_THROWS_WITH(optim::load_state(other, saved), Contains("exp_avg.head"));
  auto wrong = saved;
  wrong.tensors.at("exp_avg.norm") = Tensor<float, Cpu>::zeros({5});
  CHECK_THROWS_WITH(optim::load_state(second, wrong), Contains("exp_avg.norm (5) into (4)"));
  auto missing = saved;
  missing.counters.erase("step.norm");
  CHECK_THROWS_WITH(optim::load_state(second, missing), Contains("step.norm"));
}

TEST_CASE("Cpu::update_in_place with fn::AdamWStep equals the three maps it fuses, bitwise", "[optim][adamw][kernel]") {
  const index_t n = 1003;
  Rng rng(21);
  const auto p0 = rand_uniform<float, Cpu>({n}, rng, -1.0, 1.0), m0 = rand_uniform<float, Cpu>({n}, rng, -0.1, 0.1),
             v0 = rand_uniform<float, Cpu>({n}, rng, 0.0, 0.01), g = rand_uniform<float, Cpu>({n}, rng, -1.0, 1.0);
  const fn::Lerp first{0.1};
  const fn::EmaSquare second{0.95};
  const fn::AdamWUpdate update{0.999, 1e-2, std::sqrt(1.0 - 0.95 * 0.95), 1e-8};
  auto p = p0.clone(), m = m0.clone(), v = v0.clone();
  Cpu::map<float>(1, n, first, m.data(), In<float>{m.data()}, In<float>{g.data()});
  Cpu::map<float>(1, n, second, v.data(), In<float>{v.data()}, In<float>{g.data()});
  Cpu::map<float>(1, n, update, p.data(), In<float>{p.data()}, In<float>{m.data()}, In<float>{v.data()});
  auto fp = p0.clone(), fm = m0.clone(), fv = v0.clone();
  Cpu::update_in_place<float>(n, fn::AdamWStep{first, second, update}, fp.data(), fm.data(), fv.data(), g.data());
  CHECK(fm.to_host() == m.to_host());
  CHECK(fv.to_host() == v.to_host());
  CHECK(fp.to_host() == p.to_host());
  // With the parameter's bf16 output: the same p, m, v, and the output is convert's rounding of p.
  auto rp = p0.clone(), rm = m0.clone(), rv = v0.clone();
  Tensor<bf16, Cpu> rounded({n});
  Cpu::update_in_place<float>(n, fn::AdamWStep{first, second, update}, rp.data(), rm.data(), rv.data(), g.data(),
                              rounded.data());
  CHECK(rp.to_host() == p.to_host());
  CHECK(rm.to_host() == m.to_host());
  CHECK(rv.to_host() == v.to_host());
  const auto got = rounded.to_host(), want = p.to<bf16>().to_host();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i].bits == want[i].bits);
}
