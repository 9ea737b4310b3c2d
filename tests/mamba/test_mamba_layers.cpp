// Mamba-3 (SISO, MIMO) and Mamba-2 layers: chunked == sequential, gradcheck of every parameter and
// input, decode reproduces the training forward, document isolation of whole layers and blocks
// (by hand and through the library's whole-model checker), parameter names/roles, and bad input.
#include "support/document_isolation.hpp"
#include "support/documents_testing.hpp"
#include "support/masking_testing.hpp"
#include "support/op_testing.hpp"

#include <cmath>
#include <type_traits>
#include <utility>

#include "megacpp/nn/mamba.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

namespace {

using Docs = DocumentLayout<Cpu>;
constexpr std::int32_t kBos = 0;

std::vector<std::int32_t> tokens_for(const std::vector<std::vector<index_t>>& rows) { return packed_tokens(rows, kBos); }
Docs docs_for(const std::vector<std::vector<index_t>>& rows) { return packed_layout(rows, kBos); }

// Tiny layers for fast double-precision gradchecks: d_model 4, d_inner 8, 2 heads of 4, N = 6.
Mamba3Config tiny_mamba3(index_t chunk) {
  Mamba3Config c;
  c.d_model = 4;
  c.d_state = 6;
  c.headdim = 4;
  c.chunk_size = chunk;
  return c;
}
// Even smaller layers for the gradchecks (every parameter element costs two forwards): d_model 2,
// d_inner 4, 2 heads of 2, N = 4 (one rotary angle) / N = 3.
Mamba3Config grad_mamba3(index_t chunk) {
  Mamba3Config c = tiny_mamba3(chunk);
  c.d_model = 2;
  c.headdim = 2;
  c.d_state = 4;
  return c;
}
Mamba2Config tiny_mamba2(index_t chunk) {
  Mamba2Config c;
  c.d_model = 4;
  c.d_state = 5;
  c.headdim = 4;
  c.chunk_size = chunk;
  return c;
}

Mamba2Config grad_mamba2(index_t chunk) {
  Mamba2Config c;
  c.d_model = 2;
  c.d_state = 3;
  c.headdim = 2;
  c.chunk_size = chunk;
  return c;
}

// out_proj starts at zero (residual branch = identity); tests want every path live.
template <class Layer>
void randomise_out_proj(Layer& layer, std::uint64_t seed) {
  Rng rng(seed);
  auto& w = layer.out_proj.weight.var;
  w.mutable_value().assign(randn<double, Cpu>(w.shape(), rng, 0.5));
}

template <class Layer>
std::vector<V64> params_of(Layer& layer) {
  std::vector<V64> ps;
  layer.for_each_param([&](const std::string&, Param<double, Cpu>& p) { ps.push_back(p.var); });
  return ps;
}

using Siso = Mamba3<double, Cpu, SISO>;  // the A activation is the reference's heavy tail
using Mimo = Mamba3<double, Cpu, MIMO<2>>;
using SisoSoftplus = Mamba3<double, Cpu, SISO, SoftplusA>;  // the earlier A = -softplus(dd_A)
using MimoSoftplus = Mamba3<double, Cpu, MIMO<2>, SoftplusA>;
using M2 = Mamba2<double, Cpu>;
static_assert(std::is_same_v<Siso, Mamba3<double, Cpu, SISO, HeavyTailA>>, "the heavy-tail A is the default");

// A Mamba-3 layer of the tiny sizes; `outproj_norm` sets is_outproj_norm and gives the norm gains
// values away from 1, so that a gain that were ignored (or applied to the wrong channel) shows.
template <class Layer>
Layer make_mamba3(index_t chunk, std::uint64_t seed, bool outproj_norm) {
  Rng rng(seed);
  Mamba3Config c = tiny_mamba3(chunk);
  c.is_outproj_norm = outproj_norm;
  Layer m(c, rng);
  randomise_out_proj(m, seed + 100);
  if (outproj_norm) m.norm.var.mutable_value().assign(rand_uniform<double, Cpu>(m.norm.shape(), rng, 0.5, 1.5));
  return m;
}
template <class Layer = Siso>
Layer make_siso(index_t chunk = 3, std::uint64_t seed = 1, bool outproj_norm = false) {
  return make_mamba3<Layer>(chunk, seed, outproj_norm);
}
template <class Layer = Mimo>
Layer make_mimo(index_t chunk = 2, std::uint64_t seed = 2, bool outproj_norm = false) {
  return make_mamba3<Layer>(chunk, seed, outproj_norm);
}
M2 make_mamba2(index_t chunk = 3, std::uint64_t seed = 3) {
  Rng rng(seed);
  M2 m(tiny_mamba2(chunk), rng);
  randomise_out_proj(m, seed + 100);
  return m;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(1.0, std::abs(b[i])));
  return worst;
}

