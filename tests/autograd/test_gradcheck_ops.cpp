// Every differentiable op against central finite differences in double (gradcheck).
// Each case fails if its backward is wrong (see test_engine.cpp "gradcheck catches a wrong backward").
#include "support/op_testing.hpp"

using namespace megacpp;
using namespace megacpp::testing;

TEST_CASE("gradcheck: matmul, every transpose combination and batch layout", "[gradcheck][matmul]") {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const index_t m = 3, k = 4, n = 5;
      auto mat = [](bool t, index_t r, index_t c) { return t ? Shape{c, r} : Shape{r, c}; };
      auto bat = [](index_t b, Shape s) { return Shape{b}.concat(s); };
      DYNAMIC_SECTION("ta=" << ta << " tb=" << tb) {
        auto f = [=](std::vector<V64>& in) { return matmul(in[0], in[1], ta, tb); };
        require_gradcheck("both batched", f, {random_param(bat(2, mat(ta, m, k)), 1), random_param(bat(2, mat(tb, k, n)), 2)});
        require_gradcheck("matrix rhs", f, {random_param(Shape{2, 2}.concat(mat(ta, m, k)), 3), random_param(mat(tb, k, n), 4)});
        require_gradcheck("matrix lhs", f, {random_param(mat(ta, m, k), 5), random_param(bat(3, mat(tb, k, n)), 6)});
        require_gradcheck("plain", f, {random_param(mat(ta, m, k), 7), random_param(mat(tb, k, n), 8)});
      }
    }
}

TEST_CASE("gradcheck: add, sub, mul, div with broadcasting over leading dims", "[gradcheck][elementwise]") {
  const std::vector<std::pair<Shape, Shape>> layouts{
      {Shape{2, 3, 4}, Shape{2, 3, 4}}, {Shape{2, 3, 4}, Shape{4}}, {Shape{3, 4}, Shape{2, 3, 4}},
      {Shape{2, 3}, Shape{}}, {Shape{1}, Shape{2, 2}}};
  for (const auto& [sa, sb] : layouts) {
    DYNAMIC_SECTION(sa << " op " << sb) {
      auto a = random_param(sa, 11), b = random_param(sb, 12);
      auto b_pos = random_param(sb, 13, 0.3, 2.0);  // keep divisors away from zero
      require_gradcheck("add", [](auto& in) { return in[0] + in[1]; }, {a, b});
      require_gradcheck("sub", [](auto& in) { return in[0] - in[1]; }, {a, b});
      require_gradcheck("mul", [](auto& in) { return in[0] * in[1]; }, {a, b});
      require_gradcheck("div", [](auto& in) { return in[0] / in[1]; }, {a, b_pos});
    }
  }
}

TEST_CASE("gradcheck: scalar ops and activations", "[gradcheck][elementwise]") {
  auto x = random_param({3, 5}, 21, 1.5);
  auto positive = random_param({3, 5}, 22, 0.3, 2.0);
  require_gradcheck("scale", [](auto& in) { return scale(in[0], -2.5); }, {x});
  require_gradcheck("add_scalar", [](auto& in) { return add_scalar(in[0], 0.7); }, {x});
  require_gradcheck("neg", [](auto& in) { return -in[0]; }, {x});
  require_gradcheck("exp", [](auto& in) { return exp(in[0]); }, {x});
  require_gradcheck("log", [](auto& in) { return log(in[0]); }, {positive});
  require_gradcheck("tanh", [](auto& in) { return tanh(in[0]); }, {x});
  require_gradcheck("sigmoid", [](auto& in) { return sigmoid(in[0]); }, {x});
  require_gradcheck("relu", [](auto& in) { return relu(in[0]); }, {x});
  require_gradcheck("relu2", [](auto& in) { return relu2(in[0]); }, {x});
  require_gradcheck("silu", [](auto& in) { return silu(in[0]); }, {x});
  auto big = random_param({3, 5}, 23, 40.0);  // exercise the saturating part of the cap
  require_gradcheck("softcap", [](auto& in) { return softcap(in[0], 30.0); }, {big});
}

TEST_CASE("gradcheck: sum and mean over each axis and over everything", "[gradcheck][reduce]") {
  auto x = random_param({2, 3, 4}, 31);
  for (int axis : {0, 1, 2, -1})
    for (bool keepdim : {false, true}) {
      DYNAMIC_SECTION("axis " << axis << " keepdim " << keepdim) {
        require_gradcheck("sum", [=](auto& in) { return sum(in[0], axis, keepdim); }, {x});
        require_gradcheck("mean", [=](auto& in) { return mean(in[0], axis, keepdim); }, {x});
      }
    }
  require_gradcheck("sum all", [](auto& in) { return sum(in[0]); }, {x});
  require_gradcheck("mean all", [](auto& in) { return mean(in[0]); }, {x});
}

