// megacpp/optim/shard_plan.hpp: which rank orthogonalises which parameter in distributed Muon.
//
// Distributed Muon (modded-nanogpt, @YouJiacheng; docs/systems/muon.md): gradients are already
// averaged over ranks, so every rank would compute the same orthogonalised updates. Instead the
// parameters are dealt round-robin: in each chunk of `world` consecutive parameters every rank
// orthogonalises its own one, and an all-gather over a communicator (megacpp/dist/comm.hpp)
// hands every rank all of the chunk's updates, which every rank then applies.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"

namespace megacpp::optim {

/// Round-robin assignment of `count` parameters to `world` ranks: parameter i is orthogonalised
/// by rank i % world, in chunks of `world` consecutive parameters gathered together.
struct ShardPlan {
  index_t count = 0;  ///< parameters to update
  int world = 1;      ///< ranks

  /// The plan for `count` parameters over `world` ranks.
  ShardPlan(index_t n, int w) : count(n), world(w) {
    check(w >= 1, "ShardPlan", "world size must be >= 1, got ", w);
    check(n >= 0, "ShardPlan", "parameter count must be >= 0, got ", n);
  }
  /// The rank that orthogonalises parameter i.
  int owner(index_t i) const { return static_cast<int>(i % world); }
  /// Number of all-gathers: ceil(count / world).
  index_t chunks() const { return (count + world - 1) / world; }
  /// First parameter of chunk k.
  index_t chunk_begin(index_t k) const { return k * world; }
  /// One past the last parameter of chunk k.
  index_t chunk_end(index_t k) const { return std::min(count, (k + 1) * index_t{world}); }
};

/// ZeRO-1 ownership of whole parameters balanced by size (AdamW's sharded state): parameters
/// are taken largest first (ties: lower index first) and each is given to the rank with the
/// fewest elements so far (ties: lower rank). Deterministic, so every rank computes the same
/// owners; returns owners[i] for parameter i of sizes[i] elements.
inline std::vector<int> balanced_owners(const std::vector<index_t>& sizes, int world) {
  check(world >= 1, "balanced_owners", "world size must be >= 1, got ", world);
  std::vector<std::size_t> order(sizes.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
  std::vector<index_t> load(static_cast<std::size_t>(world), 0);
  std::vector<int> owners(sizes.size(), 0);
  for (std::size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equal loads
    owners[i] = static_cast<int>(least - load.begin());
    *least += sizes[i];
  }
  return owners;
}

}  // namespace megacpp::optim
