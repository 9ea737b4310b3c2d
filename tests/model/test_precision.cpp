// Mixed precision (autograd/precision.hpp, docs/systems/precision.md): the products of a
// Bf16Mixed model are the fp32 products of bf16-rounded operands in the forward and in the
// backward, the document-masking invariants hold bitwise in bf16, and 50 training steps of the
// tiny model end within 2% of the fp32 run's loss.
#include "support/fused_bf16_testing.hpp"
#include "support/masking_testing.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <cstdint>
#include <vector>

#include "megacpp/optim.hpp"

using namespace megacpp;

namespace {

float round_bf16(float x) { return static_cast<float>(bf16(x)); }

// ref (m, n) = sum_k r(x(i, k)) r(y(k, j)) in double, and the bound sum_k |r(x) r(y)| the fp32
// summation error is measured against; x(i, k) and y(k, j) read the operands in any layout.
template <class X, class Y>
void reference_product(index_t m, index_t n, index_t k, X x, Y y, std::vector<double>& ref, std::vector<double>& bound) {
  ref.assign(static_cast<std::size_t>(m * n), 0.0);
  bound.assign(static_cast<std::size_t>(m * n), 0.0);
  for (index_t i = 0; i < m; ++i)
    for (index_t j = 0; j < n; ++j)
      for (index_t p = 0; p < k; ++p) {
        const double t = static_cast<double>(round_bf16(x(i, p))) * static_cast<double>(round_bf16(y(p, j)));
        ref[static_cast<std::size_t>(i * n + j)] += t;
        bound[static_cast<std::size_t>(i * n + j)] += std::abs(t);
      }
}

// |got - ref| within fp32 summation of k terms (Higham: k u sum |terms|, u = 2^-24), elementwise.
void require_close(const char* what, const std::vector<float>& got, const std::vector<double>& ref,
                   const std::vector<double>& bound, index_t k) {
  REQUIRE(got.size() == ref.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << ": got " << got[i] << ", reference " << ref[i]);
    REQUIRE(std::abs(static_cast<double>(got[i]) - ref[i]) <= static_cast<double>(k + 2) * 0x1p-24 * bound[i] + 1e-30);
  }
}

}  // namespace

TEST_CASE("Bf16Mixed: matmul's forward and both gradients are fp32 sums of bf16-rounded operands", "[precision]") {
  // y = x w^T (Linear's product): x (2, 5, 37), w (11, 37); dY = g
  const index_t rows = 10, in = 37, out = 11;
  Rng rng(3);
  const auto x = Var<float, Cpu>::parameter(randn<float, Cpu>({2, 5, in}, rng));
  const auto w = Var<float, Cpu>::parameter(randn<float, Cpu>({out, in}, rng));
  const auto g = randn<float, Cpu>({2, 5, out}, rng);
  Var<float, Cpu> y;
  {
    const MatmulPrecisionScope bf16_products(MatmulPrecision::bf16);
    y = matmul(x, w, false, true);
  }
  // backward outside the scope: the product keeps the precision it was created with
  backward(sum(mul(y, Var<float, Cpu>(g))));
  const auto X = x.value().to_host(), W = w.value().to_host(), G = g.to_host();
  std::vector<double> ref, bound;
  reference_product(rows, out, in, [&](index_t i, index_t p) { return X[i * in + p]; },
                    [&](index_t p, index_t j) { return W[j * in + p]; }, ref, bound);
  require_close("y", y.value().to_host(), ref, bound, in);
  reference_product(rows, in, out, [&](index_t i, index_t p) { return G[i * out + p]; },
                    [&](index_t p, index_t j) { return W[p * in + j]; }, ref, bound);
  require_close("dx = dy w", x.grad().to_host(), ref, bound, out);
  reference_product(out, in, rows, [&](index_t i, index_t p) { return G[p * out + i]; },
                    [&](index_t p, index_t j) { return X[p * in + j]; }, ref, bound);
  require_close("dw = dy^T x", w.grad().to_host(), ref, bound, rows);

  // and the fp32 product differs: the scope really changed the operands
  const auto y32 = matmul(x, w, false, true).value().to_host();
  const auto y16 = y.value().to_host();
  double worst = 0;
  for (std::size_t i = 0; i < y16.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(y16[i] - y32[i])));
  CHECK(worst > 1e-4);
}

