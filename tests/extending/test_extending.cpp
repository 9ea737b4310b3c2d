// The tests every new block must have, run on the toy blocks of docs/extending.md
// (tests/extending/toy_blocks.hpp):
//   1. gradcheck (fp64) of the op, the mixer, the feed-forward (its output and its auxiliary loss)
//      and the whole block, through document boundaries;
//   2. check_document_masking on a one-block LM of the new letter (packed == alone bitwise, other
//      documents change nothing, zero cross-document gradient), and a document-blind run fails it;
//   3. a wrong composition fails to compile with a readable message: tests/extending/negative/,
//      run by CTest (CMakeLists.txt here).
// Then what the page promises end to end: an LM mixing the toy letter with the library's 'A'
// trains, LM::losses reports the toy's auxiliary loss with its weight, and decoding matches the
// forward.
#include "support/masking_testing.hpp"

#include "extending/toy_blocks.hpp"
#include "megacpp/nn/model.hpp"
#include "megacpp/optim.hpp"

#include <algorithm>
#include <cmath>

using namespace megacpp;
using namespace megacpp::testing;
using toy::ToyEma;
using toy::ToyGatedMlp;

namespace {
using Ema64 = ToyEma<double, Cpu>;
using Mlp64 = ToyGatedMlp<double, Cpu>;
using ToyBlock64 = Block<Ema64, Mlp64>;

// Each part meets its own concept and not the other's: that is what lets Block refuse a swap.
static_assert(Mixer<ToyEma<float, Cpu>> && !FeedForward<ToyEma<float, Cpu>>);
static_assert(FeedForward<ToyGatedMlp<float, Cpu>> && !Mixer<ToyGatedMlp<float, Cpu>>);
static_assert(DecodableMixer<ToyEma<float, Cpu>>);

// The toy letter's sizes, and two models built from it: one block alone (the masking check's
// shape), and a hybrid "TA" of 4 layers (toy, attention, toy, attention).
inline constexpr toy::ToySizes kToySizes{.ema_width = 16, .ffn_hidden = 64, .aux_weight = 0.05};
using ToyLetters = Letters<Letter<'T', toy::ToyLetter<kToySizes>>, Letter<'A', AttentionLetter<kOneBlockAttention>>>;
using OneToyBlockLM = LM<float, Cpu, kOneBlockDims, Pattern<"T">, ToyLetters>;
inline constexpr Dims kHybridDims{.d_model = 32, .n_layers = 4, .vocab = 64, .max_seq = 128};
using HybridLM = LM<float, Cpu, kHybridDims, Pattern<"TA">, ToyLetters>;
static_assert(BlockFactory<toy::ToyLetter<kToySizes>::factory<float, Cpu, kHybridDims>>);
static_assert(std::is_same_v<HybridLM::block_type<0>, Block<ToyEma<float, Cpu>, ToyGatedMlp<float, Cpu>>>);
static_assert(std::is_same_v<HybridLM::block_type<1>, Block<GQA<float, Cpu>>>);

// Two rows of 3 + 1 + 4 and 5 + 3 tokens: a one-token document and documents at both row ends.
DocumentLayout<Cpu> gradcheck_documents() { return DocumentLayout<Cpu>::from_lengths({{3, 1, 4}, {5, 3}}); }

// x, then every parameter of `part`: gradcheck perturbs them in place, the part sees it.
template <class Part>
std::vector<V64> input_and_params(const V64& x, Part& part) {
  std::vector<V64> in{x};
  part.for_each_param([&](const std::string&, Param<double, Cpu>& p) { in.push_back(p.var); });
  return in;
}

// Packed rows with BOS = 1 at the given starts and next-token targets (a fixed batch to overfit).
struct TrainingBatch {
  static constexpr std::int32_t bos = 1;
  static constexpr index_t batch = 2, seq = 32;
  std::vector<std::int32_t> ids, targets;
  std::vector<float> mask;  // 0 where the target is the first token of a document (unpredictable)
  TrainingBatch() {
    Rng rng(3);
    const std::vector<std::vector<index_t>> starts{{0, 9, 10, 21}, {6, 20}};
    for (index_t b = 0; b < batch; ++b)
      for (index_t t = 0; t < seq; ++t) {
        const auto& row = starts[static_cast<std::size_t>(b)];
        ids.push_back(std::find(row.begin(), row.end(), t) != row.end() ? bos : static_cast<std::int32_t>(2 + rng.below(62)));
      }
    for (std::size_t i = 0; i < ids.size(); ++i) {
      targets.push_back(i + 1 < ids.size() ? ids[i + 1] : bos);
      mask.push_back(ids[i] == bos ? 0.0f : 1.0f);
    }
  }
  CpuTensor<std::int32_t> input() const { return CpuTensor<std::int32_t>::from_host({batch, seq}, ids); }
  CpuTensor<std::int32_t> target() const { return CpuTensor<std::int32_t>::from_host({batch, seq}, targets); }
  CpuTensor<float> loss_mask() const { return CpuTensor<float>::from_host({batch, seq}, mask); }
};
}  // namespace

