/// \file
/// megacpp/autograd/ops/embedding.hpp: row gather from a table; backward scatter-adds.
#pragma once

#include <cstdint>

#include "megacpp/autograd/function.hpp"
#include "megacpp/core/bounded_ids.hpp"

namespace megacpp {

namespace detail {
// Throws unless every id is in [0, limit); names the offending value.
template <Backend B>
void check_ids(const char* op, const Tensor<std::int32_t, B>& ids, index_t limit, const char* what) {
  (void)BoundedIds<B>::checked(op, ids, limit, what);
}
}  // namespace detail

/// table (V, D), ids (...) with a bound <= V (megacpp/core/bounded_ids.hpp) -> (..., D). Only the
/// bound and the ids' write count are compared here: no pass over the ids, nothing read back.
template <class T, Backend B>
Var<T, B> embedding(const Var<T, B>& table, const BoundedIds<B>& ids) {
  check(table.rank() == 2, "embedding", "table must be (vocab, dim), got shape ", table.shape());
  const index_t vocab = table.shape()[0], dim = table.shape()[1];
  ids.check_for("embedding", vocab, "token");
  Tensor<T, B> out(ids.ids().shape().concat(Shape{dim}));
  B::template gather_rows<T>(ids.numel(), dim, table.value().data(), ids.data(), out.data());
  return make_result("embedding", std::move(out), [table, ids, dim](const Tensor<T, B>& g) mutable {
    B::template scatter_add_rows<T>(ids.numel(), dim, g.data(), ids.data(), table.grad_buffer().data());
  }, table);
}

/// table (V, D), ids (...) -> (..., D); every id is checked to be in [0, V).
template <class T, Backend B>
Var<T, B> embedding(const Var<T, B>& table, const Tensor<std::int32_t, B>& ids) {
  check(table.rank() == 2, "embedding", "table must be (vocab, dim), got shape ", table.shape());
  return embedding(table, BoundedIds<B>::checked("embedding", ids, table.shape()[0], "token"));
}

}  // namespace megacpp
