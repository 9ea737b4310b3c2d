// The MoE layer and its parts: the grouped product against per-group products and across thread
// counts (in fp32, and on bf16 operands against Cpu::gemm_bf16 per group), gradchecks in double
// (router and routing weights, the grouped product, the whole layer under both routing policies),
// deterministic top-k ties, balancing, bad input.
#include "support/fused_bf16_testing.hpp"
#include "support/op_testing.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "megacpp/nn/moe.hpp"

using namespace megacpp;
using Catch::Matchers::Contains;

namespace {
// 8 groups of uneven size, two empty.
const std::vector<index_t> kOffsets{0, 3, 3, 10, 11, 11, 24, 26, 31};

template <class T>
std::vector<T> grouped_forward(const CpuTensor<T>& x, const CpuTensor<T>& w) {
  NoGrad no_grad;
  return grouped_matmul(Var<T, Cpu>(x), Var<T, Cpu>(w), kOffsets).value().to_host();
}

template <class T, class Routing>
MoE<T, Cpu, Routing> live_moe(const MoEConfig& c, std::uint64_t seed) {
  Rng rng(seed);
  MoE<T, Cpu, Routing> moe(c, rng);
  for (auto& e : moe.experts) e.proj.weight.var.mutable_value().assign(randn<T, Cpu>(e.proj.weight.shape(), rng, 0.3));
  return moe;
}
}  // namespace

