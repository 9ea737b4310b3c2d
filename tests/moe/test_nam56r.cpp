// The NAM56R-shaped model type: its 56 layers have the letter counts of the recipe's backbone (13
// attention, 27 Mamba-3, 12 MoE, 4 M2RNN), every letter composes in one LM, the parameter count of
// each letter is pinned, and the whole model trains a step and keeps documents apart.
#include "support/masking_testing.hpp"

#include <map>

using namespace megacpp;
using namespace megacpp::testing;

namespace {
using Nam = Nam56rTinyLM<float, Cpu>;

// Parameters per letter: each "blocks.<i>." parameter counts for layer i's letter.
std::map<char, index_t> parameters_per_letter(Nam& model) {
  std::map<char, index_t> count;
  model.for_each_param([&](const std::string& name, Param<float, Cpu>& p) {
    if (name.rfind("blocks.", 0) != 0) {
      count['-'] += p.numel();  // the tied embedding
      return;
    }
    const std::size_t layer = std::stoul(name.substr(7, name.find('.', 7) - 7));
    count[kNam56rPattern[layer]] += p.numel();
  });
  return count;
}
// Parameters of one block built by letter L's recipe on its own.
template <class L>
index_t block_parameters() {
  Rng rng(0);
  auto block = L::template factory<float, Cpu, kNam56rTinyDims>::make(rng);
  index_t n = 0;
  block.for_each_param([&](const std::string&, Param<float, Cpu>& p) { n += p.numel(); });
  return n;
}
}  // namespace

TEST_CASE("NAM56R: 56 layers with the backbone's letter counts", "[moe][model][nam56r]") {
  STATIC_REQUIRE(kNam56rPattern.size() == 56);
  STATIC_REQUIRE(Nam::dims.n_layers == 56);
  std::map<char, int> layers;
  for (std::size_t i = 0; i < kNam56rPattern.size(); ++i) ++layers[kNam56rPattern[i]];
  CHECK(layers == std::map<char, int>{{'A', 13}, {'E', 12}, {'M', 27}, {'R', 4}});
  // Each quarter closes with the recurrent tail.
  for (std::size_t q = 0; q < 4; ++q) CHECK(kNam56rPattern[14 * q + 13] == 'R');
}

TEST_CASE("NAM56R: the parameter count of each letter is pinned", "[moe][model][nam56r]") {
  Nam model(1);
  const auto count = parameters_per_letter(model);
  // One block of each letter at d_model 64 (its mixer and, for A, M and R, a 4 d MLP):
  //   A: q 64x64, k and v 16x64 each, o 64x64, MLP 2 x 64x256                 -> 43,008
  //   E: router 4x64, 4 experts of 2 x 64x128 (4 d / top_k)                   -> 65,792
  //   M, R: the Mamba-3 and M2RNN layers' own parameters plus the same MLP (pinned as built:
  //   a change to either layer's parameters shows here).
  CHECK(count.at('-') == 264 * 64);
  CHECK(count.at('A') == 13 * 43008);
  CHECK(count.at('E') == 12 * 65792);
  const index_t mamba = block_parameters<Mamba3Letter<kTinyMamba>>();
  const index_t m2rnn = block_parameters<M2RNNLetter<kTinyM2RNN>>();
  CHECK(block_parameters<AttentionLetter<kTinyAttention>>() == 43008);
  CHECK(block_parameters<MoELetter<kTinyMoE>>() == 65792);
  CHECK(mamba == 60584);  // Mamba-3 SISO N16 P32 x2 (in_proj, conv, dt/A/D, norms, out_proj) + MLP
  CHECK(m2rnn == 55624);  // M2RNN 4 heads of 16 x 16 (in_proj, conv, W, A/dt/D, gate norm, out_proj) + MLP
  CHECK(count.at('M') == 27 * mamba);
  CHECK(count.at('R') == 4 * m2rnn);
  index_t total = 0;
  for (const auto& [letter, n] : count) total += n;
  INFO(model.summary());
  CHECK(total == 264 * 64 + 13 * 43008 + 12 * 65792 + 27 * mamba + 4 * m2rnn);
}

TEST_CASE("NAM56R: a training step is finite and reaches every parameter; documents stay apart", "[moe][model][nam56r]") {
  Nam model(2);
  randomise_matrices(model, 5);
  const MaskingBatch data(kNam56rTinyDims.vocab);
  MaskingCheckOptions opt;
  opt.bos_id = MaskingBatch::bos;
  opt.vocab = kNam56rTinyDims.vocab;
  opt.packed_tolerance = 1e-4;  // fp32: the documented GEMM rounding between packed and alone
  const MaskingCheckResult r = check_document_masking(model, data.ids, data.targets, data.batch, data.seq, opt);
  INFO("violation: " << r.violation);
  CHECK(r.ok);
}
