// bench_plasticity: what one pass of each plasticity intervention costs on the tiny model
// (TinyLM, "AAM" d64 x 3), next to one training step of the same model.
//
// Configuration: fp32, the trainer's tiny phase-1 step (2 micro-batches of 16 x 256 tokens,
// 8 documents per row, Hybrid Muon + AdamW). Passes (each with its optimiser-state repair):
//   fire_ms_model             FIRE on the attention Q/K projections (what entering phase 2 / 3 does)
//   fire_ms_model_aggressive  FIRE on every 2-D matrix
//   dash_ms_model             DASH over every 2-D matrix with this step's gradients
//   redo_ms_model             ReDo's recycle pass over the 3 MLPs (selection, rewrite, repair), with
//                             tau 0.5 so that it rewrites units: an upper bound of the real pass
//   step_ms / step_ms_redo_hook  a training step without / with ReDo's activation hook recording
// Weights are restored before each timed pass, so every pass sees the same trained model.
#include <cstdio>

#include "bench_common.hpp"
#include "megacpp/nn/model.hpp"
#include "megacpp/optim.hpp"
#include "megacpp/plasticity.hpp"

using namespace megacpp;
using Model = TinyLM<float, Cpu>;

namespace {
constexpr index_t kBatch = 16, kSeq = 256, kDocLen = 32;
constexpr std::int32_t kBos = 0;

struct Batch {
  Tensor<std::int32_t, Cpu> in, targets;
  Tensor<float, Cpu> mask;
  DocumentLayout<Cpu> docs;
};

Batch make_batch(std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(kBatch * kSeq)), tg(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    ids[i] = i % kDocLen == 0 ? kBos : static_cast<std::int32_t>(1 + rng.below(200));
    tg[i] = static_cast<std::int32_t>(1 + rng.below(200));
  }
  return Batch{Tensor<std::int32_t, Cpu>::from_host({kBatch, kSeq}, ids), Tensor<std::int32_t, Cpu>::from_host({kBatch, kSeq}, tg),
               Tensor<float, Cpu>::full({kBatch, kSeq}, 1.0f), Model::documents(ids, kBatch, kSeq, kBos)};
}
}  // namespace

int main(int argc, char** argv) {
  const bench::BenchArgs args = bench::parse_args(argc, argv);
  bench::print_system_info("plasticity",
                           "fp32 TinyLM \"AAM\" d64 x3; step = 2 x (16 x 256) tokens, Hybrid Muon + AdamW; "
                           "FIRE / DASH / ReDo passes over the eligible parameters, with state repair",
                           args);
  Model model(0);
  auto params = optim::collect_params<float, Cpu>(model);
  optim::Hybrid<float, Cpu> opt(params);
  // tau 0.5 instead of ReDo's 0.025, so that the timed pass rewrites units (and clears their
  // state): an upper bound; at 0.025 this briefly trained model has no dormant unit to recycle.
  plasticity::ReDoTracker<float, Cpu> tracker(plasticity::ReDoOptions{.tau = 0.5, .min_history = 1});
  model.for_each_block([&](std::size_t i, auto& block) { tracker.attach(block.ffn, "blocks." + std::to_string(i) + ".ffn"); });
  const std::vector<Batch> batches{make_batch(1), make_batch(2)};
  double loss = 0;
  const auto forward_backward = [&] {
    for (const Batch& b : batches) {
      const auto l = model.loss(b.in, b.targets, b.mask, b.docs);
      loss = l.item();
      backward(l);
    }
  };
  const auto step = [&] {
    forward_backward();
    opt.step();
    opt.zero_grad();
  };
  for (int s = 0; s < 5; ++s) step();  // a trained model: wo and proj are no longer zero
  forward_backward();                   // gradients for DASH (kept: DASH does not consume them)
  std::vector<Tensor<float, Cpu>> saved;
  for (auto& p : params) saved.push_back(p.value().clone());
  const auto restore = [&] {
    for (std::size_t i = 0; i < params.size(); ++i) params[i].value().assign(saved[i]);
  };
  plasticity::FireLedger ledger;
  std::size_t fire_targets = 0, fire_all = 0, dash_rows = 0, redo_units = 0;
  const auto t = bench::time_interleaved(
      {{"fire_attention", [&] { fire_targets = plasticity::fire(params, plasticity::FireTargets::attention_qk, 2, ledger, opt, {}, true).size(); }, restore},
       {"fire_aggressive", [&] { fire_all = plasticity::fire(params, plasticity::FireTargets::aggressive, 2, ledger, opt, {}, true).size(); }, restore},
       {"dash", [&] {
          dash_rows = 0;
          for (const auto& e : plasticity::dash(params, opt)) dash_rows += e.shrunk.size();
        }, restore},
       {"redo", [&] {
          redo_units = 0;
          for (const auto& e : tracker.recycle(params, opt)) redo_units += e.units.size();
        }, [&] {
          restore();
          tracker.set_enabled(true);
          model.loss(batches[0].in, batches[0].targets, batches[0].mask, batches[0].docs);  // one recorded pass
          tracker.set_enabled(false);
        }}},
      args.quick ? 0.2 : 2.0, 3);
  opt.zero_grad();
  const auto steps = bench::time_interleaved({{"step", step, [&] {
                                                 restore();
                                                 tracker.set_enabled(false);
                                               }},
                                              {"step_redo_hook", step, [&] {
                                                 restore();
                                                 tracker.set_enabled(true);
                                               }}},
                                             args.quick ? 0.5 : 4.0, 3);
  tracker.set_enabled(false);
  const double fire_ms = t[0].median_s * 1e3, fire_all_ms = t[1].median_s * 1e3, dash_ms = t[2].median_s * 1e3,
               redo_ms = t[3].median_s * 1e3, step_ms = steps[0].median_s * 1e3, hook_ms = steps[1].median_s * 1e3;
  std::printf("\nFIRE attention  %8.2f ms  (%zu matrices)\n", fire_ms, fire_targets);
  std::printf("FIRE aggressive %8.2f ms  (%zu matrices)\n", fire_all_ms, fire_all);
  std::printf("DASH            %8.2f ms  (%zu rows shrunk)\n", dash_ms, dash_rows);
  std::printf("ReDo recycle    %8.2f ms  (%zu units recycled)\n", redo_ms, redo_units);
  std::printf("train step      %8.2f ms  (loss %.4f); with the ReDo hook recording %.2f ms (%+.1f%%)\n", step_ms, loss, hook_ms,
              100.0 * (hook_ms / step_ms - 1.0));
  std::printf("each pass <= one step: FIRE %s, FIRE aggressive %s, DASH %s, ReDo %s\n", fire_ms <= step_ms ? "yes" : "NO",
              fire_all_ms <= step_ms ? "yes" : "NO", dash_ms <= step_ms ? "yes" : "NO", redo_ms <= step_ms ? "yes" : "NO");
  bench::JsonLine("plasticity").add("fire_ms_model", fire_ms, 3).add("fire_ms_model_aggressive", fire_all_ms, 3)
      .add("dash_ms_model", dash_ms, 3).add("redo_ms_model", redo_ms, 3).add("train_step_ms", step_ms, 3)
      .add("train_step_ms_redo_hook", hook_ms, 3).print();
  return 0;
}