TEST_CASE("Var::value_as_bf16: an op result is converted once and shared, a leaf follows its value", "[precision]") {
  Rng rng(5);
  const auto w = Var<float, Cpu>::parameter(randn<float, Cpu>({4, 6}, rng));
  const auto h = mul(w, w);  // an op result: its value never changes
  const Tensor<bf16, Cpu> first = h.value_as_bf16(), second = h.value_as_bf16();
  CHECK(first.data() == second.data());  // one copy, kept with the value
  const auto H = h.value().to_host();
  const auto H16 = first.to_host();
  for (std::size_t i = 0; i < H.size(); ++i) REQUIRE(H16[i].bits == bf16(H[i]).bits);

  // a leaf's copy follows an in-place update (as an optimizer step writes it)
  const Tensor<bf16, Cpu> before = w.value_as_bf16();
  Tensor<float, Cpu> storage = w.value();  // shares the value's storage, as an optimizer's handle does
  storage.data()[0] = 3.0f;
  CHECK(static_cast<float>(w.value_as_bf16().to_host()[0]) == 3.0f);
  CHECK(static_cast<float>(before.to_host()[0]) != 3.0f);

  // three products of one normalised input (attention's q, k, v) give what three separate
  // conversions gave, and their gradients flow as before
  const auto a = Var<float, Cpu>::parameter(randn<float, Cpu>({8, 6}, rng));
  const auto x = mul(a, a);
  Var<float, Cpu> shared_sum, separate_sum;
  {
    const MatmulPrecisionScope bf16_products(MatmulPrecision::bf16);
    shared_sum = add(add(matmul(x, w, false, true), matmul(x, w, false, true)), matmul(x, w, false, true));
    const auto x_copy = Var<float, Cpu>(x.value().clone());  // a leaf of the same values
    separate_sum = add(add(matmul(x_copy, w, false, true), matmul(x_copy, w, false, true)), matmul(x_copy, w, false, true));
  }
  const auto S = shared_sum.value().to_host(), P = separate_sum.value().to_host();
  REQUIRE(S.size() == P.size());
  for (std::size_t i = 0; i < S.size(); ++i) REQUIRE(S[i] == P[i]);
  backward(sum(shared_sum));
  CHECK(a.grad().defined());
}

TEST_CASE("Var::value_as_bf16: a leaf is cast once until a writer changes it, whatever the writer", "[precision]") {
  Rng rng(6);
  auto w = Var<float, Cpu>::parameter(randn<float, Cpu>({6, 5}, rng));
  // the copy equals a fresh conversion of the value, bit for bit
  const auto fresh = [&] {
    const auto got = w.value_as_bf16().to_host(), want = w.value().to<bf16>().to_host();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i].bits != want[i].bits) return false;
    return true;
  };
  // Each writer in turn: the copy is kept while nothing writes (reads through const handles do
  // not count), and after the write it is remade and equals the new value's conversion. `held`
  // keeps the previous copy alive, so a remade copy cannot land in the same storage.
  const std::vector<std::pair<const char*, std::function<void()>>> writers = {
      {"a handle sharing the storage writes through data()", [&] {
         Tensor<float, Cpu> handle = w.value();
         handle.data()[3] = 7.0f;
       }},
      {"a row view is assigned (plasticity resets write rows this way)", [&] {
         Tensor<float, Cpu> rows = w.value().rows(2, 4);
         rows.assign(Tensor<float, Cpu>::full({2, 5}, -2.5f));
       }},
      {"fill", [&] { Tensor<float, Cpu>(w.value()).fill(0.125f); }},
      {"mutable_value() is given a whole new tensor", [&] { w.mutable_value() = Tensor<float, Cpu>::full({6, 5}, 9.0f); }},
      {"an optimizer step", [&] {
         w.zero_grad();
         backward(sum(mul(w, w)));
         optim::AdamW<float, Cpu> opt({optim::ParamRef<float, Cpu>{"w", w, Role::matrix, {}}}, optim::AdamWOptions{.lr = 0.1});
         opt.step();
       }},
  };
  Tensor<bf16, Cpu> held = w.value_as_bf16();
  for (const auto& [what, write] : writers) {
    INFO(what);
    const Tensor<float, Cpu>& read_only = w.value();
    [[maybe_unused]] const float first = *read_only.data();  // a const read
    CHECK(w.value_as_bf16().same_data(held));                  // no write: the same copy
    write();
    CHECK_FALSE(w.value_as_bf16().same_data(held));
    CHECK(fresh());
    held = w.value_as_bf16();
  }
}

