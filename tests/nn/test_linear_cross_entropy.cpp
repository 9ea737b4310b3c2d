// Fused LM head + softcap + cross-entropy against the naive composed path.
#include "support/op_testing.hpp"

#include "megacpp/nn/linear_cross_entropy.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

namespace {
V64 naive_head_loss(const V64& h, const V64& w, const CpuTensor<std::int32_t>& targets, const T64& mask, double cap) {
  V64 z = matmul(h, w, false, true);
  if (cap > 0) z = softcap(z, cap);
  return cross_entropy(z, targets, mask);
}
}  // namespace

TEST_CASE("linear_cross_entropy equals the naive path to 1e-12, with gradients, for any chunking", "[nn][loss]") {
  const auto targets = CpuTensor<std::int32_t>::from_host({2, 5}, {0, 3, 6, 2, 2, 5, 1, 0, 4, 6});
  const auto mask = T64::from_host({2, 5}, {1, 1, 0, 1, 1, 0, 1, 1, 1, 0});
  for (double cap : {0.0, 30.0, 2.0})
    for (index_t chunk : {1, 3, 64}) {
      DYNAMIC_SECTION("cap " << cap << " chunk " << chunk) {
        auto h = random_param({2, 5, 4}, 1, 2.0), w = random_param({7, 4}, 2, 2.0);
        auto h2 = V64::parameter(h.value().clone()), w2 = V64::parameter(w.value().clone());
        const LinearCrossEntropyOptions opt{cap, chunk};
        const V64 fused = linear_cross_entropy(h, w, targets, mask, opt);
        const V64 naive = naive_head_loss(h2, w2, targets, mask, cap);
        CHECK(fused.item() == Approx(naive.item()).epsilon(1e-12));
        backward(fused);
        backward(naive);
        const auto gh = h.grad().to_host(), gh2 = h2.grad().to_host(), gw = w.grad().to_host(), gw2 = w2.grad().to_host();
        for (std::size_t i = 0; i < gh.size(); ++i) REQUIRE(gh[i] == Approx(gh2[i]).margin(1e-12));
        for (std::size_t i = 0; i < gw.size(); ++i) REQUIRE(gw[i] == Approx(gw2[i]).margin(1e-12));
        require_gradcheck("fused", [&](auto& in) { return linear_cross_entropy(in[0], in[1], targets, mask, opt); },
                          {random_param({2, 5, 4}, 3), random_param({7, 4}, 4)});
      }
    }
}

TEST_CASE("linear_cross_entropy: upstream gradient scales, no_grad skips the gradient work, bad input", "[nn][loss]") {
  const auto targets = CpuTensor<std::int32_t>::from_host({3}, {0, 1, 2});
  auto h = random_param({3, 4}, 5), w = random_param({5, 4}, 6);
  backward(scale(linear_cross_entropy(h, w, targets), 3.0));
  const auto g3 = h.grad().to_host();
  h.zero_grad();
  backward(linear_cross_entropy(h, w, targets));
  const auto g1 = h.grad().to_host();
  for (std::size_t i = 0; i < g1.size(); ++i) CHECK(g3[i] == Approx(3 * g1[i]).epsilon(1e-14));
  {
    NoGrad no_grad;
    CHECK_FALSE(linear_cross_entropy(h, w, targets).requires_grad());
  }
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, targets, T64::zeros({3})), Contains("every token is masked"));
  CHECK_THROWS_WITH(linear_cross_entropy(h, random_param({5, 3}, 7), targets), Contains("hidden (3, 4) does not match weight (5, 3)"));
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, CpuTensor<std::int32_t>::from_host({3}, {0, 9, 1})), Contains("target id 9 >= 5"));
}

