// megacpp/nn/model/curriculum.hpp: context-length curriculum phases (RECIPE.md "Curriculum").
//
//   phase 1 syntax  4K context, rope_theta 10,000
//   phase 2 file   16K context, rope_theta 500,000
//   phase 3 repo   64K context, rope_theta 1,000,000
// A phase fixes seq_len, rope_theta and the micro-batch; the global batch in tokens stays
// constant (RECIPE.md "Optimizers": "micro-batch shrinks and gradient accumulation grows as
// context grows"), so the gradient-accumulation count is recomputed from it, and a global batch
// it does not divide is an error rather than a silently different batch. Entering a phase
// re-derives every attention layer's RoPE table from the new theta (set_rope_theta); weights
// are unchanged, so a run can switch phase when it resumes from a checkpoint.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "megacpp/core/error.hpp"
#include "megacpp/nn/attention/yarn.hpp"

namespace megacpp {

/// One phase of the context curriculum.
struct CurriculumPhase {
  int number = 1;            ///< 1, 2, 3 (RECIPE.md numbering)
  std::string_view name;     ///< "syntax", "file", "repo"
  index_t seq_len = 4096;    ///< context length of the phase at full scale
  double rope_theta = 1e4;   ///< RoPE base of the phase
};

/// The recipe's phases 1-3 at full scale (a small model may scale seq_len down, see phase_seq_len).
inline constexpr std::array<CurriculumPhase, 3> kRecipePhases{{{1, "syntax", 4096, 1e4},
                                                               {2, "file", 16384, 5e5},
                                                               {3, "repo", 65536, 1e6}}};

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

/// Sets rope_theta of every attention layer of `model` (blocks whose mixer has a RoPE table)
/// and rebuilds its frequency table (YaRN settings kept). Returns how many layers changed.
template <class Model>
int set_rope_theta(Model& model, double theta) {
  check(theta > 0, "set_rope_theta", "rope_theta must be positive, got ", theta);
  int changed = 0;
  model.for_each_block([&](std::size_t, auto& block) {
    auto& mixer = block.mixer;
    if constexpr (requires { mixer.config.rope_theta; mixer.inv_freq; }) {
      if (!mixer.config.rope) return;
      using T = typename std::decay_t<decltype(mixer)>::value_type;
      using B = typename std::decay_t<decltype(mixer)>::backend_type;
      mixer.config.rope_theta = theta;
      mixer.inv_freq = rope_frequencies<T, B>(mixer.config.head_dim, theta, mixer.config.yarn);
      ++changed;
    }
  });
  return changed;
}

}  // namespace megacpp
