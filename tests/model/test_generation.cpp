// Incremental decoding: LM::step_logits over the attention KV cache and the Mamba state must give
// the logits of the full training forward at every position (the independent implementation is
// the forward itself: flash attention and the chunked scan), so greedy generation with the cache
// picks exactly the tokens that re-running the whole sequence picks.
#include "support/op_testing.hpp"

#include "megacpp/nn/model.hpp"
#include "megacpp/nn/model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <set>

using namespace megacpp;
using Catch::Matchers::Contains;

namespace {
using Tiny = TinyLM<float, Cpu>;
constexpr std::int32_t kBos = 256;  // a byte vocabulary's first special id (kTinyDims.vocab = 264)

// Output projections start at zero, so at init every block is the identity and attention does not
// matter. Perturb every parameter so that each mixer and each FFN shapes the logits.
template <class Model>
void perturb_all(Model& model, std::uint64_t seed, double std) {
  Rng rng(seed);
  model.for_each_param([&](const std::string&, Param<float, Cpu>& p) {
    const auto noise = randn<float, Cpu>(p.shape(), rng, std).to_host();
    auto value = p.value().to_host();
    for (std::size_t i = 0; i < value.size(); ++i) value[i] += noise[i];
    p.var.mutable_value().assign(CpuTensor<float>::from_host(p.shape(), value));
  });
}

// max |a - b| / max |b|: relative to the scale of the reference values.
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// Tokens (batch, seq) for rows given by their documents' BOS positions; other ids are bytes.
std::vector<std::int32_t> packed_tokens(index_t batch, index_t seq, const std::vector<std::vector<index_t>>& bos_at,
                                        std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * seq));
  for (index_t b = 0; b < batch; ++b)
    for (index_t t = 0; t < seq; ++t) {
      const auto& starts = bos_at[static_cast<std::size_t>(b)];
      const bool bos = std::find(starts.begin(), starts.end(), t) != starts.end();
      ids[static_cast<std::size_t>(b * seq + t)] = bos ? kBos : static_cast<std::int32_t>(rng.below(256));
    }
  return ids;
}
}  // namespace

TEST_CASE("Generation: step_logits equals the full forward at every position", "[generation]") {
  Tiny model(3);
  perturb_all(model, 17, 0.05);
  // Row 0: two documents (BOS at 0 and in the middle). Row 1 starts mid-document (document 0 of
  // the row, positions from 0) and has two BOS: resets happen at different steps per row.
  const index_t batch = 2, seq = 24, vocab = kTinyDims.vocab;
  const std::vector<std::int32_t> ids = packed_tokens(batch, seq, {{0, 11}, {5, 17}}, 8);
  NoGrad no_grad;
  const auto full = model.logits(model.hidden(CpuTensor<std::int32_t>::from_host({batch, seq}, ids),
                                              Tiny::documents(ids, batch, seq, kBos)))
                        .value()
                        .to_host();  // (batch, seq, vocab)
  auto cache = model.make_cache(batch, seq);
  double worst = 0;
  for (index_t t = 0; t < seq; ++t) {
    const std::vector<std::int32_t> tokens{ids[static_cast<std::size_t>(t)], ids[static_cast<std::size_t>(seq + t)]};
    const auto step = model.step_logits(tokens, cache, kBos).value().to_host();  // (batch, vocab)
    REQUIRE(step.size() == static_cast<std::size_t>(batch * vocab));
    for (index_t b = 0; b < batch; ++b) {
      const auto first = full.begin() + (b * seq + t) * vocab;
      const double d = max_rel_diff(std::vector<float>(step.begin() + b * vocab, step.begin() + (b + 1) * vocab),
                                    std::vector<float>(first, first + vocab));
      INFO("row " << b << " position " << t);
      CHECK(d < 1e-5);
      worst = std::max(worst, d);
    }
  }
  WARN("step_logits vs full forward: max relative logit difference " << worst);

  // The check has teeth: the past changes the logits (token 10 of row 0 alone in a fresh document
  // gives other logits), and so does attention (zeroing both attention blocks' wo changes them).
  auto fresh = model.make_cache(1, 1);
  const auto alone = model.step_logits({ids[10]}, fresh, kBos).value().to_host();
  CHECK(max_rel_diff(alone, std::vector<float>(full.begin() + 10 * vocab, full.begin() + 11 * vocab)) > 1e-2);
  Tiny no_attention = model;
  for (auto* wo : {&std::get<0>(no_attention.blocks).mixer.wo, &std::get<1>(no_attention.blocks).mixer.wo})
    wo->weight.var = Var<float, Cpu>::parameter(CpuTensor<float>::zeros(wo->weight.shape()));
  const auto without = no_attention.logits(no_attention.hidden(CpuTensor<std::int32_t>::from_host({batch, seq}, ids),
                                                               Tiny::documents(ids, batch, seq, kBos)))
                           .value()
                           .to_host();
  CHECK(max_rel_diff(without, full) > 1e-2);
}

