// Multi-token prediction of depth 1 (nn/model/mtp.hpp): gradients in double, the rolled and
// document-masked targets, document isolation (bitwise), lambda = 0 and the model without MTP
// bit for bit, roles and Muon's refusal, generation, checkpoints and bad weights.
#include "support/op_testing.hpp"

#include "megacpp/io/checkpoint.hpp"
#include "megacpp/nn/model.hpp"
#include "megacpp/optim.hpp"
#include "megacpp/train/mtp_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

using namespace megacpp;
using namespace megacpp::testing;
using Catch::Matchers::Contains;

namespace {
inline constexpr Dims kMtpDims{.d_model = 16, .n_layers = 2, .vocab = 32, .max_seq = 256};
inline constexpr AttentionSizes kMtpAttention{.n_heads = 2, .n_kv_heads = 1, .mlp_hidden = 32};
inline constexpr MambaSizes kMtpMamba{.d_state = 8, .headdim = 8, .expand = 2};
using Letters2 = RecipeLetters<kMtpAttention, kMtpMamba>;
template <class T>
using PlainLM = LM<T, Cpu, kMtpDims, Pattern<"AM">, Letters2>;
template <class T>
using MtpLM = LM<T, Cpu, kMtpDims, Pattern<"AM">, Letters2, HeadSoftcap<30>, MtpDepth1<'A'>>;
constexpr std::int32_t kBos = 1;
constexpr index_t kBatch = 2, kSeq = 16;

// Zero-initialised output projections get weights, so every path carries a gradient.
template <class Model>
void randomise_zero_init(Model& model) {
  Rng rng(99);
  model.for_each_param([&](const std::string&, auto& p) {
    if (p.shape().rank() == 2 && p.role != Role::embedding)
      p.var.mutable_value().assign(randn<typename Model::value_type, Cpu>(p.shape(), rng, 0.3));
  });
}

// Row 0: documents at 0, 5, 6 (a one-token document) and 11; row 1 starts mid-document, BOS at 7.
// targets are the next tokens (the last one of a row is drawn).
void packed_batch(std::vector<std::int32_t>& ids, std::vector<std::int32_t>& targets, std::uint64_t seed = 5) {
  Rng rng(seed);
  ids.assign(static_cast<std::size_t>(kBatch * kSeq), 0);
  const std::vector<std::vector<index_t>> starts{{0, 5, 6, 11}, {7}};
  for (index_t b = 0; b < kBatch; ++b)
    for (index_t t = 0; t < kSeq; ++t) {
      const auto& s = starts[static_cast<std::size_t>(b)];
      ids[static_cast<std::size_t>(b * kSeq + t)] =
          std::find(s.begin(), s.end(), t) != s.end() ? kBos : static_cast<std::int32_t>(2 + rng.below(30));
    }
  targets.assign(ids.size(), 0);
  for (index_t b = 0; b < kBatch; ++b)
    for (index_t t = 0; t < kSeq; ++t) {
      const auto i = static_cast<std::size_t>(b * kSeq + t);
      targets[i] = t + 1 < kSeq ? ids[i + 1] : static_cast<std::int32_t>(2 + rng.below(30));
    }
}

template <class T>
struct Batch {
  std::vector<std::int32_t> ids_host, targets_host;
  CpuTensor<std::int32_t> ids, targets;
  CpuTensor<T> mask;
  DocumentLayout<Cpu> docs;
  Batch(std::vector<std::int32_t> i, std::vector<std::int32_t> t, std::vector<T> m)
      : ids_host(std::move(i)), targets_host(std::move(t)),
        ids(CpuTensor<std::int32_t>::from_host({kBatch, kSeq}, ids_host)),
        targets(CpuTensor<std::int32_t>::from_host({kBatch, kSeq}, targets_host)),
        mask(CpuTensor<T>::from_host({kBatch, kSeq}, m)),
        docs(DocumentLayout<Cpu>::from_tokens(ids_host, kBatch, kSeq, kBos)) {}
};

template <class Model>
std::vector<std::vector<typename Model::value_type>> gradients(Model& model) {
  std::vector<std::vector<typename Model::value_type>> out;
  model.for_each_param([&](const std::string&, auto& p) {
    out.push_back(p.grad().defined() ? p.grad().to_host() : std::vector<typename Model::value_type>{});
  });
  return out;
}

template <class Model>
void zero_grads(Model& model) {
  model.for_each_param([&](const std::string&, auto& p) { p.var.zero_grad(); });
}
}  // namespace