TEST_CASE("grouped_matmul: each group is its own product, bitwise on 1 and 2 threads", "[moe][grouped_gemm]") {
  Rng rng(1);
  const index_t K = 70, N = 130;  // wider than a tile both ways
  const auto x = randn<float, Cpu>({31, K}, rng), w = randn<float, Cpu>({8, N, K}, rng);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = grouped_forward(x, w);
  omp_set_num_threads(2);
  const std::vector<float> two = grouped_forward(x, w);
  omp_set_num_threads(saved);
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)) == 0);
  // group g against matmul(x_g, w_g^T) on the same backend: the same packed kernel, the same bits
  for (index_t g = 0; g < 8; ++g) {
    const index_t r0 = kOffsets[g], rows = kOffsets[g + 1] - r0;
    if (rows == 0) continue;
    NoGrad no_grad;
    const auto xg = slice(Var<float, Cpu>(x), 0, r0, r0 + rows);
    const auto wg = reshape(slice(Var<float, Cpu>(w), 0, g, g + 1), Shape{N, K});
    const std::vector<float> ref = matmul(xg, wg, false, true).value().to_host();
    CHECK(std::memcmp(ref.data(), one.data() + r0 * N, ref.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("grouped_matmul under bf16 products: each group is Cpu::gemm_bf16 on bf16 copies, forward and both gradients",
          "[moe][grouped_gemm][precision]") {
  Rng rng(4);
  const index_t K = 70, N = 130, E = 8, M = kOffsets.back();  // wider than a tile both ways
  const auto x = randn<float, Cpu>({M, K}, rng), w = randn<float, Cpu>({E, N, K}, rng);
  const auto dy = randn<float, Cpu>({M, N}, rng);
  const int saved = omp_get_max_threads();
  auto run = [&](int threads) {  // y, dx, dw
    omp_set_num_threads(threads);
    const auto xv = Var<float, Cpu>::parameter(x), wv = Var<float, Cpu>::parameter(w);
    return testing::bf16_output_and_gradients({xv, wv}, Var<float, Cpu>(dy), [&] { return grouped_matmul(xv, wv, kOffsets); });
  };
  const testing::OutputAndGradients one = run(1), two = run(2);
  omp_set_num_threads(saved);
  testing::check_same_bits(one, two);

  // group by group through the dense bf16 GEMM on bf16 copies of x, w and dy: the same bits
  const auto x16 = x.to<bf16>(), w16 = w.to<bf16>(), dy16 = dy.to<bf16>();
  std::vector<float> y(static_cast<std::size_t>(M * N)), dx(static_cast<std::size_t>(M * K), 0.0f),
      dw(static_cast<std::size_t>(E * N * K), 0.0f);
  for (index_t g = 0; g < E; ++g) {
    const index_t r0 = kOffsets[g], rows = kOffsets[g + 1] - r0;
    if (rows == 0) continue;
    const bf16* wg = w16.data() + g * N * K;
    Cpu::gemm_bf16(GemmArgs::dense(false, true, rows, N, K), 1.0f, x16.data() + r0 * K, wg, 0.0f, y.data() + r0 * N);
    Cpu::gemm_bf16(GemmArgs::dense(false, false, rows, K, N), 1.0f, dy16.data() + r0 * N, wg, 1.0f, dx.data() + r0 * K);
    Cpu::gemm_bf16(GemmArgs::dense(true, false, N, K, rows), 1.0f, dy16.data() + r0 * N, x16.data() + r0 * K, 1.0f,
                   dw.data() + g * N * K);
  }
  testing::check_same_bits(one, {y, dx, dw});

  // and the fp32 product differs: the scope really rounded the operands
  const std::vector<float> y32 = grouped_forward(x, w);
  double worst = 0;
  for (std::size_t i = 0; i < y32.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(y32[i] - one[0][i])));
  CHECK(worst > 1e-3);
}

TEST_CASE("relu2_grouped_matmul_bf16 equals relu2 then grouped_matmul under bf16 bitwise, holding the hidden "
          "activation in bf16 only", "[moe][grouped_gemm][precision]") {
  Rng rng(5);
  const index_t hidden = 70, out = 45, E = 8, M = kOffsets.back();
  const auto u = Var<float, Cpu>::parameter(randn<float, Cpu>({M, hidden}, rng));
  const auto w = Var<float, Cpu>::parameter(randn<float, Cpu>({E, out, hidden}, rng));
  const Var<float, Cpu> g(randn<float, Cpu>({M, out}, rng));
  const auto separate = testing::bf16_output_and_gradients({u, w}, g, [&] { return grouped_matmul(relu2(u), w, kOffsets); });
  const auto fused = testing::bf16_output_and_gradients({u, w}, g, [&] { return relu2_grouped_matmul_bf16(u, w, kOffsets); });
  testing::check_same_bits(separate, fused);
  CHECK_THROWS_WITH(relu2_grouped_matmul_bf16(u, w, {0, 3, M}), Contains("relu2_grouped_matmul_bf16") &&
                                                                    Contains("needs 9 offsets"));

  // between forward and backward the fused op holds the hidden activation as bf16 (2 bytes an
  // element) where the two ops held its fp32 value and its bf16 copy (6 bytes)
  const std::size_t two_ops = testing::bf16_bytes_held_after_forward([&] { return grouped_matmul(relu2(u), w, kOffsets); });
  const std::size_t one_op = testing::bf16_bytes_held_after_forward([&] { return relu2_grouped_matmul_bf16(u, w, kOffsets); });
  INFO("bytes held after forward: two ops " << two_ops << ", fused " << one_op);
  CHECK(two_ops >= one_op + static_cast<std::size_t>(M * hidden) * sizeof(float));
}

TEST_CASE("relu2_grouped_mlp_bf16 equals the experts' two grouped products and relu2 under bf16 bitwise",
          "[moe][grouped_gemm][precision]") {
  Rng rng(6);
  const index_t d = 24, hidden = 70, out = 45, E = 8, M = kOffsets.back();
  const auto x = Var<float, Cpu>::parameter(randn<float, Cpu>({M, d}, rng));
  const auto w_fc = Var<float, Cpu>::parameter(randn<float, Cpu>({E, hidden, d}, rng, 0.3));
  const auto w_proj = Var<float, Cpu>::parameter(randn<float, Cpu>({E, out, hidden}, rng, 0.3));
  const Var<float, Cpu> g(randn<float, Cpu>({M, out}, rng));
  const auto separate_ops = [&] { return grouped_matmul(relu2(grouped_matmul(x, w_fc, kOffsets)), w_proj, kOffsets); };
  const auto second_half_fused = [&] { return relu2_grouped_matmul_bf16(grouped_matmul(x, w_fc, kOffsets), w_proj, kOffsets); };
  const auto whole_fused = [&] { return relu2_grouped_mlp_bf16(x, w_fc, w_proj, kOffsets); };
  for (int passes : {1, 2}) {  // the second pass adds into the gradients
    INFO(passes << " backward passes; outputs y, dx, dW_fc, dW_proj");
    const auto fused = testing::bf16_output_and_gradients({x, w_fc, w_proj}, g, whole_fused, passes);
    testing::check_same_bits(testing::bf16_output_and_gradients({x, w_fc, w_proj}, g, separate_ops, passes), fused);
    testing::check_same_bits(testing::bf16_output_and_gradients({x, w_fc, w_proj}, g, second_half_fused, passes), fused);
  }
  {  // only the second layer and the rows need a gradient (frozen first-layer experts)
    const Var<float, Cpu> fc_frozen(w_fc.value());
    const auto fused = testing::bf16_output_and_gradients({x, w_proj}, g, [&] { return relu2_grouped_mlp_bf16(x, fc_frozen, w_proj, kOffsets); });
    testing::check_same_bits(testing::bf16_output_and_gradients({x, w_proj}, g, [&] {
      return relu2_grouped_matmul_bf16(grouped_matmul(x, fc_frozen, kOffsets), w_proj, kOffsets);
    }), fused);
  }
  CHECK_THROWS_WITH(relu2_grouped_mlp_bf16(x, w_fc, Var<float, Cpu>(Tensor<float, Cpu>::zeros({E, out, hidden + 1})), kOffsets),
                    Contains("relu2_grouped_mlp_bf16") && Contains("(8, 45, 71)"));
  CHECK_THROWS_WITH(relu2_grouped_mlp_bf16(x, w_fc, w_proj, {0, 3, M}),
                    Contains("relu2_grouped_mlp_bf16") && Contains("needs 9 offsets"));
}

TEST_CASE("grouped_matmul: gradcheck in double with empty and uneven groups", "[moe][grouped_gemm][gradcheck]") {
  Rng rng(2);
  std::vector<Var<double, Cpu>> in{Var<double, Cpu>::parameter(randn<double, Cpu>({31, 6}, rng)),
                                   Var<double, Cpu>::parameter(randn<double, Cpu>({8, 5, 6}, rng))};
  const auto r = gradcheck<Cpu>([](const auto& v) { return grouped_matmul(v[0], v[1], kOffsets); }, in);
  INFO(r.report);
  CHECK(r.ok);
}

TEST_CASE("grouped_matmul: a bad group layout is refused with its values", "[moe][grouped_gemm][errors]") {
  const auto x = Var<double, Cpu>(CpuTensor<double>::zeros({4, 3})), w = Var<double, Cpu>(CpuTensor<double>::zeros({2, 5, 3}));
  CHECK_THROWS_WITH(grouped_matmul(x, w, {0, 4}), Contains("needs 3 offsets (groups + 1), got 2"));
  CHECK_THROWS_WITH(grouped_matmul(x, w, {0, 3, 2}), Contains("group 1 has negative size: offsets 3 then 2"));
  CHECK_THROWS_WITH(grouped_matmul(x, w, {0, 1, 3}), Contains("covers 3 rows but x has 4"));
  CHECK_THROWS_WITH(grouped_matmul(x, w, {1, 2, 4}), Contains("must start at 0, got 1"));
}

namespace {
// Each token's k experts chosen by ExpertRouting<Cpu> from `scores` (tokens, E) on the host.
std::vector<std::int32_t> chosen(const std::vector<float>& scores, index_t tokens, index_t k,
                                 const std::vector<double>* bias = nullptr) {
  const auto E = static_cast<index_t>(scores.size()) / tokens;
  return DispatchPlan<Cpu>::route(CpuTensor<float>::from_host(Shape{tokens, E}, scores), bias, k).selected_experts();
}
}  // namespace

TEST_CASE("top-k ties go to the lower expert index", "[moe][routing]") {
  CHECK(chosen(std::vector<float>(6, 0.25f), 1, 3) == std::vector<std::int32_t>{0, 1, 2});
  const std::vector<float> scores{0.1f, 0.7f, 0.3f, 0.7f, 0.3f};
  CHECK(chosen(scores, 1, 3) == std::vector<std::int32_t>{1, 3, 2});  // 0.7 at 1 and 3, then 0.3 at 2 before 4
  const std::vector<double> bias{0, 0, 0, 0, 0.5};
  CHECK(chosen(scores, 1, 1, &bias) == std::vector<std::int32_t>{4});
  // The first non-finite score in (token, expert) order is named, whatever follows it.
  std::vector<float> bad(8 * 2, 0.f);
  bad[7 * 2 + 1] = std::numeric_limits<float>::quiet_NaN();
  bad[7 * 2 + 0] = 0.5f;
  CHECK_THROWS_WITH(chosen(bad, 8, 1), Contains("score of token 7 for expert 1"));
  bad[3 * 2 + 0] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH(chosen(bad, 8, 1), Contains("score of token 3 for expert 0 is inf"));
  CHECK_THROWS_WITH(chosen(scores, 1, 6), Contains("1 <= k <= experts") && Contains("k 6"));
  const std::vector<double> short_bias{0, 0};
  CHECK_THROWS_WITH(chosen(scores, 1, 1, &short_bias), Contains("the choice bias has 2 entries for 5 experts"));

  // A zero router scores every expert the same: every token goes to experts 0 and 1, both policies.
  MoEConfig c{.d_model = 8, .experts = 4, .top_k = 2, .expert_hidden = 4};
  Rng rng(3);
  for (int policy = 0; policy < 2; ++policy) {
    auto check_zero_router = [&](auto moe) {
      moe.router.proj.weight.var.mutable_value().assign(CpuTensor<float>::zeros({4, 8}));
      moe.forward(Var<float, Cpu>(randn<float, Cpu>({5, 8}, rng)));
      const std::vector<index_t>& load = moe.last_load().tokens_per_expert;
      REQUIRE(load.size() == 4);
      CHECK(load[0] == 5);
      CHECK(load[1] == 5);
      CHECK(load[2] == 0);
      CHECK(load[3] == 0);
      CHECK(moe.last_load().max_fraction() == 0.5);
      CHECK(moe.last_load().min_fraction() == 0.0);
    };
    if (policy == 0) check_zero_router(MoE<float, Cpu, SoftmaxTopK>(c, rng));
    else check_zero_router(MoE<float, Cpu, SigmoidBiasTopK>(c, rng));
  }
}

TEST_CASE("DispatchPlan: a stable sort by expert, every (token, slot) once", "[moe][dispatch]") {
  // 3 tokens, k 2, 4 experts: token 0 -> (2, 0), token 1 -> (0, 3), token 2 -> (2, 3)
  const std::vector<float> scores{0.5f, 0.0f, 0.9f, 0.1f,   //
                                  0.8f, 0.1f, 0.0f, 0.3f,   //
                                  0.0f, 0.2f, 0.9f, 0.7f};
  const DispatchPlan<Cpu> p = DispatchPlan<Cpu>::route(CpuTensor<float>::from_host(Shape{3, 4}, scores), nullptr, 2);
  CHECK(p.selected_experts() == std::vector<std::int32_t>{2, 0, 0, 3, 2, 3});
  CHECK(p.score_index.ids().to_host() == std::vector<std::int32_t>{2, 0, 4, 7, 10, 11});  // t * 4 + e
  CHECK(p.offsets == std::vector<index_t>{0, 2, 2, 4, 6});
  CHECK(p.token_of_row.ids().to_host() == std::vector<std::int32_t>{0, 1, 0, 2, 1, 2});
  // slot 0 of tokens 0..2, then slot 1
  CHECK(p.row_of_slot.ids().to_host() == std::vector<std::int32_t>{2, 1, 3, 0, 4, 5});
  CHECK(p.load().tokens_per_expert == std::vector<index_t>{2, 0, 2, 2});

  // No tokens: an empty plan, every group empty.
  const DispatchPlan<Cpu> none = DispatchPlan<Cpu>::route(CpuTensor<float>::zeros({0, 4}), nullptr, 2);
  CHECK(none.offsets == std::vector<index_t>{0, 0, 0, 0, 0});
  CHECK(none.token_of_row.numel() == 0);

  // Many tokens on 1 and 2 threads: the same plan, and the one a host stable sort of the choices makes.
  Rng rng(8);
  const index_t tokens = 257, E = 7, k = 3;
  std::vector<float> many(static_cast<std::size_t>(tokens * E));
  for (float& v : many) v = static_cast<float>(std::floor(rng.normal() * 2.0)) / 4.0f;  // many ties
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const DispatchPlan<Cpu> one = DispatchPlan<Cpu>::route(CpuTensor<float>::from_host(Shape{tokens, E}, many), nullptr, k);
  omp_set_num_threads(2);
  const DispatchPlan<Cpu> two = DispatchPlan<Cpu>::route(CpuTensor<float>::from_host(Shape{tokens, E}, many), nullptr, k);
  omp_set_num_threads(saved);
  CHECK(one.score_index.ids().to_host() == two.score_index.ids().to_host());
  CHECK(one.row_of_slot.ids().to_host() == two.row_of_slot.ids().to_host());
  const std::vector<std::int32_t> sel = one.selected_experts();
  for (index_t t = 0; t < tokens; ++t) {  // each token's k largest, ties to the lower index: a stable sort's first k
    std::vector<std::int32_t> order(static_cast<std::size_t>(E));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) { return many[t * E + a] > many[t * E + b]; });
    for (index_t j = 0; j < k; ++j) REQUIRE(sel[t * k + j] == order[static_cast<std::size_t>(j)]);
  }
  std::vector<index_t> pairs(static_cast<std::size_t>(tokens * k));
  std::iota(pairs.begin(), pairs.end(), index_t{0});
  std::stable_sort(pairs.begin(), pairs.end(), [&](index_t a, index_t b) { return sel[a] < sel[b]; });
  const std::vector<std::int32_t> token_of_row = one.token_of_row.ids().to_host();
  const std::vector<std::int32_t> row_of_slot = one.row_of_slot.ids().to_host();
  for (index_t r = 0; r < tokens * k; ++r) {
    const index_t pair = pairs[static_cast<std::size_t>(r)], t = pair / k, j = pair % k;
    REQUIRE(token_of_row[r] == t);
    REQUIRE(row_of_slot[j * tokens + t] == r);
  }
  for (index_t e = 0; e < E; ++e)
    CHECK(one.offsets[e + 1] - one.offsets[e] == std::count(sel.begin(), sel.end(), static_cast<std::int32_t>(e)));
}

