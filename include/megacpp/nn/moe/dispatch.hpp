// megacpp/nn/moe/dispatch.hpp: the permutation between tokens and the expert-sorted buffer.
//
// Every (token, slot) pair the router selected becomes one row of a contiguous buffer sorted by
// expert: a stable counting sort, so within an expert the rows are in (token, slot) order. Group
// g's rows are [offsets[g], offsets[g + 1]) (the layout of kernels::GroupedGemm). No capacity
// factor: every selected pair gets its row, whatever the others chose, so a token's output
// depends only on its own input (docs/moe.md, "No token dropping").
//
//   dispatch  xs[r]  = x[token_of_row[r]]                  (rows, d)    embedding gather
//   combine   y[t]   = sum_{j < k} gate[t, j] ys[row_of_slot[j, t]]   (tokens, d)  slot j = 0, 1, ... in order
//
// The combine is the GatedCombine kernel (autograd/ops/gated_combine.hpp): it adds a token's k
// rows in slot order on every thread count, and its backward writes each row once (each row
// belongs to one slot), so both are bitwise deterministic; the dispatch's backward adds a token's
// k row gradients in row order (scatter_add_rows sums rows in order).
#pragma once

#include <cstdint>
#include <vector>

#include "megacpp/autograd/function.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/embedding.hpp"

namespace megacpp {

/// Tokens routed to experts in one step: how many per expert (the load the trainer logs).
struct MoELoad {
  std::vector<index_t> tokens_per_expert;  ///< assignments (token, slot) per expert
  index_t assignments = 0;                 ///< tokens * k

  /// Smallest share of the assignments any expert got (1 / experts when balanced).
  double min_fraction() const { return fraction(true); }
  /// Largest share of the assignments any expert got.
  double max_fraction() const { return fraction(false); }

 private:
  double fraction(bool smallest) const {
    if (tokens_per_expert.empty() || assignments == 0) return 0;
    index_t v = tokens_per_expert[0];
    for (index_t c : tokens_per_expert) v = smallest ? std::min(v, c) : std::max(v, c);
    return static_cast<double>(v) / static_cast<double>(assignments);
  }
};

/// The permutation of one step, built on the host from the selected experts (tokens, k).
struct DispatchPlan {
  index_t tokens = 0;   ///< tokens routed this step
  index_t k = 0;        ///< experts per token
  index_t experts = 0;  ///< routed experts
  std::vector<index_t> offsets;             ///< experts + 1: group layout of the sorted buffer
  std::vector<std::int32_t> token_of_row;   ///< rows: the token each sorted row came from
  std::vector<std::int32_t> slot_of_row;    ///< rows: token * k + slot of each sorted row
  std::vector<std::int32_t> row_of_slot;    ///< (k, tokens): slot j of token t sits at row [j * tokens + t]

  /// Stable counting sort of the (token, slot) pairs by expert id.
  static DispatchPlan sort(const std::vector<std::int32_t>& selected, index_t tokens, index_t k, index_t experts) {
    DispatchPlan p;
    p.tokens = tokens;
    p.k = k;
    p.experts = experts;
    const index_t rows = tokens * k;
    p.offsets.assign(static_cast<std::size_t>(experts + 1), 0);
    for (std::int32_t e : selected) ++p.offsets[static_cast<std::size_t>(e) + 1];
    for (index_t e = 0; e < experts; ++e) p.offsets[e + 1] += p.offsets[e];
    std::vector<index_t> next(p.offsets.begin(), p.offsets.end() - 1);
    p.token_of_row.resize(static_cast<std::size_t>(rows));
    p.slot_of_row.resize(static_cast<std::size_t>(rows));
    p.row_of_slot.resize(static_cast<std::size_t>(rows));
    for (index_t t = 0; t < tokens; ++t)
      for (index_t j = 0; j < k; ++j) {
        const index_t r = next[static_cast<std::size_t>(selected[t * k + j])]++;
        p.token_of_row[r] = static_cast<std::int32_t>(t);
        p.slot_of_row[r] = static_cast<std::int32_t>(t * k + j);
        p.row_of_slot[j * tokens + t] = static_cast<std::int32_t>(r);
      }
    return p;
  }

  /// Assignments per expert.
  MoELoad load() const {
    MoELoad l;
    l.assignments = tokens * k;
    for (index_t e = 0; e < experts; ++e) l.tokens_per_expert.push_back(offsets[e + 1] - offsets[e]);
    return l;
  }
};

/// x (rows, cols) scaled row by row: y[r, c] = x[r, c] * s[r], s (rows). The gate multiply.
template <class T, Backend B>
Var<T, B> scale_rows(const Var<T, B>& x, const Var<T, B>& s) {
  check(x.rank() == 2 && s.rank() == 1 && s.shape()[0] == x.shape()[0], "scale_rows", "x must be (rows, cols) and s (rows), got ",
        x.shape(), " and ", s.shape());
  const index_t rows = x.shape()[0], cols = x.shape()[1];
  Tensor<T, B> s_wide(x.shape());  // s broadcast along the columns
  B::template expand<T>(rows, cols, 1, T(1), s.value().data(), T(0), s_wide.data());
  Tensor<T, B> y(x.shape());
  B::template map<T>(1, rows * cols, fn::Mul{}, y.data(), In<T>{x.value().data()}, In<T>{s_wide.data()});
  return make_result("scale_rows", std::move(y), [x, s, s_wide, rows, cols](const Tensor<T, B>& g) mutable {
    if (x.requires_grad())
      put_gradient<T, B>(x.grad_sink(), 1, rows * cols, fn::Mul{}, In<T>{g.data()}, In<T>{s_wide.data()});
    if (s.requires_grad()) {
      const GradSink<T> sink = s.grad_sink();
      B::template reduce<T>(rows, cols, 1, fn::Mul{}, T(1), sink.beta, sink.data, In<T>{g.data()}, In<T>{x.value().data()});
    }
  }, x, s);
}

/// xs (rows, d): every token's row once per slot, sorted by expert.
template <class T, Backend B>
Var<T, B> dispatch_rows(const Var<T, B>& x, const DispatchPlan& plan) {
  return embedding(x, Tensor<std::int32_t, B>::from_host(Shape{plan.tokens * plan.k}, plan.token_of_row));
}

}  // namespace megacpp