TEST_CASE("document_ema equals its closed form and restarts at every document", "[extending][op]") {
  // h_t = sum over s from the document's start to t of (1 - a) a^(t - s) u_s: unrolling the recurrence.
  const auto docs = gradcheck_documents();
  const V64 u = random_param({2, 8, 3}, 1), logit = random_param({3}, 2);
  const auto h = toy::document_ema(u, logit, docs).value().to_host();
  const auto uh = u.value().to_host(), lh = logit.value().to_host();
  double worst = 0;
  for (index_t b = 0; b < 2; ++b)
    for (const DocumentSpan& d : docs.spans[static_cast<std::size_t>(b)])
      for (index_t t = d.start; t < d.start + d.length; ++t)
        for (index_t c = 0; c < 3; ++c) {
          const double a = 1 / (1 + std::exp(-lh[c]));
          double expected = 0;
          for (index_t s = d.start; s <= t; ++s) expected += (1 - a) * std::pow(a, static_cast<double>(t - s)) * uh[(b * 8 + s) * 3 + c];
          worst = std::max(worst, std::abs(h[(b * 8 + t) * 3 + c] - expected));
        }
  CHECK(worst < 1e-14);
  // the same tokens as one document per row give other values: the restarts are real
  const auto joined = toy::document_ema(u, logit, DocumentLayout<Cpu>::single_document(2, 8)).value().to_host();
  CHECK(joined[3 * 3] != h[3 * 3]);  // row 0, token 3 (a document start above), channel 0
}

TEST_CASE("gradcheck (fp64): document_ema, ToyEma, ToyGatedMlp with its auxiliary loss, and the whole block",
          "[extending][gradcheck]") {
  const auto docs = gradcheck_documents();
  require_gradcheck("document_ema", [&](auto& in) { return toy::document_ema(in[0], in[1], docs); },
                    {random_param({2, 8, 3}, 11), random_param({3}, 12)});

  Rng rng(21);
  Ema64 mixer(4, 3, rng);
  randomise_matrices(mixer, 22, 0.5);  // w_out starts at zero: without this, d/dw_in would be 0
  require_gradcheck("ToyEma", [&](auto& in) { return mixer.forward(in[0], docs); },
                    input_and_params(random_param({2, 8, 4}, 23), mixer));

  Mlp64 ffn(4, 6, 0.5, rng);
  randomise_matrices(ffn, 24, 0.5);
  require_gradcheck("ToyGatedMlp output", [&](auto& in) {
    AuxLosses<double, Cpu> aux;
    return ffn.forward(in[0], aux);
  }, input_and_params(random_param({2, 8, 4}, 25), ffn));
  require_gradcheck("ToyGatedMlp auxiliary loss", [&](auto& in) {
    AuxLosses<double, Cpu> aux;
    [[maybe_unused]] const V64 y = ffn.forward(in[0], aux);
    REQUIRE(aux.entries().size() == 1);
    return aux.entries()[0].loss;
  }, input_and_params(random_param({2, 8, 4}, 26), ffn));

  ToyBlock64 block(Ema64(4, 3, rng), Mlp64(4, 6, 0.5, rng));
  randomise_matrices(block, 27, 0.5);
  require_gradcheck("Block<ToyEma, ToyGatedMlp>", [&](auto& in) { return block.forward(in[0], docs); },
                    input_and_params(random_param({2, 8, 4}, 28), block));
}

TEST_CASE("check_document_masking: a one-block LM of the toy letter, and the model blind to documents fails it",
          "[extending][masking]") {
  static_assert(std::is_same_v<OneToyBlockLM::block_type<0>, Block<ToyEma<float, Cpu>, ToyGatedMlp<float, Cpu>>>);
  OneToyBlockLM model(31);
  randomise_matrices(model, 32);  // the output projections start at zero: the block would be the identity
  // packed == alone bitwise (tolerance 0): the op computes a row from its own tokens only, and the
  // CPU GEMM gives a row the same bits whatever rows sit beside it
  check_block_document_masking(model, 0.0);
}

