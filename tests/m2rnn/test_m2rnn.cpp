// M2RNN: the recurrence op against an independent per-document loop, gradcheck (fp64) of the op
// and of the whole layer, decode == training forward, document isolation (by hand and through the
// whole-model checker), the 'R' letter in a pattern ("AMR"), and bad input.
#include "support/document_isolation.hpp"
#include "support/documents_testing.hpp"
#include "support/masking_testing.hpp"
#include "support/op_testing.hpp"

#include <cmath>
#include <map>
#include <type_traits>

#include "megacpp/nn/m2rnn.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

namespace {

using Docs = DocumentLayout<Cpu>;
using Layer = M2RNN<double, Cpu>;
constexpr std::int32_t kBos = 0;

Docs docs_for(const std::vector<std::vector<index_t>>& rows) { return packed_layout(rows, kBos); }

// An independent statement of the recurrence: one document at a time from a zero state, plain
// nested loops over the formula Z = tanh(H W + k v^T), H = f H + (1 - f) Z, y = H^T q.
std::vector<double> reference_recurrence(const std::vector<double>& q, const std::vector<double>& k,
                                         const std::vector<double>& v, const std::vector<double>& f,
                                         const std::vector<double>& W, const Docs& docs, index_t H, index_t K, index_t V) {
  std::vector<double> y(static_cast<std::size_t>(docs.batch * docs.seq * H * V));
  for (index_t b = 0; b < docs.batch; ++b)
    for (index_t h = 0; h < H; ++h) {
      std::vector<double> S(static_cast<std::size_t>(K * V), 0.0);
      for (index_t t = 0; t < docs.seq; ++t) {
        if (t == 0 || !docs.same_document(b, t - 1, t)) std::fill(S.begin(), S.end(), 0.0);
        const index_t r = (b * docs.seq + t) * H + h;
        std::vector<double> next(S.size());
        for (index_t i = 0; i < K; ++i)
          for (index_t c = 0; c < V; ++c) {
            double a = k[r * K + i] * v[r * V + c];
            for (index_t j = 0; j < V; ++j) a += S[i * V + j] * W[(h * V + j) * V + c];
            next[i * V + c] = f[r] * S[i * V + c] + (1 - f[r]) * std::tanh(a);
          }
        S = next;
        for (index_t c = 0; c < V; ++c) {
          double acc = 0;
          for (index_t i = 0; i < K; ++i) acc += q[r * K + i] * S[i * V + c];
          y[r * V + c] = acc;
        }
      }
    }
  return y;
}

// Tiny layers for the fp64 checks: d_model 4, 2 heads, K = 3, V = 2, conv width 3, a state kept every 4 tokens.
M2RNNConfig tiny_config() {
  M2RNNConfig c;
  c.d_model = 4;
  c.heads = 2;
  c.k_head_dim = 3;
  c.v_head_dim = 2;
  c.conv_kernel = 3;
  c.checkpoint_every = 4;  // chunk boundaries inside the tests' documents
  return c;
}

// out_proj starts at zero and W at the identity: tests want every path live and W generic.
Layer make_layer(std::uint64_t seed, M2RNNConfig c = tiny_config()) {
  Rng rng(seed);
  Layer m(c, rng);
  m.out_proj.weight.var.mutable_value().assign(randn<double, Cpu>(m.out_proj.weight.shape(), rng, 0.5));
  m.state_weight.var.mutable_value().assign(randn<double, Cpu>(m.state_weight.shape(), rng, 0.6));
  return m;
}

std::vector<V64> params_of(Layer& layer) {
  std::vector<V64> ps;
  layer.for_each_param([&](const std::string&, Param<double, Cpu>& p) { ps.push_back(p.var); });
  return ps;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return worst;
}

// One-block and hybrid models of the recipe's letters with a small 'R': 2 heads of K 8, V 8.
inline constexpr M2RNNSizes kSmallM2RNN{.heads = 2, .k_head_dim = 8, .v_head_dim = 8, .conv_kernel = 4};
template <FixedString P>
using SmallLM = RecipeLM<float, Cpu, kOneBlockDims, P, kOneBlockAttention, kOneBlockMamba, kSmallM2RNN>;
inline constexpr Dims kHybridDims{.d_model = 32, .n_layers = 3, .vocab = 64, .max_seq = 128};
using HybridAMR = RecipeLM<double, Cpu, kHybridDims, "AMR", kOneBlockAttention, kOneBlockMamba, kSmallM2RNN>;

}  // namespace

