// Whole-model composition: types from Dims + Pattern, names and roles, determinism, and the
// document-masking invariants of a packed "AAM" hybrid checked by the library's checker.
#include "support/op_testing.hpp"

#include "megacpp/nn/model.hpp"
#include "megacpp/optim.hpp"

#include <algorithm>
#include <map>

using namespace megacpp;
using Catch::Matchers::Contains;

namespace {
// Small enough for double-precision checks (and the sanitizer run), every letter present.
inline constexpr Dims kTestDims{.d_model = 32, .n_layers = 3, .vocab = 64, .max_seq = 512};
inline constexpr AttentionSizes kTestAttention{.n_heads = 4, .n_kv_heads = 1};
inline constexpr MambaSizes kTestMamba{.d_state = 8, .headdim = 16, .expand = 2};
using TestLM = RecipeLM<double, Cpu, kTestDims, "AAM", kTestAttention, kTestMamba>;
constexpr std::int32_t kBos = 1;

// Output projections start at zero (blocks are the identity at init); give them weights so the
// checks exercise every mixer.
void randomise_zero_init(TestLM& model) {
  Rng rng(99);
  model.for_each_param([&](const std::string&, Param<double, Cpu>& p) {
    if (p.role == Role::matrix) p.var.mutable_value().assign(randn<double, Cpu>(p.shape(), rng, 0.2));
  });
}

// Two rows of packed documents of varied lengths, one row starting mid-document.
void packed_batch(std::vector<std::int32_t>& ids, std::vector<std::int32_t>& targets, index_t batch, index_t seq) {
  Rng rng(5);
  ids.assign(static_cast<std::size_t>(batch * seq), 0);
  targets = ids;
  const std::vector<index_t> starts_row0{0, 7, 8, 20}, starts_row1{5, 6, 19};
  for (index_t b = 0; b < batch; ++b)
    for (index_t t = 0; t < seq; ++t) {
      const auto& starts = b == 0 ? starts_row0 : starts_row1;
      const bool bos = std::find(starts.begin(), starts.end(), t) != starts.end();
      ids[b * seq + t] = bos ? kBos : static_cast<std::int32_t>(2 + rng.below(62));
      targets[b * seq + t] = static_cast<std::int32_t>(2 + rng.below(62));
    }
}
// A model whose one mixer leaks: every position sees the mean of the whole row.
struct LeakyModel {
  using value_type = double;
  using backend_type = Cpu;
  Var<double, Cpu> table;
  std::vector<Var<double, Cpu>> trace(const CpuTensor<std::int32_t>& ids, const DocumentLayout<Cpu>&) const {
    std::vector<Var<double, Cpu>> out{embedding(table, ids)};
    const index_t seq = ids.shape()[1];
    const Var<double, Cpu> all_pairs(CpuTensor<double>::full({seq, seq}, 1.0 / static_cast<double>(seq)));
    out.push_back(out.back() + matmul(all_pairs, out.back()));  // (seq, seq) x (batch, seq, d)
    return out;
  }
  Var<double, Cpu> per_token_loss_from(const Var<double, Cpu>& x, const CpuTensor<std::int32_t>& targets) const {
    return cross_entropy_per_token(matmul(x, table, false, true), targets);
  }
};
}  // namespace

