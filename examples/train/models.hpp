// examples/train/models.hpp: the model types megacpp-train and megacpp-generate know by name.
//
// Each entry is a distinct compile-time type from megacpp/nn/model/specialists.hpp, plus the
// defaults a run of it starts from. Context lengths follow the recipe's phases (4K / 16K / 64K);
// the tiny model runs them at 1/16 scale (256 / 1K / 4K) so its default run fits a laptop.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "megacpp/backends/cpu.hpp"
#include "megacpp/nn/model.hpp"

namespace megacpp::examples {

/// Defaults of a run of one model (each can be overridden on the command line).
struct ModelDefaults {
  const char* name;                   ///< registry name
  const char* description;            ///< one line for --help
  index_t seq_len_divisor;            ///< phase context = recipe context / this
  index_t micro_batch_tokens;         ///< tokens per micro-batch (micro_batch = this / seq_len, >= 1)
  std::int64_t total_batch_size;      ///< global batch in tokens (constant across phases)
  std::int64_t steps;                 ///< optimizer steps
  std::int64_t warmup_steps;          ///< absolute LR warmup
  std::int64_t eval_every;            ///< steps between validation passes
  std::int64_t val_tokens;            ///< tokens per validation pass
};

/// The tiny "AAM" hybrid (tests and the default run).
using TinyModel = TinyLM<float, Cpu>;

/// The names with_model accepts, for --help.
inline const char* model_names() {
  return "tiny | tiny_mtp | tiny_moe | nam56r_tiny | cmake100m | generator400m | production877m";
}

/// Calls f(std::type_identity<Model>{}, defaults) for the model named `name`, Model on backend B;
/// throws listing the names otherwise. (The types are spelled dependent on B: nvcc's front end
/// drops the class-type template arguments of a non-dependent one inside a template's body.)
template <class B = Cpu, class F>
decltype(auto) with_model(const std::string& name, F&& f) {
  if (name == "tiny")
    return f(std::type_identity<TinyLM<float, B>>{},
             ModelDefaults{"tiny", "\"AAM\" d64 x3, 4/1 heads, vocab 264 (~0.2M params): the default run", 16, 4096,
                           8192, 300, 20, 50, 16384});
  if (name == "tiny_mtp")
    return f(std::type_identity<TinyMtpLM<float, B>>{},
             ModelDefaults{"tiny_mtp", "the tiny model + MTP depth 1 (lambda 0.3 -> 0.1, docs/mtp.md)", 16, 4096, 8192, 300,
                           20, 50, 16384});
  if (name == "tiny_moe")
    return f(std::type_identity<TinyMoELM<float, B>>{},
             ModelDefaults{"tiny_moe", "\"AEM\" d64 x3: attention, an MoE layer (4 experts, top-2, docs/systems/moe.md), Mamba-3",
                           16, 4096, 8192, 300, 20, 50, 16384});
  if (name == "nam56r_tiny")
    return f(std::type_identity<Nam56rTinyLM<float, B>>{},
             ModelDefaults{"nam56r_tiny", "NAM56R's 56-layer layout (13 A, 27 M, 12 E, 4 R; docs/recipe.md) at d64, vocab 264",
                           16, 4096, 8192, 100, 10, 25, 16384});
  if (name == "cmake100m")
    return f(std::type_identity<CMake100M<float, B>>{},
             ModelDefaults{"cmake100m", "\"AAM\" d10 (640 x 10), vocab 65536: CMake specialist", 1, 8192, 524288, 10000,
                           500, 250, 1 << 20});
  if (name == "generator400m")
    return f(std::type_identity<Generator400M<float, B>>{},
             ModelDefaults{"generator400m", "\"AAM\" d16 (1024 x 16), vocab 65536: C++ generator", 1, 8192, 524288,
                           20000, 500, 250, 1 << 20});
  if (name == "production877m")
    return f(std::type_identity<Production877M<float, B>>{},
             ModelDefaults{"production877m", "\"AAM\" d24 (1536 x 24), vocab 65536: production target", 1, 8192, 524288,
                           40000, 500, 250, 1 << 20});
  fail("megacpp-train", "unknown model \"", name, "\": choose ", model_names());
}

/// The backend a model lives on, for a tool's summary line: "cpu", or "cuda (NVIDIA H100 ...)".
template <class B>
std::string device_description() {
  if constexpr (requires { B::device_name(); }) return std::string(B::name) + " (" + B::device_name() + ")";
  else return std::string(B::name);
}

/// True when with_model knows `name`.
inline bool is_model_name(const std::string& name) {
  for (const char* known : {"tiny", "tiny_mtp", "tiny_moe", "nam56r_tiny", "cmake100m", "generator400m", "production877m"})
    if (name == known) return true;
  return false;
}

}  // namespace megacpp::examples
