// Muon: steps on fixed tensors equal hand-computed values; MTP and non-matrix parameters are
// refused by name; state save/load/reset; world size 2 (in-process fake) == world size 1 bitwise.
#include <cmath>
#include <thread>
#include <vector>

#include "optim_testing.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

namespace {

// f^5(sigma): five NS5 steps on one singular value.
double ns5_scalar(double sigma) {
  for (int k = 0; k < 5; ++k) sigma = 3.4445 * sigma - 4.7750 * std::pow(sigma, 3) + 2.0315 * std::pow(sigma, 5);
  return sigma;
}

const std::vector<double> kQ{0.6, -0.8, 0.8, 0.6};  // orthogonal: every gradient k Q has singular values |k|

// Reference Muon step on host doubles (modded-nanogpt's Muon.step, written out).
struct ReferenceMuon {
  double lr = 0.02, momentum = 0.95, weight_decay = 0.0;
  bool nesterov = true;
  std::vector<double> buf;
  void step(std::vector<double>& w, const std::vector<double>& g, index_t rows, index_t cols) {
    if (buf.empty()) buf.assign(g.size(), 0.0);
    std::vector<double> eff(g.size());
    for (std::size_t i = 0; i < g.size(); ++i) {
      buf[i] = momentum * buf[i] + (1 - momentum) * g[i];
      eff[i] = nesterov ? (1 - momentum) * g[i] + momentum * buf[i] : buf[i];
    }
    const auto o = optim::newton_schulz_reference<optim::NS5>(eff, rows, cols, 5);
    const double scale = std::sqrt(std::max(1.0, static_cast<double>(rows) / static_cast<double>(cols)));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = w[i] * (1 - lr * weight_decay) - lr * scale * o[i];
  }
};

}  // namespace

TEST_CASE("Muon: two steps on a 2x2 matrix equal the hand-computed values", "[optim][muon]") {
  // g1 = 2 Q, g2 = -Q with Q orthogonal: every momentum buffer and Nesterov mix is a multiple k Q,
  // so NS maps it to sign(k) f^5(|k| / (|k| sqrt(2) + 1e-7)) Q and the whole step is scalar
  // arithmetic. Expected values from that arithmetic in Python (double):
  //   step 1: buf = 0.1 Q, g' = 0.195 Q, sigma_0 = 0.7071065247763841, f^5 = 1.1081115978477258
  //   step 2: buf = 0.045 Q, g' = -0.00725 Q, f^5 = 1.1081240833068016 (negated)
  //   W_t = W_{t-1} (1 - lr wd) - lr sqrt(max(1, 2/2)) O_t, lr = 0.02, wd = 0.1
  Param<double, Cpu> w(Tensor<double, Cpu>::from_host({2, 2}, {1.0, 2.0, 3.0, 4.0}), Role::matrix);
  optim::Muon<double, Cpu> muon({optim::make_param_ref("w", w)}, {.lr = 0.02, .momentum = 0.95, .nesterov = true, .weight_decay = 0.1});
  set_grad(w, {1.2, -1.6, 1.6, 1.2});  // 2 Q
  muon.step();
  const std::vector<double> step1{0.9847026608258272, 2.013729785565564, 2.976270214434436, 3.978702660825827};
  for (int i = 0; i < 4; ++i) CHECK(w.value().to_host()[i] == Approx(step1[i]).epsilon(1e-13));
  set_grad(w, {-0.6, 0.8, -0.8, -0.6});  // -Q
  muon.step();
  const std::vector<double> step2{0.9960307445038572, 1.9919723406615237, 2.9880476593384757, 3.9840427445038573};
  for (int i = 0; i < 4; ++i) CHECK(w.value().to_host()[i] == Approx(step2[i]).epsilon(1e-13));
  // and the momentum buffer is 0.045 Q
  const auto state = optim::save_state(muon);
  const auto buf = state.tensors.at("momentum_buffer.w").to_host();
  for (int i = 0; i < 4; ++i) CHECK(buf[i] == Approx(0.045 * kQ[i]).epsilon(1e-14));
}