TEST_CASE("MoE: gradcheck in double of the router and routing weights", "[moe][gradcheck]") {
  const MoEConfig c{.d_model = 6, .experts = 4, .top_k = 2, .expert_hidden = 5};
  Rng rng(4);
  const auto x = Var<double, Cpu>::parameter(randn<double, Cpu>({7, 6}, rng));
  SECTION("softmax top-k: gates and the balance loss") {
    auto moe = live_moe<double, SoftmaxTopK>(c, 5);
    const auto r = gradcheck<Cpu>([&](const auto& v) { return moe.forward(v[0]); }, {x, moe.router.proj.weight.var});
    INFO(r.report);
    CHECK(r.ok);
    const auto balance = gradcheck<Cpu>([&](const auto&) {
      AuxLosses<double, Cpu> aux;
      moe.forward(x, aux);
      return aux.entries().at(0).loss;
    }, {x, moe.router.proj.weight.var});
    INFO(balance.report);
    CHECK(balance.ok);
  }
  SECTION("sigmoid + bias top-k") {
    auto moe = live_moe<double, SigmoidBiasTopK>(c, 6);
    moe.routing.bias = {0.3, -0.2, 0.0, 0.1};
    const auto r = gradcheck<Cpu>([&](const auto& v) { return moe.forward(v[0]); }, {x, moe.router.proj.weight.var});
    INFO(r.report);
    CHECK(r.ok);
  }
}

