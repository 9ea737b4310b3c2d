// examples/train/run_checkpoint.hpp: a training run's checkpoints on disk.
//
// OUT/step_00000300/model.safetensors      weights under the model's parameter names
//                  /optimizer.safetensors  optimizer state (moments, Muon buffers, step counters)
//                  /state.json             step, phase, data position, RNG, model and options
// OUT/latest                               the name of the newest complete checkpoint
//
// A checkpoint is written into a hidden temp directory (each file temp + fsync + rename), the
// directory is fsynced and renamed to its final name, and only then is `latest` replaced
// atomically. Killing the process at any instant therefore leaves `latest` naming a complete
// checkpoint (the previous one until the switch): nothing a reader can see is half written.
// Older checkpoints are pruned only after the switch.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "megacpp/data/loader.hpp"
#include "megacpp/io/checkpoint.hpp"

namespace megacpp::examples {

namespace fs = std::filesystem;

/// What state.json holds: everything besides weights and optimizer state that a resume needs.
struct TrainingState {
  std::int64_t step = 0;              ///< optimizer steps completed
  int phase = 1;                      ///< curriculum phase the steps ran in
  std::string model;                  ///< registry name ("tiny")
  std::string model_type;             ///< Model::type_id() of the model
  std::uint64_t rng_state = 0;        ///< the trainer's Rng after `step` steps
  data::LoaderPosition train_position;  ///< where the next training batch starts
  std::int64_t tokens_seen = 0;       ///< training tokens consumed
  int threads = 0;                    ///< OpenMP threads (bitwise resume needs the same count)
  nlohmann::json options;             ///< the command line's options, for the record
};

inline nlohmann::json to_json(const TrainingState& s) {
  return {{"format", 1},
          {"step", s.step},
          {"phase", s.phase},
          {"model", s.model},
          {"model_type", s.model_type},
          {"rng_state", std::to_string(s.rng_state)},  // a JSON number would lose 64-bit precision
          {"train_position", {{"shard", s.train_position.shard}, {"token", s.train_position.token}, {"epoch", s.train_position.epoch}}},
          {"tokens_seen", s.tokens_seen},
          {"threads", s.threads},
          {"options", s.options}};
}

namespace detail {
template <class V>
V json_field(const nlohmann::json& j, const char* key, const std::string& file) {
  check(j.is_object() && j.contains(key), "checkpoint", file, ": missing field \"", key, "\"");
  try {
    return j.at(key).get<V>();
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint", file, ": field \"", key, "\" has the wrong type (", e.what(), ")");
  }
}
}  // namespace detail