// An update that writes the value and its bf16 rounding in one pass (an optimizer step; AdamW's
// and Muon's are checked here): none is
// asked before a product has read the leaf in bf16; after one, the update's rounding becomes the
// copy, current without a cast and equal to convert's, while a copy held from before is unchanged.
TEST_CASE("Var::update_value: the update writes the bf16 copy when products read one, and leaves held copies alone",
          "[precision]") {
  Rng rng(8);
  auto w = Var<float, Cpu>::parameter(randn<float, Cpu>({7, 3}, rng));
  const auto scale_by = [&](float factor, bool* asked) {
    w.update_value([&](float* v, bf16* rounded) {
      *asked = rounded != nullptr;
      for (index_t i = 0; i < w.numel(); ++i) {
        v[i] = v[i] * factor + 0.0625f;
        if (rounded) rounded[i] = bf16(v[i]);
      }
    });
  };
  bool asked = true;
  const float before = w.value().to_host()[4];
  scale_by(2.0f, &asked);
  CHECK_FALSE(asked);  // no product has read w in bf16: no copy to keep
  CHECK_FALSE(w.bf16_copy_current());
  CHECK(w.value().to_host()[4] == before * 2.0f + 0.0625f);
  const Tensor<bf16, Cpu> held = w.value_as_bf16();
  const auto held_bits = held.to_host();
  CHECK(w.bf16_copy_current());
  scale_by(-1.5f, &asked);
  CHECK(asked);
  CHECK(w.bf16_copy_current());  // the next product makes no cast
  const Tensor<bf16, Cpu> copy = w.value_as_bf16();
  CHECK_FALSE(copy.same_data(held));
  const auto got = copy.to_host(), want = w.value().to<bf16>().to_host(), kept = held.to_host();
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].bits == want[i].bits);
    CHECK(kept[i].bits == held_bits[i].bits);  // the held copy still rounds the old value
  }
  // AdamW's and Muon's steps round in their pass: the copy is current right after the step.
  const auto step_is_current = [&](auto& opt) {
    w.zero_grad();
    backward(sum(mul(w, w)));
    opt.step();
    CHECK(w.bf16_copy_current());
    const auto after = w.value_as_bf16().to_host(), want_after = w.value().to<bf16>().to_host();
    for (std::size_t i = 0; i < after.size(); ++i) CHECK(after[i].bits == want_after[i].bits);
  };
  optim::AdamW<float, Cpu> adamw({optim::ParamRef<float, Cpu>{"w", w, Role::matrix, {}}}, optim::AdamWOptions{.lr = 0.1});
  step_is_current(adamw);
  optim::Muon<float, Cpu> muon({optim::ParamRef<float, Cpu>{"w", w, Role::matrix, {}}}, optim::MuonOptions{.lr = 0.02});
  step_is_current(muon);
}

