// megacpp/optim/sum_of_squares.hpp: ||x||^2 of a whole tensor, composed from B::reduce.
//
// The Backend contract reduces one axis at a time, and a reduction over a single axis of n
// elements runs as one sum (one thread on the CPU). Viewing x as (rows, cols) and reducing twice,
// first each row (rows in parallel) and then the row sums, keeps the work parallel without a new
// kernel. The CPU's reduce sums in double in a fixed order, so the result does not depend on the
// thread count.
#pragma once

#include <utility>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/functors.hpp"
#include "megacpp/core/shape.hpp"

namespace megacpp::optim {

/// The (rows, cols) view sum_of_squares uses for a tensor of `shape`: the first axis by the
/// rest for rank >= 2, one row otherwise.
inline std::pair<index_t, index_t> sum_of_squares_view(const Shape& shape) {
  if (shape.rank() >= 2 && shape[0] > 0) return {shape[0], shape.numel() / shape[0]};
  return {1, shape.numel()};
}

/// out[0] = sum_ij x[i, j]^2 for x viewed as (rows, cols); `row_sums` holds `rows` elements of
/// scratch. All pointers are backend memory; nothing is copied to the host.
template <class T, Backend B>
void sum_of_squares(index_t rows, index_t cols, const T* x, T* row_sums, T* out) {
  B::template reduce<T>(rows, cols, 1, fn::Square{}, T(1), T(0), row_sums, In<T>{x});
  B::template reduce<T>(1, rows, 1, fn::Identity{}, T(1), T(0), out, In<T>{row_sums});
}

}  // namespace megacpp::optim
