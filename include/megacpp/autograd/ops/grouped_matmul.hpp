/// \file
/// megacpp/autograd/ops/grouped_matmul.hpp: the grouped product of the MoE experts as one graph
/// node, through the GroupedGemm kernel contract (megacpp/core/kernels/grouped_gemm.hpp).
///
///   y[r] = x[r] w_g^T  for every row r of group g, i.e. rows [offsets[g], offsets[g + 1])
///   dx_g = dy_g w_g,  dw_g = dy_g^T x_g
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "megacpp/autograd/function.hpp"
#include "megacpp/core/kernels/grouped_gemm.hpp"

namespace megacpp {

/// x (M, K) with rows sorted by group, w (E, N, K) stacked per group, `offsets` (E + 1 entries,
/// host) the group layout -> (M, N). Groups may be empty; M = offsets[E].
template <class T, Backend B>
Var<T, B> grouped_matmul(const Var<T, B>& x, const Var<T, B>& w, std::vector<index_t> offsets) {
  const char* op = "grouped_matmul";
  check(x.rank() == 2 && w.rank() == 3, op, "x must be (rows, K) and w (groups, N, K), got ", x.shape(), " and ",
        w.shape());
  const index_t groups = w.shape()[0], n = w.shape()[1], k = w.shape()[2];
  check(x.shape()[1] == k, op, "x ", x.shape(), " has ", x.shape()[1], " features, w ", w.shape(), " expects ", k);
  check(static_cast<index_t>(offsets.size()) == groups + 1, op, "the group layout needs ", groups + 1,
        " offsets (groups + 1), got ", offsets.size());
  auto layout = std::make_shared<const std::vector<index_t>>(std::move(offsets));
  const kernels::GroupedGemmParams p{groups, k, n, layout->data()};
  p.validate(op);
  check(p.rows() == x.shape()[0], op, "the group layout covers ", p.rows(), " rows but x has ", x.shape()[0]);
  Tensor<T, B> y(Shape{x.shape()[0], n});
  kernels::GroupedGemm<B>::template forward<T>(p, {x.value().data(), w.value().data(), y.data()});
  return make_result(op, std::move(y), [x, w, layout, p](const Tensor<T, B>& g) mutable {
    kernels::GroupedGemm<B>::template backward<T>(
        p, {x.value().data(), w.value().data(), nullptr},
        {g.data(), x.requires_grad() ? x.grad_buffer().data() : nullptr,
         w.requires_grad() ? w.grad_buffer().data() : nullptr});
  }, x, w);
}

}  // namespace megacpp
