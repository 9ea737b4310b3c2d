// tests/cuda_emulation/host_arrays.hpp: the host arrays the emulation tests draw and compare:
// uniform random operands, uninitialized device memory, bitwise equality of two results, and their largest difference.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "megacpp/core/config.hpp"
#include "megacpp/core/random.hpp"

namespace megacpp::cuda_emulation {

// n values drawn uniform in [lo, hi) from `rng`, rounded to T.
template <class T>
std::vector<T> uniform(std::size_t n, Rng& rng, double lo = -1.0, double hi = 1.0) {
  std::vector<T> out(n);
  for (T& x : out) x = static_cast<T>(rng.uniform(lo, hi));
  return out;
}

// Doc ids of rows of documents given by their lengths (each row the same total), row-major; a
// negative length -n stands for n padding tokens (doc id -1, as DocumentLayout::from_spans gives
// them). Documents are numbered from `first_id` on (ids need not start at 0: a row may begin
// inside a document). `seq` receives the row length.
inline std::vector<std::int32_t> doc_ids_of(const std::vector<std::vector<index_t>>& rows, std::int32_t first_id,
                                            index_t& seq) {
  seq = 0;
  for (index_t length : rows.front()) seq += length < 0 ? -length : length;
  std::vector<std::int32_t> ids;
  std::int32_t id = first_id;
  for (const std::vector<index_t>& row : rows)
    for (index_t length : row)
      ids.insert(ids.end(), static_cast<std::size_t>(length < 0 ? -length : length), length < 0 ? -1 : id++);
  return ids;
}

// n values of device memory as cudaMalloc leaves it: NaN, so a read of what no kernel wrote shows
// in the outputs.
template <class T>
std::vector<T> uninitialized_device(index_t n) {
  return std::vector<T>(static_cast<std::size_t>(n), std::numeric_limits<T>::quiet_NaN());
}

// Same length and the same bytes. (memcmp takes no null pointer, even for 0 bytes: an empty
// vector's data() may be null.)
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// The largest |got - want| over the elements, divided by the largest |want| (at least 1); infinity
// when the sizes differ or an element of `got` or `want` is not finite.
template <class T>
double scaled_error(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double scale = 1, worst = 0;
  for (T x : want) scale = std::max(scale, std::abs(static_cast<double>(x)));
  for (std::size_t e = 0; e < got.size(); ++e) {
    if (!std::isfinite(static_cast<double>(got[e])) || !std::isfinite(static_cast<double>(want[e])))
      return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(static_cast<double>(got[e]) - static_cast<double>(want[e])));
  }
  return worst / scale;
}

}  // namespace megacpp::cuda_emulation
