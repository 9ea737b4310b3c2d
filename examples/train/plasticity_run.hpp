// examples/train/plasticity_run.hpp: megacpp-train's plasticity interventions (FIRE at phase
// entry, periodic DASH and ReDo; docs/systems/plasticity.md), their flags, metrics records and
// checkpointed state.
//
// Flags (off by default outside the curriculum's rules):
//   --fire phase|now|force|off   phase (default): FIRE when the run enters phase 2 or 3 from a
//                                checkpoint of an earlier phase; now: also at the start of this run
//                                (once per phase: a second request is an error); force: even if
//                                done in this phase; off: never
//   --fire_targets attention_qk|aggressive
//   --dash_every N, --dash_threshold, --dash_min_factor     (phase 1 only; 0: off)
//   --redo_every N, --redo_tau, --redo_min_history          (phase 1 only; 0: off)
// Every intervention writes a metrics record {"step", "intervention", "params", "rows"/"units"}.
// state.json's "plasticity" holds the FIRE ledger (parameter -> phase), ReDo's activation
// statistics and its pass count (which seeds the redrawn rows), so a resumed run neither repeats
// FIRE in the same phase nor loses ReDo's history, and its ReDo passes draw what an uninterrupted
// run draws.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/cli.hpp"
#include "megacpp/backends/cpu.hpp"
#include "megacpp/dist/comm.hpp"
#include "megacpp/plasticity.hpp"
#include "megacpp/train/curriculum.hpp"

namespace megacpp::examples {

/// The plasticity flags of megacpp-train.
struct PlasticityFlags {
  std::string fire = "phase";                ///< phase | now | force | off
  std::string fire_targets = "attention_qk";  ///< attention_qk | aggressive
  std::int64_t dash_every = 0;               ///< steps between DASH passes (0: off)
  double dash_threshold = 0.3;               ///< DASH's cosine threshold
  double dash_min_factor = 0.5;              ///< DASH's lower bound of the shrink factor
  std::int64_t redo_every = 0;               ///< steps between ReDo passes (0: off)
  double redo_tau = 0.025;                   ///< ReDo's dormancy threshold
  std::int64_t redo_min_history = 0;         ///< recorded passes before ReDo may judge (0: redo_every x accumulation)
};

/// Checks the plasticity flags on their own (UsageError naming the flag).
inline void check_plasticity_flags(const std::string& tool, const PlasticityFlags& f) {
  check_flag(f.fire == "phase" || f.fire == "now" || f.fire == "force" || f.fire == "off", tool, "fire", "\"", f.fire,
             "\" is not one of phase, now, force, off");
  check_flag(f.fire_targets == "attention_qk" || f.fire_targets == "aggressive", tool, "fire_targets", "\"",
             f.fire_targets, "\" is not one of attention_qk, aggressive");
  check_range(tool, "dash_every", f.dash_every, 0, std::int64_t{1} << 40, "0: off");
  check_real(tool, "dash_threshold", f.dash_threshold, -1, 0.999999);
  check_real(tool, "dash_min_factor", f.dash_min_factor, 0, 1, /*open_lo=*/true);
  check_range(tool, "redo_every", f.redo_every, 0, std::int64_t{1} << 40, "0: off");
  check_real(tool, "redo_tau", f.redo_tau, 0, 1);
  check_range(tool, "redo_min_history", f.redo_min_history, 0, std::int64_t{1} << 40, "0: redo_every x accumulation");
}

/// The interventions of one run of megacpp-train over a model and its optimiser.
template <class Model, class Opt>
class PlasticityRun {
 public:
  using B = typename Model::backend_type;  ///< where the model's parameters live
  using Params = std::vector<optim::ParamRef<float, B>>;

  /// Checks the flags against the phase and the run's accumulation, attaches ReDo to every MLP
  /// (when --redo_every is set) and restores `saved` (state.json's "plasticity", null for none).
  PlasticityRun(const std::string& tool, const PlasticityFlags& f, const CurriculumPhase& phase, index_t accumulation,
                Model& model, Opt& opt, const nlohmann::json& saved)
      : flags_(f), phase_(phase), params_(optim::collect_params<float, B>(model)), opt_(opt),
        tracker_(plasticity::ReDoOptions{.tau = f.redo_tau,
                                         .min_history = f.redo_min_history > 0 ? f.redo_min_history : std::max<std::int64_t>(1, f.redo_every * accumulation)}) {
    check_flag(f.dash_every == 0 || phase.dash_and_redo, tool, "dash_every", f.dash_every, ": DASH runs in phase 1 only ",
               "(docs/systems/curriculum.md), this run is phase ", phase.number);
    check_flag(f.redo_every == 0 || phase.dash_and_redo, tool, "redo_every", f.redo_every, ": ReDo runs in phase 1 only ",
               "(docs/systems/curriculum.md), this run is phase ", phase.number);
    check_flag(f.redo_every == 0 || tracker_.options().min_history <= f.redo_every * accumulation, tool, "redo_min_history",
               f.redo_min_history, " exceeds the ", f.redo_every * accumulation, " forward passes between ReDo passes (",
               "--redo_every ", f.redo_every, " x ", accumulation, " micro-batches): ReDo would never have enough history");
    if (f.redo_every > 0)
      model.for_each_block([&](std::size_t i, auto& block) {
        if constexpr (requires { block.ffn.hidden_observer; })
          tracker_.attach(block.ffn, "blocks." + std::to_string(i) + ".ffn");
      });
    tracker_.set_enabled(f.redo_every > 0);
    if (saved.is_object()) {
      for (const auto& [name, p] : saved.at("fire").items()) ledger_.phase_of[name] = p.template get<int>();
      const auto& layers = saved.at("redo");
      check(layers.size() == tracker_.layers().size() || layers.empty() || tracker_.layers().empty(), tool, "the checkpoint's ReDo statistics cover ",
            layers.size(), " layers, the model has ", tracker_.layers().size());
      if (saved.contains("redo_passes")) tracker_.set_passes(saved.at("redo_passes").template get<std::uint64_t>());
      for (std::size_t i = 0; i < layers.size() && i < tracker_.layers().size(); ++i)
        tracker_.restore(i, layers[i].at("ema").template get<std::vector<double>>(), layers[i].at("history").template get<index_t>());
    }
  }