TEST_CASE("Generation: greedy decoding with the cache matches re-running the full forward", "[generation]") {
  Tiny model(5);
  perturb_all(model, 23, 0.05);
  const std::vector<std::int32_t> prompt{kBos, 'i', 'n', 't', ' ', kBos, 'v', 'o', 'i', 'd'};
  const SamplingOptions greedy{.temperature = 0.0};
  Rng rng_cached(1), rng_full(1);
  std::vector<std::int32_t> seen;
  const auto cached = generate(model, prompt, 40, greedy, rng_cached, kBos, [&](std::int32_t t) { seen.push_back(t); });
  const auto full = generate_full_forward(model, prompt, 40, greedy, rng_full, kBos);
  REQUIRE(cached.size() == prompt.size() + 40);
  CHECK(cached == full);
  CHECK(std::vector<std::int32_t>(cached.begin() + static_cast<std::ptrdiff_t>(prompt.size()), cached.end()) == seen);
  // not a degenerate run of one token
  CHECK(std::set<std::int32_t>(seen.begin(), seen.end()).size() > 1);

  // Sampling draws one uniform per token from the same seed in both, so it agrees too.
  const SamplingOptions sampled{.temperature = 0.8, .top_k = 20};
  Rng a(42), b(42);
  CHECK(generate(model, prompt, 12, sampled, a, kBos) == generate_full_forward(model, prompt, 12, sampled, b, kBos));

  // A callback returning false stops generation.
  const auto stopped = generate(model, prompt, 40, greedy, rng_cached, kBos, [n = 0](std::int32_t) mutable { return ++n < 3; });
  CHECK(stopped.size() == prompt.size() + 3);
}

TEST_CASE("Generation: a sliding-window attention step matches its forward", "[generation]") {
  AttentionConfig config;
  config.d_model = 32;
  config.n_heads = 4;
  config.n_kv_heads = 2;
  config.window = 3;
  Rng rng(7);
  auto block = make_attention_block<float, Cpu>(config, rng);
  block.mixer.wo.weight.var.mutable_value().assign(randn<float, Cpu>(block.mixer.wo.weight.shape(), rng, 0.2));
  block.ffn.proj.weight.var.mutable_value().assign(randn<float, Cpu>(block.ffn.proj.weight.shape(), rng, 0.1));
  // Two rows; documents longer than the window (the ring buffer wraps) and a reset mid-row.
  const index_t batch = 2, seq = 14, d = config.d_model;
  const std::vector<std::int32_t> ids = packed_tokens(batch, seq, {{0, 9}, {3, 4}}, 4);
  const auto docs = DocumentLayout<Cpu>::from_tokens(ids, batch, seq, kBos);
  const auto x = randn<float, Cpu>({batch, seq, d}, rng);
  const auto xv = x.to_host();
  NoGrad no_grad;
  const auto full = block.forward(Var<float, Cpu>(x), docs).value().to_host();
  // capacity 16 > window: only `window` slots are kept
  for (index_t capacity : {index_t{16}, index_t{3}}) {
    INFO("capacity " << capacity);
    auto cache = block.make_cache(batch, capacity);
    CHECK(cache.capacity() == 3);
    std::vector<float> stepped(full.size());
    for (index_t t = 0; t < seq; ++t) {
      std::vector<float> xt;
      std::vector<bool> starts;
      for (index_t b = 0; b < batch; ++b) {
        xt.insert(xt.end(), xv.begin() + (b * seq + t) * d, xv.begin() + (b * seq + t + 1) * d);
        starts.push_back(ids[static_cast<std::size_t>(b * seq + t)] == kBos);
      }
      const auto y = block.step(Var<float, Cpu>(CpuTensor<float>::from_host({batch, d}, xt)), cache, starts).value().to_host();
      for (index_t b = 0; b < batch; ++b)
        std::copy(y.begin() + b * d, y.begin() + (b + 1) * d, stepped.begin() + (b * seq + t) * d);
    }
    const double diff = max_rel_diff(stepped, full);
    WARN("window 3 attention block, capacity " << capacity << ", step vs forward: max relative difference " << diff);
    CHECK(diff < 1e-5);
    CHECK(cache.position == std::vector<index_t>{5, 10});  // row 0: positions 0..4 of its second document
  }
  // The window changes the result: the same block without one differs after 3 tokens.
  auto unwindowed = block;
  unwindowed.mixer.config.window = 0;
  CHECK(max_rel_diff(unwindowed.forward(Var<float, Cpu>(x), docs).value().to_host(), full) > 1e-3);
}

