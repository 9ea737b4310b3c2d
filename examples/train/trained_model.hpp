// examples/train/trained_model.hpp: a trained checkpoint's weights into a model, as the tools
// that use a trained model need them (megacpp-generate and megacpp-eval sample from it,
// megacpp-train --init starts SFT or GSPO from it).
#pragma once

#include <filesystem>
#include <string>

#include "megacpp/io/checkpoint.hpp"
#include "megacpp/train/curriculum.hpp"
#include "models.hpp"
#include "run_checkpoint.hpp"

namespace megacpp::examples {

/// Reads the weights of checkpoint `dir` (whose state.json gave `state`) into `model`; throws
/// naming the directory when it holds another model type, and the file when it is damaged.
template <class Model>
void load_trained_weights(const std::string& tool, const fs::path& dir, const TrainingState& state, Model& model) {
  const std::string type_id = Model::type_id();
  check(state.model_type == type_id, tool, dir.string(), " holds model \"", state.model, "\" [", state.model_type,
        "], this run is \"", type_id, "\"");
  io::load_model(dir / "model.safetensors", model, type_id);
}

/// The row length the checkpoint was trained with: its recorded seq_len, or its phase's default
/// for model `d` (checkpoints written before seq_len was recorded).
inline index_t trained_seq_len(const TrainingState& state, const ModelDefaults& d) {
  const auto& o = state.options;
  if (o.contains("seq_len") && o["seq_len"].is_number_integer() && o["seq_len"].get<index_t>() > 0)
    return o["seq_len"].get<index_t>();
  return recipe_phase(state.phase).seq_len / d.seq_len_divisor;
}

/// load_trained_weights, then the RoPE base (and in phase 3 the YaRN extension, which depends on
/// the row length) the weights were trained with: the model as it was at the checkpoint.
template <class Model>
void load_trained_model(const std::string& tool, const fs::path& dir, const TrainingState& state,
                        const ModelDefaults& d, Model& model) {
  load_trained_weights(tool, dir, state, model);
  enter_phase(model, recipe_phase(state.phase), trained_seq_len(state, d));
}

}  // namespace megacpp::examples