TEST_CASE("Muon: a tall matrix is scaled by sqrt(rows / cols), with and without Nesterov", "[optim][muon]") {
  // G (4, 2) = 3 [Q; 0]: singular values (3, 3); ||G||_F = 3 sqrt(2); O = f^5(sigma_0) G / 3.
  const std::vector<double> g{1.8, -2.4, 2.4, 1.8, 0.0, 0.0, 0.0, 0.0};
  const std::vector<double> w0{0.5, -0.5, 1.0, 2.0, -1.0, 0.25, 0.0, 3.0};
  for (bool nesterov : {true, false}) {
    Param<double, Cpu> w(Tensor<double, Cpu>::from_host({4, 2}, w0), Role::matrix);
    optim::Muon<double, Cpu> muon({optim::make_param_ref("w", w)}, {.lr = 0.05, .momentum = 0.9, .nesterov = nesterov});
    w.var.grad_buffer().assign(Tensor<double, Cpu>::from_host({4, 2}, g));
    muon.step();
    // buf = 0.1 g; g' = 0.1 g + 0.9 buf = 0.19 g with Nesterov, buf = 0.1 g without (NS is
    // scale-free up to the 1e-7 of the normalisation, which the expected value includes).
    const double k = nesterov ? 3.0 * 0.19 : 3.0 * 0.1;  // singular value of g'
    const double f5 = ns5_scalar(k / (k * std::sqrt(2.0) + 1e-7));
    const auto got = w.value().to_host();
    for (int i = 0; i < 8; ++i) {
      INFO("nesterov " << nesterov << ", element " << i);
      CHECK(got[i] == Approx(w0[i] - 0.05 * std::sqrt(2.0) * f5 * g[i] / 3.0).epsilon(1e-13).margin(1e-15));
    }
  }
}

TEST_CASE("Muon: the Moonlight shape scale is 0.2 sqrt(max(rows, cols))", "[optim][muon]") {
  STATIC_REQUIRE(optim::MuonShapeScale<optim::MoonlightScale>);
  CHECK(optim::SqrtAspectScale::factor(4096, 1024) == 2.0);
  CHECK(optim::SqrtAspectScale::factor(1024, 4096) == 1.0);
  CHECK(optim::MoonlightScale::factor(1024, 4096) == Approx(0.2 * 64.0).epsilon(1e-15));
  const std::vector<double> w0{1.0, 2.0, 3.0, 4.0};
  Param<double, Cpu> w(Tensor<double, Cpu>::from_host({2, 2}, w0), Role::matrix);
  optim::Muon<double, Cpu, optim::NS5, optim::MoonlightScale> muon({optim::make_param_ref("w", w)}, {.lr = 0.01});
  set_grad(w, {1.2, -1.6, 1.6, 1.2});
  muon.step();
  const double k = 2.0 * 0.05 * (1 + 0.95);  // g' = (1 - m)(1 + m) g on the first step
  const double f5 = ns5_scalar(k / (k * std::sqrt(2.0) + 1e-7));
  for (int i = 0; i < 4; ++i) CHECK(w.value().to_host()[i] == Approx(w0[i] - 0.01 * 0.2 * std::sqrt(2.0) * f5 * kQ[i]).epsilon(1e-13));
}

TEST_CASE("Muon matches the reference step (modded-nanogpt) on random matrices of both orientations", "[optim][muon]") {
  for (const auto& [rows, cols] : std::vector<std::pair<index_t, index_t>>{{24, 40}, {40, 24}}) {
    Rng rng(77);
    Param<double, Cpu> w = Param<double, Cpu>::normal({rows, cols}, Role::matrix, rng, 1.0);
    std::vector<double> ref_w = w.value().to_host();
    ReferenceMuon ref;
    ref.weight_decay = 0.05;
    optim::Muon<double, Cpu> muon({optim::make_param_ref("w", w)}, {.lr = 0.02, .weight_decay = 0.05});
    for (int step = 0; step < 3; ++step) {
      const auto g = randn<double, Cpu>({rows, cols}, rng);
      w.var.grad_buffer().assign(g);
      muon.step();
      ref.step(ref_w, g.to_host(), rows, cols);
    }
    const auto got = w.value().to_host();
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - ref_w[i]));
    INFO("(" << rows << ", " << cols << "): max |muon - reference| = " << worst);
    CHECK(worst < 1e-12);
  }
}