TEST_CASE("Generation: errors name the capacity, the vocabulary and the batch", "[generation]") {
  Tiny model(1);
  NoGrad no_grad;
  auto cache = model.make_cache(1, 4);
  for (int i = 0; i < 4; ++i) model.step_logits({'a'}, cache, kBos);
  CHECK_THROWS_WITH(model.step_logits({'a'}, cache, kBos), Contains("capacity 4"));
  // a BOS starts a new document, so the same cache has room again
  CHECK_NOTHROW(model.step_logits({kBos}, cache, kBos));

  CHECK_THROWS_WITH((model.step_logits({264}, cache, kBos)),
                    Contains("LM::step_logits: token id 264 at [0] is outside [0, 264)"));
  CHECK_THROWS_WITH((model.step_logits({-1}, cache, kBos)), Contains("token id -1"));

  auto two_rows = model.make_cache(2, 8);
  CHECK_THROWS_WITH((model.step_logits({'a'}, two_rows, kBos)), Contains("the cache holds 2 rows but 1 tokens"));
  CHECK_THROWS_WITH((model.step_logits({}, two_rows, kBos)), Contains("needs one token per row"));

  // Layer level: a cache for another batch, and the new_document size.
  const auto& attention = std::get<0>(model.blocks).mixer;
  auto layer_cache = attention.make_cache(2, 8);
  const Var<float, Cpu> u(CpuTensor<float>::zeros({3, kTinyDims.d_model}));
  CHECK_THROWS_WITH((attention.step(u, layer_cache)), Contains("cache.k is (2, 8, 1, 16) but this layer and batch need (3, 8, 1, 16)"));
  CHECK_THROWS_WITH((attention.step(Var<float, Cpu>(CpuTensor<float>::zeros({2, kTinyDims.d_model})), layer_cache, {true})),
                    Contains("new_document has 1 entries for batch 2"));

  Rng rng(0);
  CHECK_THROWS_WITH((generate(model, {}, 3, {}, rng, kBos)), Contains("the prompt is empty"));
  CHECK_THROWS_WITH((generate(model, {300}, 3, {}, rng, kBos)), Contains("prompt token 0 has id 300"));
}

TEST_CASE("Generation: sample_token is greedy at temperature 0, honours top_k and is seeded", "[generation]") {
  const std::vector<float> logits{1.0f, 3.0f, 3.0f, -2.0f, 0.5f};
  Rng rng(9);
  const std::uint64_t before = rng.state();
  CHECK(sample_token(logits.data(), 5, {.temperature = 0.0}, rng) == 1);  // lowest index among ties
  CHECK(rng.state() == before);                                           // greedy draws nothing
  // top_k = 1 keeps only the largest (ties to the lower index): always token 1
  for (int i = 0; i < 20; ++i) CHECK(sample_token(logits.data(), 5, {.temperature = 1.0, .top_k = 1}, rng) == 1);
  // top_k = 2 never leaves {1, 2}; both appear
  std::set<std::int32_t> drawn;
  for (int i = 0; i < 200; ++i) drawn.insert(sample_token(logits.data(), 5, {.temperature = 1.0, .top_k = 2}, rng));
  CHECK(drawn == std::set<std::int32_t>{1, 2});
  // the same seed gives the same draws; the frequencies follow softmax(z / temperature)
  Rng a(5), b(5);
  std::vector<int> counts(5, 0);
  for (int i = 0; i < 20000; ++i) {
    const std::int32_t t = sample_token(logits.data(), 5, {.temperature = 2.0}, a);
    CHECK(t == sample_token(logits.data(), 5, {.temperature = 2.0}, b));
    ++counts[static_cast<std::size_t>(t)];
  }
  double total = 0;
  for (float z : logits) total += std::exp(z / 2.0);
  for (std::size_t i = 0; i < 5; ++i) CHECK(counts[i] / 20000.0 == Approx(std::exp(logits[i] / 2.0) / total).margin(0.015));
  CHECK_THROWS_WITH((sample_token(logits.data(), 5, {.temperature = -1.0}, rng)), Contains("temperature must be"));
  const std::vector<double> nan{0.0, std::nan("")};
  CHECK_THROWS_WITH((sample_token(nan.data(), 2, {}, rng)), Contains("logit 1 is NaN"));
}