// The recipe's letter table has no Mamba-2 letter; the library's Mamba2Letter builds
// Block<Mamba2<T, B>> with the one-block sizes. Chunk 16 (not the default 64) puts several chunk
// boundaries inside the documents of the masking batch. 'S' for SSD, Mamba-2's name for its scan.
inline constexpr MambaSizes kMamba2Sizes{.d_state = kOneBlockMamba.d_state, .headdim = kOneBlockMamba.headdim,
                                         .expand = kOneBlockMamba.expand, .chunk_size = 16};
using Mamba2Letters = Letters<Letter<'S', Mamba2Letter<kMamba2Sizes>>>;

}  // namespace

static_assert(Mixer<Siso> && Mixer<Mimo> && Mixer<M2>, "Mamba layers must satisfy the Mixer concept");

TEST_CASE("Mamba3: parameters, names, roles and the reference's initial values", "[mamba][layers]") {
  Rng rng(1);
  Mamba3Config cfg;
  cfg.d_model = 64;  // reference defaults otherwise: headdim 64, d_state 128, expand 2, rope_fraction 0.5
  Mamba3<float, Cpu, SISO> siso(cfg, rng);
  CHECK(siso.heads() == 2);
  CHECK(siso.n_angles() == 32);
  CHECK(siso.config.chunk_size == 64);
  CHECK(siso.in_proj.weight.shape() == Shape{2 * 128 + 2 * 128 + 3 * 2 + 32, 64});
  std::vector<std::string> names;
  siso.for_each_param([&](const std::string& n, Param<float, Cpu>& p) { names.push_back(n + ":" + std::string(role_name(p.role))); }, "blocks.0.mixer");
  CHECK(names == std::vector<std::string>{"blocks.0.mixer.in_proj.weight:matrix", "blocks.0.mixer.dt_bias:scalar",
                                          "blocks.0.mixer.B_norm:norm_gain", "blocks.0.mixer.C_norm:norm_gain",
                                          "blocks.0.mixer.B_bias:scalar", "blocks.0.mixer.C_bias:scalar",
                                          "blocks.0.mixer.D:scalar", "blocks.0.mixer.out_proj.weight:matrix"});
  for (float b : siso.dt_bias.value().to_host()) {  // softplus(dt_bias) in [dt_min, dt_max]
    const double dt = std::log1p(std::exp(static_cast<double>(b)));
    CHECK(dt >= 0.001 * 0.999);
    CHECK(dt <= 0.1 * 1.001);
  }
  for (float w : siso.out_proj.weight.value().to_host()) REQUIRE(w == 0.0f);
  // is_outproj_norm (off by default, as in the reference) adds the per-head RMSNorm gain "norm" (d_inner), init 1
  CHECK_FALSE(cfg.is_outproj_norm);
  Mamba3Config normed = cfg;
  normed.is_outproj_norm = true;
  Mamba3<float, Cpu, SISO> siso_normed(normed, rng);
  names.clear();
  siso_normed.for_each_param([&](const std::string& n, Param<float, Cpu>& p) { names.push_back(n + ":" + std::string(role_name(p.role))); });
  CHECK(names[names.size() - 2] == "norm:norm_gain");
  CHECK(siso_normed.norm.shape() == Shape{128});
  CHECK(siso_normed.norm.value().to_host() == std::vector<float>(128, 1.0f));
  // the letter's switch: MambaSizes::outproj_norm sets it and shows in the model's type id
  using NormedLetter = Mamba3Letter<MambaSizes{.d_state = 8, .headdim = 16, .expand = 2, .outproj_norm = true}>::factory<
      float, Cpu, kOneBlockDims>;
  CHECK(NormedLetter::config().is_outproj_norm);
  CHECK(NormedLetter::describe() == "Mamba3 SISO N8 P16 x2 mlp 128 outproj_norm A heavy-tail");
  Mamba3<float, Cpu, MIMO<4>> mimo(cfg, rng);
  CHECK(mimo.config.chunk_size == 16);  // 64 / R rows per chunk
  CHECK(mimo.mimo_x.shape() == Shape{2, 4, 64});
  CHECK(mimo.mimo_x.value().to_host()[0] == 0.25f);
  CHECK(mimo.in_proj.weight.shape() == Shape{2 * 128 + 2 * 4 * 128 + 3 * 2 + 32, 64});

  Mamba2Config c2;
  c2.d_model = 64;
  Mamba2<float, Cpu> m2(c2, rng);
  names.clear();
  m2.for_each_param([&](const std::string& n, Param<float, Cpu>& p) { names.push_back(n + ":" + std::string(role_name(p.role))); });
  CHECK(names == std::vector<std::string>{"in_proj.weight:matrix", "conv_weight:scalar", "conv_bias:bias", "dt_bias:scalar",
                                          "A_log:scalar", "D:scalar", "norm:norm_gain", "out_proj.weight:matrix"});
  CHECK(m2.conv_weight.shape() == Shape{128 + 2 * 128, 4});
  for (float a : m2.A_log.value().to_host()) {
    CHECK(std::exp(a) >= 1.0f * 0.999f);
    CHECK(std::exp(a) <= 16.0f * 1.001f);
  }
}

