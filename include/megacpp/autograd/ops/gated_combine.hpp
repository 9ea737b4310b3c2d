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
#include "megacpp/autograd/ops/embedding.hpp"  // detail::check_ids
#include "megacpp/core/kernels/gated_combine.hpp"

namespace megacpp {

/// ys (tokens * k, d) sorted by expert, gate (tokens, k), `row_of_slot` (k * tokens entries in
/// backend memory, a permutation of the rows, as kernels::ExpertRouting writes it) -> y (tokens, d).
/// The entries are checked to be rows (B::minmax_index), not to be distinct: a repeated row gives
/// a wrong sum, never a read outside ys. The host overload below checks the permutation.
template <class T, Backend B>
Var<T, B> gated_combine(const Var<T, B>& ys, const Var<T, B>& gate, const Tensor<std::int32_t, B>& row_of_slot) {
  const char* op = "gated_combine";
  check(ys.rank() == 2 && gate.rank() == 2, op, "ys must be (rows, d) and gate (tokens, k), got ", ys.shape(), " and ",
        gate.shape());
  const kernels::GatedCombineParams p{gate.shape()[0], gate.shape()[1], ys.shape()[1]};
  p.validate(op);
  check(ys.shape()[0] == p.rows(), op, "ys has ", ys.shape()[0], " rows, gate ", gate.shape(), " needs tokens * k = ",
        p.rows());
  check(row_of_slot.numel() == p.rows(), op, "row_of_slot has ", row_of_slot.numel(), " entries, expected tokens * k = ",
        p.rows());
  detail::check_ids(op, row_of_slot, p.rows(), "row");
  Tensor<T, B> y(Shape{p.tokens, p.d});
  kernels::GatedCombine<B>::template forward<T>(p, {row_of_slot.data(), gate.value().data(), ys.value().data(), y.data()});
  return make_result(op, std::move(y), [ys, gate, rows = row_of_slot, p](const Tensor<T, B>& g) mutable {
    kernels::GatedCombine<B>::template backward<T>(
        p, {rows.data(), gate.value().data(), ys.value().data(), nullptr},
        {g.data(), ys.requires_grad() ? ys.grad_buffer().data() : nullptr,
         gate.requires_grad() ? gate.grad_buffer().data() : nullptr});
  }, ys, gate);
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
  return gated_combine(ys, gate, Tensor<std::int32_t, B>::from_host(Shape{rows}, row_of_slot));
}

}  // namespace megacpp
