// Helpers shared by the attention tests: random inputs, packed layouts, exact comparisons.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "support/op_testing.hpp"

#include "megacpp/nn/attention.hpp"

namespace megacpp::testing {

constexpr std::int32_t kBos = 0;

// Token ids of one row from document lengths: each document is BOS then filler tokens. A negative
// first length -n means the row starts mid-document with n tokens before the first BOS.
inline std::vector<std::int32_t> row_tokens(const std::vector<index_t>& lengths, std::int32_t filler = 5) {
  std::vector<std::int32_t> ids;
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    const index_t len = lengths[d] < 0 ? -lengths[d] : lengths[d];
    for (index_t t = 0; t < len; ++t)
      ids.push_back(t == 0 && lengths[d] > 0 ? kBos : filler + static_cast<std::int32_t>((d + t) % 7));
  }
  return ids;
}

// A layout for several rows given per-row document lengths (each row must sum to seq).
inline DocumentLayout<Cpu> layout_of(const std::vector<std::vector<index_t>>& rows, Positions mode = Positions::per_document) {
  std::vector<std::int32_t> ids;
  index_t seq = -1;
  for (const auto& r : rows) {
    const auto row = row_tokens(r);
    if (seq < 0) seq = static_cast<index_t>(row.size());
    REQUIRE(static_cast<index_t>(row.size()) == seq);
    ids.insert(ids.end(), row.begin(), row.end());
  }
  return DocumentLayout<Cpu>::from_tokens(ids, static_cast<index_t>(rows.size()), seq, kBos, mode);
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
  s[1] = t1 - t0;
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
inline const cpu::flash::Tuning kDefaultTiles{};

// Restores the CPU kernel's process-wide tuning when a test ends.
struct ScopedFlashTuning {
  cpu::flash::Tuning saved = cpu::flash::tuning();
  ScopedFlashTuning(index_t q_rows, index_t tile_k,
                    cpu::flash::Tuning::Backward backward = cpu::flash::Tuning::Backward::automatic) {
    cpu::flash::tuning() = {q_rows, tile_k, backward};
  }
  ~ScopedFlashTuning() { cpu::flash::tuning() = saved; }
  ScopedFlashTuning(const ScopedFlashTuning&) = delete;
  ScopedFlashTuning& operator=(const ScopedFlashTuning&) = delete;
};

}  // namespace megacpp::testing
