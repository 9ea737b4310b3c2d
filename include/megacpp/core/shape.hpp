/// \file
/// megacpp/core/shape.hpp: runtime tensor shape (rank <= 8), row-major.
#pragma once

#include <array>
#include <initializer_list>
#include <ostream>
#include <span>
#include <string>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"

namespace megacpp {

/// Runtime tensor shape (rank <= 8), row-major. Dimensions are checked to be non-negative.
class Shape {
 public:
  static constexpr int kMaxRank = 8;  ///< the largest rank a Shape holds

  Shape() = default;  ///< rank 0: a scalar with one element
  /// Shape{2, 3}: the given dims (throws Error beyond kMaxRank or on a negative dim).
  Shape(std::initializer_list<index_t> dims) { assign(dims.begin(), dims.size()); }
  /// The dims of a span (same checks).
  explicit Shape(std::span<const index_t> dims) { assign(dims.data(), dims.size()); }

  /// Number of dims.
  int rank() const { return rank_; }
  /// Negative axes count from the end, as in numpy: shape[-1] is the last dim.
  index_t operator[](int axis) const { return dims_[normalize_axis(axis)]; }
  /// Sets dim `axis` (negative counts from the end) to `value`; throws Error naming the shape for
  /// an axis out of range or a negative value (no writable reference that skips that check).
  void set(int axis, index_t value) {
    check(value >= 0, "Shape", "dim ", axis, " of ", to_string(), " set to negative ", value);
    dims_[normalize_axis(axis)] = value;
  }
  /// First dim (for range-for).
  const index_t* begin() const { return dims_.data(); }
  /// One past the last dim.
  const index_t* end() const { return dims_.data() + rank_; }

  /// Number of elements: the product of the dims (1 at rank 0). Throws Error naming the shape
  /// when the product of its nonzero dims overflows index_t, so no product of a subset of the
  /// dims that code computes from a shape that passed numel() can overflow either.
  index_t numel() const { return prod(0, rank_); }
  /// Product of dims [first, last); throws as numel() does.
  index_t prod(int first, int last) const {
    // A zero dim counts as 1 in the checked product: (0, 2^62, 4) is refused, not 0 by luck of order.
    index_t n = 1;
    bool empty = false;
    for (int i = first; i < last; ++i) {
      const index_t d = dims_[i];
      empty |= d == 0;
      if (__builtin_mul_overflow(n, d == 0 ? 1 : d, &n)) [[unlikely]]
        extent_overflow(first, last);
    }
    return empty ? 0 : n;
  }

  /// Maps a possibly negative axis to [0, rank); throws naming the axis and the shape.
  int normalize_axis(int axis) const {
    const int a = axis < 0 ? axis + rank_ : axis;
    check(a >= 0 && a < rank_, "Shape", "axis ", axis, " out of range for shape ", to_string());
    return a;
  }

  /// Shape with `dim` removed (keepdim=false reductions) or set to 1 (keepdim=true).
  Shape without(int axis) const {
    const int a = normalize_axis(axis);
    Shape s;
    for (int i = 0; i < rank_; ++i)
      if (i != a) s.push_back(dims_[i]);
    return s;
  }
  /// This shape with dim `axis` set to `value`.
  Shape with(int axis, index_t value) const {
    Shape s = *this;
    s.set(axis, value);
    return s;
  }
  /// Appends a dim (throws beyond kMaxRank).
  void push_back(index_t d) {
    check(rank_ < kMaxRank, "Shape", "rank would exceed ", kMaxRank);
    dims_[rank_++] = d;
  }
  /// The last `n` dims (a suffix), used for broadcasting over leading dims.
  Shape suffix(int n) const {
    Shape s;
    for (int i = rank_ - n; i < rank_; ++i) s.push_back(dims_[i]);
    return s;
  }
  /// The first `n` dims.
  Shape prefix(int n) const {
    Shape s;
    for (int i = 0; i < n; ++i) s.push_back(dims_[i]);
    return s;
  }
  /// This shape followed by the dims of `tail`.
  Shape concat(const Shape& tail) const {
    Shape s = *this;
    for (index_t d : tail) s.push_back(d);
    return s;
  }

  /// "(2, 3)": the form error messages use.
  std::string to_string() const {
    std::string s = "(";
    for (int i = 0; i < rank_; ++i) {
      if (i) s += ", ";
      s += std::to_string(dims_[i]);
    }
    return s + ")";
  }

  /// Same rank and dims.
  friend bool operator==(const Shape& a, const Shape& b) {
    if (a.rank_ != b.rank_) return false;
    for (int i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }
  /// Writes to_string().
  friend std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.to_string(); }

 private:
  void assign(const index_t* dims, std::size_t n) {
    check(n <= static_cast<std::size_t>(kMaxRank), "Shape", "rank ", n, " exceeds ", kMaxRank);
    for (std::size_t i = 0; i < n; ++i) {
      check(dims[i] >= 0, "Shape", "negative dimension ", dims[i], " at axis ", i);
      dims_[i] = dims[i];
    }
    rank_ = static_cast<int>(n);
  }

  // Kept out of line and cold: numel() is on every op's path and stays a few instructions.
  [[noreturn, gnu::cold, gnu::noinline]] void extent_overflow(int first, int last) const {
    fail("Shape", "the product of dims [", first, ", ", last, ") of shape ", to_string(),
         " overflows the 64-bit element count (index_t): corrupt or hostile sizes");
  }

  std::array<index_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace megacpp
