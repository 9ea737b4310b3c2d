// The 'E' letter in a model: an "AEM" LM builds Block<NoMixer, MoE> for E, trains (forward,
// backward, the balance loss under its scoped name), generates, and passes the whole-model
// document-masking check bitwise under both routing policies and under Bf16Mixed (the experts'
// bf16 grouped products). A capacity-dropping variant of the
// same layer (test-only: the library never drops) must fail that check.
#include "support/masking_testing.hpp"

#include <cmath>

#include "data/temp_dir.hpp"
#include "megacpp/io.hpp"
#include "megacpp/optim.hpp"

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

namespace {
inline constexpr Dims kDims{.d_model = 32, .n_layers = 3, .vocab = 64, .max_seq = 128};
inline constexpr AttentionSizes kAttention{.n_heads = 4, .n_kv_heads = 1};
inline constexpr MambaSizes kMamba{.d_state = 8, .headdim = 16, .expand = 2};
inline constexpr MoESizes kMoE{.experts = 4, .top_k = 2, .expert_hidden = 24, .shared_experts = 1};
template <class T, class Routing = SoftmaxTopK>
using AemLM = RecipeMoELM<T, Cpu, kDims, "AEM", kAttention, kMamba, kMoE, Routing>;

// Switch Transformer's capacity rule (Fedus et al. 2021, sec. 2.2), for this test only: each expert
// takes at most capacity = ceil(factor * tokens * k / E) of the step's (token, slot) pairs, in token
// order; a pair beyond it is dropped (its gate is 0, as if the expert had not run for it). Whether a
// token is dropped depends on how many tokens earlier in the batch, of any document, chose the
// same expert: the dependence the masking invariant forbids.
struct CapacityDroppingTopK {
  static constexpr const char* name = "capacity_dropping_topk";
  double capacity_factor = 1.0;
  void reset(index_t) {}
  template <class T, Backend B>
  RouteDecision<T, B> route(const Var<T, B>& logits, index_t k) const {
    RouteDecision<T, B> d = SoftmaxTopK{}.route(logits, k);
    const index_t tokens = logits.shape()[0], experts = logits.shape()[1];
    const std::vector<std::int32_t> chosen = DispatchPlan<B>::route(d.scores.value(), nullptr, k).selected_experts();
    d.choose_by = d.scores.value();  // the experts stay those chosen here; the dropped pairs' gates become 0
    const auto capacity = static_cast<index_t>(std::ceil(capacity_factor * static_cast<double>(tokens * k) / static_cast<double>(experts)));
    std::vector<index_t> used(static_cast<std::size_t>(experts), 0);
    std::vector<T> keep(static_cast<std::size_t>(tokens * experts), T(1));
    for (index_t t = 0; t < tokens; ++t)
      for (index_t j = 0; j < k; ++j) {
        const std::int32_t e = chosen[static_cast<std::size_t>(t * k + j)];
        if (++used[e] > capacity) keep[t * experts + e] = T(0);
      }
    d.scores = mul(d.scores, Var<T, B>(Tensor<T, B>::from_host(Shape{tokens, experts}, keep)));
    d.normalize = false;  // a token with both slots dropped has no gate sum to divide by
    return d;
  }
};

void check_aem_masking(auto& model) {
  randomise_matrices(model, 21);
  const MaskingBatch data(kDims.vocab);
  MaskingCheckOptions opt;
  opt.bos_id = MaskingBatch::bos;
  opt.vocab = kDims.vocab;
  opt.packed_tolerance = 0.0;  // every MoE step is per token: packed and alone agree bitwise
  const MaskingCheckResult r = check_document_masking(model, data.ids, data.targets, data.batch, data.seq, opt);
  INFO("violation: " << r.violation);
  CHECK(r.ok);
  CHECK(r.documents_checked == static_cast<std::size_t>(MaskingBatch::documents));
  CHECK(r.max_packed_vs_alone == 0.0);
}
}  // namespace