static_assert(Mixer<Layer> && DecodableMixer<Layer>, "M2RNN must satisfy the Mixer concept and decode");

TEST_CASE("m2rnn_recurrence: equals an independent per-document loop, state reset at every document", "[m2rnn][op]") {
  const index_t B = 2, T = 9, H = 2, K = 3, V = 2;
  const Docs docs = docs_for({{4, 1, 4}, {9}});
  const auto q = random_param({B, T, H, K}, 1), k = random_param({B, T, H, K}, 2), v = random_param({B, T, H, V}, 3);
  const auto f = sigmoid(random_param({B, T, H}, 4));
  const auto W = random_param({H, V, V}, 5, 0.7);
  NoGrad no_grad;
  const auto y = m2rnn_recurrence(q, k, v, f, W, docs).value().to_host();
  const auto want = reference_recurrence(q.value().to_host(), k.value().to_host(), v.value().to_host(), f.value().to_host(),
                                         W.value().to_host(), docs, H, K, V);
  CHECK(max_rel_diff(y, want) < 1e-13);
}

TEST_CASE("m2rnn_recurrence: gradcheck of q, k, v, f and W in fp64 across document starts", "[m2rnn][op][gradcheck]") {
  const index_t B = 2, T = 7, H = 2, K = 3, V = 2;
  const Docs docs = docs_for({{3, 4}, {1, 2, 4}});
  std::vector<V64> in{random_param({B, T, H, K}, 1), random_param({B, T, H, K}, 2), random_param({B, T, H, V}, 3),
                      random_param({B, T, H}, 4), random_param({H, V, V}, 5, 0.7)};
  require_gradcheck("m2rnn_recurrence", [&](auto& x) { return m2rnn_recurrence(x[0], x[1], x[2], sigmoid(x[3]), x[4], docs); }, in);
  // checkpoints every 2 tokens: chunk boundaries inside documents and on document starts
  require_gradcheck("m2rnn_recurrence, checkpoint_every 2",
                    [&](auto& x) { return m2rnn_recurrence(x[0], x[1], x[2], sigmoid(x[3]), x[4], docs, 0.0, 2); }, in);
}

TEST_CASE("m2rnn_recurrence: the backward's gradients do not depend on checkpoint_every (bitwise)", "[m2rnn][op]") {
  const index_t B = 2, T = 11, H = 2, K = 3, V = 2;
  const Docs docs = docs_for({{4, 7}, {2, 1, 8}});
  auto grads = [&](index_t every) {
    std::vector<V64> in{random_param({B, T, H, K}, 1), random_param({B, T, H, K}, 2), random_param({B, T, H, V}, 3),
                        random_param({B, T, H}, 4), random_param({H, V, V}, 5, 0.7)};
    const auto y = m2rnn_recurrence(in[0], in[1], in[2], sigmoid(in[3]), in[4], docs, 0.0, every);
    Rng rng(9);
    backward(sum(mul(y, V64(randn<double, Cpu>(y.shape(), rng)))));
    std::vector<std::vector<double>> g;
    for (const auto& x : in) g.push_back(x.grad().to_host());
    return g;
  };
  const auto all_states = grads(1);
  for (index_t every : {2, 3, 4, 64}) {
    INFO("checkpoint_every " << every);
    CHECK(grads(every) == all_states);
  }
}

TEST_CASE("m2rnn_recurrence: gradient clipping bounds the state gradient, and a bound never reached changes nothing",
          "[m2rnn][op]") {
  const index_t B = 1, T = 6, H = 1, K = 2, V = 2;
  const Docs docs = docs_for({{6}});
  auto grads = [&](double clip) {
    auto q = random_param({B, T, H, K}, 1, 3.0), k = random_param({B, T, H, K}, 2), v = random_param({B, T, H, V}, 3);
    auto fr = random_param({B, T, H}, 4), W = random_param({H, V, V}, 5);
    backward(sum(m2rnn_recurrence(q, k, v, sigmoid(fr), W, docs, clip)));
    return W.grad().to_host();
  };
  const auto exact = grads(0.0);
  CHECK(grads(1e6) == exact);
  CHECK(grads(1e-3) != exact);
}

