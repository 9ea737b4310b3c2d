// tests/cuda_emulation/host_arrays.hpp: the host arrays the emulation tests draw and compare:
// uniform random operands, and bitwise equality of two results.
#pragma once

#include <cstddef>
#include <cstring>
#include <vector>

#include "megacpp/core/random.hpp"

namespace megacpp::cuda_emulation {

// n values drawn uniform in [lo, hi) from `rng`, rounded to T.
template <class T>
std::vector<T> uniform(std::size_t n, Rng& rng, double lo = -1.0, double hi = 1.0) {
  std::vector<T> out(n);
  for (T& x : out) x = static_cast<T>(rng.uniform(lo, hi));
  return out;
}

// Same length and the same bytes. (memcmp takes no null pointer, even for 0 bytes: an empty
// vector's data() may be null.)
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace megacpp::cuda_emulation