// The tiny model trained with two micro-batches per step: every bf16 weight is cast once per
// optimizer step (the second micro-batch's products use the first one's copies), and the run is
// bitwise the run that casts at every use, i.e. a cached copy is never stale.
TEST_CASE("Bf16Mixed with gradient accumulation: weights are cast once per step, bitwise as casting at every use",
          "[precision]") {
  using Model = TinyLM<float, Cpu>::with_precision<Bf16Mixed>;
  const testing::MaskingBatch data(264);
  const auto docs = Model::documents(data.ids, data.batch, data.seq, testing::MaskingBatch::bos);
  const auto in = Tensor<std::int32_t, Cpu>::from_host({data.batch, data.seq}, data.ids);
  const auto tg = Tensor<std::int32_t, Cpu>::from_host({data.batch, data.seq}, data.targets);
  const auto mask = Tensor<float, Cpu>::full({data.batch, data.seq}, 1.0f);
  struct Run {
    std::vector<double> losses;
    std::vector<float> weights;
    std::size_t casts_reused = 0, matrices = 0;
  };
  const auto train = [&](bool cast_at_every_use) {
    Model model(11);
    optim::HybridOptions ho;
    ho.muon.lr = 0.02;
    ho.adamw.lr = 0.004;
    optim::Hybrid<float, Cpu> opt(model, ho);
    auto params = optim::collect_params<float, Cpu>(model);
    Run r;
    for (int step = 0; step < 3; ++step) {
      std::vector<Tensor<bf16, Cpu>> first_copies;
      for (int micro = 0; micro < 2; ++micro) {
        if (cast_at_every_use)
          for (auto& p : params) p.value();  // mutable_value() drops every copy: the old per-use cast
        const auto loss = model.loss(in, tg, mask, docs);
        r.losses.push_back(loss.item());
        backward(loss);
        std::size_t matrix = 0;
        for (auto& p : params) {
          if (p.shape().rank() != 2) continue;
          if (micro == 0) first_copies.push_back(p.var.value_as_bf16());
          else {
            r.matrices += 1;
            r.casts_reused += p.var.value_as_bf16().same_data(first_copies[matrix]);
          }
          ++matrix;
        }
      }
      opt.step();
      opt.zero_grad();
    }
    model.for_each_param([&](const std::string&, Param<float, Cpu>& p) {
      const auto v = p.var.value().to_host();
      r.weights.insert(r.weights.end(), v.begin(), v.end());
    });
    return r;
  };
  const Run cached = train(false), every_use = train(true);
  CHECK(cached.matrices > 0);
  CHECK(cached.casts_reused == cached.matrices);  // the second micro-batch cast nothing again
  CHECK(every_use.casts_reused == 0);
  REQUIRE(cached.losses.size() == every_use.losses.size());
  for (std::size_t i = 0; i < cached.losses.size(); ++i) CHECK(cached.losses[i] == every_use.losses[i]);
  REQUIRE(cached.weights.size() == every_use.weights.size());
  CHECK(std::memcmp(cached.weights.data(), every_use.weights.data(), cached.weights.size() * sizeof(float)) == 0);
}

TEST_CASE("relu2_linear_bf16 equals relu2 then matmul bitwise, and the MLP keeps its hidden activation in bf16 only",
          "[precision]") {
  Rng rng(9);
  const index_t rows = 3 * 37, hidden = 70, out = 19;
  const auto u = Var<float, Cpu>::parameter(randn<float, Cpu>({3, 37, hidden}, rng));
  const auto w = Var<float, Cpu>::parameter(randn<float, Cpu>({out, hidden}, rng));
  const Var<float, Cpu> g(randn<float, Cpu>({3, 37, out}, rng));
  const auto separate = testing::bf16_output_and_gradients({u, w}, g, [&] { return matmul(relu2(u), w, false, true); });
  const auto fused = testing::bf16_output_and_gradients({u, w}, g, [&] { return relu2_linear_bf16(u, w); });
  testing::check_same_bits(separate, fused);
  CHECK(rows * out == static_cast<index_t>(fused[0].size()));
  CHECK_THROWS_WITH(relu2_linear_bf16(u, Var<float, Cpu>(Tensor<float, Cpu>::zeros({out, hidden + 1}))),
                    Catch::Contains("relu2_linear_bf16"));

  // MLP under bf16 products: between forward and backward the fused path holds the hidden
  // activation as bf16 (2 bytes an element) where the two ops held its fp32 value and its bf16
  // copy (6 bytes); an observer (ReDo) needs the fp32 value and keeps the two ops
  const index_t d = 64, tokens = 256;
  MLP<float, Cpu> mlp(d, rng);
  const Var<float, Cpu> x(randn<float, Cpu>({tokens, d}, rng));
  const auto held_after_forward = [&](bool observe) {
    mlp.hidden_observer = observe ? std::function<void(const Tensor<float, Cpu>&)>([](const Tensor<float, Cpu>&) {})
                                  : std::function<void(const Tensor<float, Cpu>&)>();
    return testing::bf16_bytes_held_after_forward([&] { return mlp.forward(x); });
  };
  const std::size_t two_ops = held_after_forward(true), one_op = held_after_forward(false);
  const std::size_t hidden_fp32 = static_cast<std::size_t>(tokens * 4 * d) * sizeof(float);
  INFO("bytes held after forward: two ops " << two_ops << ", fused " << one_op);
  CHECK(two_ops >= one_op + hidden_fp32);
  mlp.hidden_observer = {};
}

