// examples/train/expert_load.hpp: the MoE layers of a model and the expert load of one training
// step (megacpp-train's metrics and the sigmoid router's bias update).
#pragma once

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "megacpp/dist/comm.hpp"
#include "megacpp/backends/cpu.hpp"
#include "megacpp/nn/moe.hpp"

namespace megacpp::examples {

/// Calls f(moe) for the MoE feed-forward of every layer that has one ('E' letters), in layer order.
template <class Model, class F>
void for_each_moe_layer(Model& model, F&& f) {
  std::apply([&](auto&... block) {
    const auto visit = [&](auto& b) {
      if constexpr (requires { b.ffn.last_load(); }) f(b.ffn);
    };
    (visit(block), ...);
  }, model.blocks);
}

/// The expert load of one training step: assignments per expert of every MoE layer, summed over
/// the step's micro-batches, reduced to the smallest and largest share any expert of any layer got
/// (1 / experts each when balanced).
struct ExpertLoad {
  std::vector<std::vector<index_t>> per_layer;  // [layer][expert]
  std::vector<index_t> assignments;             // [layer]

  template <class Model>
  void add(Model& model) {
    std::size_t layer = 0;
    for_each_moe_layer(model, [&](const auto& moe) {
      const auto& load = moe.last_load();
      if (per_layer.size() <= layer) {
        per_layer.emplace_back(load.tokens_per_expert.size(), 0);
        assignments.push_back(0);
      }
      for (std::size_t e = 0; e < load.tokens_per_expert.size(); ++e) per_layer[layer][e] += load.tokens_per_expert[e];
      assignments[layer] += load.assignments;
      ++layer;
    });
  }
  bool empty() const { return per_layer.empty(); }
  /// Sums the counts over `comm`'s ranks (every rank then holds the global batch's load).
  template <class Comm>
  void all_reduce(Comm& comm) {
    if (comm.size() == 1) return;
    std::vector<std::int64_t> flat(assignments.begin(), assignments.end());
    for (const auto& layer : per_layer) flat.insert(flat.end(), layer.begin(), layer.end());
    comm.template all_reduce<std::int64_t, Cpu>(flat.data(), static_cast<index_t>(flat.size()), dist::ReduceOp::sum);
    std::size_t i = 0;
    for (auto& a : assignments) a = flat[i++];
    for (auto& layer : per_layer)
      for (auto& n : layer) n = flat[i++];
  }
  /// Layer `l`'s load, for the balancing bias.
  MoELoad layer(std::size_t l) const { return {per_layer[l], assignments[l]}; }
  std::pair<double, double> min_max_fraction() const {
    double lo = 1, hi = 0;
    for (std::size_t l = 0; l < per_layer.size(); ++l)
      for (const index_t n : per_layer[l]) {
        const double f = assignments[l] > 0 ? static_cast<double>(n) / static_cast<double>(assignments[l]) : 0.0;
        lo = std::min(lo, f);
        hi = std::max(hi, f);
      }
    return {lo, hi};
  }
};

}  // namespace megacpp::examples