TEST_CASE("LM: the pattern fixes the block types, names, roles and summary", "[model]") {
  static_assert(std::is_same_v<TestLM::block_type<0>, Block<GQA<double, Cpu>>>);
  static_assert(std::is_same_v<TestLM::block_type<2>, Block<Mamba3<double, Cpu>>>);
  static_assert(!std::is_same_v<TinyLM<float, Cpu>, CMake100M<float, Cpu>>, "each specialist size is its own type");
  TestLM model(1);
  std::vector<std::string> names;
  std::map<Role, int> roles;
  model.for_each_param([&](const std::string& n, Param<double, Cpu>& p) {
    names.push_back(n);
    ++roles[p.role];
  });
  CHECK(names.front() == "embedding.weight");
  CHECK(std::find(names.begin(), names.end(), "blocks.0.mixer.wq.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "blocks.2.mixer.in_proj.weight") != names.end());
  CHECK(std::find(names.begin(), names.end(), "blocks.2.ffn.proj.weight") != names.end());
  CHECK(roles[Role::embedding] == 1);
  CHECK(roles[Role::matrix] == 2 * 6 + 4);  // 2 x (wq wk wv wo fc proj) + (in_proj out_proj fc proj)
  const std::string summary = model.summary();
  INFO(summary);
  CHECK_THAT(summary, Contains("LM \"AAM\" d_model 32 layers 3 vocab 64"));
  CHECK_THAT(summary, Contains("embedding: 2048"));
  // the type id names each distinct letter's own sizes once, in pattern order
  CHECK(TestLM::type_id() ==
        "F64 LM \"AAM\" d_model 32 layers 3 vocab 64 max_seq 512; A: GQA heads 4/1 head_dim 8 window 0 mlp 128; "
        "M: Mamba3 SISO N8 P16 x2 mlp 128 A heavy-tail");
}

TEST_CASE("LM: initialisation and forward are bitwise deterministic for a seed", "[model][determinism]") {
  TestLM a(7), b(7), c(8);
  std::vector<std::vector<double>> pa, pb, pc;
  a.for_each_param([&](const std::string&, Param<double, Cpu>& p) { pa.push_back(p.value().to_host()); });
  b.for_each_param([&](const std::string&, Param<double, Cpu>& p) { pb.push_back(p.value().to_host()); });
  c.for_each_param([&](const std::string&, Param<double, Cpu>& p) { pc.push_back(p.value().to_host()); });
  CHECK(pa == pb);
  CHECK(pa != pc);
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets, 2, 24);
  const auto docs = TestLM::documents(ids, 2, 24, kBos);
  const auto in = CpuTensor<std::int32_t>::from_host({2, 24}, ids), tg = CpuTensor<std::int32_t>::from_host({2, 24}, targets);
  const auto mask = CpuTensor<double>::full({2, 24}, 1.0);
  CHECK(a.loss(in, tg, mask, docs).item() == b.loss(in, tg, mask, docs).item());
}

TEST_CASE("LM: whole-model document masking invariants on a packed AAM hybrid (bitwise)", "[model][masking]") {
  TestLM model(3);
  randomise_zero_init(model);
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets, 2, 24);
  MaskingCheckOptions opt;
  opt.bos_id = kBos;
  opt.vocab = 64;
  opt.packed_tolerance = 0.0;  // a document alone and packed agree bitwise, layer by layer
  const MaskingCheckResult r = check_document_masking(model, ids, targets, 2, 24, opt);
  INFO(r.violation);
  CHECK(r.ok);
  CHECK(r.documents_checked == 8);
  CHECK(r.max_packed_vs_alone == 0.0);
}

TEST_CASE("LM: a pattern letter builds Mamba-3 MIMO; forward, backward and document masking of the model", "[model][masking]") {
  // RecipeMIMOLetters: 'M' is Mamba3<T, B, MIMO<R>> (rank 2 here, the heavy-tail A by default)
  using MimoLM = RecipeMIMOLM<double, Cpu, kTestDims, "AMM", kTestAttention, kTestMamba, 2>;
  static_assert(std::is_same_v<MimoLM::block_type<1>, Block<Mamba3<double, Cpu, MIMO<2>>>>);
  static_assert(std::is_same_v<MimoLM::block_type<2>, Block<Mamba3<double, Cpu, MIMO<2>, HeavyTailA>>>);
  CHECK_THAT(MimoLM::type_id(), Contains("M: Mamba3 MIMO2 N8 P16 x2 mlp 128 A heavy-tail"));
  MimoLM model(12);
  Rng rng(98);
  model.for_each_param([&](const std::string&, Param<double, Cpu>& p) {
    if (p.role == Role::matrix) p.var.mutable_value().assign(randn<double, Cpu>(p.shape(), rng, 0.2));
  });
  std::vector<std::string> names;
  model.for_each_param([&](const std::string& n, Param<double, Cpu>&) { names.push_back(n); });
  for (const char* n : {"blocks.1.mixer.mimo_x", "blocks.1.mixer.mimo_z", "blocks.1.mixer.mimo_o", "blocks.2.mixer.mimo_o"})
    CHECK(std::find(names.begin(), names.end(), n) != names.end());
  // forward and backward: the loss is finite and every parameter, the MIMO projections included, gets a gradient
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets, 2, 24);
  const auto docs = MimoLM::documents(ids, 2, 24, kBos);
  const auto in = CpuTensor<std::int32_t>::from_host({2, 24}, ids), tg = CpuTensor<std::int32_t>::from_host({2, 24}, targets);
  const auto loss = model.loss(in, tg, CpuTensor<double>::full({2, 24}, 1.0), docs);
  CHECK(std::isfinite(loss.item()));
  backward(loss);
  model.for_each_param([&](const std::string& n, Param<double, Cpu>& p) {
    INFO(n);
    REQUIRE(p.grad().defined());
    double norm = 0;
    for (double g : p.grad().to_host()) norm += g * g;
    CHECK(norm > 0);
  });
  // the whole-model masking invariants, bitwise, as for the SISO hybrid
  MaskingCheckOptions opt;
  opt.bos_id = kBos;
  opt.vocab = 64;
  opt.packed_tolerance = 0.0;
  const MaskingCheckResult r = check_document_masking(model, ids, targets, 2, 24, opt);
  INFO(r.violation);
  CHECK(r.ok);
  CHECK(r.documents_checked == 8);
}

