// examples/train/run_checkpoint.hpp: a training run's checkpoints on disk.
//
// OUT/step_00000300/model.safetensors      weights under the model's parameter names
//                  /optimizer.safetensors  optimizer state (moments, Muon buffers, step counters)
//                  (ZeRO-1 at world > 1, instead: optimizer.rank0000R-of-0000W.safetensors, one
//                   per rank with the state it owns, and optimizer.manifest.json listing them
//                   with sizes and checksums: io/optimizer_shards.hpp)
//                  /state.json             step, phase, data position, RNG, model and options
//                  /config.json            the model's dimensions and pattern as data (model_config)
// OUT/latest                               the name of the newest complete checkpoint
//
// A checkpoint is written into a hidden temp directory (each file temp + fsync + rename), the
// directory is fsynced and renamed to its final name, and only then is `latest` replaced
// atomically. Killing the process at any instant therefore leaves `latest` naming a complete
// checkpoint (the previous one until the switch): nothing a reader can see is half written.
// Older checkpoints are pruned only after the switch.
//
// A run directory holds one run: prepare_run_directory() refuses to resume into a directory
// that holds steps after the resume point (they belong to another continuation), and moves an
// earlier run aside before a fresh run writes there (docs/trainer.md "Checkpoints and resume").
// state.json is read strictly: every field's type and range is checked and named when wrong.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "megacpp/backends/cpu.hpp"
#include "megacpp/data/loader.hpp"
#include "megacpp/data/mixture.hpp"
#include "megacpp/data/shard_meta.hpp"
#include "megacpp/dist/comm.hpp"
#include "megacpp/io/checkpoint.hpp"
#include "megacpp/io/optimizer_shards.hpp"
#include "megacpp/io/json_value.hpp"
#include "megacpp/core/version.hpp"
#include "model_config.hpp"