TEST_CASE("Muon refuses MTP parameters by name, other roles and non-2-D tensors", "[optim][muon]") {
  Rng rng(1);
  auto mtp = Param<float, Cpu>::normal({8, 8}, Role::mtp, rng, 1.0);
  auto emb = Param<float, Cpu>::normal({8, 8}, Role::embedding, rng, 1.0);
  auto vec = Param<float, Cpu>::normal({8}, Role::matrix, rng, 1.0);
  auto cube = Param<float, Cpu>::normal({2, 4, 4}, Role::matrix, rng, 1.0);
  using M = optim::Muon<float, Cpu>;
  CHECK_THROWS_WITH(M({optim::make_param_ref("mtp.block.attn.wq", mtp)}),
                    Contains("'mtp.block.attn.wq'") && Contains("Role::mtp") && Contains("AdamW"));
  CHECK_THROWS_WITH(M({optim::make_param_ref("embed", emb)}), Contains("'embed'") && Contains("Role::embedding"));
  CHECK_THROWS_WITH(M({optim::make_param_ref("v", vec)}), Contains("'v'") && Contains("(8)"));
  CHECK_THROWS_WITH(M({optim::make_param_ref("c", cube)}), Contains("'c'") && Contains("(2, 4, 4)"));
  CHECK_THROWS_WITH(M({optim::make_param_ref("a", vec), optim::make_param_ref("a", vec)}), Contains("'a'"));
  auto w = Param<float, Cpu>::normal({8, 8}, Role::matrix, rng, 1.0);
  CHECK_THROWS_WITH(M({optim::make_param_ref("w", w)}, {.momentum = 1.0}), Contains("momentum") && Contains("1"));
  CHECK_THROWS_WITH(M({optim::make_param_ref("w", w)}, {.lr = -1.0}), Contains("lr") && Contains("-1"));
}

TEST_CASE("Muon skips parameters without a gradient and rejects a gradient of the wrong shape", "[optim][muon]") {
  Rng rng(2);
  auto a = Param<float, Cpu>::normal({8, 4}, Role::matrix, rng, 1.0);
  auto b = Param<float, Cpu>::normal({4, 8}, Role::matrix, rng, 1.0);
  optim::Muon<float, Cpu> muon({optim::make_param_ref("a", a), optim::make_param_ref("b", b)});
  const auto b0 = b.value().clone();
  a.var.grad_buffer().assign(randn<float, Cpu>({8, 4}, rng));
  muon.step();
  CHECK(bitwise_equal(b.value(), b0));
  const auto state = optim::save_state(muon);
  for (float v : state.tensors.at("momentum_buffer.b").to_host()) CHECK(v == 0.0f);
  b.var.grad_buffer() = Tensor<float, Cpu>::zeros({8, 4});
  CHECK_THROWS_WITH(muon.step(), Contains("'b'") && Contains("(8, 4)") && Contains("(4, 8)"));
}