TEST_CASE("MTP: targets are x_{t+2}, masked where x_{t+1} or x_{t+2} leaves t's document or the row", "[model][mtp]") {
  // one row, documents [0, 5), [5, 6), [6, 10): BOS at 0, 5, 6
  const std::vector<std::int32_t> ids{1, 10, 11, 12, 13, 1, 1, 20, 21, 22};
  std::vector<std::int32_t> targets(ids.begin() + 1, ids.end());
  targets.push_back(30);
  const auto docs = DocumentLayout<Cpu>::from_tokens(ids, 1, 10, kBos);
  const MtpTargets r = mtp_targets(targets, {}, docs);
  CHECK(r.targets == std::vector<std::int32_t>{11, 12, 13, 1, 1, 20, 21, 22, 0, 0});
  // t = 0..2 learn 11, 12, 13; t = 3 (x_5 = BOS) and t = 4 (x_5 is the next document) do not; t = 5
  // is a one-token document; t = 6, 7 learn 21, 22; t = 8, 9 run off the row
  CHECK(r.mask == std::vector<float>{1, 1, 1, 0, 0, 0, 1, 1, 0, 0});
  CHECK(r.learned == 5);
  // the main loss mask of x_{t+2} (loss_mask_{t+1}) applies too
  std::vector<float> loss_mask(10, 1.0f);
  loss_mask[2] = 0;
  CHECK(mtp_targets(targets, loss_mask, docs).mask == std::vector<float>{1, 0, 1, 0, 0, 0, 1, 1, 0, 0});
  CHECK_THROWS_WITH(mtp_targets(std::vector<std::int32_t>(9, 0), {}, docs), Contains("targets hold 9"));
}

TEST_CASE("MTP: gradcheck of the depth-1 module in double (W_p, the block, the tied embedding, h)", "[model][mtp][gradcheck]") {
  MtpLM<double> model(3);
  randomise_zero_init(model);
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets);
  Batch<double> batch(ids, targets, std::vector<double>(ids.size(), 1.0));
  auto h = random_param({kBatch, kSeq, kMtpDims.d_model}, 17);
  std::vector<Var<double, Cpu>> inputs{h, model.embedding.var, model.mtp.proj.weight.var};
  model.mtp.block.for_each_param([&](const std::string&, Param<double, Cpu>& p) { inputs.push_back(p.var); });
  require_gradcheck("mtp", [&](auto& in) {
    return model.mtp.loss(in[0], in[1], batch.targets, batch.mask, batch.docs, model.norm_eps, model.head);
  }, inputs);
}

TEST_CASE("MTP: lambda = 0 skips the module; without MTP the model is bit for bit the plain LM", "[model][mtp]") {
  PlainLM<float> plain(7);
  MtpLM<float> with_mtp(7);
  static_assert(!PlainLM<float>::has_mtp && MtpLM<float>::has_mtp);
  static_assert(std::is_empty_v<PlainLM<float>::mtp_type>);
  static_assert(std::is_same_v<PlainLM<float>, LM<float, Cpu, kMtpDims, Pattern<"AM">, Letters2, HeadSoftcap<30>, NoMtp>>);
  CHECK(PlainLM<float>::type_id().find("MTP") == std::string::npos);
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets);
  Batch<float> batch(ids, targets, std::vector<float>(ids.size(), 1.0f));

  // the trunk's weights are drawn first: the same seed gives the same trunk
  with_mtp.mtp.set_weight(0.0);
  const auto lp = plain.losses(batch.ids, batch.targets, batch.mask, batch.docs);
  const auto lm = with_mtp.losses(batch.ids, batch.targets, batch.mask, batch.docs);
  CHECK(lm.aux.empty());
  CHECK(lp.total.item() == lm.total.item());
  backward(lp.total);
  backward(lm.total);
  std::vector<std::vector<float>> gp = gradients(plain), gm;
  std::size_t mtp_params = 0, mtp_grads = 0;
  with_mtp.for_each_param([&](const std::string& name, Param<float, Cpu>& p) {
    if (name.rfind("mtp.", 0) == 0) {
      ++mtp_params;
      mtp_grads += p.grad().defined();
    } else {
      gm.push_back(p.grad().to_host());
    }
  });
  CHECK(mtp_params > 0);
  CHECK(mtp_grads == 0);  // no graph was built through the module
  CHECK(gp == gm);

  // lambda > 0: total = main + lambda * mtp, the entry named "mtp"
  with_mtp.mtp.set_weight(0.3);
  const auto l3 = with_mtp.losses(batch.ids, batch.targets, batch.mask, batch.docs);
  REQUIRE(l3.aux.size() == 1);
  CHECK(l3.aux[0].name == "mtp");
  CHECK(l3.aux[0].weight == 0.3);
  CHECK(l3.main.item() == lp.main.item());
  CHECK(l3.total.item() == Approx(l3.main.item() + 0.3 * l3.aux[0].loss.item()).epsilon(1e-6));
  zero_grads(with_mtp);
  backward(l3.total);
  with_mtp.for_each_param([&](const std::string& name, Param<float, Cpu>& p) {
    INFO(name);
    CHECK(p.grad().defined());
  });
}

