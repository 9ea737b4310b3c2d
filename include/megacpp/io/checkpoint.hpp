// megacpp/io/checkpoint.hpp: model weights and optimizer state as safetensors files.
//
// A model file holds one tensor per parameter under the model's dotted parameter names
// (for_each_param: "embedding.weight", "blocks.2.mixer.in_proj.weight", ...), tied weights once,
// non-trainable layer state (for_each_state, autograd/module.hpp: a sigmoid router's balancing
// bias, "blocks.1.ffn.routing.bias") as F64 tensors,
// and the model's type in the metadata ("megacpp.model", e.g. LM::type_id()) so a checkpoint of
// another model type is refused before any tensor is read. An optimizer file holds every state tensor
// under its state name ("exp_avg.<param>", "momentum_buffer.<param>") and the integer step
// counters as metadata strings ("counter.<name>"): safetensors has no scalar type, and a counter
// must round-trip exactly. Loading validates everything (names, dtypes, shapes; nothing missing,
// nothing extra) before it changes anything, so a failed load leaves model and optimizer intact.
// Writes are atomic (temp + fsync + rename, io/atomic_file.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "megacpp/io/safetensors.hpp"
#include "megacpp/autograd/module.hpp"
#include "megacpp/autograd/param.hpp"

namespace megacpp::io {

/// Metadata key of the model type in a model file.
inline constexpr const char* kModelTypeKey = "megacpp.model";

/// Writes every parameter of `model` to `path` (atomically), with `metadata`, the model type and
/// "format": "pt" (the key Hugging Face transformers checks before it loads a safetensors file).
template <class Model>
void save_model(const std::filesystem::path& path, Model& model, const std::string& type_id,
                const std::map<std::string, std::string>& metadata = {}) {
  using T = typename Model::value_type;
  using B = typename Model::backend_type;
  SafetensorsWriter writer;
  writer.set_metadata("format", "pt");  // what Hugging Face transformers requires of a safetensors checkpoint
  for (const auto& [k, v] : metadata) writer.set_metadata(k, v);
  writer.set_metadata(kModelTypeKey, type_id);
  std::set<const void*> seen;  // tied weights are visited under one name only
  model.for_each_param([&](const std::string& name, Param<T, B>& p) {
    if (seen.insert(p.var.value().data()).second) writer.add(name, p.var.value());
  });
  if constexpr (ModuleWithState<Model>)
    model.for_each_state([&](const std::string& name, std::vector<double>& state) {
      writer.add(name, Tensor<double, B>::from_host(Shape{static_cast<index_t>(state.size())}, state));
    });
  writer.write(path);
}

/// Reads `path` into the parameters of `model`. Floating-point tensors of another precision
/// (a bf16 or f16 export) are converted to the model's element type (SafetensorsReader::read_as).
/// Throws naming the file and the problem (another model type, a missing or extra tensor, a
/// non-floating dtype, a shape mismatch) before any parameter changes.
template <class Model>
void load_model(const std::filesystem::path& path, Model& model, const std::string& type_id) {
  using T = typename Model::value_type;
  using B = typename Model::backend_type;
  const SafetensorsReader reader(path);
  const auto it = reader.metadata().find(kModelTypeKey);
  check(it != reader.metadata().end(), "load_model", path.string(), " has no \"", kModelTypeKey,
        "\" metadata: not a megacpp model checkpoint");
  check(it->second == type_id, "load_model", path.string(), " is a checkpoint of a different model type: it holds [",
        it->second, "], this model is [", type_id, "]");
  std::vector<std::pair<Param<T, B>*, Tensor<T, B>>> staged;
  std::set<std::string> expected;
  std::set<const void*> seen;
  model.for_each_param([&](const std::string& name, Param<T, B>& p) {
    if (!seen.insert(p.var.value().data()).second) return;
    expected.insert(name);
    const Shape shape = p.var.value().shape();
    if constexpr (std::is_floating_point_v<T>) staged.emplace_back(&p, reader.read_as<T, B>(name, &shape));
    else staged.emplace_back(&p, reader.read<T, B>(name, &shape));
  });
  std::vector<std::pair<std::vector<double>*, std::vector<double>>> staged_state;
  if constexpr (ModuleWithState<Model>)
    model.for_each_state([&](const std::string& name, std::vector<double>& state) {
      expected.insert(name);
      const Shape shape{static_cast<index_t>(state.size())};
      staged_state.emplace_back(&state, reader.read_as<double, B>(name, &shape).to_host());
    });
  for (const auto& name : reader.names())
    check(expected.count(name) != 0, "load_model", path.string(), " holds tensor \"", name,
          "\" which this model does not have");
  for (auto& [p, value] : staged) p->var.mutable_value().assign(value);
  for (auto& [state, value] : staged_state) *state = std::move(value);
}

namespace detail {
/// The step counter `name` of an optimizer file's metadata (`counter.NAME`, a decimal
/// integer); throws naming `file` when it is absent or not an integer.
inline std::int64_t parse_counter(const std::map<std::string, std::string>& metadata, const std::string& name,
                                  const std::string& file) {
  const auto it = metadata.find("counter." + name);
  check(it != metadata.end(), "load_optimizer", file, ": no counter \"", name, "\"");
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  check(used == it->second.size() && !it->second.empty(), "load_optimizer", file, ": counter \"", name,
        "\" is not an integer: \"", it->second, "\"");
  return static_cast<std::int64_t>(v);
}
}  // namespace detail

/// Writes the state of optimizer `opt` (for_each_state) to `path` (atomically).
template <class Opt>
void save_optimizer(const std::filesystem::path& path, Opt& opt, const std::map<std::string, std::string>& metadata = {}) {
  using T = typename Opt::value_type;
  SafetensorsWriter writer;
  for (const auto& [k, v] : metadata) writer.set_metadata(k, v);
  opt.for_each_state([&](const std::string& name, auto& item) {
    if constexpr (std::is_same_v<std::decay_t<decltype(item)>, std::int64_t>) writer.set_metadata("counter." + name, std::to_string(item));
    else writer.add(name, static_cast<const Tensor<T, typename Opt::backend_type>&>(item));
  });
  writer.write(path);
}

/// Reads `path` into the state of `opt`; every state tensor and counter must be present with its
/// shape, and nothing else; throws naming the problem before any state changes.
template <class Opt>
void load_optimizer(const std::filesystem::path& path, Opt& opt) {
  using T = typename Opt::value_type;
  using B = typename Opt::backend_type;
  const SafetensorsReader reader(path);
  const std::string file = path.string();
  std::vector<std::pair<Tensor<T, B>*, Tensor<T, B>>> tensors;
  std::vector<std::pair<std::int64_t*, std::int64_t>> counters;
  std::set<std::string> tensor_names;
  std::size_t counter_count = 0;
  opt.for_each_state([&](const std::string& name, auto& item) {
    if constexpr (std::is_same_v<std::decay_t<decltype(item)>, std::int64_t>) {
      counters.emplace_back(&item, detail::parse_counter(reader.metadata(), name, file));
      ++counter_count;
    } else {
      const Shape shape = item.shape();
      tensors.emplace_back(&item, reader.read<T, B>(name, &shape));
      tensor_names.insert(name);
    }
  });
  for (const auto& name : reader.names())
    check(tensor_names.count(name) != 0, "load_optimizer", file, " holds state \"", name,
          "\" which this optimizer does not have (another model or optimizer configuration?)");
  std::size_t file_counters = 0;
  for (const auto& [k, v] : reader.metadata()) file_counters += k.rfind("counter.", 0) == 0;
  check(file_counters == counter_count, "load_optimizer", file, " holds ", file_counters,
        " step counters, this optimizer has ", counter_count);
  for (auto& [dst, value] : tensors) dst->assign(value);
  for (auto& [dst, value] : counters) *dst = value;
}

}  // namespace megacpp::io