TEST_CASE("M2RNN: parameters, names, roles and the reference's initial values", "[m2rnn][layer]") {
  Rng rng(1);
  Layer m(tiny_config(), rng);
  std::vector<std::string> names;
  std::map<std::string, Role> roles;
  index_t count = 0;
  m.for_each_param([&](const std::string& n, Param<double, Cpu>& p) {
    names.push_back(n);
    roles[n] = p.role;
    count += p.shape().numel();
  });
  CHECK(names == std::vector<std::string>{"in_proj.weight", "conv_weight", "conv_bias", "state_weight", "A_log", "dt_bias",
                                          "D", "g_norm", "out_proj.weight"});
  CHECK(roles["in_proj.weight"] == Role::matrix);
  CHECK(roles["out_proj.weight"] == Role::matrix);
  CHECK(roles["state_weight"] == Role::scalar);
  CHECK(roles["g_norm"] == Role::norm_gain);
  // in_proj: (2 (2 K + V) + 2 + 2 V) x 4; conv 16 x 3 + 16; W 2 x 2 x 2; A_log, dt_bias 2 each; D 4; g_norm 4; out_proj 4 x 4
  CHECK(count == (16 + 2 + 4) * 4 + 16 * 3 + 16 + 8 + 2 + 2 + 4 + 4 + 16);
  const auto W = m.state_weight.value().to_host();
  CHECK(W == std::vector<double>{1, 0, 0, 1, 1, 0, 0, 1});
  for (double a : m.A_log.value().to_host()) CHECK((std::exp(a) >= 1e-4 && std::exp(a) <= 16.0));
  for (double b : m.dt_bias.value().to_host()) {
    const double dt = std::log1p(std::exp(b));
    CHECK((dt >= 1e-3 * (1 - 1e-9) && dt <= 0.1 * (1 + 1e-9)));
  }
  for (double w : m.out_proj.weight.value().to_host()) CHECK(w == 0.0);
}

TEST_CASE("M2RNN: gradcheck of every parameter and the input (fp64)", "[m2rnn][layer][gradcheck]") {
  const Docs docs = docs_for({{2, 4}, {1, 5}});
  const auto u = random_param({2, 6, 4}, 11);
  Layer layer = make_layer(21);
  std::vector<V64> inputs{u};
  for (const V64& p : params_of(layer)) inputs.push_back(p);
  require_gradcheck("M2RNN", [&](auto& in) { return layer.forward(in[0], docs); }, inputs);
}

TEST_CASE("M2RNN: decode steps reproduce the training forward token by token", "[m2rnn][layer][decode]") {
  const std::vector<std::vector<index_t>> rows{{3, 1, 5, 3}, {6, 6}};
  const std::vector<std::int32_t> ids = packed_tokens(rows, kBos);
  const index_t B = 2, T = 12, d = 4;
  const Docs docs = Docs::from_tokens(ids, B, T, kBos);
  const auto u = random_param({B, T, d}, 12);
  const auto uv = u.value().to_host();
  const Layer layer = make_layer(31);
  NoGrad no_grad;
  const auto train = layer.forward(u, docs).value().to_host();
  auto cache = layer.make_cache(B);
  std::vector<double> out(train.size());
  for (index_t t = 0; t < T; ++t) {
    std::vector<double> ut;
    std::vector<bool> starts;
    for (index_t b = 0; b < B; ++b) {
      ut.insert(ut.end(), uv.begin() + (b * T + t) * d, uv.begin() + (b * T + t + 1) * d);
      starts.push_back(ids[static_cast<std::size_t>(b * T + t)] == kBos);
    }
    const auto y = layer.step(V64(T64::from_host({B, d}, ut)), cache, starts).value().to_host();
    for (index_t b = 0; b < B; ++b) std::copy(y.begin() + b * d, y.begin() + (b + 1) * d, out.begin() + (b * T + t) * d);
  }
  CHECK(max_rel_diff(out, train) < 1e-12);
}