TEST_CASE("Mamba layers: chunked forward equals the sequential recurrence (fp64)", "[mamba][layers]") {
  const Docs docs = docs_for({{1, 4, 6, 2}, {9, 1, 3}});
  const auto u = random_param({2, 13, 4}, 10);
  auto compare = [&](auto layer) {
    NoGrad no_grad;
    std::vector<double> reference;
    {
      auto seq_layer = layer;
      seq_layer.config.scan = ScanKind::sequential;
      reference = seq_layer.forward(u, docs).value().to_host();
    }
    for (index_t chunk : {1, 2, 4, 64}) {
      INFO("chunk " << chunk);
      layer.config.chunk_size = chunk;
      CHECK(max_rel_diff(layer.forward(u, docs).value().to_host(), reference) < 1e-10);
    }
  };
  SECTION("Mamba3 SISO") { compare(make_siso()); }
  SECTION("Mamba3 MIMO<2>") { compare(make_mimo()); }
  SECTION("Mamba3 SISO, SoftplusA") { compare(make_siso<SisoSoftplus>()); }
  SECTION("Mamba3 MIMO<2>, SoftplusA") { compare(make_mimo<MimoSoftplus>()); }
  SECTION("Mamba3 SISO, is_outproj_norm") { compare(make_siso(3, 1, true)); }
  SECTION("Mamba3 MIMO<2>, is_outproj_norm") { compare(make_mimo(2, 2, true)); }
  SECTION("Mamba2") { compare(make_mamba2()); }
}

TEST_CASE("Mamba layers: gradcheck of every parameter and the input through the chunked path", "[mamba][layers][gradcheck]") {
  const Docs docs = docs_for({{2, 4}, {1, 5}});
  const auto u = random_param({2, 6, 2}, 11);
  auto run = [&](const char* name, auto layer) {
    randomise_out_proj(layer, 77);
    std::vector<V64> inputs{u};
    for (const V64& p : params_of(layer)) inputs.push_back(p);
    require_gradcheck(name, [&](auto& in) { return layer.forward(in[0], docs); }, inputs);
  };
  Rng rng(21);
  run("Mamba3 SISO", Siso(grad_mamba3(3), rng));
  run("Mamba3 MIMO<2>", Mimo(grad_mamba3(2), rng));
  run("Mamba3 SISO, SoftplusA", SisoSoftplus(grad_mamba3(3), rng));
  run("Mamba3 MIMO<2>, SoftplusA", MimoSoftplus(grad_mamba3(2), rng));
  Mamba3Config normed = grad_mamba3(3);
  normed.is_outproj_norm = true;
  run("Mamba3 SISO, is_outproj_norm", Siso(normed, rng));
  normed.chunk_size = 2;
  run("Mamba3 MIMO<2>, is_outproj_norm", Mimo(normed, rng));
  run("Mamba2", M2(grad_mamba2(3), rng));
}

