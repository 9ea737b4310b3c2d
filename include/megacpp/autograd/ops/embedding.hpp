/// \file
/// megacpp/autograd/ops/embedding.hpp: row gather from a table; backward scatter-adds.
#pragma once

#include <cstdint>

#include "megacpp/autograd/function.hpp"

namespace megacpp {

namespace detail {
// Throws unless every id is in [0, limit); names the offending value.
template <Backend B>
void check_ids(const char* op, const Tensor<std::int32_t, B>& ids, index_t limit, const char* what) {
  if (ids.numel() == 0) return;
  const auto [lo, hi] = B::minmax_index(ids.numel(), ids.data());
  check(lo >= 0, op, what, " id ", lo, " is negative");
  check(hi < limit, op, what, " id ", hi, " >= ", limit);
}
}  // namespace detail

/// table (V, D), ids (...) -> (..., D).
template <class T, Backend B>
Var<T, B> embedding(const Var<T, B>& table, const Tensor<std::int32_t, B>& ids) {
  check(table.rank() == 2, "embedding", "table must be (vocab, dim), got shape ", table.shape());
  const index_t vocab = table.shape()[0], dim = table.shape()[1];
  detail::check_ids("embedding", ids, vocab, "token");
  Tensor<T, B> out(ids.shape().concat(Shape{dim}));
  B::template gather_rows<T>(ids.numel(), dim, table.value().data(), ids.data(), out.data());
  return make_result("embedding", std::move(out), [table, ids, dim](const Tensor<T, B>& g) mutable {
    B::template scatter_add_rows<T>(ids.numel(), dim, g.data(), ids.data(), table.grad_buffer().data());
  }, table);
}

}  // namespace megacpp