TEST_CASE("check_document_masking reports the first violating layer and position", "[model][masking]") {
  LeakyModel leaky;
  Rng rng(1);
  leaky.table = Var<double, Cpu>::parameter(randn<double, Cpu>({64, 8}, rng));
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets, 2, 24);
  const MaskingCheckResult r = check_document_masking(leaky, ids, targets, 2, 24, MaskingCheckOptions{kBos, 64});
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.violation, Contains("changing another document changed this one: layer 1"));
}

TEST_CASE("LM: the fused loss equals the per-token path and gradients reach every parameter", "[model]") {
  TestLM model(4);
  randomise_zero_init(model);
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets, 2, 24);
  const auto docs = TestLM::documents(ids, 2, 24, kBos);
  const auto in = CpuTensor<std::int32_t>::from_host({2, 24}, ids), tg = CpuTensor<std::int32_t>::from_host({2, 24}, targets);
  const auto mask = CpuTensor<double>::full({2, 24}, 1.0);
  const auto fused = model.loss(in, tg, mask, docs);
  const auto per_token = model.per_token_loss(in, tg, docs).value().to_host();
  double mean_loss = 0;
  for (double l : per_token) mean_loss += l / static_cast<double>(per_token.size());
  CHECK(fused.item() == Approx(mean_loss).epsilon(1e-12));
  backward(fused);
  model.for_each_param([&](const std::string& n, Param<double, Cpu>& p) {
    INFO(n);
    CHECK(p.grad().defined());
  });
}

TEST_CASE("LM: the initial loss on random tokens is ln(vocab), not a bet on repeating the input", "[model][init]") {
  // Identity blocks at step 0 make the hidden state RMSNorm(E[t]); the embedding's scale
  // (LM::kEmbeddingStd) decides how strongly the tied head predicts the input token again.
  using Tiny = TinyLM<float, Cpu>;
  const Tiny model(3);
  const index_t batch = 4, seq = 64;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * seq)), targets(ids.size());
  Rng rng(5);
  for (auto& t : ids) t = static_cast<std::int32_t>(rng.below(256));
  for (auto& t : targets) t = static_cast<std::int32_t>(rng.below(256));
  const auto docs = Tiny::documents(ids, batch, seq, 256);
  const auto in = CpuTensor<std::int32_t>::from_host({batch, seq}, ids), tg = CpuTensor<std::int32_t>::from_host({batch, seq}, targets);
  const auto mask = CpuTensor<float>::from_host({batch, seq}, std::vector<float>(ids.size(), 1.0f));
  const double loss = model.loss(in, tg, mask, docs).item();
  CHECK(std::abs(loss - std::log(static_cast<double>(kTinyDims.vocab))) < 0.1);
}

TEST_CASE("LM: a tiny hybrid overfits a fixed packed batch (training works end to end)", "[model][train]") {
  using SmallLM = RecipeLM<float, Cpu, kTestDims, "AAM", kTestAttention, kTestMamba>;
  SmallLM model(11);
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets, 2, 24);
  for (std::size_t i = 0; i + 1 < ids.size(); ++i) targets[i] = ids[i + 1];  // next-token targets
  const auto docs = SmallLM::documents(ids, 2, 24, kBos);
  const auto in = CpuTensor<std::int32_t>::from_host({2, 24}, ids), tg = CpuTensor<std::int32_t>::from_host({2, 24}, targets);
  // The token after BOS cannot be predicted: masking keeps each document blind to the others,
  // so all documents' BOS look alike. Those targets are left out with the loss mask.
  std::vector<float> mask_host(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) mask_host[i] = ids[i] == kBos ? 0.0f : 1.0f;
  const auto mask = CpuTensor<float>::from_host({2, 24}, mask_host);
  optim::HybridOptions o;
  o.muon.lr = 0.02;
  o.adamw.lr = 0.01;
  optim::Hybrid<float, Cpu> opt(model, o);
  float first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    const auto loss = model.loss(in, tg, mask, docs);
    if (step == 0) first = loss.item();
    last = loss.item();
    backward(loss);
    [[maybe_unused]] const auto clip = optim::clip_grad_norm(opt.params(), 1.0);
    opt.step();
    opt.zero_grad();
  }
  INFO("loss " << first << " -> " << last);
  CHECK(first > 3.0f);
  CHECK(last < 0.05f);
}