TEST_CASE("Mamba layers: decode steps reproduce the training forward token by token", "[mamba][layers][decode]") {
  // Two rows with different document structure: resets happen at different steps per row.
  const std::vector<std::vector<index_t>> rows{{3, 1, 5, 3}, {6, 6}};
  const std::vector<std::int32_t> ids = tokens_for(rows);
  const index_t B = 2, T = 12;
  const Docs docs = Docs::from_tokens(ids, B, T, kBos);
  const auto u = random_param({B, T, 4}, 12);
  const auto uv = u.value().to_host();
  auto decode_all = [&](const auto& layer, auto cache) {
    std::vector<double> out(static_cast<std::size_t>(B * T * 4));
    for (index_t t = 0; t < T; ++t) {
      std::vector<double> ut;
      std::vector<bool> starts;
      for (index_t b = 0; b < B; ++b) {
        ut.insert(ut.end(), uv.begin() + (b * T + t) * 4, uv.begin() + (b * T + t + 1) * 4);
        starts.push_back(ids[static_cast<std::size_t>(b * T + t)] == kBos);
      }
      const auto y = layer.step(V64(T64::from_host({B, 4}, ut)), cache, starts).value().to_host();
      for (index_t b = 0; b < B; ++b)
        std::copy(y.begin() + b * 4, y.begin() + (b + 1) * 4, out.begin() + (b * T + t) * 4);
    }
    return out;
  };
  auto check_layer = [&](const char* name, const auto& layer) {
    INFO(name);
    NoGrad no_grad;
    const auto train = layer.forward(u, docs).value().to_host();
    CHECK(max_rel_diff(decode_all(layer, layer.make_cache(B)), train) < 1e-10);
  };
  check_layer("Mamba3 SISO", make_siso());
  check_layer("Mamba3 MIMO<2>", make_mimo());
  check_layer("Mamba3 SISO, SoftplusA", make_siso<SisoSoftplus>());
  check_layer("Mamba3 MIMO<2>, SoftplusA", make_mimo<MimoSoftplus>());
  check_layer("Mamba3 SISO, is_outproj_norm", make_siso(3, 1, true));
  check_layer("Mamba3 MIMO<2>, is_outproj_norm", make_mimo(2, 2, true));
  check_layer("Mamba2", make_mamba2());
}

TEST_CASE("Mamba layers: documents are isolated end to end", "[mamba][layers][masking]") {
  // pack [A A A A A][B B B B B B B]; chunk 3, so B's chunks are B-relative, not row-relative.
  const index_t TA = 5, TB = 7;
  auto check_layer = [&](const char* name, const auto& layer) { check_documents_isolated(name, layer, 4, TA, TB, kBos); };
  auto siso = make_siso(3);
  auto mimo = make_mimo(3);
  auto m2 = make_mamba2(3);
  check_layer("Mamba3 SISO", siso);
  check_layer("Mamba3 MIMO<2>", mimo);
  check_layer("Mamba2", m2);
  Rng rng(5);
  Block<Siso> block{make_siso(3), MLP<double, Cpu>(4, rng)};
  block.ffn.proj.weight.var.mutable_value().assign(randn<double, Cpu>({4, 16}, rng, 0.3));
  check_layer("Block<Mamba3 SISO>", block);
}

TEST_CASE("Block<Mamba3> and Block<Mamba2>: pre-norm residual blocks that stack", "[mamba][layers][block]") {
  Rng rng(6);
  Block<Siso> b0{make_siso(3, 7), MLP<double, Cpu>(4, rng)};
  Block<M2> b1{make_mamba2(3, 8), MLP<double, Cpu>(4, rng)};
  Block<Mimo> b2{make_mimo(2, 9), MLP<double, Cpu>(4, rng)};
  for (auto* w : {&b0.ffn.proj.weight.var, &b1.ffn.proj.weight.var, &b2.ffn.proj.weight.var})
    w->mutable_value().assign(randn<double, Cpu>({4, 16}, rng, 0.3));
  std::vector<std::string> names;
  b1.for_each_param([&](const std::string& n, Param<double, Cpu>&) { names.push_back(n); }, "blocks.1");
  CHECK(names.front() == "blocks.1.mixer.in_proj.weight");
  CHECK(names.back() == "blocks.1.ffn.proj.weight");
  const Docs docs = docs_for({{2, 3}});
  const auto x = random_param({1, 5, 4}, 14);
  // a three-block stack (pattern "MMM" with all three mixer kinds); the gradient flows through all
  // of it (in_proj weights are covered by the layer gradchecks; here the input and a few scalars)
  std::vector<V64> inputs{x, b0.mixer.dt_bias.var, b1.mixer.A_log.var, b2.mixer.D.var};
  require_gradcheck("stack of Mamba blocks", [&](auto& in) {
    return b2.forward(b1.forward(b0.forward(in[0], docs), docs), docs);
  }, inputs);
}