TEST_CASE("LM \"TA\" with the toy letter beside attention trains, and losses() reports the auxiliary loss with its weight",
          "[extending][train][aux]") {
  HybridLM model(41);
  CHECK_THAT(HybridLM::type_id(), Catch::Matchers::Contains("T: ToyEma width 16, ToyGatedMlp hidden 64 aux 0.05; A: GQA"));
  const TrainingBatch data;
  const auto ids = data.input(), targets = data.target();
  const auto mask = data.loss_mask();
  const auto docs = HybridLM::documents(data.ids, data.batch, data.seq, data.bos);

  // total == main + sum_i w_i aux_i, one entry per toy block in layer order, the letter's weight
  const auto losses = model.losses(ids, targets, mask, docs);
  REQUIRE(losses.aux.size() == 2);  // layers 0 and 2
  CHECK(losses.aux[0].name == "blocks.0.ffn.toy_activation_l2");
  CHECK(losses.aux[1].name == "blocks.2.ffn.toy_activation_l2");
  double expected = losses.main.item();
  for (const auto& e : losses.aux) {
    CHECK(e.weight == kToySizes.aux_weight);
    CHECK(e.loss.item() > 0);
    expected += e.weight * e.loss.item();
  }
  CHECK(losses.total.item() == Approx(expected).epsilon(1e-6));
  CHECK(losses.total.item() > losses.main.item());
  // the entry is what the block's feed-forward computed: mean(hidden^2) on RMSNorm(h), recomputed
  {
    NoGrad no_grad;
    const auto& block = std::get<0>(model.blocks);
    const auto x = model.trace(ids, docs)[0];  // the embedding's output: block 0's input
    const auto h = x + block.mixer.forward(rmsnorm(x, block.norm_eps), docs);
    const auto f = rmsnorm(h, block.norm_eps);
    const auto hidden = mul(silu(block.ffn.gate.forward(f)), block.ffn.up.forward(f));
    CHECK(mean(mul(hidden, hidden)).item() == losses.aux[0].loss.item());
  }

  optim::HybridOptions o;  // Muon for the Role::matrix weights, AdamW for decay_logit and the embedding
  o.muon.lr = 0.02;
  o.adamw.lr = 0.01;
  optim::Hybrid<float, Cpu> opt(model, o);
  const auto decay_before = std::get<0>(model.blocks).mixer.decay_logit.value().to_host();
  float first = 0, last = 0, first_aux = 0;
  for (int step = 0; step < 60; ++step) {
    const auto l = model.losses(ids, targets, mask, docs);
    if (step == 0) first = l.total.item(), first_aux = l.aux[0].loss.item();
    last = l.total.item();
    backward(l.total);
    [[maybe_unused]] const auto clip = optim::clip_grad_norm(opt.params(), 1.0);
    opt.step();
    opt.zero_grad();
  }
  // the learned decays moved too: Role::scalar routed them to AdamW
  CHECK(std::get<0>(model.blocks).mixer.decay_logit.value().to_host() != decay_before);
  INFO("loss " << first << " -> " << last << ", first aux " << first_aux);
  CHECK(first > 3.0f);
  CHECK(last < 0.1f);  // ~0.004 here: the fixed batch is learnt
}

TEST_CASE("decoding: ToyEma::step equals its forward token by token, and so does the hybrid LM's step_logits",
          "[extending][decode]") {
  const auto docs = gradcheck_documents();
  Rng rng(51);
  Ema64 mixer(4, 3, rng);
  randomise_matrices(mixer, 52, 0.5);
  const V64 x = random_param({2, 8, 4}, 53);
  const auto full = mixer.forward(x, docs).value().to_host();  // (2, 8, 4)
  const auto xh = x.value().to_host();
  auto cache = mixer.make_cache(2);
  for (index_t t = 0; t < 8; ++t) {
    std::vector<double> token;
    std::vector<bool> new_document;
    for (index_t b = 0; b < 2; ++b) {
      token.insert(token.end(), xh.begin() + (b * 8 + t) * 4, xh.begin() + (b * 8 + t + 1) * 4);
      new_document.push_back(t > 0 && !docs.same_document(b, t - 1, t));
    }
    const auto y = mixer.step(V64(T64::from_host({2, 4}, token)), cache, new_document).value().to_host();
    for (index_t b = 0; b < 2; ++b) {
      INFO("row " << b << " token " << t);
      CHECK(std::equal(y.begin() + b * 4, y.begin() + (b + 1) * 4, full.begin() + (b * 8 + t) * 4));  // bitwise
    }
  }

  HybridLM model(61);
  randomise_matrices(model, 62);
  const TrainingBatch data;
  NoGrad no_grad;
  const auto logits = model.logits(model.hidden(data.input(), HybridLM::documents(data.ids, data.batch, data.seq, data.bos)))
                          .value()
                          .to_host();  // (batch, seq, vocab)
  auto lm_cache = model.make_cache(data.batch, data.seq);
  double worst = 0, scale = 0;
  for (index_t t = 0; t < data.seq; ++t) {
    const auto step = model.step_logits({data.ids[t], data.ids[data.seq + t]}, lm_cache, data.bos).value().to_host();
    for (index_t b = 0; b < data.batch; ++b)
      for (index_t v = 0; v < kHybridDims.vocab; ++v) {
        const double reference = logits[(b * data.seq + t) * kHybridDims.vocab + v];
        worst = std::max(worst, std::abs(step[b * kHybridDims.vocab + v] - reference));
        scale = std::max(scale, std::abs(reference));
      }
  }
  INFO("max |step - forward| " << worst << " for logits up to " << scale);
  CHECK(worst <= 1e-5 * scale);
}