TEST_CASE("M2RNN: documents are isolated end to end (packed == alone, perturbing A, zero gradient into A)",
          "[m2rnn][layer][masking]") {
  check_documents_isolated("M2RNN", make_layer(41), 4, 5, 7, kBos);
}

TEST_CASE("Block<M2RNN>: check_document_masking on a one-block RecipeLM of pattern R, and it catches a model blind to documents",
          "[m2rnn][layer][masking]") {
  using RLM = SmallLM<"R">;
  static_assert(std::is_same_v<RLM::block_type<0>, Block<M2RNN<float, Cpu>>>);
  RLM model(51);
  randomise_matrices(model, 52);
  check_block_document_masking(model, 0.0);  // packed == alone bitwise
}

TEST_CASE("RecipeLM \"AMR\": the R letter composes with attention and Mamba-3, trains, and keeps documents apart",
          "[m2rnn][model]") {
  static_assert(std::is_same_v<HybridAMR::block_type<2>, Block<M2RNN<double, Cpu>>>);
  CHECK(HybridAMR::type_id() ==
        "F64 LM \"AMR\" d_model 32 layers 3 vocab 64 max_seq 128; A: GQA heads 4/1 head_dim 8 window 0 mlp 128; "
        "M: Mamba3 SISO N8 P16 x2 mlp 128 A heavy-tail; R: M2RNN heads 2 K8 V8 conv 4 mlp 128");
  HybridAMR model(61);
  // the R block's parameter count, pinned: M2RNN (in_proj 32 x (2 (16 + 8) + 2 + 16), conv 48 x 4 + 48,
  // W 2 x 8 x 8, A_log 2, dt_bias 2, D 16, g_norm 16, out_proj 16 x 32) and its MLP (2 x 32 x 128)
  index_t r_params = 0;
  model.for_each_param([&](const std::string& n, Param<double, Cpu>& p) {
    if (n.rfind("blocks.2.", 0) == 0) r_params += p.shape().numel();
  });
  CHECK(r_params == 32 * 66 + 48 * 4 + 48 + 128 + 2 + 2 + 16 + 16 + 16 * 32 + 2 * 32 * 128);
  randomise_matrices(model, 62);

  const MaskingBatch data(static_cast<std::int32_t>(kHybridDims.vocab));
  MaskingCheckOptions opt;
  opt.bos_id = MaskingBatch::bos;
  opt.vocab = static_cast<std::int32_t>(kHybridDims.vocab);
  opt.packed_tolerance = 0.0;
  const MaskingCheckResult r = check_document_masking(model, data.ids, data.targets, data.batch, data.seq, opt);
  INFO("violation: " << r.violation);
  CHECK(r.ok);

  const auto docs = HybridAMR::documents(data.ids, data.batch, data.seq, MaskingBatch::bos);
  const auto in = CpuTensor<std::int32_t>::from_host({data.batch, data.seq}, data.ids);
  const auto tg = CpuTensor<std::int32_t>::from_host({data.batch, data.seq}, data.targets);
  const auto mask = CpuTensor<double>::full({data.batch, data.seq}, 1.0);
  const auto loss = model.loss(in, tg, mask, docs);
  CHECK(std::isfinite(loss.item()));
  backward(loss);
  bool w_has_grad = false;
  model.for_each_param([&](const std::string& n, Param<double, Cpu>& p) {
    if (n == "blocks.2.mixer.state_weight")
      for (double g : p.var.grad().to_host()) w_has_grad = w_has_grad || g != 0.0;
  });
  CHECK(w_has_grad);
}