  /// FIRE at the start of the run, per --fire; `entered` is true when the run resumed from a
  /// checkpoint of an earlier phase. Returns the metrics record ({} when nothing ran).
  nlohmann::json at_start(std::int64_t step, bool entered) {
    const bool wanted = flags_.fire == "now" || flags_.fire == "force" || (flags_.fire == "phase" && entered && phase_.fire_at_entry);
    if (!wanted) return {};
    const auto targets = plasticity::parse_fire_targets(flags_.fire_targets);
    // A resume inside a phase whose FIRE the checkpoint already recorded does not repeat it.
    if (flags_.fire == "phase" && all_done(targets)) return {};
    const auto entries = plasticity::fire(params_, targets, phase_.number, ledger_, opt_, {}, flags_.fire == "force");
    nlohmann::json names = nlohmann::json::array();
    index_t rows = 0, skipped = 0;
    for (const auto& e : entries) {
      names.push_back(e.name);
      if (e.result.skipped) ++skipped;
      else rows += find(e.name).shape()[0];
    }
    return {{"step", step}, {"intervention", "fire"}, {"phase", phase_.number}, {"targets", flags_.fire_targets},
            {"params", names}, {"rows", rows}, {"skipped_zero", skipped}};
  }

  /// DASH after the backward of step `number` (before the optimiser step), every --dash_every.
  nlohmann::json after_backward(std::int64_t number) {
    if (flags_.dash_every == 0 || number % flags_.dash_every != 0) return {};
    const auto entries = plasticity::dash(params_, opt_, plasticity::DashOptions{flags_.dash_threshold, flags_.dash_min_factor});
    nlohmann::json shrunk = nlohmann::json::object();
    std::size_t rows = 0;
    for (const auto& e : entries)
      if (!e.shrunk.empty()) {
        shrunk[e.name] = e.shrunk.size();
        rows += e.shrunk.size();
      }
    return {{"step", number}, {"intervention", "dash"}, {"params", shrunk}, {"rows", rows}};
  }

  /// ReDo after the optimiser step of step `number`, every --redo_every; on every rank of `comm`
  /// (the ranks' activation statistics are averaged, so all recycle the same units).
  template <class Comm>
  nlohmann::json after_step(std::int64_t number, Comm& comm) {
    if (flags_.redo_every == 0 || number % flags_.redo_every != 0) return {};
    // Steps whose micro-batches learn nothing skip their forward passes (possible only when every
    // target is masked): the pass then waits for the evidence instead of judging on less. The
    // ranks decide together (one rank short of history means all wait).
    double short_of_history = tracker_.ready() ? 0.0 : 1.0;
    comm.template all_reduce<double, Cpu>(&short_of_history, 1, dist::ReduceOp::max);
    if (short_of_history > 0) return {{"step", number}, {"intervention", "redo"}, {"skipped", "not enough activation history"}};
    const auto entries = tracker_.recycle(params_, opt_, comm);
    nlohmann::json units = nlohmann::json::object();
    std::size_t total = 0;
    for (const auto& e : entries) {
      units[e.layer] = e.units.size();
      total += e.units.size();
    }
    return {{"step", number}, {"intervention", "redo"}, {"params", units}, {"units", total}};
  }

  /// What state.json keeps: the FIRE ledger and ReDo's statistics.
  nlohmann::json to_json() const {
    nlohmann::json fire = nlohmann::json::object(), redo = nlohmann::json::array();
    for (const auto& [name, p] : ledger_.phase_of) fire[name] = p;
    for (const auto& l : tracker_.layers()) redo.push_back({{"layer", l.prefix}, {"ema", l.ema}, {"history", l.history}});
    return {{"fire", fire}, {"redo", redo}, {"redo_passes", tracker_.passes()}};
  }

 private:
  bool all_done(plasticity::FireTargets targets) const {
    bool any = false;
    for (const auto& p : params_)
      if (plasticity::is_fire_target(p.name, p.role, p.shape(), targets)) {
        any = true;
        if (!ledger_.done(p.name, phase_.number)) return false;
      }
    return any;
  }
  const optim::ParamRef<float, B>& find(const std::string& name) const {
    for (const auto& p : params_)
      if (p.name == name) return p;
    fail("plasticity", "no parameter '", name, "'");
  }

  PlasticityFlags flags_;
  CurriculumPhase phase_;
  Params params_;
  Opt& opt_;
  plasticity::FireLedger ledger_;
  plasticity::ReDoTracker<float, B> tracker_;
};

}  // namespace megacpp::examples