TEST_CASE("relu2_mlp_bf16 equals fc, relu2 and the projection bitwise, and its backward holds relu2's gradient in "
          "bf16 only", "[precision]") {
  Rng rng(11);
  const index_t d = 24, hidden = 70, out = 19;
  const auto x = Var<float, Cpu>::parameter(randn<float, Cpu>({3, 37, d}, rng));
  const auto w_fc = Var<float, Cpu>::parameter(randn<float, Cpu>({hidden, d}, rng, 0.3));
  const auto w_proj = Var<float, Cpu>::parameter(randn<float, Cpu>({out, hidden}, rng, 0.3));
  const Var<float, Cpu> g(randn<float, Cpu>({3, 37, out}, rng));
  const auto separate_ops = [&] { return matmul(relu2(matmul(x, w_fc, false, true)), w_proj, false, true); };
  const auto second_half_fused = [&] { return relu2_linear_bf16(matmul(x, w_fc, false, true), w_proj); };
  const auto whole_fused = [&] { return relu2_mlp_bf16(x, w_fc, w_proj); };
  for (int passes : {1, 2}) {  // the second pass adds into the gradients
    INFO(passes << " backward passes; outputs y, dx, dW_fc, dW_proj");
    const auto fused = testing::bf16_output_and_gradients({x, w_fc, w_proj}, g, whole_fused, passes);
    testing::check_same_bits(testing::bf16_output_and_gradients({x, w_fc, w_proj}, g, separate_ops, passes), fused);
    testing::check_same_bits(testing::bf16_output_and_gradients({x, w_fc, w_proj}, g, second_half_fused, passes), fused);
  }
  // only some inputs need a gradient: a constant input (x), and a frozen first layer
  {
    const Var<float, Cpu> x_const(x.value());
    const auto fused = testing::bf16_output_and_gradients({w_fc, w_proj}, g, [&] { return relu2_mlp_bf16(x_const, w_fc, w_proj); });
    testing::check_same_bits(testing::bf16_output_and_gradients({w_fc, w_proj}, g, [&] {
      return relu2_linear_bf16(matmul(x_const, w_fc, false, true), w_proj);
    }), fused);
    const Var<float, Cpu> fc_frozen(w_fc.value());
    const auto fused_frozen = testing::bf16_output_and_gradients({x, w_proj}, g, [&] { return relu2_mlp_bf16(x, fc_frozen, w_proj); });
    testing::check_same_bits(testing::bf16_output_and_gradients({x, w_proj}, g, [&] {
      return relu2_linear_bf16(matmul(x, fc_frozen, false, true), w_proj);
    }), fused_frozen);
  }
  // an MLP whose fc has a bias keeps fc's product (and its bias) apart: the separate ops' bits
  {
    MLP<float, Cpu> biased(d, rng, hidden);
    biased.fc.bias = Param<float, Cpu>::normal(Shape{hidden}, Role::bias, rng, 0.5);
    biased.proj.weight.var.mutable_value().assign(randn<float, Cpu>({d, hidden}, rng, 0.3));
    const Var<float, Cpu> gd(randn<float, Cpu>({3, 37, d}, rng));
    const Var<float, Cpu>& fc_w = biased.fc.weight.var;
    const Var<float, Cpu>& fc_b = biased.fc.bias.var;
    const Var<float, Cpu>& proj_w = biased.proj.weight.var;
    const auto via_mlp = testing::bf16_output_and_gradients({x, fc_w, fc_b, proj_w}, gd, [&] { return biased.forward(x); });
    testing::check_same_bits(testing::bf16_output_and_gradients({x, fc_w, fc_b, proj_w}, gd, [&] {
      return matmul(relu2(matmul(x, fc_w, false, true) + fc_b), proj_w, false, true);
    }), via_mlp);
  }
  CHECK_THROWS_WITH(relu2_mlp_bf16(x, w_fc, Var<float, Cpu>(Tensor<float, Cpu>::zeros({out, hidden + 1}))),
                    Catch::Contains("relu2_mlp_bf16") && Catch::Contains("(19, 71)"));
  CHECK_THROWS_WITH(relu2_mlp_bf16(x, Var<float, Cpu>(Tensor<float, Cpu>::zeros({hidden, d + 1})), w_proj),
                    Catch::Contains("relu2_mlp_bf16"));
  CHECK_THROWS_WITH(relu2_mlp_bf16(Var<float, Cpu>(Tensor<float, Cpu>::zeros({d})), w_fc, w_proj),
                    Catch::Contains("relu2_mlp_bf16"));  // rank 1: as matmul, at least 2 dims

  // The backward's peak, at relu2's gradient: the separate ops hold dh = dy W_proj and relu2's
  // gradient du both in fp32 (8 bytes a hidden unit), the fused op dh and du's bf16 rounding (6)
  const index_t tokens = 512;
  const Var<float, Cpu> xs(randn<float, Cpu>({tokens, d}, rng));
  const auto backward_peak = [&](auto op) {
    Var<float, Cpu> y;
    {
      const MatmulPrecisionScope bf16_products(MatmulPrecision::bf16);
      y = op();
    }
    const Var<float, Cpu> loss = sum(y);
    const std::size_t before = Cpu::memory_stats().current_bytes;
    Cpu::reset_peak_memory();
    backward(loss);
    return Cpu::memory_stats().peak_bytes - before;
  };
  MLP<float, Cpu> mlp(d, rng, hidden);
  const auto apart_ops = [&] { return relu2_linear_bf16(matmul(xs, mlp.fc.weight.var, false, true), mlp.proj.weight.var); };
  (void)backward_peak(apart_ops);  // the weights' gradients exist from here on: later passes add into them
  const std::size_t apart = backward_peak(apart_ops);
  const std::size_t fused = backward_peak([&] { return mlp.forward(xs); });  // MLP::forward takes relu2_mlp_bf16
  INFO("backward peak above the forward's bytes: apart " << apart << ", fused " << fused);
  CHECK(apart >= fused + static_cast<std::size_t>(tokens * hidden) * sizeof(bf16));
}

