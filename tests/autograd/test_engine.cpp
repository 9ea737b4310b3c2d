// The backward engine: accumulation, no_grad, custom fused ops, graph lifetime, deep graphs.
#include <catch2/catch.hpp>

#include <vector>

#include "megacpp/megacpp.hpp"

using namespace megacpp;
using Catch::Matchers::Contains;
using V = Var<double, Cpu>;
using T64 = CpuTensor<double>;

TEST_CASE("gradients accumulate across backward calls until zero_grad", "[engine]") {
  auto x = V::parameter(T64::from_host({2}, {1.0, 2.0}));
  for (int i = 0; i < 3; ++i) backward(sum(mul(x, x)));  // d/dx sum(x^2) = 2x, three times
  CHECK(x.grad().to_host() == std::vector<double>{6.0, 12.0});
  x.zero_grad();
  backward(sum(x));
  CHECK(x.grad().to_host() == std::vector<double>{1.0, 1.0});
}

TEST_CASE("a Var used twice (diamond graph) receives both contributions", "[engine]") {
  auto x = V::parameter(T64::from_host({1}, {3.0}));
  auto y = exp(x);
  auto z = sum(mul(y, y) + y);  // d/dx (e^2x + e^x) = 2 e^2x + e^x
  backward(z);
  const double e = std::exp(3.0);
  CHECK(x.grad().item() == Approx(2 * e * e + e).epsilon(1e-14));
}

TEST_CASE("NoGrad records nothing", "[engine]") {
  auto x = V::parameter(T64::from_host({1}, {3.0}));
  {
    NoGrad guard;
    CHECK_FALSE(grad_enabled());
    auto y = mul(x, x);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
  }
  CHECK(grad_enabled());
  CHECK(mul(x, x).requires_grad());
}

TEST_CASE("constants do not collect gradients", "[engine]") {
  auto x = V::parameter(T64::from_host({2}, {1, 2}));
  V c(T64::from_host({2}, {5, 7}));
  backward(sum(mul(x, c)));
  CHECK(x.grad().to_host() == std::vector<double>{5, 7});
  CHECK_FALSE(c.grad().defined());
}

TEST_CASE("a fused op with a hand-written backward is one node (make_result)", "[engine]") {
  // y = x^3 with backward 3 x^2 g, written by hand like a user's fused kernel.
  auto cube = [](const V& x) {
    T64 y(x.shape());
    for (index_t i = 0; i < x.numel(); ++i) y.data()[i] = std::pow(x.value().data()[i], 3);
    return make_result("cube", std::move(y), [x](const T64& g) {
      double* gx = x.grad_buffer().data();
      for (index_t i = 0; i < x.numel(); ++i) gx[i] += 3 * std::pow(x.value().data()[i], 2) * g.data()[i];
    }, x);
  };
  auto x = V::parameter(T64::from_host({3}, {1, -2, 0.5}));
  auto result = gradcheck<Cpu>([&](std::vector<V>& in) { return cube(in[0]); }, {x});
  INFO(result.report);
  CHECK(result.ok);
}

TEST_CASE("gradcheck catches a wrong backward", "[engine][gradcheck]") {
  // Same op with a deliberately wrong derivative (2x^2 instead of 3x^2): gradcheck must fail.
  auto broken_cube = [](const V& x) {
    T64 y(x.shape());
    for (index_t i = 0; i < x.numel(); ++i) y.data()[i] = std::pow(x.value().data()[i], 3);
    return make_result("broken_cube", std::move(y), [x](const T64& g) {
      double* gx = x.grad_buffer().data();
      for (index_t i = 0; i < x.numel(); ++i) gx[i] += 2 * std::pow(x.value().data()[i], 2) * g.data()[i];
    }, x);
  };
  auto x = V::parameter(T64::from_host({3}, {1, -2, 0.5}));
  auto result = gradcheck<Cpu>([&](std::vector<V>& in) { return broken_cube(in[0]); }, {x});
  CHECK_FALSE(result.ok);
  CHECK_THAT(result.report, Contains("input 0"));
}

TEST_CASE("the graph is freed after backward unless retained", "[engine]") {
  auto x = V::parameter(T64::from_host({1}, {2.0}));
  auto y = sum(mul(x, x));
  backward(y, /*retain_graph=*/true);
  backward(y);  // second pass allowed: graph was retained
  CHECK(x.grad().item() == 8.0);
  CHECK_THROWS_WITH(backward(y), Contains("already freed"));
}