TEST_CASE("MTP: another document's tokens change neither this document's MTP loss nor any gradient (bitwise)",
          "[model][mtp][masking]") {
  MtpLM<double> model(5);
  randomise_zero_init(model);
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets);
  // document B = row 0, tokens [6, 11) ... [11, 16): learn only B = [11, 16) of row 0
  const index_t b_start = 11, b_end = 16;
  std::vector<double> mask(ids.size(), 0.0);
  for (index_t t = b_start; t < b_end; ++t) mask[static_cast<std::size_t>(t)] = 1.0;
  auto run = [&](const std::vector<std::int32_t>& i, const std::vector<std::int32_t>& tg) {
    zero_grads(model);
    Batch<double> batch(i, tg, mask);
    const auto l = model.losses(batch.ids, batch.targets, batch.mask, batch.docs);
    REQUIRE(l.aux.size() == 1);
    const double mtp = l.aux[0].loss.item();
    backward(l.total);
    return std::make_pair(mtp, gradients(model));
  };
  const auto [mtp_a, grads_a] = run(ids, targets);
  CHECK(mtp_a > 0);
  // every other document of row 0 (and row 1) gets new tokens; BOS stay where they are
  std::vector<std::int32_t> ids2 = ids, targets2 = targets;
  Rng rng(42);
  for (std::size_t i = 0; i < ids2.size(); ++i) {
    const auto t = static_cast<index_t>(i % kSeq);
    const bool in_b = i < static_cast<std::size_t>(kSeq) && t >= b_start;
    if (!in_b && ids2[i] != kBos) ids2[i] = static_cast<std::int32_t>(2 + rng.below(30));
  }
  for (std::size_t i = 0; i + 1 < ids2.size(); ++i)
    if ((i + 1) % kSeq != 0) targets2[i] = ids2[i + 1];
  targets2.back() = 3;  // row 1's last target (outside B)
  REQUIRE(ids2 != ids);
  const auto [mtp_b, grads_b] = run(ids2, targets2);
  CHECK(mtp_a == mtp_b);
  CHECK(grads_a == grads_b);
}

TEST_CASE("MTP: a masked position contributes exactly zero gradient", "[model][mtp][masking]") {
  MtpLM<double> model(6);
  randomise_zero_init(model);
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets);
  Batch<double> batch(ids, targets, std::vector<double>(ids.size(), 1.0));
  const MtpTargets rolled = mtp_targets(targets, {}, batch.docs);
  auto h = random_param({kBatch, kSeq, kMtpDims.d_model}, 8);
  const auto loss = model.mtp.loss(h, model.embedding.var, batch.targets, batch.mask, batch.docs, model.norm_eps, model.head);
  backward(loss);
  const std::vector<double> dh = h.grad().to_host();
  std::size_t masked = 0, learned_nonzero = 0;
  for (std::size_t i = 0; i < rolled.mask.size(); ++i) {
    double norm = 0;
    for (index_t c = 0; c < kMtpDims.d_model; ++c) norm += std::abs(dh[i * kMtpDims.d_model + static_cast<std::size_t>(c)]);
    INFO("position " << i);
    if (rolled.mask[i] == 0) {
      ++masked;
      CHECK(norm == 0.0);  // bitwise zero: its target is ignored and no learned position attends to it
    } else {
      learned_nonzero += norm > 0;
    }
  }
  CHECK(masked == 11);
  CHECK(learned_nonzero == static_cast<std::size_t>(rolled.learned));
  // the ids a masked position would learn or embed do not matter
  std::vector<std::int32_t> targets2 = targets;
  targets2[15] = 9;  // row 0's last target: embedded at t = 15 only, learned by no position
  Batch<double> batch2(ids, targets2, std::vector<double>(ids.size(), 1.0));
  const auto loss2 = model.mtp.loss(h, model.embedding.var, batch2.targets, batch2.mask, batch2.docs, model.norm_eps,
                                    model.head);
  CHECK(loss.item() == loss2.item());
}