TEST_CASE("MoE: gradcheck in double of the whole layer, both policies, shared expert", "[moe][gradcheck]") {
  const MoEConfig c{.d_model = 6, .experts = 4, .top_k = 2, .expert_hidden = 5, .shared_experts = 1};
  Rng rng(7);
  const auto x = Var<double, Cpu>::parameter(randn<double, Cpu>({2, 4, 6}, rng));
  auto layer_inputs = [&](auto& moe) {
    moe.shared.proj.weight.var.mutable_value().assign(randn<double, Cpu>(moe.shared.proj.weight.shape(), rng, 0.3));
    std::vector<Var<double, Cpu>> in{x, moe.router.proj.weight.var};
    for (auto& e : moe.experts) {
      in.push_back(e.fc.weight.var);
      in.push_back(e.proj.weight.var);
    }
    in.push_back(moe.shared.fc.weight.var);
    return in;
  };
  auto softmax_moe = live_moe<double, SoftmaxTopK>(c, 8);
  const auto a = gradcheck<Cpu>([&](const auto& v) { return softmax_moe.forward(v[0]); }, layer_inputs(softmax_moe));
  INFO(a.report);
  CHECK(a.ok);
  auto sigmoid_moe = live_moe<double, SigmoidBiasTopK>(c, 9);
  const auto b = gradcheck<Cpu>([&](const auto& v) { return sigmoid_moe.forward(v[0]); }, layer_inputs(sigmoid_moe));
  INFO(b.report);
  CHECK(b.ok);
}

