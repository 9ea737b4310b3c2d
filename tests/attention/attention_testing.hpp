// Helpers shared by the attention tests: random inputs, packed layouts, exact comparisons.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "support/documents_testing.hpp"
#include "support/op_testing.hpp"

#include "megacpp/backends/cpu.hpp"
#include "megacpp/nn/attention.hpp"

namespace megacpp::testing {

constexpr std::int32_t kBos = 0;

// A layout for several rows given per-row document lengths (a negative first length: the row
// starts mid-document), through the shared helper.
inline DocumentLayout<Cpu> layout_of(const std::vector<std::vector<index_t>>& rows, Positions mode = Positions::per_document) {
  return packed_layout(rows, kBos, mode);
}

template <class T>
Var<T, Cpu> random_var(Shape shape, std::uint64_t seed, bool requires_grad = true, double std = 1.0) {
  Rng rng(seed);
  return Var<T, Cpu>(randn<T, Cpu>(shape, rng, std), requires_grad);
}

template <class T>
Tensor<T, Cpu> random_tensor(Shape shape, std::uint64_t seed) {
  Rng rng(seed);
  return randn<T, Cpu>(shape, rng);
}

// Rows [t0, t1) of the seq axis of a (1, seq, ...) tensor, as a new (1, t1 - t0, ...) tensor.
template <class T>
Tensor<T, Cpu> seq_rows(const Tensor<T, Cpu>& x, index_t t0, index_t t1) {
  Shape s = x.shape();
  const index_t inner = x.numel() / (s[0] * s[1]);
  REQUIRE(s[0] == 1);
  s.set(1, t1 - t0);
  Tensor<T, Cpu> out(s);
  std::memcpy(out.data(), x.data() + t0 * inner, static_cast<std::size_t>((t1 - t0) * inner) * sizeof(T));
  return out;
}

template <class T>
bool bitwise_equal(const Tensor<T, Cpu>& a, const Tensor<T, Cpu>& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.numel()) * sizeof(T)) == 0;
}

// Number of elements of x[begin, end) that are not exactly zero.
template <class T>
index_t count_nonzero(const T* x, index_t begin, index_t end) {
  index_t n = 0;
  for (index_t i = begin; i < end; ++i) n += x[i] != T(0);
  return n;
}

// max |a - b| / max(max |b|, tiny)
template <class T>
double max_relative_error(const Tensor<T, Cpu>& a, const Tensor<T, Cpu>& b) {
  REQUIRE(a.shape() == b.shape());
  double diff = 0, scale = 1e-30;
  for (index_t i = 0; i < a.numel(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a.data()[i]) - static_cast<double>(b.data()[i])));
    scale = std::max(scale, std::abs(static_cast<double>(b.data()[i])));
  }
  return diff / scale;
}

// max_i |a_i|.
template <class T>
double max_abs(const Tensor<T, Cpu>& a) {
  double m = 0;
  for (index_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(static_cast<double>(a.data()[i])));
  return m;
}

// The CPU kernel's default tiles (tests that say "default tiles" use these, whatever they are).
inline constexpr AttentionTiles kDefaultTiles{cpu::flash::kDefaultQueryRows, cpu::flash::kDefaultKeyTile};
// Tiny tiles: query tiles of q_rows / group tokens, key tiles of 3: many partial tiles.
inline constexpr AttentionTiles kTinyTiles{4, 3};

// `options` with the kernel's tiles set to `tiles`.
inline AttentionOptions with_tiles(AttentionOptions options, AttentionTiles tiles) {
  options.tiles = tiles;
  return options;
}

}  // namespace megacpp::testing