TEST_CASE("MTP: names, Role::mtp on every module parameter, and Muon refuses them", "[model][mtp][optim]") {
  MtpLM<float> model(1);
  std::vector<std::string> mtp_names;
  model.for_each_param([&](const std::string& name, Param<float, Cpu>& p) {
    if (name.rfind("mtp.", 0) != 0) return;
    mtp_names.push_back(name);
    INFO(name);
    CHECK(p.role == Role::mtp);
  });
  CHECK(mtp_names.front() == "mtp.proj.weight");
  CHECK(std::find(mtp_names.begin(), mtp_names.end(), "mtp.block.mixer.wq.weight") != mtp_names.end());
  CHECK(std::find(mtp_names.begin(), mtp_names.end(), "mtp.block.ffn.fc.weight") != mtp_names.end());
  CHECK(model.mtp.proj.weight.shape() == Shape{16, 32});
  CHECK_THAT(MtpLM<float>::type_id(), Contains("; MTP depth 1 (block of letter A)"));
  CHECK_THAT(model.summary(), Contains("mtp: "));

  // default routing: every MTP parameter under AdamW
  optim::Hybrid<float, Cpu> hybrid(model);
  for (const auto& r : hybrid.routes())
    if (r.role == Role::mtp) CHECK(r.optimizer == optim::OptimizerKind::adamw);
  // routing the MTP matrices to Muon beside the hidden matrices is refused, naming the first one
  optim::HybridOptions o;
  o.route = [](const std::string&, Role r, const Shape& s) {
    return (r == Role::matrix || r == Role::mtp) && s.rank() == 2 ? optim::OptimizerKind::muon : optim::OptimizerKind::adamw;
  };
  o.decays = [](const std::string&, Role, const Shape&) { return false; };
  CHECK_THROWS_WITH((optim::Hybrid<float, Cpu>(model, o)), Contains("'mtp.proj.weight'") && Contains("Role::mtp"));
  // and Muon alone refuses them too
  std::vector<optim::ParamRef<float, Cpu>> refs;
  model.for_each_param([&](const std::string& name, Param<float, Cpu>& p) {
    if (name.rfind("mtp.block.mixer.wq", 0) == 0) refs.push_back(optim::make_param_ref(name, p));
  });
  REQUIRE(refs.size() == 1);
  CHECK_THROWS_WITH((optim::Muon<float, Cpu>(refs)), Contains("'mtp.block.mixer.wq.weight'") && Contains("Role::mtp"));
}