TEST_CASE("MoE: the balance loss is E sum_e f_e P_e, added with the layer's weight", "[moe][routing]") {
  MoEConfig c{.d_model = 8, .experts = 4, .top_k = 1, .expert_hidden = 4, .aux_loss_weight = 0.25};
  Rng rng(10);
  MoE<double, Cpu, SoftmaxTopK> moe(c, rng);
  const auto x = Var<double, Cpu>(randn<double, Cpu>({9, 8}, rng));
  AuxLosses<double, Cpu> aux;
  moe.forward(x, aux);
  REQUIRE(aux.entries().size() == 1);
  CHECK(aux.entries()[0].name == "balance");
  CHECK(aux.entries()[0].weight == 0.25);
  // the same from the definition
  const std::vector<double> p = softmax(moe.router.forward(x)).value().to_host();
  double expected = 0;
  for (index_t e = 0; e < 4; ++e) {
    double P = 0;
    for (index_t t = 0; t < 9; ++t) P += p[t * 4 + e] / 9;
    expected += static_cast<double>(moe.last_load().tokens_per_expert[e]) / 9 * P;
  }
  CHECK(aux.entries()[0].loss.item() == Approx(4 * expected).epsilon(1e-12));
  // weight 0 skips it; the sigmoid policy has none
  moe.config.aux_loss_weight = 0;
  AuxLosses<double, Cpu> none;
  moe.forward(x, none);
  CHECK(none.empty());
}