TEST_CASE("'E' letter: an AEM model composes Block<NoMixer, MoE>, with named parameters", "[moe][model]") {
  using M = AemLM<double>;
  static_assert(std::is_same_v<M::block_type<1>, Block<NoMixer<double, Cpu>, MoE<double, Cpu, SoftmaxTopK>>>);
  static_assert(!M::block_type<1>::has_mixer && M::block_type<1>::has_feed_forward);
  static_assert(std::is_same_v<TinyMoELM<float, Cpu>::block_type<1>, Block<NoMixer<float, Cpu>, MoE<float, Cpu>>>);
  M model(1);
  std::map<std::string, index_t> sizes;
  model.for_each_param([&](const std::string& n, Param<double, Cpu>& p) { sizes[n] = p.numel(); });
  CHECK(sizes.at("blocks.1.ffn.router.weight") == 4 * 32);
  CHECK(sizes.at("blocks.1.ffn.experts.3.fc.weight") == 24 * 32);
  CHECK(sizes.at("blocks.1.ffn.experts.3.proj.weight") == 32 * 24);
  CHECK(sizes.at("blocks.1.ffn.shared.fc.weight") == 24 * 32);
  CHECK(sizes.count("blocks.1.mixer.wq.weight") == 0);
  index_t moe_params = 0;
  for (const auto& [n, s] : sizes)
    if (n.rfind("blocks.1.", 0) == 0) moe_params += s;
  CHECK(moe_params == 4 * 32 + 4 * 2 * 24 * 32 + 2 * 24 * 32);  // router + 4 experts + 1 shared
  CHECK_THAT(M::type_id(), Contains("E: MoE 4x24 top2 softmax_topk shared 1"));
  model.for_each_param([&](const std::string& n, Param<double, Cpu>& p) {
    if (n.find("router") != std::string::npos) CHECK(p.role == Role::router);
  });
}

TEST_CASE("'E' letter: forward, backward and the balance loss of an AEM model", "[moe][model]") {
  TinyMoELM<float, Cpu> model(2);
  randomise_matrices(model, 3, 0.05);
  const MaskingBatch data(kTinyDims.vocab);
  const auto docs = TinyMoELM<float, Cpu>::documents(data.ids, data.batch, data.seq, MaskingBatch::bos);
  const auto ids = CpuTensor<std::int32_t>::from_host({data.batch, data.seq}, data.ids);
  const auto targets = CpuTensor<std::int32_t>::from_host({data.batch, data.seq}, data.targets);
  const auto mask = CpuTensor<float>::full({data.batch, data.seq}, 1.0f);
  const auto losses = model.losses(ids, targets, mask, docs);
  REQUIRE(losses.aux.size() == 1);
  CHECK(losses.aux[0].name == "blocks.1.ffn.balance");
  CHECK(losses.aux[0].loss.item() > 0.0f);
  CHECK(losses.total.item() == Approx(losses.main.item() + 0.01 * losses.aux[0].loss.item()).epsilon(1e-6));
  backward(losses.total);
  int with_grad = 0, params = 0;
  model.for_each_param([&](const std::string&, Param<float, Cpu>& p) {
    ++params;
    with_grad += p.var.grad().defined() ? 1 : 0;
  });
  CHECK(with_grad == params);
  const auto& block = std::get<1>(model.blocks);
  CHECK(block.ffn.last_load().assignments == data.batch * data.seq * 2);
  CHECK(block.ffn.last_load().max_fraction() >= 0.25);
}

TEST_CASE("'E' letter: decoding one token at a time gives the forward's logits", "[moe][model][generation]") {
  AemLM<double> model(4);
  randomise_matrices(model, 5);
  const std::vector<std::int32_t> ids{1, 7, 9, 3, 12};
  const auto docs = AemLM<double>::documents(ids, 1, 5, 1);
  const auto full = model.logits(model.hidden(CpuTensor<std::int32_t>::from_host({1, 5}, ids), docs)).value().to_host();
  auto cache = model.make_cache(1, 8);
  std::vector<double> last;
  for (std::int32_t id : ids) last = model.step_logits({id}, cache, 1).value().to_host();
  for (index_t v = 0; v < kDims.vocab; ++v) CHECK(last[v] == Approx(full[4 * kDims.vocab + v]).margin(1e-10));
}

TEST_CASE("'E' letter: an AEM model passes the document-masking check bitwise (softmax top-k)", "[moe][model][masking]") {
  AemLM<double> model(6);
  check_aem_masking(model);
}

TEST_CASE("'E' letter: an AEM model passes the document-masking check bitwise (sigmoid + bias)", "[moe][model][masking]") {
  AemLM<double, SigmoidBiasTopK> model(7);
  std::get<1>(model.blocks).ffn.routing.bias = {0.2, -0.1, 0.05, 0.0};
  check_aem_masking(model);
}