TEST_CASE("Bf16Mixed: the model's type sets the products' precision, and the loss stays near fp32's", "[precision]") {
  using Model32 = TinyLM<float, Cpu>;
  using Model16 = Model32::with_precision<Bf16Mixed>;
  static_assert(std::is_same_v<Model32::precision_type, Fp32>);
  static_assert(std::is_same_v<Model16::precision_type, Bf16Mixed>);
  CHECK(Model16::type_id() == Model32::type_id());  // same parameters: checkpoints are shared
  Model32 a(5);
  Model16 b(5);
  testing::randomise_matrices(a, 9, 0.05);
  testing::randomise_matrices(b, 9, 0.05);
  const testing::MaskingBatch data(264);
  const auto docs = Model32::documents(data.ids, data.batch, data.seq, testing::MaskingBatch::bos);
  const auto in = Tensor<std::int32_t, Cpu>::from_host({data.batch, data.seq}, data.ids);
  const auto tg = Tensor<std::int32_t, Cpu>::from_host({data.batch, data.seq}, data.targets);
  const auto mask = Tensor<float, Cpu>::full({data.batch, data.seq}, 1.0f);
  const double l32 = a.loss(in, tg, mask, docs).item(), l16 = b.loss(in, tg, mask, docs).item();
  // a caller's scope does not override the model's policy
  const MatmulPrecisionScope caller(MatmulPrecision::bf16);
  CHECK(a.loss(in, tg, mask, docs).item() == l32);
  INFO("fp32 loss " << l32 << ", bf16 loss " << l16);
  CHECK(l16 != l32);
  CHECK(std::abs(l16 - l32) <= 1e-2 * l32);
}

