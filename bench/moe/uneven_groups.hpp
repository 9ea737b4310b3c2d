// bench/moe/uneven_groups.hpp: the group layout bench_moe and bench_moe_cuda time the grouped
// product on: `rows` rows over 8 groups in proportions 5:1:3:0:2:6:1:2 (uneven, one empty), the
// last group taking the rounding remainder.
#pragma once

#include <cstddef>
#include <vector>

#include "megacpp/core/config.hpp"

namespace megacpp::bench {

/// The E + 1 offsets of the 8 uneven groups over `rows` rows.
inline std::vector<index_t> uneven_offsets(index_t rows) {
  const std::vector<index_t> weights{5, 1, 3, 0, 2, 6, 1, 2};
  const index_t total = 20;
  std::vector<index_t> offsets{0};
  for (std::size_t g = 0; g < weights.size(); ++g)
    offsets.push_back(g + 1 == weights.size() ? rows : offsets.back() + rows * weights[g] / total);
  return offsets;
}

}  // namespace megacpp::bench
