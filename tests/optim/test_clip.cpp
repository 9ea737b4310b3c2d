// clip_grad_norm: exact global-norm clipping, the pre-clip norm returned, non-finite norms
// reported (error naming the parameters, or skip), never applied silently.
#include <cmath>
#include <limits>
#include <vector>

#include "optim_testing.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

TEST_CASE("clip_grad_norm scales by max_norm / (norm + 1e-6) and returns the pre-clip norm, exactly", "[optim][clip]") {
  // ||(3, 4)||^2 + ||(12)||^2 = 169: the norm is 13 exactly; coef = 1 / (13 + 1e-6).
  Param<double, Cpu> a(Tensor<double, Cpu>::zeros({2}), Role::bias), b(Tensor<double, Cpu>::zeros({1, 1}), Role::matrix),
      c(Tensor<double, Cpu>::zeros({3}), Role::scalar);  // c has no gradient: counts as zero
  set_grad(a, {3.0, 4.0});
  set_grad(b, {12.0});
  const std::vector<optim::ParamRef<double, Cpu>> params{optim::make_param_ref("a", a), optim::make_param_ref("b", b),
                                                         optim::make_param_ref("c", c)};
  const optim::ClipResult r = optim::clip_grad_norm(params, 1.0);
  const double coef = 1.0 / (13.0 + 1e-6);
  CHECK(r.norm == 13.0);
  CHECK(r.clipped);
  CHECK(r.scale == coef);
  CHECK_FALSE(r.skip_step());
  CHECK(a.grad().to_host() == std::vector<double>{coef * 3.0, coef * 4.0});
  CHECK(b.grad().to_host() == std::vector<double>{coef * 12.0});
  CHECK_FALSE(c.var.grad().defined());
  // the clipped norm is max_norm up to the 1e-6
  const optim::ClipResult again = optim::clip_grad_norm(params, 1.0);
  CHECK(again.norm == Approx(13.0 / (13.0 + 1e-6)).epsilon(1e-15));
  CHECK_FALSE(again.clipped);
}

TEST_CASE("clip_grad_norm in fp32: exact norm, gradients scaled by the fp32 coefficient", "[optim][clip]") {
  Param<float, Cpu> a(Tensor<float, Cpu>::zeros({2, 2}), Role::matrix);
  set_grad(a, {1.0f, 2.0f, 2.0f, 4.0f});  // norm 5
  const optim::ClipResult r = optim::clip_grad_norm(std::vector{optim::make_param_ref("a", a)}, 2.0);
  CHECK(r.norm == 5.0);
  const float coef = static_cast<float>(2.0 / (5.0 + 1e-6));
  CHECK(a.grad().to_host() == std::vector<float>{coef * 1.0f, coef * 2.0f, coef * 2.0f, coef * 4.0f});
}

TEST_CASE("clip_grad_norm below max_norm leaves the gradients bitwise untouched", "[optim][clip]") {
  Rng rng(11);
  auto a = Param<float, Cpu>::normal({30, 20}, Role::matrix, rng, 1.0);
  a.var.grad_buffer().assign(randn<float, Cpu>({30, 20}, rng, 0.01));
  const auto g0 = a.grad().clone();
  const optim::ClipResult r = optim::clip_grad_norm(std::vector{optim::make_param_ref("a", a)}, 1.0);
  CHECK(r.norm < 1.0);
  CHECK_FALSE(r.clipped);
  CHECK(r.scale == 1.0);
  CHECK(bitwise_equal(a.grad(), g0));
}

TEST_CASE("clip_grad_norm: a large model's norm matches a double host sum", "[optim][clip]") {
  ToyLM<double> model(12, /*tie=*/false);
  auto params = optim::collect_params<double, Cpu>(model);
  set_random_grads(params, 13, 0.5);
  double total = 0;
  for (const auto& p : params)
    for (double v : p.grad().to_host()) total += v * v;
  const optim::ClipResult r = optim::clip_grad_norm<double, Cpu>(model, 1.0);
  CHECK(r.norm == Approx(std::sqrt(total)).epsilon(1e-13));
  double after = 0;
  for (const auto& p : params)
    for (double v : p.grad().to_host()) after += v * v;
  CHECK(std::sqrt(after) == Approx(1.0).epsilon(1e-6));
}

TEST_CASE("clip_grad_norm never applies a non-finite norm silently", "[optim][clip]") {
  Param<float, Cpu> a(Tensor<float, Cpu>::zeros({3}), Role::bias), b(Tensor<float, Cpu>::zeros({2, 2}), Role::matrix);
  const std::vector<optim::ParamRef<float, Cpu>> params{optim::make_param_ref("blocks.0.bias", a),
                                                        optim::make_param_ref("blocks.0.wq", b)};
  set_grad(a, {1.0f, 2.0f, 3.0f});
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    set_grad(b, {1.0f, bad, 1.0f, 1.0f});
    const auto ga = a.grad().clone(), gb = b.grad().clone();
    CHECK_THROWS_WITH(optim::clip_grad_norm(params, 1.0), Contains("'blocks.0.wq'") && Contains("not finite"));
    CHECK(bitwise_equal(a.grad(), ga));
    const optim::ClipResult r = optim::clip_grad_norm(params, 1.0, optim::NonFinitePolicy::skip);
    CHECK(r.skip_step());
    CHECK(r.non_finite == std::vector<std::string>{"blocks.0.wq"});
    CHECK_FALSE(r.clipped);
    CHECK_FALSE(std::isfinite(r.norm));
    CHECK(bitwise_equal(a.grad(), ga));
    CHECK(std::memcmp(b.grad().data(), gb.data(), sizeof(float) * 4) == 0);  // NaN != NaN: compare bits
  }
  CHECK_THROWS_WITH(optim::clip_grad_norm(params, 0.0), Contains("max_norm") && Contains("0"));
  const optim::ClipResult none = optim::clip_grad_norm(std::vector<optim::ParamRef<float, Cpu>>{}, 1.0);
  CHECK(none.norm == 0.0);
}