TEST_CASE("gradcheck: softmax and log_softmax over the last axis", "[gradcheck][softmax]") {
  auto x = random_param({2, 3, 7}, 41, 2.0);
  require_gradcheck("softmax", [](auto& in) { return softmax(in[0]); }, {x});
  require_gradcheck("log_softmax", [](auto& in) { return log_softmax(in[0]); }, {x});
}

TEST_CASE("gradcheck: RMSNorm with and without gain, configurable eps", "[gradcheck][rmsnorm]") {
  auto x = random_param({2, 3, 8}, 51);
  auto gain = random_param({8}, 52, 0.5, 1.0);
  require_gradcheck("rmsnorm gain", [](auto& in) { return rmsnorm(in[0], in[1], 1e-5); }, {x, gain});
  require_gradcheck("rmsnorm no gain", [](auto& in) { return rmsnorm(in[0], 1e-6); }, {x});
  require_gradcheck("rmsnorm large eps", [](auto& in) { return rmsnorm(in[0], in[1], 0.5); }, {x, gain});
}

TEST_CASE("gradcheck: embedding gather with scatter-add backward (repeated ids)", "[gradcheck][embedding]") {
  auto table = random_param({6, 4}, 61);
  const auto ids = CpuTensor<std::int32_t>::from_host({2, 3}, {5, 0, 5, 2, 5, 1});
  require_gradcheck("embedding", [&](auto& in) { return embedding(in[0], ids); }, {table});
}

TEST_CASE("gradcheck: RoPE with per-document positions and configurable theta", "[gradcheck][rope]") {
  auto x = random_param({2, 3, 2, 8}, 71);  // (B, T, heads, head_dim)
  const auto positions = CpuTensor<std::int32_t>::from_host({2, 3}, {0, 1, 2, 0, 0, 1});
  for (double theta : {10000.0, 500000.0, 7.0}) {
    require_gradcheck("rope", [&](auto& in) { return rope(in[0], positions, theta); }, {x});
  }
  // The rotation preserves norms and position 0 is the identity.
  V64 x0(x.value());
  auto y = rope(x0, positions, 10000.0);
  const auto xv = x.value().to_host(), yv = y.value().to_host();
  for (int i = 0; i < 16; ++i) CHECK(yv[i] == xv[i]);  // token (0, 0): position 0
}

TEST_CASE("gradcheck: reshape, transpose, slice, concat", "[gradcheck][shape]") {
  auto x = random_param({2, 3, 4}, 81);
  require_gradcheck("reshape", [](auto& in) { return reshape(in[0], {4, -1}); }, {x});
  for (const auto& axes : std::vector<std::pair<int, int>>{{0, 1}, {1, 2}, {0, 2}, {2, 0}, {1, 1}}) {
    const int a0 = axes.first, a1 = axes.second;  // plain names: clang 14 cannot capture a structured binding
    DYNAMIC_SECTION("transpose " << a0 << "," << a1) {
      require_gradcheck("transpose", [=](auto& in) { return transpose(in[0], a0, a1); }, {x});
    }
  }
  require_gradcheck("slice axis 1", [](auto& in) { return slice(in[0], 1, 1, 3); }, {x});
  require_gradcheck("slice axis -1", [](auto& in) { return slice(in[0], -1, 0, 1); }, {x});
  auto y = random_param({2, 2, 4}, 82);
  require_gradcheck("concat axis 1", [](auto& in) { return concat<double, Cpu>({in[0], in[1], in[0]}, 1); }, {x, y});
}

TEST_CASE("cast between float and double passes the gradient back", "[gradcheck][shape]") {
  auto x = random_param({3}, 91);
  auto f = cast<float>(x);
  backward(sum(mul(f, f)));
  const auto xv = x.value().to_host(), g = x.grad().to_host();
  for (int i = 0; i < 3; ++i) CHECK(g[i] == Approx(2 * xv[i]).epsilon(1e-6));
}

TEST_CASE("gradcheck: cross-entropy with and without a loss mask", "[gradcheck][cross_entropy]") {
  auto logits = random_param({2, 3, 5}, 101, 2.0);
  const auto targets = CpuTensor<std::int32_t>::from_host({2, 3}, {4, 0, 2, 2, 1, 3});
  const auto mask = CpuTensor<double>::from_host({2, 3}, {1, 0, 1, 1, 0, 1});
  require_gradcheck("mean", [&](auto& in) { return cross_entropy(in[0], targets); }, {logits});
  require_gradcheck("masked mean", [&](auto& in) { return cross_entropy(in[0], targets, mask); }, {logits});
  require_gradcheck("per token", [&](auto& in) { return cross_entropy_per_token(in[0], targets, mask); }, {logits});
  // The masked mean equals the mean of the unmasked per-token losses.
  const auto per_token = cross_entropy_per_token(logits.detach(), targets).value().to_host();
  const double expected = (per_token[0] + per_token[2] + per_token[3] + per_token[5]) / 4;
  CHECK(cross_entropy(logits.detach(), targets, mask).item() == Approx(expected).epsilon(1e-14));
}
