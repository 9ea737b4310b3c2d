// megacpp/train/curriculum.hpp: context-length curriculum phases (docs/systems/curriculum.md), a
// training policy: it lives above the layers and reaches them only through LM's methods.
//
//   phase 1 syntax  4K context, rope_theta 10,000                DASH and ReDo on (when asked for)
//   phase 2 file   16K context, rope_theta 500,000               FIRE on Q/K at entry
//   phase 3 repo   64K context, rope_theta 1,000,000 + YaRN x4   FIRE on Q/K at entry
// A phase fixes seq_len, rope_theta and the micro-batch; the global batch in tokens stays
// constant (the micro-batch shrinks and gradient accumulation grows as context grows), so the
// gradient-accumulation count is recomputed from it, and a global batch it does not divide is an
// error rather than a silently different batch. Entering a phase re-derives every attention
// layer's RoPE table from the new theta (enter_phase -> LM::set_rope_theta); weights are
// unchanged, so a run can switch phase when it resumes from a checkpoint. Phase 3 also turns YaRN
// on (nn/attention/yarn.hpp): factor 4 over an original context of a quarter of the phase's
// seq_len (64K over phase 2's 16K). What the phase table says about plasticity (FIRE at entry,
// DASH and ReDo in phase 1) is applied by the trainer (megacpp/plasticity, docs/systems/plasticity.md).
// Each phase also names its data mixture over the streams megacpp-prepare writes (docs/recipe.md
// "Data mixtures"): 70% code / 20% text / 10% math at 4K, 70/30 code/text at 16K, 50/30/20
// code/text/math at 64K; the trainer's MixtureLoader (data/mixture.hpp) draws rows by it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/data/mixture.hpp"
#include "megacpp/nn/attention/yarn.hpp"

namespace megacpp {

/// A stream's share in a phase's mixture (an empty stream name ends the list).
struct PhaseStreamWeight {
  std::string_view stream;  ///< stream name as megacpp-prepare --stream writes it ("code", "text", "math")
  double weight = 0;        ///< share of the phase's training rows
};

/// One phase of the context curriculum.
struct CurriculumPhase {
  int number = 1;            ///< 1, 2, 3
  std::string_view name;     ///< "syntax", "file", "repo"
  index_t seq_len = 4096;    ///< context length of the phase at full scale
  double rope_theta = 1e4;   ///< RoPE base of the phase
  double yarn_factor = 1.0;  ///< YaRN context extension factor over seq_len / yarn_factor (1: plain RoPE)
  bool fire_at_entry = false;  ///< entering the phase orthogonalises the attention Q/K projections (FIRE)
  bool dash_and_redo = false;  ///< DASH and ReDo may run in this phase (phase 1 only by default)
  std::array<PhaseStreamWeight, 3> mixture{};  ///< the phase's data mixture (docs/recipe.md "Data mixtures")
};

/// The recipe's phases 1-3 at full scale (a small model may scale seq_len down, see phase_seq_len).
inline constexpr std::array<CurriculumPhase, 3> kRecipePhases{
    {{1, "syntax", 4096, 1e4, 1.0, false, true, {{{"code", 0.7}, {"text", 0.2}, {"math", 0.1}}}},
     {2, "file", 16384, 5e5, 1.0, true, false, {{{"code", 0.7}, {"text", 0.3}, {"", 0.0}}}},
     {3, "repo", 65536, 1e6, 4.0, true, false, {{{"code", 0.5}, {"text", 0.3}, {"math", 0.2}}}}}};

/// The phase's mixture as data::Mixture (its weights sum to 1).
inline data::Mixture phase_mixture(const CurriculumPhase& phase) {
  data::Mixture m;
  for (const auto& w : phase.mixture)
    if (!w.stream.empty()) m.push_back({std::string(w.stream), w.weight});
  return m;
}

/// The phase's mixture restricted to `available` streams and renormalised (data without a math
/// stream trains phase 1 on code 0.7/0.9, text 0.2/0.9); throws when none of its streams is there.
inline data::Mixture phase_mixture_for(const CurriculumPhase& phase, const std::vector<std::string>& available) {
  data::Mixture m;
  double sum = 0;
  for (const auto& w : phase_mixture(phase))
    for (const auto& a : available)
      if (a == w.stream) {
        m.push_back(w);
        sum += w.weight;
      }
  check(sum > 0, "curriculum", "phase ", phase.number, "'s mixture ", data::format_mixture(phase_mixture(phase)),
        " names none of the data's streams: give --mix");
  for (auto& w : m) w.weight /= sum;
  return m;
}

/// The recipe phase with number `n` (1-3); throws naming `n` otherwise.
inline const CurriculumPhase& recipe_phase(int n) {
  check(n >= 1 && n <= static_cast<int>(kRecipePhases.size()), "curriculum", "phase ", n,
        " does not exist: the recipe has phases 1 (syntax, 4K), 2 (file, 16K), 3 (repo, 64K)");
  return kRecipePhases[static_cast<std::size_t>(n - 1)];
}

/// Gradient-accumulation steps so that world x micro_batch x seq_len x accumulation equals
/// total_batch_tokens exactly; throws naming every value when it does not divide.
inline index_t gradient_accumulation(index_t total_batch_tokens, index_t micro_batch, index_t seq_len, index_t world = 1) {
  check(total_batch_tokens > 0 && micro_batch > 0 && seq_len > 0 && world > 0, "curriculum",
        "total batch, micro-batch, seq_len and world must be positive, got ", total_batch_tokens, ", ", micro_batch, ", ",
        seq_len, ", ", world);
  const index_t per_micro_step = world * micro_batch * seq_len;
  check(total_batch_tokens % per_micro_step == 0, "curriculum", "the global batch of ", total_batch_tokens,
        " tokens is not a multiple of world ", world, " x micro_batch ", micro_batch, " x seq_len ", seq_len, " = ",
        per_micro_step, " tokens per micro-step: choose a micro_batch or total_batch_size that divides");
  return total_batch_tokens / per_micro_step;
}

/// The YaRN extension a phase runs with when its rows are `seq_len` tokens long (0: the phase's
/// full-scale seq_len): factor yarn_factor over an original context of seq_len / yarn_factor.
inline Yarn phase_yarn(const CurriculumPhase& phase, index_t seq_len = 0) {
  if (phase.yarn_factor <= 1.0) return Yarn{};
  const index_t context = seq_len > 0 ? seq_len : phase.seq_len;
  const auto original = static_cast<index_t>(static_cast<double>(context) / phase.yarn_factor);
  check(original > 0, "curriculum", "phase ", phase.number, ": seq_len ", context, " is too short for YaRN factor ",
        phase.yarn_factor);
  return Yarn{.factor = phase.yarn_factor, .original_context = original};
}

/// Applies what entering `phase` changes in `model`: the RoPE base of every layer with rotary
/// positions (Model::set_rope_theta) and the phase's YaRN extension (Model::set_yarn; plain RoPE
/// outside phase 3), for rows of `seq_len` tokens (0: the phase's full-scale seq_len). Returns
/// how many layers changed.
template <class Model>
int enter_phase(Model& model, const CurriculumPhase& phase, index_t seq_len = 0) {
  model.set_yarn(phase_yarn(phase, seq_len));
  return model.set_rope_theta(phase.rope_theta);
}

}  // namespace megacpp