TEST_CASE("MTP: generation ignores the module; checkpoints carry it", "[model][mtp]") {
  PlainLM<float> plain(9);
  MtpLM<float> with_mtp(9);
  auto cp = plain.make_cache(1, 8);
  auto cm = with_mtp.make_cache(1, 8);
  for (const std::int32_t token : {kBos, 5, 6, 7})
    CHECK(plain.step_logits({token}, cp, kBos).value().to_host() == with_mtp.step_logits({token}, cm, kBos).value().to_host());
  CHECK(with_mtp.set_rope_theta(5e5) == 2);  // the trunk's 'A' and the MTP block

  const auto dir = std::filesystem::temp_directory_path() / "megacpp_test_mtp_checkpoint";
  std::filesystem::create_directories(dir);
  const auto file = dir / "model.safetensors";
  with_mtp.mtp.proj.weight.var.mutable_value().fill(0.25f);
  io::save_model(file, with_mtp, MtpLM<float>::type_id());
  MtpLM<float> loaded(10);
  io::load_model(file, loaded, MtpLM<float>::type_id());
  CHECK(loaded.mtp.proj.weight.value().to_host() == with_mtp.mtp.proj.weight.value().to_host());
  CHECK(loaded.mtp.block.mixer.wq.weight.value().to_host() == with_mtp.mtp.block.mixer.wq.weight.value().to_host());
  // a checkpoint without the module does not load into a model with it
  io::save_model(file, plain, MtpLM<float>::type_id());  // even under the same type id: mtp.* is missing
  CHECK_THROWS_WITH(io::load_model(file, loaded, MtpLM<float>::type_id()), Contains("mtp.proj.weight"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("MTP: a negative or non-finite lambda is an error naming the value; the schedule by tokens", "[model][mtp]") {
  MtpLM<float> model(1);
  CHECK(model.mtp.weight() == 0.3);
  CHECK_THROWS_WITH(model.mtp.set_weight(-0.5), Contains("lambda") && Contains("-0.5"));
  CHECK_THROWS_WITH(model.mtp.set_weight(std::numeric_limits<double>::quiet_NaN()), Contains("nan"));
  CHECK_THROWS_WITH(model.mtp.set_weight(std::numeric_limits<double>::infinity()), Contains("inf"));
  CHECK(model.mtp.weight() == 0.3);  // unchanged by the refused values

  const MtpWeightSchedule s{0.3, 0.1, 1000};
  CHECK(s(0) == 0.3);
  CHECK(s(999) == 0.3);
  CHECK(s(1000) == 0.1);
  CHECK(s(1 << 30) == 0.1);
  const auto d = MtpWeightSchedule::deepseek_v3(14800);
  CHECK(d.switch_tokens == 10000);
  CHECK_THROWS_WITH((MtpWeightSchedule{-0.1, 0.1, 0}.validate()), Contains("-0.1"));
  CHECK_THROWS_WITH((MtpWeightSchedule{0.3, std::numeric_limits<double>::infinity(), 0}.validate()), Contains("inf"));
  CHECK_THROWS_WITH((MtpWeightSchedule{0.3, 0.1, -5}.validate()), Contains("-5"));
}

TEST_CASE("LM: ids and targets as BoundedIds and the mask as a LossMask (all made on the host) give the tensor "
          "path's bits, MTP included", "[model][mtp]") {
  MtpLM<float> by_tensor(11), by_bounds(11);
  std::vector<std::int32_t> ids, targets;
  packed_batch(ids, targets);
  std::vector<float> mask(ids.size(), 1.0f);
  for (std::size_t i = 0; i < mask.size(); i += 5) mask[i] = 0.0f;  // some targets not learned
  Batch<float> batch(ids, targets, mask);
  const auto vocab = static_cast<index_t>(kMtpDims.vocab);
  const auto bounded_ids = BoundedIds<Cpu>::from_host("test", Shape{kBatch, kSeq}, ids, vocab, "token");
  const auto bounded_targets = BoundedIds<Cpu>::from_host("test", Shape{kBatch, kSeq}, targets, vocab, "target");
  const auto summed_mask = LossMask<float, Cpu>::from_host("test", Shape{kBatch, kSeq}, mask);
  const auto a = by_tensor.losses(batch.ids, batch.targets, batch.mask, batch.docs);
  const auto b = by_bounds.losses(bounded_ids, bounded_targets, summed_mask, batch.docs);
  REQUIRE(a.aux.size() == 1);
  REQUIRE(b.aux.size() == 1);
  CHECK(a.total.item() == b.total.item());
  CHECK(a.aux[0].loss.item() == b.aux[0].loss.item());
  backward(a.total);
  backward(b.total);
  CHECK(gradients(by_tensor) == gradients(by_bounds));
  CHECK(by_tensor.loss(batch.ids, batch.targets, batch.mask, batch.docs).item() ==
        by_bounds.loss(bounded_ids, bounded_targets, summed_mask, batch.docs).item());
  CHECK(by_tensor.loss(batch.ids, batch.targets, batch.mask, batch.docs).item() ==
        by_bounds.loss(bounded_ids, bounded_targets, batch.mask, batch.docs).item());
  // A bad id is named by the tensor path's check, before any work.
  auto bad = batch.targets.clone();
  bad.data()[3] = static_cast<std::int32_t>(vocab);
  CHECK_THROWS_WITH(by_tensor.losses(batch.ids, bad, batch.mask, batch.docs),
                    Catch::Matchers::Contains("target id " + std::to_string(vocab) + " >= " + std::to_string(vocab)));
}
