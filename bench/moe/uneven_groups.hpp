// bench/moe/uneven_groups.hpp: the group layouts the MoE benches time the grouped product on:
// `rows` rows over 8 groups in proportions 5:1:3:0:2:6:1:2 (uneven, one empty), the last group
// taking the rounding remainder (bench_moe, bench_moe_cuda); and many small uneven groups
// (bench_moe_cuda).
#pragma once

#include <cstddef>
#include <vector>

#include "megacpp/core/config.hpp"

namespace megacpp::bench {

/// The E + 1 offsets of groups in proportions `weights` over `rows` rows, the last group taking
/// the rounding remainder.
inline std::vector<index_t> uneven_offsets(index_t rows, const std::vector<index_t>& weights) {
  index_t total = 0;
  for (index_t w : weights) total += w;
  std::vector<index_t> offsets{0};
  for (std::size_t g = 0; g < weights.size(); ++g)
    offsets.push_back(g + 1 == weights.size() ? rows : offsets.back() + rows * weights[g] / total);
  return offsets;
}

/// The E + 1 offsets of the 8 uneven groups over `rows` rows.
inline std::vector<index_t> uneven_offsets(index_t rows) { return uneven_offsets(rows, {5, 1, 3, 0, 2, 6, 1, 2}); }

/// `groups` groups in proportions g * 5 mod 7 (0 to 6: groups 0, 7, 14, ... empty but the last,
/// which takes the rounding remainder), the shape of a fine-grained MoE's many small experts.
inline std::vector<index_t> many_uneven_offsets(index_t rows, index_t groups) {
  std::vector<index_t> weights;
  for (index_t g = 0; g < groups; ++g) weights.push_back(g * 5 % 7);
  return uneven_offsets(rows, weights);
}

}  // namespace megacpp::bench