TEST_CASE("M2RNN: bad input gives megacpp::Error with the values", "[m2rnn][errors]") {
  Rng rng(1);
  M2RNNConfig c = tiny_config();
  c.conv_kernel = 17;
  CHECK_THROWS_AS((Layer(c, rng)), Error);
  CHECK_THROWS_WITH((Layer(c, rng)), Contains("conv_kernel must be in [1, 16], got 17"));
  c = tiny_config();
  c.v_head_dim = 0;
  CHECK_THROWS_WITH((Layer(c, rng)), Contains("got d_model 4, heads 2, k_head_dim 3, v_head_dim 0"));
  c = tiny_config();
  c.A_init_min = 5;
  c.A_init_max = 2;
  CHECK_THROWS_WITH((Layer(c, rng)), Contains("need 0 <= A_init_min <= A_init_max and A_init_max > 0, got 5, 2"));
  c = tiny_config();
  c.checkpoint_every = 0;
  CHECK_THROWS_WITH((Layer(c, rng)), Contains("checkpoint_every must be >= 1, got 0"));
  c = tiny_config();
  c.gradient_clipping = -1;
  CHECK_THROWS_WITH((Layer(c, rng)), Contains("gradient_clipping must be >= 0 (0 = none), got -1"));

  const Layer layer = make_layer(3);
  const Docs docs = docs_for({{2, 3}});
  CHECK_THROWS_WITH(layer.forward(random_param({1, 5, 3}, 1), docs), Contains("input must be (batch, seq, 4), got (1, 5, 3)"));
  CHECK_THROWS_WITH(layer.forward(random_param({1, 6, 4}, 1), docs), Contains("document layout (1, 5) does not match input (1, 6, 4)"));
  auto cache = layer.make_cache(2);
  CHECK_THROWS_WITH(layer.step(random_param({3, 4}, 1), cache), Contains("cache.conv is (2, 2, 16) but this layer and batch need (3, 2, 16)"));
  CHECK_THROWS_WITH(layer.step(random_param({2, 4}, 1), cache, {true}), Contains("new_document has 1 entries for batch 2"));

  const auto q = random_param({1, 5, 2, 3}, 1), v = random_param({1, 5, 2, 2}, 2), f = random_param({1, 5, 2}, 3);
  CHECK_THROWS_WITH(m2rnn_recurrence(q, q, v, f, random_param({2, 3, 3}, 4), docs), Contains("W must be (2, 2, 2), got (2, 3, 3)"));
  CHECK_THROWS_WITH(m2rnn_recurrence(q, q, v, random_param({1, 5, 1}, 4), random_param({2, 2, 2}, 4), docs),
                    Contains("f must be (1, 5, 2), got (1, 5, 1)"));
  CHECK_THROWS_WITH(m2rnn_recurrence(q, q, v, f, random_param({2, 2, 2}, 4), docs_for({{6}})),
                    Contains("document layout (1, 6) does not match (batch, seq) = (1, 5)"));
  CHECK_THROWS_WITH(m2rnn_recurrence(q, q, v, f, random_param({2, 2, 2}, 4), docs, -1.0),
                    Contains("gradient_clipping must be >= 0 (0 = none), got -1"));
}

TEST_CASE("RecipeLM \"AMR\": step_logits through the R block's decode cache equals the full forward", "[m2rnn][model][decode]") {
  HybridAMR model(71);
  randomise_matrices(model, 72);
  const MaskingBatch data(static_cast<std::int32_t>(kHybridDims.vocab));
  const index_t batch = data.batch, seq = data.seq, vocab = kHybridDims.vocab;
  NoGrad no_grad;
  const auto full = model.logits(model.hidden(CpuTensor<std::int32_t>::from_host({batch, seq}, data.ids),
                                              HybridAMR::documents(data.ids, batch, seq, MaskingBatch::bos)))
                        .value()
                        .to_host();  // (batch, seq, vocab)
  auto cache = model.make_cache(batch, seq);
  double worst = 0;
  for (index_t t = 0; t < seq; ++t) {
    const std::vector<std::int32_t> tokens{data.ids[static_cast<std::size_t>(t)], data.ids[static_cast<std::size_t>(seq + t)]};
    const auto step = model.step_logits(tokens, cache, MaskingBatch::bos).value().to_host();  // (batch, vocab)
    for (index_t b = 0; b < batch; ++b) {
      const auto first = full.begin() + (b * seq + t) * vocab;
      worst = std::max(worst, max_rel_diff(std::vector<double>(step.begin() + b * vocab, step.begin() + (b + 1) * vocab),
                                           std::vector<double>(first, first + vocab)));
    }
  }
  INFO("step_logits vs full forward: max relative logit difference " << worst);
  CHECK(worst < 1e-10);
}