/// Parses state.json of a checkpoint; every field is checked and named when wrong.
inline TrainingState read_training_state(const fs::path& file) {
  std::ifstream in(file);
  check(in.good(), "checkpoint", "cannot open ", file.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint", file.string(), " is not valid JSON (", e.what(), ")");
  }
  const std::string f = file.string();
  check(detail::json_field<int>(j, "format", f) == 1, "checkpoint", f, ": unknown format ", j.value("format", 0));
  TrainingState s;
  s.step = detail::json_field<std::int64_t>(j, "step", f);
  s.phase = detail::json_field<int>(j, "phase", f);
  s.model = detail::json_field<std::string>(j, "model", f);
  s.model_type = detail::json_field<std::string>(j, "model_type", f);
  const auto rng = detail::json_field<std::string>(j, "rng_state", f);
  std::size_t used = 0;
  try {
    s.rng_state = std::stoull(rng, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check(!rng.empty() && used == rng.size(), "checkpoint", f, ": rng_state \"", rng, "\" is not an unsigned integer");
  const auto pos = detail::json_field<nlohmann::json>(j, "train_position", f);
  s.train_position.shard = detail::json_field<std::size_t>(pos, "shard", f);
  s.train_position.token = detail::json_field<index_t>(pos, "token", f);
  s.train_position.epoch = detail::json_field<std::uint64_t>(pos, "epoch", f);
  s.tokens_seen = detail::json_field<std::int64_t>(j, "tokens_seen", f);
  s.threads = detail::json_field<int>(j, "threads", f);
  s.options = detail::json_field<nlohmann::json>(j, "options", f);
  check(s.step >= 0 && s.tokens_seen >= 0, "checkpoint", f, ": negative step ", s.step, " or tokens_seen ", s.tokens_seen);
  return s;
}

/// The checkpoint directory `path` names: `path` itself when it holds state.json, else the one
/// its `latest` file names. Throws when neither exists.
inline fs::path resolve_checkpoint(const fs::path& path) {
  if (fs::exists(path / "state.json")) return path;
  const fs::path latest = path / "latest";
  check(fs::exists(latest), "checkpoint", "no checkpoint in ", path.string(), " (neither state.json nor latest)");
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  check(!name.empty() && name.find('/') == std::string::npos, "checkpoint", latest.string(), " is malformed: \"", name, "\"");
  const fs::path dir = path / name;
  check(fs::exists(dir / "state.json"), "checkpoint", latest.string(), " names ", dir.string(), ", which has no state.json");
  return dir;
}

/// Name of the checkpoint directory of `step`.
inline std::string checkpoint_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

/// Writes model, optimizer and state as OUT/step_N atomically, points `latest` at it and keeps
/// the newest `keep` checkpoints. `pause_ms` sleeps between the files (kill tests only).
template <class Model, class Opt>
fs::path save_checkpoint(const fs::path& out, Model& model, Opt& opt, const TrainingState& state, int keep = 2,
                         int pause_ms = 0) {
  const auto pause = [&] {
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  };
  fs::create_directories(out);
  const std::string name = checkpoint_name(state.step);
  const fs::path final_dir = out / name;
  const fs::path tmp = out / ("." + name + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  io::save_model(tmp / "model.safetensors", model, state.model_type, {{"step", std::to_string(state.step)}});
  pause();
  io::save_optimizer(tmp / "optimizer.safetensors", opt, {{"step", std::to_string(state.step)}});
  pause();
  const std::string json = to_json(state).dump(2) + "\n";
  io::atomic_write(tmp / "state.json", std::span<const char>(json.data(), json.size()));
  io::detail::fsync_directory(tmp);
  pause();
  // A directory of the same step can only be an earlier save of this exact state (resume at a
  // checkpoint, save again); replace it only when `latest` does not point at it.
  std::error_code ec;
  if (fs::exists(final_dir)) {
    const fs::path latest_dir = fs::exists(out / "latest") ? resolve_checkpoint(out) : fs::path();
    if (latest_dir == final_dir) {
      fs::remove_all(tmp, ec);
      return final_dir;
    }
    fs::remove_all(final_dir);
  }
  fs::rename(tmp, final_dir);
  io::detail::fsync_directory(out);
  pause();
  io::atomic_write(out / "latest", std::span<const char>(name.data(), name.size()));
  // Prune: keep the newest `keep` complete checkpoints and nothing half written by a dead process.
  std::vector<fs::path> steps;
  for (const auto& e : fs::directory_iterator(out)) {
    const std::string n = e.path().filename().string();
    if (e.is_directory() && n.rfind("step_", 0) == 0) steps.push_back(e.path());
    else if (e.is_directory() && n.rfind(".step_", 0) == 0) fs::remove_all(e.path(), ec);
  }
  std::sort(steps.begin(), steps.end());
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < steps.size(); ++i)
    if (steps[i] != final_dir) fs::remove_all(steps[i], ec);
  return final_dir;
}

/// Loads the weights and optimizer state of checkpoint `dir` (from resolve_checkpoint) into
/// `model` and `opt`; throws naming the file for another model type or a damaged file.
template <class Model, class Opt>
void load_checkpoint(const fs::path& dir, Model& model, Opt& opt, const std::string& model_type) {
  io::load_model(dir / "model.safetensors", model, model_type);
  io::load_optimizer(dir / "optimizer.safetensors", opt);
}

}  // namespace megacpp::examples