TEST_CASE("linear_cross_entropy: bounded targets give the tensor path's bits; their bound and writes are checked",
          "[nn][loss]") {
  const std::vector<std::int32_t> ids{0, 3, 6, 2, 2, 5, 1, 0, 4, 6};
  const auto targets = CpuTensor<std::int32_t>::from_host({2, 5}, ids);
  const auto bounded = BoundedIds<Cpu>::from_host("test", Shape{2, 5}, ids, 7, "target");
  const auto mask = T64::from_host({2, 5}, {1, 1, 0, 1, 1, 0, 1, 1, 1, 0});
  auto h = random_param({2, 5, 4}, 1, 2.0), w = random_param({7, 4}, 2, 2.0);
  auto h2 = V64::parameter(h.value().clone()), w2 = V64::parameter(w.value().clone());
  const LinearCrossEntropyOptions opt{30.0, 3};
  const V64 from_tensor = linear_cross_entropy(h, w, targets, mask, opt);
  const V64 from_bounded = linear_cross_entropy(h2, w2, bounded, mask, opt);
  CHECK(from_tensor.item() == from_bounded.item());
  backward(from_tensor);
  backward(scale(from_bounded, 0.75));  // an upstream gradient of 0.75: exactly 0.75 times the gradients
  const auto gh = h.grad().to_host(), gw = w.grad().to_host(), gh2 = h2.grad().to_host(), gw2 = w2.grad().to_host();
  for (std::size_t i = 0; i < gh.size(); ++i) REQUIRE(gh2[i] == 0.75 * gh[i]);
  for (std::size_t i = 0; i < gw.size(); ++i) REQUIRE(gw2[i] == 0.75 * gw[i]);
  // A bound above the vocabulary, or ids written after their check, are refused.
  const auto loose = BoundedIds<Cpu>::from_host("test", Shape{2, 5}, ids, 8, "target");
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, loose, mask, opt), Contains("target ids bounded by 8 index 7 rows"));
  auto reused = CpuTensor<std::int32_t>::from_host({2, 5}, ids);
  const auto stale = BoundedIds<Cpu>::checked("test", reused, 7, "target");
  reused.data()[1] = 9;
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, stale, mask, opt), Contains("written after their bound was checked"));
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, BoundedIds<Cpu>::from_host("test", Shape{3}, {0, 1, 2}, 7, "target")),
                    Contains("targets (3) do not match hidden (2, 5, 4)"));
}

TEST_CASE("linear_cross_entropy: a mask summed on the host gives the tensor mask's bits; a stale sum is refused",
          "[nn][loss]") {
  const std::vector<std::int32_t> ids{0, 3, 6, 2, 2, 5, 1, 0, 4, 6};
  const std::vector<double> weights{1, 1, 0, 1, 0.5, 0, 1, 1, 1, 0};
  const auto targets = BoundedIds<Cpu>::from_host("test", Shape{2, 5}, ids, 7, "target");
  const auto mask = LossMask<double, Cpu>::from_host("test", Shape{2, 5}, weights);
  auto h = random_param({2, 5, 4}, 1, 2.0), w = random_param({7, 4}, 2, 2.0);
  auto h2 = V64::parameter(h.value().clone()), w2 = V64::parameter(w.value().clone());
  const LinearCrossEntropyOptions opt{30.0, 3};
  const V64 from_tensor = linear_cross_entropy(h, w, targets, T64::from_host({2, 5}, weights), opt);
  const V64 from_host = linear_cross_entropy(h2, w2, targets, mask, opt);
  CHECK(from_tensor.item() == from_host.item());
  backward(from_tensor);
  backward(from_host);
  CHECK(h.grad().to_host() == h2.grad().to_host());
  CHECK(w.grad().to_host() == w2.grad().to_host());
  // No mask at all: the mean over every token, as an undefined tensor mask gives.
  CHECK((linear_cross_entropy(h, w, targets, LossMask<double, Cpu>(), opt).item() ==
         linear_cross_entropy(h, w, targets, T64(), opt).item()));
  CHECK_THROWS_WITH((linear_cross_entropy(h, w, targets, LossMask<double, Cpu>::from_host("test", Shape{10}, std::vector<double>(10, 0)), opt)),
                    Contains("linear_cross_entropy: every token is masked"));
  CHECK_THROWS_WITH((linear_cross_entropy(h, w, targets, LossMask<double, Cpu>::from_host("test", Shape{3}, {1, 1, 1}), opt)),
                    Contains("loss_mask (3) does not match targets (2, 5)"));
  auto reused = T64::from_host({2, 5}, weights);
  const auto stale = LossMask<double, Cpu>::counted(reused);
  reused.fill(1.0);
  CHECK_THROWS_WITH(linear_cross_entropy(h, w, targets, stale, opt), Contains("loss_mask was written after its sum was taken"));
}