namespace megacpp::examples {

namespace fs = std::filesystem;

/// What state.json holds: everything besides weights and optimizer state that a resume needs.
struct TrainingState {
  std::int64_t step = 0;              ///< optimizer steps completed
  int phase = 1;                      ///< curriculum phase the steps ran in
  std::string model;                  ///< registry name ("tiny")
  std::string model_type;             ///< Model::type_id() of the model
  std::uint64_t rng_state = 0;        ///< the trainer's Rng after `step` steps
  data::LoaderPosition train_position;  ///< where the next training batch starts (one unnamed stream)
  std::optional<data::MixturePosition> train_mixture;  ///< the row draws and each named stream's position (mixtures)
  std::int64_t tokens_seen = 0;       ///< training tokens consumed
  int threads = 1;                    ///< OpenMP threads (bitwise resume needs the same count)
  nlohmann::json options;             ///< the command line's options, for the record
  data::ShardMetadata shards;         ///< the tokenizer of the training data (byte for older checkpoints)
  nlohmann::json plasticity;          ///< FIRE ledger and ReDo statistics (plasticity_run.hpp); null when absent
  nlohmann::json post_training;       ///< SFT or GSPO: {"stage": "sft" | "gspo", ...its data position}; null in pretraining
};

/// "pretraining", "sft" or "gspo": the kind of run that wrote state `s`.
inline std::string training_stage(const TrainingState& s) {
  return s.post_training.is_object() ? s.post_training["stage"].get<std::string>() : std::string("pretraining");
}

inline nlohmann::json to_json(const TrainingState& s) {
  nlohmann::json mixture;  // null for one unnamed stream
  if (s.train_mixture) {
    mixture = {{"rng_state", std::to_string(s.train_mixture->rng_state)}, {"streams", nlohmann::json::object()}};
    for (const auto& [name, p] : s.train_mixture->streams)
      mixture["streams"][name] = {{"shard", p.shard}, {"token", p.token}, {"epoch", p.epoch}};
  }
  return {{"format", 1},
          {"step", s.step},
          {"phase", s.phase},
          {"model", s.model},
          {"model_type", s.model_type},
          {"rng_state", std::to_string(s.rng_state)},  // a JSON number would lose 64-bit precision
          {"train_position", {{"shard", s.train_position.shard}, {"token", s.train_position.token}, {"epoch", s.train_position.epoch}}},
          {"train_mixture", mixture},
          {"tokens_seen", s.tokens_seen},
          {"threads", s.threads},
          {"options", s.options},
          {"shards", {{"tokenizer", s.shards.tokenizer}, {"tokenizer_hash", s.shards.tokenizer_hash},
                      {"vocab_size", s.shards.vocab_size}, {"bos", s.shards.special.bos}, {"eos", s.shards.special.eos},
                      {"fim_prefix", s.shards.special.fim_prefix}, {"fim_suffix", s.shards.special.fim_suffix},
                      {"fim_middle", s.shards.special.fim_middle}}},
          {"plasticity", s.plasticity},
          {"post_training", s.post_training}};
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

// An integer field in [lo, hi]. A JSON float (1e300) or an out-of-range integer is refused by
// name before any conversion, so nothing wraps or truncates ("threads" 1e300 is not -2^31).
inline std::int64_t json_integer(const nlohmann::json& j, const char* key, const std::string& file, std::int64_t lo,
                                 std::int64_t hi) {
  check(j.is_object() && j.contains(key), "checkpoint", file, ": missing field \"", key, "\"");
  const nlohmann::json& v = j.at(key);
  check(v.is_number_integer(), "checkpoint", file, ": field \"", key, "\" = ", v.dump(), " is not an integer");
  const bool in_range = v.is_number_unsigned() ? v.get<std::uint64_t>() <= static_cast<std::uint64_t>(hi) &&
                                                     v.get<std::uint64_t>() >= static_cast<std::uint64_t>(std::max<std::int64_t>(lo, 0))
                                               : v.get<std::int64_t>() >= lo && v.get<std::int64_t>() <= hi;
  check(in_range, "checkpoint", file, ": field \"", key, "\" = ", v.dump(), " is outside [", lo, ", ", hi, "]");
  return v.get<std::int64_t>();
}

// A 64-bit unsigned integer stored as a decimal string (a JSON number would lose precision).
// Digits only: std::stoull would take "-1" as 2^64 - 1.
inline std::uint64_t json_u64_string(const nlohmann::json& j, const char* key, const std::string& file) {
  const auto text = json_field<std::string>(j, key, file);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  check(!text.empty() && text[0] != '-' && text[0] != '+' && ec == std::errc() && end == text.data() + text.size(),
        "checkpoint", file, ": ", key, " \"", text, "\" is not an unsigned 64-bit integer");
  return value;
}

}  // namespace detail

/// Parses state.json of a checkpoint; every field's type and range is checked and named when wrong.
inline TrainingState read_training_state(const fs::path& file) {
  constexpr std::int64_t kMaxSteps = std::int64_t{1} << 40, kMaxCount = std::int64_t{1} << 62;
  const std::string f = file.string();
  // The library's strict reader (RFC 8259, nesting limit, a directory or missing file an Error)
  // validates the text before nlohmann parses it, so no input reaches a recursive parser unchecked.
  const std::string text = io::read_json_file(file, "checkpoint");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail("checkpoint", f, " is not valid JSON (", e.what(), ")");
  }
  check(j.is_object(), "checkpoint", f, ": expected a JSON object");
  const std::int64_t format = detail::json_integer(j, "format", f, 0, INT32_MAX);
  check(format == 1, "checkpoint", f, ": unknown format ", format);
  TrainingState s;
  s.step = detail::json_integer(j, "step", f, 0, kMaxSteps);
  s.phase = static_cast<int>(detail::json_integer(j, "phase", f, 1, 3));
  s.model = detail::json_field<std::string>(j, "model", f);
  check(!s.model.empty(), "checkpoint", f, ": field \"model\" is empty");
  s.model_type = detail::json_field<std::string>(j, "model_type", f);
  s.rng_state = detail::json_u64_string(j, "rng_state", f);
  const auto read_position = [&](const nlohmann::json& pos) {
    data::LoaderPosition p;
    p.shard = static_cast<std::size_t>(detail::json_integer(pos, "shard", f, 0, INT32_MAX));
    p.token = detail::json_integer(pos, "token", f, 0, kMaxCount);
    p.epoch = static_cast<std::uint64_t>(detail::json_integer(pos, "epoch", f, 0, kMaxCount));
    return p;
  };
  s.train_position = read_position(detail::json_field<nlohmann::json>(j, "train_position", f));
  if (j.contains("train_mixture") && !j["train_mixture"].is_null()) {  // absent before mixtures existed
    const auto& m = j["train_mixture"];
    check(m.is_object() && m.contains("streams") && m["streams"].is_object() && !m["streams"].empty(), "checkpoint",
          f, ": field \"train_mixture\" must be {\"rng_state\": \"N\", \"streams\": {name: position}}");
    data::MixturePosition mp;
    mp.rng_state = detail::json_u64_string(m, "rng_state", f);
    for (const auto& [name, pos] : m["streams"].items()) {
      check(data::valid_stream_name(name), "checkpoint", f, ": train_mixture names stream \"", name,
            "\", which is not lowercase letters and digits");
      mp.streams[name] = read_position(pos);
    }
    s.train_mixture = mp;
  }
  s.tokens_seen = detail::json_integer(j, "tokens_seen", f, 0, kMaxCount);
  s.threads = static_cast<int>(detail::json_integer(j, "threads", f, 1, 1 << 20));
  s.options = detail::json_field<nlohmann::json>(j, "options", f);
  check(s.options.is_object(), "checkpoint", f, ": field \"options\" is not an object");
  if (j.contains("plasticity") && !j["plasticity"].is_null()) {  // absent before plasticity existed
    const auto& pl = j["plasticity"];
    const auto bad = [&](const std::string& what) { fail("checkpoint", f, ": field \"plasticity\" ", what); };
    if (!pl.is_object() || !pl.contains("fire") || !pl["fire"].is_object() || !pl.contains("redo") || !pl["redo"].is_array())
      bad("must be {\"fire\": {parameter: phase}, \"redo\": [layer statistics]}");
    for (const auto& [name, phase] : pl["fire"].items())
      if (!phase.is_number_integer() || phase.get<std::int64_t>() < 1 || phase.get<std::int64_t>() > 3)
        bad("has FIRE phase " + phase.dump() + " for '" + name + "' (must be 1-3)");
    for (const auto& layer : pl["redo"]) {
      if (!layer.is_object() || !layer.contains("ema") || !layer["ema"].is_array() || !layer.contains("history") ||
          !layer["history"].is_number_integer() || layer["history"].get<std::int64_t>() < 0)
        bad("has a malformed ReDo layer " + layer.dump().substr(0, 80));
      for (const auto& v : layer["ema"])
        if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) bad("has a ReDo EMA value " + v.dump());
    }
    if (pl.contains("redo_passes") && !pl["redo_passes"].is_number_unsigned()) bad("has a ReDo pass count that is not a count");
    s.plasticity = pl;
  }
  if (j.contains("post_training") && !j["post_training"].is_null()) {  // absent before SFT and GSPO existed
    const auto& pt = j["post_training"];
    check(pt.is_object() && pt.contains("stage") && pt["stage"].is_string() &&
              (pt["stage"] == "sft" || pt["stage"] == "gspo"),
          "checkpoint", f, ": field \"post_training\" must be an object whose \"stage\" is \"sft\" or \"gspo\"");
    s.post_training = pt;
  }
  if (j.contains("shards")) {  // absent in checkpoints written before shards.json existed: byte shards
    const auto& m = detail::json_field<nlohmann::json>(j, "shards", f);
    s.shards.tokenizer = detail::json_field<std::string>(m, "tokenizer", f);
    s.shards.tokenizer_hash = detail::json_field<std::string>(m, "tokenizer_hash", f);
    s.shards.vocab_size = static_cast<std::int32_t>(detail::json_integer(m, "vocab_size", f, 1, INT32_MAX));
    s.shards.special.bos = static_cast<std::int32_t>(detail::json_integer(m, "bos", f, 0, INT32_MAX));
    s.shards.special.eos = static_cast<std::int32_t>(detail::json_integer(m, "eos", f, 0, INT32_MAX));
    s.shards.special.fim_prefix = static_cast<std::int32_t>(detail::json_integer(m, "fim_prefix", f, 0, INT32_MAX));
    s.shards.special.fim_suffix = static_cast<std::int32_t>(detail::json_integer(m, "fim_suffix", f, 0, INT32_MAX));
    s.shards.special.fim_middle = static_cast<std::int32_t>(detail::json_integer(m, "fim_middle", f, 0, INT32_MAX));
    data::validate(s.shards, f + " (field \"shards\")");
  }
  return s;
}