TEST_CASE("Bf16Mixed: whole-model document masking invariants hold bitwise", "[precision][masking]") {
  using Model = testing::OneBlockLM<float, "A">::with_precision<Bf16Mixed>;
  using Hybrid = RecipeLM<float, Cpu, Dims{.d_model = 32, .n_layers = 3, .vocab = 64, .max_seq = 128}, "AAM",
                          testing::kOneBlockAttention, testing::kOneBlockMamba>::with_precision<Bf16Mixed>;
  Model one(2);
  testing::randomise_matrices(one, 4);
  testing::check_block_document_masking(one, 0.0);  // perturbing A leaves B, zero cross-document gradient, bitwise
  Hybrid model(3);
  testing::randomise_matrices(model, 6);
  const testing::MaskingBatch data(64);
  MaskingCheckOptions opt;
  opt.bos_id = testing::MaskingBatch::bos;
  opt.vocab = 64;
  opt.packed_tolerance = 0.0;
  const MaskingCheckResult r = check_document_masking(model, data.ids, data.targets, data.batch, data.seq, opt);
  INFO(r.violation);
  CHECK(r.ok);
  CHECK(r.documents_checked == static_cast<std::size_t>(testing::MaskingBatch::documents));
}

namespace {

// Loss after each of `steps` optimizer steps of the tiny model on a learnable packed stream:
// documents of 20-60 tokens that follow t' = (5 t + 3) mod 262 + 2 with 10% random tokens.
template <class Model>
std::vector<double> train_tiny(int steps) {
  constexpr index_t batch = 4, seq = 128;
  constexpr std::int32_t bos = 1;
  Model model(11);
  optim::HybridOptions ho;
  ho.muon.lr = 0.02;
  ho.adamw.lr = 0.004;
  ho.adamw_by_role[Role::embedding].lr = 0.01;
  optim::Hybrid<float, Cpu> opt(model, ho);
  const auto params = optim::collect_params<float, Cpu>(model);
  Rng rng(17);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    std::vector<std::int32_t> stream;
    std::int32_t t = bos;
    index_t left = 0;
    while (static_cast<index_t>(stream.size()) < batch * seq + 1) {
      if (left == 0) {
        t = bos;
        left = 20 + static_cast<index_t>(rng.below(41));
      } else {
        t = rng.below(10) == 0 ? static_cast<std::int32_t>(2 + rng.below(262)) : (5 * t + 3) % 262 + 2;
        --left;
      }
      stream.push_back(t);
    }
    const std::vector<std::int32_t> ids(stream.begin(), stream.end() - 1), targets(stream.begin() + 1, stream.end());
    const auto docs = Model::documents(ids, batch, seq, bos);
    const auto in = Tensor<std::int32_t, Cpu>::from_host({batch, seq}, ids);
    const auto tg = Tensor<std::int32_t, Cpu>::from_host({batch, seq}, targets);
    const auto mask = Tensor<float, Cpu>::full({batch, seq}, 1.0f);
    const auto loss = model.loss(in, tg, mask, docs);
    losses.push_back(loss.item());
    backward(loss);
    [[maybe_unused]] const auto clip = optim::clip_grad_norm(params, 1.0, optim::NonFinitePolicy::skip);
    opt.step();
    opt.zero_grad();
  }
  return losses;
}

}  // namespace

TEST_CASE("Bf16Mixed: 50 steps of the tiny model end within 2% of the fp32 run's loss", "[precision][slow]") {
  const auto l32 = train_tiny<TinyLM<float, Cpu>>(50);
  const auto l16 = train_tiny<TinyLM<float, Cpu>::with_precision<Bf16Mixed>>(50);
  // both runs see the same batches, so the step-50 losses compare directly
  const double f32 = l32.back(), f16 = l16.back();
  INFO("loss at step 1: fp32 " << l32.front() << ", bf16 " << l16.front() << "; step 50: fp32 " << f32 << ", bf16 " << f16);
  CHECK(f32 < 0.8 * l32.front());  // it learned: the comparison is about a falling curve
  CHECK(l16 != l32);               // bf16 products really ran
  CHECK(std::abs(f16 - f32) <= 0.02 * f32);
}
