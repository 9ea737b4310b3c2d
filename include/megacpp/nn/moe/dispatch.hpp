// megacpp/nn/moe/dispatch.hpp: the permutation between tokens and the expert-sorted buffer.
//
// Every (token, slot) pair the router selected becomes one row of a contiguous buffer sorted by
// expert: a stable sort (the ExpertRouting kernel, on the backend that holds the scores), so
// within an expert the rows are in (token, slot) order. Group
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
#include "megacpp/core/bounded_ids.hpp"
#include "megacpp/core/kernels/expert_routing.hpp"

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

/// One step's routing: each token's k experts and the permutation that sorts the (token, slot)
/// pairs by expert, made by the ExpertRouting kernel on the scores' backend
/// (megacpp/core/kernels/expert_routing.hpp). Only the group layout is host data.
template <Backend B>
struct DispatchPlan {
  index_t tokens = 0;   ///< tokens routed this step
  index_t k = 0;        ///< experts per token
  index_t experts = 0;  ///< routed experts
  std::vector<index_t> offsets;          ///< experts + 1, host: group layout of the sorted buffer
  // The kernel's outputs, in backend memory and in range by its contract: the gathers by them
  // check only the bounds (megacpp/core/bounded_ids.hpp), with no device-to-host sync.
  BoundedIds<B> score_index;   ///< (tokens * k) < tokens * experts: t * experts + e for slot j of token t, best first
  BoundedIds<B> token_of_row;  ///< (rows) < tokens: the token each sorted row came from
  BoundedIds<B> row_of_slot;   ///< (k * tokens) < rows: slot j of token t sits at row [j * tokens + t]

  /// Each token's k experts by the largest scores (tokens, E) plus `bias` (E, host; null: none),
  /// ties to the lower expert index, and a stable sort of the pairs by expert. Throws on a
  /// non-finite score, naming the token and the expert.
  template <class T>
  static DispatchPlan route(const Tensor<T, B>& scores, const std::vector<double>* bias, index_t k) {
    check(scores.rank() == 2, "MoE routing", "scores must be (tokens, experts), got ", scores.shape());
    const kernels::ExpertRoutingParams params{scores.shape()[0], scores.shape()[1], k};
    params.validate("MoE routing");
    check(!bias || static_cast<index_t>(bias->size()) == params.experts, "MoE routing", "the choice bias has ",
          bias ? bias->size() : 0, " entries for ", params.experts, " experts");
    DispatchPlan p;
    p.tokens = params.tokens;
    p.k = k;
    p.experts = params.experts;
    p.offsets.assign(static_cast<std::size_t>(p.experts + 1), 0);
    Tensor<std::int32_t, B> score_index(Shape{params.rows()}), token_of_row(Shape{params.rows()}),
        row_of_slot(Shape{params.rows()});
    Tensor<double, B> bias_on_backend;
    if (bias) bias_on_backend = Tensor<double, B>::from_host(Shape{p.experts}, *bias);
    const kernels::RoutingFault fault = kernels::ExpertRouting<B>::template route<T>(
        params, {scores.data(), bias ? bias_on_backend.data() : nullptr, score_index.data(), token_of_row.data(),
                 row_of_slot.data(), p.offsets.data()});
    check(!fault, "MoE router", "score of token ", fault.token, " for expert ", fault.expert, " is ", fault.score,
          ": the router's input or weights are not finite");
    p.score_index = BoundedIds<B>::by_contract(std::move(score_index), params.tokens * params.experts, "score_index");
    p.token_of_row = BoundedIds<B>::by_contract(std::move(token_of_row), params.tokens, "token_of_row");
    p.row_of_slot = BoundedIds<B>::by_contract(std::move(row_of_slot), params.rows(), "row_of_slot");
    return p;
  }

  /// Assignments per expert.
  MoELoad load() const {
    MoELoad l;
    l.assignments = tokens * k;
    for (index_t e = 0; e < experts; ++e) l.tokens_per_expert.push_back(offsets[e + 1] - offsets[e]);
    return l;
  }

  /// Each token's k experts (tokens, k), best first, copied to the host (tests, host-side policies).
  std::vector<std::int32_t> selected_experts() const {
    std::vector<std::int32_t> s = score_index.ids().to_host();
    for (std::size_t i = 0; i < s.size(); ++i) s[i] -= static_cast<std::int32_t>(static_cast<index_t>(i) / k * experts);
    return s;
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
Var<T, B> dispatch_rows(const Var<T, B>& x, const DispatchPlan<B>& plan) {
  return embedding(x, plan.token_of_row);
}

}  // namespace megacpp