TEST_CASE("Muon state: save -> new optimiser -> load gives a bitwise identical next step, and reset zeroes chosen buffers",
          "[optim][muon][state]") {
  Rng rng(3);
  auto a = Param<float, Cpu>::normal({16, 8}, Role::matrix, rng, 1.0);
  auto b = Param<float, Cpu>::normal({8, 16}, Role::matrix, rng, 1.0);
  std::vector<optim::ParamRef<float, Cpu>> refs{optim::make_param_ref("a", a), optim::make_param_ref("b", b)};
  optim::Muon<float, Cpu> first(refs, {.weight_decay = 0.01});
  for (std::uint64_t s = 0; s < 3; ++s) {
    set_random_grads(refs, 100 + s);
    first.step();
  }
  const auto saved = optim::save_state(first);
  CHECK(saved.tensors.size() == 2);
  CHECK(saved.tensors.count("momentum_buffer.a") == 1);
  // a second model with the same values, a fresh optimiser, the loaded state
  Param<float, Cpu> a2(a.value().clone(), Role::matrix), b2(b.value().clone(), Role::matrix);
  std::vector<optim::ParamRef<float, Cpu>> refs2{optim::make_param_ref("a", a2), optim::make_param_ref("b", b2)};
  optim::Muon<float, Cpu> second(refs2, {.weight_decay = 0.01});
  optim::load_state(second, saved);
  set_random_grads(refs, 200);
  set_random_grads(refs2, 200);
  first.step();
  second.step();
  CHECK(bitwise_equal(a.value(), a2.value()));
  CHECK(bitwise_equal(b.value(), b2.value()));

  const auto before = optim::save_state(first);
  first.reset_state({"a"});
  const auto after = optim::save_state(first);
  for (float v : after.tensors.at("momentum_buffer.a").to_host()) CHECK(v == 0.0f);
  CHECK(bitwise_equal(after.tensors.at("momentum_buffer.b"), before.tensors.at("momentum_buffer.b")));
  CHECK_THROWS_WITH(first.reset_state({"b", "nope"}), Contains("'nope'"));
  CHECK(first.owns("b"));
  CHECK_FALSE(first.owns("nope"));
}

TEST_CASE("Muon::set_momentum sets every group's momentum (momentum warmup)", "[optim][muon]") {
  Rng rng(4);
  auto a = Param<double, Cpu>::normal({4, 4}, Role::matrix, rng, 1.0);
  optim::Muon<double, Cpu> muon({optim::make_param_ref("a", a)});
  muon.set_momentum(optim::MomentumWarmup{}(0));
  CHECK(muon.groups()[0].options.momentum == 0.85);
  // with m = 0.85 the first buffer is 0.15 g
  a.var.grad_buffer().fill(2.0);
  muon.step();
  for (double v : optim::save_state(muon).tensors.at("momentum_buffer.a").to_host()) CHECK(v == Approx(0.3).epsilon(1e-15));
  CHECK_THROWS_WITH(muon.set_momentum(1.5), Contains("1.5"));
}

TEST_CASE("Distributed Muon: world size 2 (in-process fake) equals world size 1 bitwise", "[optim][muon][distributed]") {
  // Five matrices of different shapes: chunks of two, the last one alone, padding in the gather.
  const std::vector<std::pair<index_t, index_t>> shapes{{32, 16}, {16, 48}, {24, 24}, {8, 40}, {40, 8}};
  const auto make_params = [&](std::vector<Param<float, Cpu>>& store) {
    Rng rng(9);
    store.clear();
    for (const auto& [r, c] : shapes) store.push_back(Param<float, Cpu>::normal({r, c}, Role::matrix, rng, 0.5));
    std::vector<optim::ParamRef<float, Cpu>> refs;
    for (std::size_t i = 0; i < store.size(); ++i) refs.push_back(optim::make_param_ref("m" + std::to_string(i), store[i]));
    return refs;
  };
  const auto train = [&](std::vector<Param<float, Cpu>>& store, auto& comm) {
    auto refs = make_params(store);
    optim::Muon<float, Cpu> muon(refs, {.weight_decay = 0.01});
    for (std::uint64_t s = 0; s < 3; ++s) {
      set_random_grads(refs, 500 + s);  // every rank sees the same (all-reduced) gradients
      muon.step(comm);
    }
  };
  std::vector<Param<float, Cpu>> single;
  dist::SingleProcess one;
  train(single, one);
  for (int world : {2, 3}) {
    dist::InProcessGroup group(world);
    std::vector<std::vector<Param<float, Cpu>>> ranks(static_cast<std::size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r)
      threads.emplace_back([&, r] {
        dist::InProcessComm comm = group.comm(r);
        train(ranks[static_cast<std::size_t>(r)], comm);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < world; ++r)
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        INFO("world " << world << ", rank " << r << ", matrix " << i);
        CHECK(bitwise_equal(ranks[static_cast<std::size_t>(r)][i].value(), single[i].value()));
      }
  }
  const optim::ShardPlan plan(5, 2);
  CHECK(plan.chunks() == 3);
  CHECK(plan.owner(0) == 0);
  CHECK(plan.owner(3) == 1);
  CHECK(plan.chunk_begin(2) == 4);
  CHECK(plan.chunk_end(2) == 5);
}