/// The checkpoint directory `path` names: `path` itself when it holds state.json, else the one
/// its `latest` file names. Throws when neither exists.
inline fs::path resolve_checkpoint(const fs::path& path) {
  check(fs::is_directory(path), "checkpoint", "no checkpoint in ", path.string(),
        fs::exists(path) ? ": not a directory" : ": it does not exist");
  if (fs::exists(path / "state.json")) return path;
  const fs::path latest = path / "latest";
  check(fs::exists(latest), "checkpoint", "no checkpoint in ", path.string(), " (neither state.json nor latest)");
  check(fs::is_regular_file(latest), "checkpoint", latest.string(), " is not a regular file");
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

/// The step of a checkpoint directory name "step_%08d", or -1 for any other name.
inline std::int64_t checkpoint_step(const std::string& name) {
  if (name.rfind("step_", 0) != 0 || name.size() <= 5) return -1;
  std::int64_t step = -1;
  const auto [end, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
  return ec == std::errc() && end == name.data() + name.size() ? step : -1;
}

/// The complete checkpoints (step_* directories) under `out`, sorted by step.
inline std::vector<std::pair<std::int64_t, fs::path>> list_checkpoints(const fs::path& out) {
  std::vector<std::pair<std::int64_t, fs::path>> found;
  if (!fs::is_directory(out)) return found;
  for (const auto& e : fs::directory_iterator(out)) {
    const std::int64_t step = checkpoint_step(e.path().filename().string());
    if (step >= 0 && e.is_directory()) found.emplace_back(step, e.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

/// Makes `out` safe for a run that starts at `resume_step` (-1: a fresh run), before anything is
/// written there, so checkpoint steps are never silently kept from another run:
/// - resuming: a checkpoint after `resume_step` in `out` belongs to a run that went further from
///   this point (or to another run); the new run would write the same step names with other
///   contents, and save_checkpoint keeps the step `latest` already names. Refused, with the fix.
/// - fresh: an earlier run's checkpoints, `latest`, metrics.jsonl and loss.svg are moved into
///   OUT/replaced_<UTC time>/ (reported on stdout), so nothing of it is lost or mixed in.
inline void prepare_run_directory(const fs::path& out, std::int64_t resume_step) {
  const auto checkpoints = list_checkpoints(out);
  if (resume_step >= 0) {
    // A step past the one `latest` names was never published: a kill between renaming its
    // directory into place and updating `latest` left it. It is not another run's history, so it
    // is moved aside (kept for inspection, never reused) instead of blocking the resume.
    std::int64_t published = -1;
    if (std::ifstream in(out / "latest"); in) {
      std::string name;
      std::getline(in, name);
      published = checkpoint_step(name);
    }
    std::string later;
    for (const auto& [step, dir] : checkpoints) {
      if (step <= resume_step) continue;
      if (step > published) {
        const fs::path aside = out / ("unpublished_" + dir.filename().string());
        fs::remove_all(aside);
        fs::rename(dir, aside);
        std::printf("--out %s: %s was never published by latest (an interrupted save): moved to %s\n",
                    out.string().c_str(), dir.filename().string().c_str(), aside.string().c_str());
        continue;
      }
      later += (later.empty() ? "" : ", ") + dir.filename().string();
    }
    check(later.empty(), "megacpp-train", "--out ", out.string(), " holds checkpoints after the resume point (step ",
          resume_step, "): ", later, ". A resumed run would write those steps again with other contents. Resume "
          "into another --out (--resume keeps reading the checkpoint where it is), or move those step directories "
          "and latest out of ", out.string(), " if they should go");
    return;
  }
  const bool has_run = !checkpoints.empty() || fs::exists(out / "latest");
  if (!has_run) return;
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(stamp, sizeof stamp, "replaced_%Y%m%dT%H%M%SZ", &utc);
  fs::path aside = out / stamp;
  for (int n = 2; fs::exists(aside); ++n) aside = out / (std::string(stamp) + "_" + std::to_string(n));
  fs::create_directories(aside);
  for (const auto& [step, dir] : checkpoints) fs::rename(dir, aside / dir.filename());
  for (const char* name : {"latest", "metrics.jsonl", "loss.svg"})
    if (fs::exists(out / name)) fs::rename(out / name, aside / name);
  io::detail::fsync_directory(out);
  std::printf("--out %s held an earlier run: moved its checkpoints, latest and metrics to %s\n", out.string().c_str(),
              aside.string().c_str());
}

namespace detail {
// The hidden directory a checkpoint of `step` is written into before it is renamed to step_N.
inline fs::path checkpoint_temp_dir(const fs::path& out, std::int64_t step, std::int64_t pid) {
  return out / ("." + checkpoint_name(step) + ".tmp." + std::to_string(pid));
}

// Writes model, config, the optimizer (write_optimizer(tmp)) and state into `tmp` (created by
// the caller), renames it to OUT/step_N, points `latest` at it and keeps the newest `keep`.
template <class Model, class WriteOptimizer>
fs::path publish_checkpoint(const fs::path& out, const fs::path& tmp, Model& model, const TrainingState& state, int keep,
                            int pause_ms, WriteOptimizer&& write_optimizer) {
  const auto pause = [&] {
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  };
  const std::string name = checkpoint_name(state.step);
  const fs::path final_dir = out / name;
  const std::string config = model_config(model, state.model).dump(2) + "\n";
  io::save_model(tmp / "model.safetensors", model, state.model_type,
                 {{"step", std::to_string(state.step)}, {"megacpp.config", model_config(model, state.model).dump()}});
  io::atomic_write(tmp / "config.json", std::span<const char>(config.data(), config.size()));
  pause();
  write_optimizer(tmp);
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
}  // namespace detail

/// Writes model, optimizer and state as OUT/step_N atomically, points `latest` at it and keeps
/// the newest `keep` checkpoints. `pause_ms` sleeps between the files (kill tests only).
template <class Model, class Opt>
fs::path save_checkpoint(const fs::path& out, Model& model, Opt& opt, const TrainingState& state, int keep = 2,
                         int pause_ms = 0) {
  fs::create_directories(out);
  const fs::path tmp = detail::checkpoint_temp_dir(out, state.step, ::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  return detail::publish_checkpoint(out, tmp, model, state, keep, pause_ms, [&](const fs::path& dir) {
    io::save_optimizer(dir / "optimizer.safetensors", opt, {{"step", std::to_string(state.step)}});
  });
}

/// ZeRO-1 at world > 1 (opt.shard(comm.rank(), comm.size())): every rank of `comm` calls this
/// at the same step. Each rank writes its own optimizer shard into the checkpoint's temp
/// directory (io/optimizer_shards.hpp); rank 0 writes the model, config.json, state.json (its
/// `state`; the other ranks' matters only for state.step) and, once every rank's shard is
/// complete (the ranks exchange sizes and checksums, which is also their barrier), the manifest;
/// then it publishes the directory as save_checkpoint() does. Every rank returns after the
/// checkpoint is published. OUT must be a directory every rank sees (a shared filesystem).
template <class Model, class Opt, class Comm>
fs::path save_sharded_checkpoint(const fs::path& out, Model& model, Opt& opt, const TrainingState& state, Comm& comm,
                                 int keep = 2, int pause_ms = 0) {
  const int rank = comm.rank(), world = comm.size();
  check(opt.shard_world() == world, "save_sharded_checkpoint", "the optimizer is sharded over ", opt.shard_world(),
        " ranks, the communicator has ", world);
  std::int64_t pid = 0;  // rank 0's: it names the temp directory every rank writes into
  if (rank == 0) {
    pid = ::getpid();
    fs::create_directories(out);
    fs::remove_all(detail::checkpoint_temp_dir(out, state.step, pid));
    fs::create_directories(detail::checkpoint_temp_dir(out, state.step, pid));
  }
  // Host numbers (the pid, the shards' sizes and checksums): the CPU backend's memory, whatever
  // backend the optimizer's state lives on, as the trainer's other host sums.
  comm.template broadcast<std::int64_t, Cpu>(&pid, 1, 0);  // after rank 0 created the directory
  const fs::path tmp = detail::checkpoint_temp_dir(out, state.step, pid);
  const auto write_shards = [&](const fs::path& dir) {
    const io::OptimizerShardFile mine =
        io::save_optimizer_shard(dir, rank, world, opt, {{"step", std::to_string(state.step)}});
    // Sizes and checksums to rank 0. The sum returns only once every rank's shard is renamed
    // into place and fsynced: the manifest is never written before the set is complete.
    std::vector<std::int64_t> digests(2 * static_cast<std::size_t>(world), 0);
    digests[2 * static_cast<std::size_t>(rank)] = static_cast<std::int64_t>(mine.bytes);
    digests[2 * static_cast<std::size_t>(rank) + 1] = static_cast<std::int64_t>(mine.fnv1a64);
    comm.template all_reduce<std::int64_t, Cpu>(digests.data(), 2 * world, dist::ReduceOp::sum);
    std::vector<io::OptimizerShardFile> shards;
    for (int r = 0; r < world; ++r)
      shards.push_back({r, io::optimizer_shard_name(r, world), static_cast<std::uint64_t>(digests[2 * static_cast<std::size_t>(r)]),
                        static_cast<std::uint64_t>(digests[2 * static_cast<std::size_t>(r) + 1])});
    return shards;
  };
  fs::path final_dir = out / checkpoint_name(state.step);
  if (rank == 0)
    final_dir = detail::publish_checkpoint(out, tmp, model, state, keep, pause_ms, [&](const fs::path& dir) {
      io::write_optimizer_manifest(dir, world, write_shards(dir));
    });
  else
    write_shards(tmp);
  comm.barrier();  // nobody goes on (or ends the job) before rank 0 published the checkpoint
  return final_dir;
}

/// Loads the weights and optimizer state of checkpoint `dir` (from resolve_checkpoint) into
/// `model` and the unsharded `opt` (shard it afterwards): optimizer.safetensors, or the ZeRO-1
/// shards its manifest lists (verified first, written at any world size); throws naming the
/// file for another model type or a damaged or missing file.
template <class Model, class Opt>
void load_checkpoint(const fs::path& dir, Model& model, Opt& opt, const std::string& model_type) {
  io::load_model(dir / "model.safetensors", model, model_type);
  if (fs::exists(dir / io::kOptimizerManifest)) io::load_optimizer_shards(dir, opt);  // written by ZeRO-1 ranks
  else io::load_optimizer(dir / "optimizer.safetensors", opt);
}

}  // namespace megacpp::examples