TEMPLATE_TEST_CASE("SoftcapCrossEntropy<Cpu> equals the separate softcap, cross-entropy and gradient kernels",
                   "[nn][loss][kernel]", float, double) {
  using T = TestType;
  const index_t rows = 5;
  const std::vector<T> mask = {1, 0, T(0.5), 1, 1};
  const T scale = T(0.125), tolerance = std::is_same_v<T, float> ? T(2e-6) : T(1e-14);
  for (index_t vocab : {37, 1000})  // neither a multiple of the packet width: the tail packet is padded
    for (T cap : {T(0), T(5)}) {
      DYNAMIC_SECTION("vocab " << vocab << " cap " << cap) {
        const std::vector<std::int32_t> targets = {0, 3, static_cast<std::int32_t>(vocab - 1), 17, static_cast<std::int32_t>(vocab / 2)};
        Rng rng(11);
        const auto z = rand_uniform<T, Cpu>({rows, vocab}, rng, -9.0, 9.0);
        // the separate kernels, as linear_cross_entropy ran them before the fused one
        auto zc = z.clone();
        if (cap > 0) Cpu::map<T>(1, rows * vocab, fn::Softcap{cap}, zc.data(), In<T>{zc.data()});
        std::vector<T> losses(rows), lse(rows), grad(static_cast<std::size_t>(rows * vocab), T(0));
        Cpu::cross_entropy<T>(rows, vocab, zc.data(), targets.data(), mask.data(), losses.data(), lse.data());
        Cpu::cross_entropy_backward<T>(rows, vocab, zc.data(), lse.data(), targets.data(), mask.data(), scale, grad.data());
        if (cap > 0) Cpu::map<T>(1, rows * vocab, fn::SoftcapGrad{cap}, grad.data(), In<T>{grad.data()}, In<T>{zc.data()}, In<T>{zc.data()});
        const auto expected_zc = zc.to_host();
        // fused: the gradient into its own buffer (NaN before: every element must be written), then in place
        auto fused = z.clone(), in_place = z.clone();
        std::vector<T> f_losses(rows), f_lse(rows), f_grad(grad.size(), std::numeric_limits<T>::quiet_NaN());
        std::vector<T> i_losses(rows), i_lse(rows);
        using Kernel = kernels::SoftcapCrossEntropy<Cpu>;
        const kernels::SoftcapCrossEntropyParams params{rows, vocab, static_cast<double>(cap), static_cast<double>(scale)};
        Kernel::forward<T>(params, {fused.data(), targets.data(), mask.data(), f_losses.data(), f_lse.data(), f_grad.data()});
        Kernel::forward<T>(params, {in_place.data(), targets.data(), mask.data(), i_losses.data(), i_lse.data(), in_place.data()});
        CHECK(fused.to_host() == expected_zc);  // the same softcap code: bitwise
        CHECK(f_losses == losses);               // the same max, sum and log: bitwise
        CHECK(f_lse == lse);
        CHECK(i_losses == losses);
        const auto g_in_place = in_place.to_host();
        for (std::size_t i = 0; i < grad.size(); ++i) {
          INFO("element " << i << " (row " << i / vocab << ")");
          REQUIRE(f_grad[i] == Approx(grad[i]).epsilon(tolerance).margin(tolerance * 1e-3));
          REQUIRE(g_in_place[i] == f_grad[i]);
        }
        for (index_t c = 0; c < vocab; ++c) REQUIRE(f_grad[static_cast<std::size_t>(vocab + c)] == T(0));  // masked row
        // loss only (no gradient): logits end as zc
        auto loss_only = z.clone();
        Kernel::forward<T>(params, {loss_only.data(), targets.data(), mask.data(), i_losses.data(), i_lse.data(), nullptr});
        CHECK(loss_only.to_host() == expected_zc);
        CHECK(i_losses == losses);
      }
    }
}
