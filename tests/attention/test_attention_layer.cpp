// The GQA attention layer and Block<GQA<...>>: configuration and policies, gradients, document
// masking through the whole layer (projections included) and through the library's whole-model
// checker, YaRN, bad input.
#include "attention_testing.hpp"
#include "support/masking_testing.hpp"

#include <type_traits>

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

// The recipe's default and the modded-nanogpt variant, spelled as the policies read.
static_assert(std::is_same_v<GQA<float, Cpu>::SoftcapPolicy, Softcap<50>>);
static_assert(std::is_same_v<GQA<float, Cpu>::ScalePolicy, InvSqrtHeadDim>);
static_assert(std::is_same_v<GQA<float, Cpu>::QKNormPolicy, NoQKNorm>);
using NanoGptAttention = GQA<double, Cpu, QKNorm, NoSoftcap, Scale<12, 100>>;
static_assert(std::is_same_v<NanoGptAttention::SoftcapPolicy, NoSoftcap>);
static_assert(std::is_same_v<NanoGptAttention::ScalePolicy, Scale<12, 100>>);
static_assert(NanoGptAttention::QKNormPolicy::enabled);
static_assert(Mixer<GQA<float, Cpu, Softcap<50>>>);

namespace {
// Random values for every parameter (wo and the MLP's output projection start at zero, which
// would make the attention branch vanish from every test).
template <class Layer>
void randomise(Layer& layer, std::uint64_t seed, double std = 0.3) {
  Rng rng(seed);
  using T = typename Layer::value_type;
  layer.for_each_param([&](const std::string&, Param<T, Cpu>& p) { p.var.mutable_value().assign(randn<T, Cpu>(p.shape(), rng, std)); });
}
}  // namespace

TEST_CASE("Attention: defaults from the recipe, shapes, names, zero-initialised wo", "[attention][layer]") {
  Rng rng(1);
  const auto block = make_attention_block<float, Cpu>(AttentionConfig{.d_model = 64, .n_heads = 8}, rng);
  const auto& attn = block.mixer;
  CHECK(attn.config.n_kv_heads == 2);  // n_heads / 4
  CHECK(attn.config.head_dim == 8);
  CHECK(attn.wq.weight.shape() == Shape{64, 64});
  CHECK(attn.wk.weight.shape() == Shape{16, 64});
  CHECK(attn.wv.weight.shape() == Shape{16, 64});
  CHECK(attn.wo.weight.shape() == Shape{64, 64});
  for (float w : attn.wo.weight.value().to_host()) REQUIRE(w == 0.0f);
  const AttentionOptions opt = attn.options();
  CHECK(opt.scale == 1.0 / std::sqrt(8.0));
  CHECK(opt.softcap == 50.0);
  CHECK(opt.window == 0);
  std::vector<std::string> names;
  auto copy = block;
  copy.for_each_param([&](const std::string& n, Param<float, Cpu>& p) { names.push_back(n + ":" + std::string(role_name(p.role))); },
                      "blocks.0");
  CHECK(names == std::vector<std::string>{"blocks.0.mixer.wq.weight:matrix", "blocks.0.mixer.wk.weight:matrix",
                                          "blocks.0.mixer.wv.weight:matrix", "blocks.0.mixer.wo.weight:matrix",
                                          "blocks.0.ffn.fc.weight:matrix", "blocks.0.ffn.proj.weight:matrix"});
  // A zero wo makes the block start as the identity on its attention branch.
  const auto docs = layout_of({{3, 5}});
  auto x = random_var<float>({1, 8, 64}, 2);
  const auto y = block.mixer.forward(x, docs);
  for (float e : y.value().to_host()) REQUIRE(e == 0.0f);
}

TEST_CASE("Attention and Block<GQA>: gradcheck and the dense reference (double)", "[attention][layer][gradcheck]") {
  const auto docs = layout_of({{-2, 4, 1, 2}});  // starts mid-document; a length-1 document
  const index_t B = 1, T = 9, d = 8;
  Rng rng(3);
  SECTION("softcap 2, window 3, RoPE") {
    auto block = make_attention_block<double, Cpu, Softcap<2>>(
        AttentionConfig{.d_model = d, .n_heads = 2, .n_kv_heads = 1, .head_dim = 4, .window = 3, .tiles = kTinyTiles}, rng);
    randomise(block, 4);
    auto& attn = block.mixer;
    auto x = random_var<double>({B, T, d}, 5);
    require_gradcheck("attention layer", [&](auto& in) { return attn.forward(in[0], docs); },
                      {x, attn.wk.weight.var, attn.wv.weight.var});
    require_gradcheck("attention block", [&](auto& in) { return block.forward(in[0], docs); }, {x});
    const auto dense = attn.forward_with(x, docs, [](auto&&... a) { return dense_attention(a...); });
    CHECK(max_relative_error(attn.forward(x, docs).value(), dense.value()) < 1e-12);
  }
  SECTION("modded-nanogpt policies: QK-norm, scale 0.12, no softcap, YaRN") {
    NanoGptAttention attn(AttentionConfig{.d_model = d, .n_heads = 2, .n_kv_heads = 1, .head_dim = 6,
                                          .yarn = Yarn{.factor = 4.0, .original_context = 4}, .tiles = kTinyTiles},
                          rng);
    randomise(attn, 6);
    auto x = random_var<double>({B, T, d}, 7);
    require_gradcheck("nanogpt attention", [&](auto& in) { return attn.forward(in[0], docs); },
                      {x, attn.wk.weight.var});
    const auto dense = attn.forward_with(x, docs, [](auto&&... a) { return dense_attention(a...); });
    CHECK(max_relative_error(attn.forward(x, docs).value(), dense.value()) < 1e-12);
  }
}

