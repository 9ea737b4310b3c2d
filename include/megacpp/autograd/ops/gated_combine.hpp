/// \file
/// megacpp/autograd/ops/gated_combine.hpp: the MoE layer's weighted return from the
/// expert-sorted rows to the tokens as one graph node, through the GatedCombine kernel contract
/// (megacpp/core/kernels/gated_combine.hpp).
///
///   y[t] = sum_{j < k} gate[t, j] ys[row_of_slot[j * tokens + t]]
///   dys[row] = gate[t, j] dy[t],  dgate[t, j] = dy[t] . ys[row]
#pragma once

#include <cstdint>
#include <vector>

#include "megacpp/autograd/function.hpp"
#include "megacpp/core/bounded_ids.hpp"
#include "megacpp/core/kernels/gated_combine.hpp"

namespace megacpp {

namespace detail {
// The shapes' checks, naming the op and the shapes: ys (tokens * k, d), gate (tokens, k) and
// `entries` slot rows.
inline kernels::GatedCombineParams gated_combine_params(const Shape& ys, const Shape& gate, index_t entries) {
  const char* op = "gated_combine";
  check(ys.rank() == 2 && gate.rank() == 2, op, "ys must be (rows, d) and gate (tokens, k), got ", ys, " and ", gate);
  const kernels::GatedCombineParams p{gate[0], gate[1], ys[1]};
  p.validate(op);
  check(ys[0] == p.rows(), op, "ys has ", ys[0], " rows, gate ", gate, " needs tokens * k = ", p.rows());
  check(entries == p.rows(), op, "row_of_slot has ", entries, " entries, expected tokens * k = ", p.rows());
  return p;
}
}  // namespace detail

/// ys (tokens * k, d) sorted by expert, gate (tokens, k), `row_of_slot` (k * tokens rows of ys in
/// backend memory, a permutation of them, as kernels::ExpertRouting writes it) -> y (tokens, d).
/// The ids are rows by their bound (megacpp/core/bounded_ids.hpp), not checked to be distinct: a
/// repeated row gives a wrong sum, never a read outside ys. The host overload below checks the
/// permutation.
template <class T, Backend B>
Var<T, B> gated_combine(const Var<T, B>& ys, const Var<T, B>& gate, const BoundedIds<B>& row_of_slot) {
  const char* op = "gated_combine";
  const kernels::GatedCombineParams p = detail::gated_combine_params(ys.shape(), gate.shape(), row_of_slot.numel());
  row_of_slot.check_for(op, p.rows(), "row");
  Tensor<T, B> y(Shape{p.tokens, p.d});
  kernels::GatedCombine<B>::template forward<T>(p, {row_of_slot.data(), gate.value().data(), ys.value().data(), y.data()});
  return make_result(op, std::move(y), [ys, gate, rows = row_of_slot, p](const Tensor<T, B>& g) mutable {
    kernels::GatedCombine<B>::template backward<T>(
        p, {rows.data(), gate.value().data(), ys.value().data(), nullptr},
        {g.data(), ys.requires_grad() ? ys.grad_buffer().data() : nullptr,
         gate.requires_grad() ? gate.grad_buffer().data() : nullptr});
  }, ys, gate);
}

/// The same with `row_of_slot` unchecked in backend memory: every entry is checked to be a row of
/// ys (B::minmax_index), not to be distinct.
template <class T, Backend B>
Var<T, B> gated_combine(const Var<T, B>& ys, const Var<T, B>& gate, const Tensor<std::int32_t, B>& row_of_slot) {
  const index_t rows = detail::gated_combine_params(ys.shape(), gate.shape(), row_of_slot.numel()).rows();
  return gated_combine(ys, gate, BoundedIds<B>::checked("gated_combine", row_of_slot, rows, "row"));
}

/// The same with `row_of_slot` on the host, checked to be a permutation of [0, its size).
template <class T, Backend B>
Var<T, B> gated_combine(const Var<T, B>& ys, const Var<T, B>& gate, const std::vector<std::int32_t>& row_of_slot) {
  const auto rows = static_cast<index_t>(row_of_slot.size());
  std::vector<bool> seen(row_of_slot.size(), false);
  for (std::size_t i = 0; i < row_of_slot.size(); ++i) {
    const std::int32_t r = row_of_slot[i];
    check(r >= 0 && r < rows && !seen[static_cast<std::size_t>(r)], "gated_combine", "row_of_slot[", i, "] = ", r,
          " is out of range or repeated: it must be a permutation of [0, ", rows, ")");
    seen[static_cast<std::size_t>(r)] = true;
  }
  return gated_combine(ys, gate, BoundedIds<B>::from_host("gated_combine", Shape{rows}, row_of_slot, rows, "row"));
}

}  // namespace megacpp
