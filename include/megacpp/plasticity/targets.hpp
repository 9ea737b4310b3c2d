// megacpp/plasticity/targets.hpp: which parameters FIRE rewrites, chosen by Role, shape and name.
//
// Only 2-D Role::matrix parameters are eligible: embeddings, the head, norm gains, biases,
// scalars, routers and MTP parameters never are (an orthogonal embedding table or head means
// nothing), nor anything that is not a matrix. Within them:
//   attention_qk  the attention query and key projections wq, wk: the narrow set for a context
//                 extension (docs/systems/curriculum.md, "FIRE on Q/K at entry"): RoPE rotates
//                 exactly their product, so a new RoPE base changes what their geometry encodes,
//                 while values, outputs and MLPs still fit the data
//   aggressive    every eligible matrix (wv, wo, MLPs and Mamba projections too)
// Names are the dotted for_each_param names ("blocks.0.mixer.wq.weight").
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "megacpp/autograd/param.hpp"

namespace megacpp::plasticity {

/// FIRE's target set.
enum class FireTargets {
  attention_qk,  ///< wq, wk of attention layers
  aggressive,    ///< every 2-D Role::matrix parameter
};

/// "attention_qk" or "aggressive".
constexpr std::string_view fire_targets_name(FireTargets t) { return t == FireTargets::attention_qk ? "attention_qk" : "aggressive"; }

/// Parses "attention_qk" / "aggressive"; throws naming the value otherwise.
inline FireTargets parse_fire_targets(std::string_view s) {
  if (s == "attention_qk") return FireTargets::attention_qk;
  if (s == "aggressive") return FireTargets::aggressive;
  fail("fire", "unknown target set '", std::string(s), "': use 'attention_qk' (wq, wk) or 'aggressive' (every matrix)");
}

/// True when `name` is an attention query or key projection: its last two parts are w{q,k}.weight.
inline bool is_query_key_projection(std::string_view name) {
  static constexpr std::array<std::string_view, 2> kProjections{"wq.weight", "wk.weight"};
  for (std::string_view p : kProjections)
    if (name == p || (name.size() > p.size() && name.ends_with(p) && name[name.size() - p.size() - 1] == '.')) return true;
  return false;
}

/// True when FIRE with `targets` rewrites the parameter (name, role, shape).
inline bool is_fire_target(std::string_view name, Role role, const Shape& shape, FireTargets targets) {
  if (role != Role::matrix || shape.rank() != 2 || shape.numel() == 0) return false;
  return targets == FireTargets::aggressive || is_query_key_projection(name);
}

}  // namespace megacpp::plasticity