TEST_CASE("non-leaf gradients are released unless retain_grad", "[engine]") {
  auto x = V::parameter(T64::from_host({2}, {1, 2}));
  auto h = scale(x, 3.0);
  auto k = scale(x, 5.0);
  k.retain_grad();
  backward(sum(h + k));
  CHECK_FALSE(h.grad().defined());
  CHECK(k.grad().to_host() == std::vector<double>{1, 1});
  CHECK(x.grad().to_host() == std::vector<double>{8, 8});
}

TEST_CASE("reshape and add hand their gradient on without a copy only when nothing else sees it", "[engine]") {
  SECTION("add(x, x): the second operand accumulates onto the first's copy") {
    auto x = V::parameter(T64::from_host({2}, {1, 2}));
    backward(sum(add(x, x)));
    CHECK(x.grad().to_host() == std::vector<double>{2, 2});
  }
  SECTION("a retained gradient is never shared with the input's") {
    auto x = V::parameter(T64::from_host({2}, {1, 2}));
    auto r = reshape(x, Shape{2, 1});
    r.retain_grad();
    // add: x accumulates a copy, reshape(r)'s result takes the gradient, r takes that in turn;
    // r retains it, so x adds r's gradient instead of taking it.
    backward(sum(add(reshape(r, Shape{2}), x)));
    CHECK(r.grad().to_host() == std::vector<double>{1, 1});
    CHECK(x.grad().to_host() == std::vector<double>{2, 2});
    CHECK(r.grad().data() != x.grad().data());
    backward(sum(scale(x, 5.0)));  // x's later accumulation leaves r's gradient alone
    CHECK(x.grad().to_host() == std::vector<double>{7, 7});
    CHECK(r.grad().to_host() == std::vector<double>{1, 1});
  }
  SECTION("take_grad refuses a second gradient and a wrong shape") {
    auto x = V::parameter(T64::from_host({2}, {1, 2}));
    CHECK_THROWS_WITH(x.take_grad(T64::zeros({3})), Contains("differs from value shape"));
    x.take_grad(T64::zeros({2}));
    CHECK_THROWS_WITH(x.take_grad(T64::zeros({2})), Contains("already accumulated"));
  }
}

TEST_CASE("backward with an explicit upstream gradient", "[engine]") {
  auto x = V::parameter(T64::from_host({2}, {1, 2}));
  auto y = scale(x, 2.0);
  backward(y, T64::from_host({2}, {10, 100}));
  CHECK(x.grad().to_host() == std::vector<double>{20, 200});
}

TEST_CASE("a 20000-op chain backpropagates without recursion", "[engine]") {
  auto x = V::parameter(T64::from_host({1}, {1.0}));
  V y = x;
  for (int i = 0; i < 20000; ++i) y = add_scalar(y, 1e-3);
  backward(sum(y));
  CHECK(x.grad().item() == 1.0);
}

TEST_CASE("training a 2-layer MLP lowers the loss (integration)", "[engine]") {
  using VF = Var<float, Cpu>;
  Rng rng(3);
  auto w1 = VF::parameter(randn<float, Cpu>({4, 16}, rng, 0.5));
  auto w2 = VF::parameter(randn<float, Cpu>({16, 3}, rng, 0.5));
  VF x(randn<float, Cpu>({32, 4}, rng));
  std::vector<std::int32_t> labels(32);
  const auto xh = x.value().to_host();
  for (int i = 0; i < 32; ++i) labels[i] = xh[i * 4] > 0 ? (xh[i * 4 + 1] > 0 ? 2 : 1) : 0;
  const auto targets = CpuTensor<std::int32_t>::from_host({32}, labels);
  float first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    auto loss = cross_entropy(matmul(relu2(matmul(x, w1)), w2), targets);
    if (step == 0) first = loss.item();
    last = loss.item();
    w1.zero_grad();
    w2.zero_grad();
    backward(loss);
    NoGrad no_grad;
    for (VF* w : {&w1, &w2}) {
      float* p = w->mutable_value().data();
      const float* g = w->grad().data();
      for (index_t i = 0; i < w->numel(); ++i) p[i] -= 0.1f * g[i];
    }
  }
  CHECK(last < 0.5f * first);
}
