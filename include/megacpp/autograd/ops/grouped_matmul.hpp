/// \file
/// megacpp/autograd/ops/grouped_matmul.hpp: the grouped product of the MoE experts as one graph
/// node, through the GroupedGemm kernel contract (megacpp/core/kernels/grouped_gemm.hpp).
///
///   y[r] = x[r] w_g^T  for every row r of group g, i.e. rows [offsets[g], offsets[g + 1])
///   dx_g = dy_g w_g,  dw_g = dy_g^T x_g
///
/// Under MatmulPrecision::bf16 (autograd/precision.hpp) a float product runs on bf16 copies of x
/// and w (Var::value_as_bf16, so a weight is rounded once per write) and of dy (rounded once in
/// the backward), with fp32 sums and results, as `matmul` does: the MoE experts' products follow
/// the model's precision policy like every other product.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/precision.hpp"
#include "megacpp/core/kernels/grouped_gemm.hpp"

namespace megacpp {

namespace detail {

// The group layout of x (M, K) against w (E, N, K): checked (op names the caller), kept alive by
// the shared pointer the backward captures; params.offsets points into it.
struct GroupedLayout {
  std::shared_ptr<const std::vector<index_t>> offsets;
  kernels::GroupedGemmParams params;
};
inline GroupedLayout grouped_layout(const char* op, const Shape& x, const Shape& w, std::vector<index_t> offsets) {
  check(x.rank() == 2 && w.rank() == 3, op, "x must be (rows, K) and w (groups, N, K), got ", x, " and ", w);
  const index_t groups = w[0], n = w[1], k = w[2];
  check(x[1] == k, op, "x ", x, " has ", x[1], " features, w ", w, " expects ", k);
  check(static_cast<index_t>(offsets.size()) == groups + 1, op, "the group layout needs ", groups + 1,
        " offsets (groups + 1), got ", offsets.size());
  GroupedLayout l{std::make_shared<const std::vector<index_t>>(std::move(offsets)), {}};
  l.params = kernels::GroupedGemmParams{groups, k, n, l.offsets->data()};
  l.params.validate(op);
  check(l.params.rows() == x[0], op, "the group layout covers ", l.params.rows(), " rows but x has ", x[0]);
  return l;
}

// grouped_matmul under MatmulPrecision::bf16: the same grouped products on bf16 copies of x, w
// and dy (fp32 sums, results and gradients).
template <Backend B>
Var<float, B> grouped_matmul_bf16(const Var<float, B>& x, const Var<float, B>& w, GroupedLayout l) {
  const kernels::GroupedGemmParams p = l.params;
  const std::shared_ptr<const std::vector<index_t>> layout = std::move(l.offsets);  // p.offsets' storage
  const Tensor<bf16, B> x16 = x.value_as_bf16(), w16 = w.value_as_bf16();
  Tensor<float, B> y(Shape{x.shape()[0], p.n});
  kernels::GroupedGemm<B>::template forward<float, bf16>(p, {x16.data(), w16.data(), y.data()});
  return make_result("grouped_matmul_bf16", std::move(y), [x, w, x16, w16, layout, p](const Tensor<float, B>& g) mutable {
    const Tensor<bf16, B> g16 = g.template to<bf16>();
    kernels::GroupedGemm<B>::template backward<float, bf16>(
        p, {x16.data(), w16.data(), nullptr},
        {g16.data(), x.requires_grad() ? x.grad_buffer().data() : nullptr,
         w.requires_grad() ? w.grad_buffer().data() : nullptr});
  }, x, w);
}

}  // namespace detail

/// x (M, K) with rows sorted by group, w (E, N, K) stacked per group, `offsets` (E + 1 entries,
/// host) the group layout -> (M, N). Groups may be empty; M = offsets[E].
template <class T, Backend B>
Var<T, B> grouped_matmul(const Var<T, B>& x, const Var<T, B>& w, std::vector<index_t> offsets) {
  detail::GroupedLayout l = detail::grouped_layout("grouped_matmul", x.shape(), w.shape(), std::move(offsets));
  if constexpr (std::is_same_v<T, float>) {
    if (matmul_precision() == MatmulPrecision::bf16) return detail::grouped_matmul_bf16<B>(x, w, std::move(l));
  }
  const kernels::GroupedGemmParams p = l.params;
  const std::shared_ptr<const std::vector<index_t>> layout = std::move(l.offsets);  // p.offsets' storage
  Tensor<T, B> y(Shape{x.shape()[0], p.n});
  kernels::GroupedGemm<B>::template forward<T>(p, {x.value().data(), w.value().data(), y.data()});
  return make_result("grouped_matmul", std::move(y), [x, w, layout, p](const Tensor<T, B>& g) mutable {
    kernels::GroupedGemm<B>::template backward<T>(
        p, {x.value().data(), w.value().data(), nullptr},
        {g.data(), x.requires_grad() ? x.grad_buffer().data() : nullptr,
         w.requires_grad() ? w.grad_buffer().data() : nullptr});
  }, x, w);
}

}  // namespace megacpp