TEST_CASE("Muon with ns_bf16 orthogonalises on bf16 GEMM operands, and double parameters refuse it", "[optim][muon]") {
  // Same weights, same gradient, one step each: the bf16 iteration's update is close to the fp32
  // one (within the bound test_newton_schulz.cpp checks for newton_schulz_bf16) and not equal to it.
  Rng rng(7);
  const auto w0 = randn<float, Cpu>({24, 40}, rng), g = randn<float, Cpu>({24, 40}, rng);
  Param<float, Cpu> a(w0.clone(), Role::matrix), b(w0.clone(), Role::matrix);
  optim::Muon<float, Cpu> fp32({optim::make_param_ref("w", a)}, {.lr = 0.02});
  optim::Muon<float, Cpu> mixed({optim::make_param_ref("w", b)}, {.lr = 0.02, .ns_bf16 = true});
  a.var.grad_buffer().assign(g.clone());
  b.var.grad_buffer().assign(g.clone());
  fp32.step();
  mixed.step();
  const auto start = w0.to_host(), wa = a.value().to_host(), wb = b.value().to_host();
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < start.size(); ++i) {
    const double ua = wa[i] - start[i], ub = wb[i] - start[i];
    diff += (ua - ub) * (ua - ub);
    norm += ua * ua;
  }
  INFO("||update_bf16 - update_fp32|| / ||update_fp32|| = " << std::sqrt(diff / norm));
  CHECK(std::sqrt(diff / norm) < kNsBf16Tolerance);
  CHECK(diff > 0);

  Param<double, Cpu> d(Tensor<double, Cpu>::zeros({4, 4}), Role::matrix);
  using MuonDouble = optim::Muon<double, Cpu>;
  const optim::MuonOptions bf16_ns{.ns_bf16 = true};
  CHECK_THROWS_WITH(MuonDouble({optim::make_param_ref("w", d)}, bf16_ns), Contains("ns_bf16") && Contains("float"));
}

TEST_CASE("Cpu::update_in_place with fn::MuonStep equals the map of fn::MuonUpdate bitwise; its rounding is convert's",
          "[optim][muon][kernel]") {
  const index_t n = 1003;
  Rng rng(23);
  const auto w0 = rand_uniform<float, Cpu>({n}, rng, -1.0, 1.0), o = rand_uniform<float, Cpu>({n}, rng, -1.0, 1.0);
  const fn::MuonUpdate update{1.0 - 0.02 * 0.1, 0.02 * 1.5};
  auto mapped = w0.clone();
  Cpu::map<float>(1, n, update, mapped.data(), In<float>{mapped.data()}, In<float>{o.data()});
  auto stepped = w0.clone(), rounded_step = w0.clone();
  Cpu::update_in_place<float>(n, fn::MuonStep{update}, stepped.data(), o.data());
  CHECK(stepped.to_host() == mapped.to_host());
  Tensor<bf16, Cpu> rounded({n});
  Cpu::update_in_place<float>(n, fn::MuonStep{update}, rounded_step.data(), o.data(), rounded.data());
  CHECK(rounded_step.to_host() == mapped.to_host());
  const auto got = rounded.to_host(), want = mapped.to<bf16>().to_host();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i].bits == want[i].bits);
}