TEST_CASE("Block<GQA>: document masking through the whole layer, projections included", "[attention][layer][masking]") {
  const index_t len_a = 37, len_b = 50, T = len_a + len_b, d = 64;
  Rng rng(8);
  auto block = make_attention_block<float, Cpu>(AttentionConfig{.d_model = d, .n_heads = 8}, rng);
  randomise(block, 9, 0.1);
  const auto packed = layout_of({{len_a, len_b}});
  const auto alone = layout_of({{len_b}});
  auto x = random_var<float>({1, T, d}, 10);
  const auto y = block.forward(x, packed);

  // Changing every token of A leaves every output of B bitwise unchanged.
  auto x2 = Var<float, Cpu>(x.value().clone(), true);
  for (index_t i = 0; i < len_a * d; ++i) x2.mutable_value().data()[i] = -2.0f * x.value().data()[i] + 0.5f;
  auto y2 = block.forward(x2, packed);
  REQUIRE(bitwise_equal(seq_rows(y2.value(), len_a, T), seq_rows(y.value(), len_a, T)));

  // A loss on B's outputs has exactly zero gradient with respect to A's inputs.
  Tensor<float, Cpu> b_only = random_tensor<float>({1, T, d}, 11);
  std::fill(b_only.data(), b_only.data() + len_a * d, 0.0f);
  backward(y2, b_only);
  REQUIRE(count_nonzero(x2.grad().data(), 0, len_a * d) == 0);
  bool b_gradient_nonzero = false;
  for (index_t i = len_a * d; i < T * d; ++i) b_gradient_nonzero = b_gradient_nonzero || x2.grad().data()[i] != 0.0f;
  CHECK(b_gradient_nonzero);

  // B inside the pack equals B alone (positions restart at every document), bitwise: the fused
  // attention tiles each document from its own first token, and the CPU GEMM computes a row of
  // the projections the same way whatever rows surround it (backends/cpu/detail/gemm_kernel.hpp).
  auto xb = Var<float, Cpu>(seq_rows(x.value(), len_a, T), false);
  const auto yb = block.forward(xb, alone);
  const double rel = max_relative_error(seq_rows(y.value(), len_a, T), yb.value());
  INFO("B in the pack vs B alone, whole block: max relative difference " << rel);
  CHECK(bitwise_equal(seq_rows(y.value(), len_a, T), yb.value()));
}

TEST_CASE("Block<GQA>: check_document_masking on a one-block RecipeLM of pattern A, and it catches a model blind to documents",
          "[attention][layer][masking]") {
  using AttentionLM = OneBlockLM<float, "A">;
  static_assert(std::is_same_v<AttentionLM::block_type<0>, Block<GQA<float, Cpu>>>);
  AttentionLM model(21);
  randomise_matrices(model, 22);
  // packed == alone bitwise (tolerance 0): see the whole-block test above
  check_block_document_masking(model, 0.0);
}

TEST_CASE("YaRN frequencies and attention factor", "[attention][yarn]") {
  const index_t D = 64;
  const auto plain = rope_inv_freq<double, Cpu>(D, 10000.0).to_host();
  CHECK(rope_frequencies<double, Cpu>(D, 10000.0).to_host() == plain);
  const Yarn yarn{.factor = 4.0, .original_context = 4096};
  const auto extended = rope_frequencies<double, Cpu>(D, 10000.0, yarn).to_host();
  CHECK(extended.front() == plain.front());         // 652 rotations over L > beta_fast: kept
  CHECK(extended.back() == plain.back() / 4.0);     // 0.09 rotations < beta_slow: interpolated by s
  for (std::size_t i = 0; i < extended.size(); ++i) {
    CHECK(extended[i] <= plain[i]);
    CHECK(extended[i] >= plain[i] / 4.0);
  }
  CHECK(yarn.attention_factor() == Approx(0.1 * std::log(4.0) + 1.0));
  Rng rng(12);
  const GQA<float, Cpu> attn(AttentionConfig{.d_model = 128, .n_heads = 2, .head_dim = 64, .yarn = yarn}, rng);
  CHECK(attn.options().scale == Approx(0.125 * yarn.attention_factor() * yarn.attention_factor()));
}