TEST_CASE("SigmoidBiasTopK: the bias update moves the load toward balance", "[moe][routing][balance]") {
  SigmoidBiasTopK rule;
  rule.reset(4);
  MoELoad load{{10, 2, 2, 2}, 16};  // mean 4
  rule.update_bias(load, 0.1);
  CHECK(rule.bias == std::vector<double>{-0.1, 0.1, 0.1, 0.1});
  CHECK_THROWS_WITH(rule.update_bias(load, -1), Contains("gamma -1 must be >= 0"));

  // A router that prefers expert 0 for every token: repeated updates pull the load toward 1/E.
  MoEConfig c{.d_model = 8, .experts = 4, .top_k = 1, .expert_hidden = 4};
  Rng rng(11);
  MoE<float, Cpu, SigmoidBiasTopK> moe(c, rng);
  std::vector<float> w = moe.router.proj.weight.value().to_host();
  for (index_t i = 0; i < 8; ++i) w[i] += 2.0f;  // expert 0's row: every feature votes for it
  moe.router.proj.weight.var.mutable_value().assign(CpuTensor<float>::from_host({4, 8}, w));
  const auto x = Var<float, Cpu>(add_scalar(Var<float, Cpu>(rand_uniform<float, Cpu>({64, 8}, rng, 0.0, 1.0)), 0.5));
  moe.forward(x);
  const double before = moe.last_load().max_fraction();
  for (int step = 0; step < 60; ++step) {
    moe.update_bias(0.05);
    moe.forward(x);
  }
  INFO("max fraction before " << before << ", after " << moe.last_load().max_fraction());
  CHECK(before > 0.9);
  CHECK(moe.last_load().max_fraction() < 0.5);
  CHECK(moe.routing.bias[0] < 0);
}

TEST_CASE("MoE: bad sizes are refused with their values", "[moe][errors]") {
  Rng rng(12);
  auto make = [&](MoEConfig c) { return MoE<float, Cpu>(c, rng); };
  CHECK_THROWS_WITH(make({.d_model = 8, .experts = 4, .top_k = 5}), Contains("top_k must be in [1, experts = 4], got 5"));
  CHECK_THROWS_WITH(make({.d_model = 8, .experts = 4, .top_k = 0}), Contains("top_k must be in [1, experts = 4], got 0"));
  CHECK_THROWS_WITH(make({.d_model = 8, .experts = 0, .top_k = 1}), Contains("experts must be >= 1, got 0"));
  CHECK_THROWS_WITH(make({.d_model = 8, .experts = 4, .top_k = 2, .expert_hidden = -3}),
                    Contains("expert_hidden must be positive, got -3"));
  CHECK_THROWS_WITH(make({.d_model = 0, .experts = 4, .top_k = 2}), Contains("d_model must be positive, got 0"));
  CHECK_THROWS_WITH(make({.d_model = 8, .experts = 4, .top_k = 2, .aux_loss_weight = -1}),
                    Contains("aux_loss_weight must be >= 0, got -1"));
  const auto moe = make({.d_model = 8, .experts = 4, .top_k = 2});
  CHECK_THROWS_WITH(moe.forward(Var<float, Cpu>(CpuTensor<float>::zeros({3, 7}))), Contains("must end in d_model 8"));
}