TEST_CASE("'E' letter under Bf16Mixed: the experts' bf16 grouped products keep the masking check bitwise",
          "[moe][model][masking][precision]") {
  AemLM<float>::with_precision<Bf16Mixed> model(8);
  check_aem_masking(model);
}

TEST_CASE("a capacity-dropping MoE fails the document-masking check", "[moe][model][masking]") {
  AemLM<double, CapacityDroppingTopK> model(8);
  CHECK_THAT(model.type_id(), Contains("E: MoE 4x24 top2 capacity_dropping_topk"));
  randomise_matrices(model, 21);
  const MaskingBatch data(kDims.vocab);
  MaskingCheckOptions opt;
  opt.bos_id = MaskingBatch::bos;
  opt.vocab = kDims.vocab;
  opt.packed_tolerance = 0.0;
  const MaskingCheckResult r = check_document_masking(model, data.ids, data.targets, data.batch, data.seq, opt);
  INFO("violation: " << r.violation);
  CHECK_FALSE(r.ok);
  // The MoE block (layer 2; 0 is the embedding) is where it breaks: a token's output depends on
  // which other tokens of the batch filled its expert first.
  CHECK_THAT(r.violation, Contains("layer 2 (0 = embedding)"));
}

TEST_CASE("'E' letter: the hybrid optimiser gives the router to AdamW and each expert matrix to Muon", "[moe][model][optim]") {
  TinyMoELM<float, Cpu> model(9);
  optim::Hybrid<float, Cpu> opt(model, optim::HybridOptions{});
  int routers = 0, experts = 0;
  for (const auto& r : opt.routes()) {
    if (r.name.find(".router.") != std::string::npos) {
      ++routers;
      CHECK(r.optimizer == optim::OptimizerKind::adamw);
      CHECK(r.group.rfind("adamw.router", 0) == 0);
    }
    if (r.name.find(".experts.") != std::string::npos) {
      ++experts;
      CHECK(r.optimizer == optim::OptimizerKind::muon);
      CHECK(r.shape.rank() == 2);
    }
  }
  CHECK(routers == 1);
  CHECK(experts == 2 * kTinyMoE.experts);
  // one training step runs: forward, backward, both optimisers
  const MaskingBatch data(kTinyDims.vocab);
  const auto docs = TinyMoELM<float, Cpu>::documents(data.ids, data.batch, data.seq, MaskingBatch::bos);
  const auto ids = CpuTensor<std::int32_t>::from_host({data.batch, data.seq}, data.ids);
  const auto targets = CpuTensor<std::int32_t>::from_host({data.batch, data.seq}, data.targets);
  const auto mask = CpuTensor<float>::full({data.batch, data.seq}, 1.0f);
  const std::vector<float> before = std::get<1>(model.blocks).ffn.router.proj.weight.value().to_host();
  backward(model.loss(ids, targets, mask, docs));
  opt.step();
  CHECK(std::get<1>(model.blocks).ffn.router.proj.weight.value().to_host() != before);
}

TEST_CASE("'E' letter: a sigmoid router's balancing bias is saved and loaded with the weights", "[moe][model][checkpoint]") {
  TempDir dir;
  AemLM<float, SigmoidBiasTopK> source(7);
  std::get<1>(source.blocks).ffn.routing.bias = {0.25, -0.125, 0.0625, -0.5};
  io::save_model(dir / "model.safetensors", source, source.type_id());
  const io::SafetensorsReader reader(dir / "model.safetensors");
  CHECK(reader.entry("blocks.1.ffn.routing.bias").dtype == "F64");

  AemLM<float, SigmoidBiasTopK> loaded(8);
  io::load_model(dir / "model.safetensors", loaded, loaded.type_id());
  CHECK(std::get<1>(loaded.blocks).ffn.routing.bias == std::vector<double>{0.25, -0.125, 0.0625, -0.5});

  // A checkpoint without the bias (a softmax-routed model's) is refused by name, the model unchanged.
  AemLM<float> softmax_model(9);
  io::save_model(dir / "softmax.safetensors", softmax_model, loaded.type_id());
  CHECK_THROWS_WITH(io::load_model(dir / "softmax.safetensors", loaded, loaded.type_id()),
                    Contains("blocks.1.ffn.routing.bias"));
  CHECK(std::get<1>(loaded.blocks).ffn.routing.bias[3] == -0.5);
}