TEST_CASE("Block<Mamba3>: check_document_masking on a one-block RecipeLM of pattern M, and it catches a model blind to documents",
          "[mamba][layers][masking]") {
  using Mamba3LM = OneBlockLM<float, "M">;
  static_assert(std::is_same_v<Mamba3LM::block_type<0>, Block<Mamba3<float, Cpu>>>);
  Mamba3LM model(31);
  randomise_matrices(model, 32);
  // packed == alone bitwise (tolerance 0), as for the layers alone above
  check_block_document_masking(model, 0.0);
}

TEST_CASE("Block<Mamba2>: check_document_masking on a one-block LM of a custom letter table, and it catches a model blind to documents",
          "[mamba][layers][masking]") {
  using Mamba2LM = LM<float, Cpu, kOneBlockDims, Pattern<"S">, Mamba2Letters>;
  static_assert(std::is_same_v<Mamba2LM::block_type<0>, Block<Mamba2<float, Cpu>>>);
  Mamba2LM model(41);
  randomise_matrices(model, 42);
  check_block_document_masking(model, 0.0);
}

TEST_CASE("Mamba layers: bad input gives megacpp::Error with the values", "[mamba][layers][errors]") {
  Rng rng(1);
  Mamba3Config c = tiny_mamba3(3);
  c.d_model = 5;  // d_inner 10 is not a multiple of headdim 4
  CHECK_THROWS_AS((Siso(c, rng)), Error);
  CHECK_THROWS_WITH((Siso(c, rng)), Contains("d_inner = expand * d_model = 2 * 5 = 10 is not divisible by headdim 4"));
  c = tiny_mamba3(3);
  c.d_state = 1;
  CHECK_THROWS_WITH((Siso(c, rng)), Contains("leaves no pair to rotate"));
  Mamba2Config c2 = tiny_mamba2(3);
  c2.d_model = 5;
  CHECK_THROWS_WITH((M2(c2, rng)), Contains("d_inner = expand * d_model = 2 * 5 = 10 is not divisible by headdim 4"));
  c2 = tiny_mamba2(3);
  c2.ngroups = 3;
  CHECK_THROWS_WITH((M2(c2, rng)), Contains("heads (2) must be a multiple of ngroups (3)"));

  const auto siso = make_siso();
  const Docs docs = docs_for({{2, 3}});
  CHECK_THROWS_WITH(siso.forward(random_param({1, 5, 3}, 1), docs), Contains("input must be (batch, seq, 4), got (1, 5, 3)"));
  CHECK_THROWS_WITH(siso.forward(random_param({1, 6, 4}, 1), docs), Contains("document layout (1, 5) does not match input (1, 6, 4)"));

  // decode caches of the wrong shape
  auto cache = siso.make_cache(2);
  CHECK_THROWS_WITH(siso.step(random_param({3, 4}, 1), cache), Contains("cache.state is (2, 2, 6, 4) but this layer and batch need (3, 2, 6, 4)"));
  auto mimo_cache = make_mimo().make_cache(2);
  CHECK_THROWS_WITH(siso.step(random_param({2, 4}, 1), mimo_cache), Contains("cache.k_prev is (2, 2, 2, 6) but this layer and batch need (2, 2, 1, 6)"));
  CHECK_THROWS_WITH(siso.step(random_param({2, 4}, 1), cache, {true}), Contains("new_document has 1 entries for batch 2"));
  const auto m2 = make_mamba2();
  auto m2_cache = m2.make_cache(1);
  m2_cache.conv = Tensor<double, Cpu>::zeros({1, 2, m2.config.conv_dim()});
  CHECK_THROWS_WITH(m2.step(random_param({1, 4}, 1), m2_cache), Contains("cache.conv is (1, 2, 18) but this layer and batch need (1, 3, 18)"));
  CHECK_THROWS_WITH(cache.reset(5), Contains("row 5 out of range for batch 2"));
}