TEST_CASE("Attention::set_rope_theta and set_yarn: the same layer as one built with the new values", "[attention][rope]") {
  Rng rng(21), rng_copy(21);
  GQA<float, Cpu> attn(AttentionConfig{.d_model = 32, .n_heads = 4, .n_kv_heads = 2}, rng);
  static_assert(RotaryMixer<GQA<float, Cpu>>);
  const Yarn yarn{.factor = 2.0, .original_context = 16};
  const GQA<float, Cpu> built(AttentionConfig{.d_model = 32, .n_heads = 4, .n_kv_heads = 2, .rope_theta = 5e5, .yarn = yarn},
                              rng_copy);  // same draws: the same weights
  attn.set_rope_theta(5e5);
  attn.set_yarn(yarn);
  CHECK(attn.inv_freq.to_host() == built.inv_freq.to_host());
  CHECK(attn.options().scale == built.options().scale);
  const auto docs = layout_of({{3, 5}});
  const auto x = random_var<float>({1, 8, 32}, 22, false);
  CHECK(bitwise_equal(attn.forward(x, docs).value(), built.forward(x, docs).value()));
  CHECK_THROWS_WITH(attn.set_rope_theta(0.0), Contains("rope_theta must be positive, got 0"));
  CHECK_THROWS_WITH(attn.set_yarn(Yarn{.factor = 0.5}), Contains("YaRN factor must be >= 1"));
  GQA<float, Cpu> no_rope(AttentionConfig{.d_model = 32, .n_heads = 4, .rope = false}, rng);
  CHECK_FALSE(no_rope.uses_rope());
  CHECK_THROWS_WITH(no_rope.set_rope_theta(1e6), Contains("this layer has no RoPE"));
}

TEST_CASE("bad input: clear megacpp::Errors carrying the values", "[attention][errors]") {
  Rng rng(13);
  auto make = [&](const AttentionConfig& config) { return GQA<float, Cpu>(config, rng); };
  CHECK_THROWS_AS(make({.d_model = 48, .n_heads = 6, .n_kv_heads = 4}), Error);
  CHECK_THROWS_WITH(make({.d_model = 48, .n_heads = 6, .n_kv_heads = 4}), Contains("n_heads 6 is not divisible by n_kv_heads 4"));
  CHECK_THROWS_WITH(make({.d_model = 28, .n_heads = 4}), Contains("head_dim 7 is odd: RoPE rotates feature pairs"));
  CHECK_NOTHROW(make({.d_model = 28, .n_heads = 4, .rope = false}));
  CHECK_THROWS_WITH(make({.d_model = 32, .n_heads = 4, .yarn = Yarn{.factor = 0.5}}), Contains("YaRN factor must be >= 1"));

  const GQA<float, Cpu> attn(AttentionConfig{.d_model = 32, .n_heads = 4, .max_seq = 8}, rng);
  const auto x9 = random_var<float>({1, 9, 32}, 14);
  CHECK_THROWS_WITH(attn.forward(x9, layout_of({{9}})), Contains("sequence length 9 exceeds the configured maximum max_seq = 8"));
  const auto x8 = random_var<float>({1, 8, 32}, 15);
  CHECK_THROWS_WITH(attn.forward(x8, layout_of({{8}, {8}})),
                    Contains("document layout is for (batch, seq) = (2, 8) but the input has (1, 8)"));
  CHECK_THROWS_WITH(attn.forward(x8, layout_of({{3, 4}})),
                    Contains("document layout is for (batch, seq) = (1, 7) but the input has (1, 8)"));
  CHECK_THROWS_WITH(attn.forward(random_var<float>({1, 8, 16}, 16), layout_of({{8}})),
                    Contains("x must be (batch, seq, d_model = 32), got (1, 8, 16)"));

  // The op checks its own inputs.
  const auto docs = layout_of({{4}});
  auto q = random_var<float>({1, 4, 6, 8}, 17), k = random_var<float>({1, 4, 4, 8}, 18);
  CHECK_THROWS_WITH(flash_attention(q, k, k, docs), Contains("query heads 6 are not a multiple of kv heads 4"));
  auto q4 = random_var<float>({1, 4, 4, 8}, 19), k2 = random_var<float>({1, 4, 2, 8}, 20);
  CHECK_THROWS_WITH(flash_attention(q4, k2, k, docs), Contains("k and v must both be (batch, seq, kv_heads, head_dim)"));
  CHECK_THROWS_WITH(flash_attention(q4, k2, k2, docs, {0.0, -1.0, 0}), Contains("softcap must be finite and >= 0"));
  auto overlapping = docs;
  overlapping.spans[0] = {{0, 3}, {2, 2}};
  CHECK_THROWS_WITH(flash_attention(q4, k2, k2, overlapping), Contains("row 0: document span [2, 4)"));
}
