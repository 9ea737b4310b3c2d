// megacpp/plasticity/shard.hpp: the rows a rank owns, and sums over ranks.
//
// Every plasticity pass (FIRE, DASH, ReDo) rewrites only the rows of a matrix that its own rank
// owns: a row-sharded parameter (ZeRO-1 style, dim 0) is split base plus remainder, the first
// `rows % world` ranks holding one row more (the split of PyTorch's Shard(0) placement for uneven
// sizes). Statistics that need the whole matrix (FIRE's Frobenius norm and Gram matrix, ReDo's
// layer mean) are summed over ranks with sum_over_ranks(): an all-gather of every rank's partial
// values followed by a sum in rank order, so every rank gets bitwise the same total (a sum in
// arrival order would not be).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "megacpp/core/tensor.hpp"
#include "megacpp/dist/comm.hpp"

namespace megacpp::plasticity {

/// Rows [begin, end) of a matrix.
struct RowRange {
  index_t begin = 0;  ///< first owned row
  index_t end = 0;    ///< one past the last owned row
  /// Number of rows.
  index_t size() const { return end - begin; }
  /// True when global row r is in the range.
  bool contains(index_t r) const { return r >= begin && r < end; }
  /// Equal ranges.
  bool operator==(const RowRange&) const = default;
};

/// The rows rank `rank` of `world` owns of a `rows`-row matrix: base = rows / world rows each, and
/// the first rows % world ranks one more. Throws for a rank outside [0, world).
inline RowRange shard0_bounds(index_t rows, int rank, int world) {
  check(world >= 1, "shard0_bounds", "world size must be >= 1, got ", world);
  check(rank >= 0 && rank < world, "shard0_bounds", "rank ", rank, " out of range for world size ", world);
  check(rows >= 0, "shard0_bounds", "rows must be >= 0, got ", rows);
  const index_t base = rows / world, extra = rows % world;
  const index_t begin = rank * base + std::min<index_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

/// The whole matrix as one rank's range (world size 1).
inline RowRange all_rows(index_t rows) { return {0, rows}; }

/// values[i] = sum over ranks of every rank's values[i], identical on every rank (summed in rank
/// order). Every rank must pass the same number of values. Runs the all-gather on backend B's
/// memory (a host round trip: these are a few statistics per pass, not a hot loop).
template <Backend B, class Comm>
  requires dist::GatherComm<Comm, double, B>
void sum_over_ranks(Comm& comm, std::vector<double>& values) {
  const int world = comm.size();
  if (world == 1 || values.empty()) return;
  const auto n = static_cast<index_t>(values.size());
  const auto send = Tensor<double, B>::from_host(Shape{n}, values);
  Tensor<double, B> recv(Shape{n * world});
  comm.template all_gather<double, B>(send.data(), n, recv.data());
  const std::vector<double> all = recv.to_host();
  for (index_t i = 0; i < n; ++i) {
    double s = 0;
    for (int r = 0; r < world; ++r) s += all[static_cast<std::size_t>(r * n + i)];
    values[static_cast<std::size_t>(i)] = s;
  }
}

}  // namespace megacpp::plasticity
