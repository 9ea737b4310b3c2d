// megacpp/nn/moe/moe.hpp: the mixture-of-experts feed-forward, MoE<T, B, Routing, Act>.
//
//   logits = x W_r^T                           router (Role::router -> AdamW)
//   experts_t, gates_t = Routing(logits)       top-k per token, ties to the lower index (the
//                                               ExpertRouting kernel, on the logits' backend)
//   xs = x[token_of_row]                       (rows = tokens k, d) sorted by expert
//   ys = grouped(Act(grouped(xs, W_up)), W_down)          one grouped product each way
//   y_t = sum_j gate_t,j ys[row_of_slot(t, j)] (+ shared(x_t))   slot order (the GatedCombine
//                                               kernel: one pass each way), then the shared experts
//
// Experts are MLPs like the dense MLP (ReLU^2, output projection zero-initialised), each with its
// own (hidden, d) and (d, hidden) Role::matrix weights (so Muon orthogonalises each expert's
// matrix); the forward stacks them into (E, hidden, d) for the grouped product. Shared experts
// (DeepSeekMoE, arXiv 2401.06066) are always on; n of them of width h are one MLP of width n h.
//
// No capacity factor, no token dropping: every selected (token, expert) pair is computed, so a
// token's output is a function of its own input only and MoE passes check_document_masking
// bitwise (tests/moe). The balance loss (SoftmaxTopK) is a batch statistic: its gradient reaches
// every token's router probabilities, across documents (docs/moe.md).
//
// Load statistics: last_load() holds the assignments per expert of the last forward (min/max
// fraction for the trainer's log); SigmoidBiasTopK reads it in update_bias(gamma).
#pragma once

#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "megacpp/autograd/ops/gated_combine.hpp"
#include "megacpp/autograd/ops/grouped_matmul.hpp"
#include "megacpp/autograd/ops/relu2_linear.hpp"
#include "megacpp/autograd/ops/shape.hpp"
#include "megacpp/nn/aux_loss.hpp"
#include "megacpp/nn/mlp.hpp"
#include "megacpp/nn/moe/dispatch.hpp"
#include "megacpp/nn/moe/router.hpp"
#include "megacpp/nn/moe/routing.hpp"

namespace megacpp {

/// Sizes of an MoE feed-forward.
struct MoEConfig {
  index_t d_model = 0;        ///< model width
  index_t experts = 8;        ///< E, routed experts
  index_t top_k = 2;          ///< k experts per token
  index_t expert_hidden = 0;  ///< each expert's width; 0: 4 d_model / top_k (the dense MLP's active FLOPs)
  index_t shared_experts = 0; ///< always-on experts of width expert_hidden (0: none)
  double aux_loss_weight = 0.01;  ///< weight of the balance loss (Switch's alpha = 1e-2); 0 skips it

  /// expert_hidden or its default.
  index_t hidden() const { return expert_hidden ? expert_hidden : 4 * d_model / (top_k > 0 ? top_k : 1); }
  /// Throws unless the sizes make an MoE, naming the values.
  void validate() const {
    check(experts >= 1, "MoE", "experts must be >= 1, got ", experts);
    check(top_k >= 1 && top_k <= experts, "MoE", "top_k must be in [1, experts = ", experts, "], got ", top_k);
    check(d_model > 0, "MoE", "d_model must be positive, got ", d_model);
    check(hidden() > 0, "MoE", "expert_hidden must be positive, got ", expert_hidden, " (0 gives 4 d_model / top_k = ",
          4 * d_model / top_k, ")");
    check(shared_experts >= 0, "MoE", "shared_experts must be >= 0, got ", shared_experts);
    check(aux_loss_weight >= 0, "MoE", "aux_loss_weight must be >= 0, got ", aux_loss_weight);
  }
};

/// Mixture-of-experts feed-forward: x (..., d) -> (..., d), top-k routed, no token dropped.
template <class T, Backend B, class Routing = SoftmaxTopK, class Act = ReLU2>
struct MoE {
  using value_type = T;    ///< element type
  using backend_type = B;  ///< backend
  using V = Var<T, B>;     ///< activation type

  /// One routed expert: an MLP's two projections.
  struct Expert {
    Linear<T, B> fc;    ///< (hidden, d)
    Linear<T, B> proj;  ///< (d, hidden), zero-initialised
  };

  MoEConfig config;              ///< sizes and the balance-loss weight
  Router<T, B> router;           ///< logits over the experts
  Routing routing;               ///< the routing rule (and its balancing state)
  std::vector<Expert> experts;   ///< E routed experts
  MLP<T, B, Act> shared;         ///< the shared experts, when config.shared_experts > 0

  MoE() = default;
  /// Draws the router, then each expert's fc, then the shared experts' fc (projections start at 0).
  MoE(const MoEConfig& c, Rng& rng) : config(c) {
    config.validate();
    const index_t d = c.d_model, h = c.hidden();
    router = Router<T, B>(d, c.experts, rng);
    routing.reset(c.experts);
    for (index_t e = 0; e < c.experts; ++e)
      experts.push_back({Linear<T, B>(d, h, rng), Linear<T, B>(h, d, rng, LinearInit::zeros)});
    if (c.shared_experts > 0) shared = MLP<T, B, Act>(d, rng, c.shared_experts * h);
  }

  /// x (..., d) -> (..., d); the balance loss, if the policy has one and its weight is > 0, goes
  /// to `aux` as "balance".
  V forward(const V& x, AuxLosses<T, B>& aux) const {
    const index_t d = config.d_model, k = config.top_k;
    check(x.rank() >= 1 && x.shape()[-1] == d, "MoE", "input ", x.shape(), " must end in d_model ", d);
    const index_t tokens = x.numel() / d;
    const V x2 = reshape(x, Shape{tokens, d});
    RouteDecision<T, B> route = routing.route(router.forward(x2), k);
    const DispatchPlan<B> plan = DispatchPlan<B>::route(route.choice(), route.bias, k);
    last_load_ = plan.load();
    if constexpr (requires { routing.add_aux_loss(route, last_load_, aux, config.aux_loss_weight); })
      if (config.aux_loss_weight > 0) routing.add_aux_loss(route, last_load_, aux, config.aux_loss_weight);

    V y = gated_combine(expert_mlps(dispatch_rows(x2, plan), plan.offsets), gates(route, plan), plan.row_of_slot);
    if (config.shared_experts > 0) y = y + shared.forward(x2);
    return reshape(y, x.shape());
  }

  /// The same, without keeping the balance loss.
  V forward(const V& x) const {
    AuxLosses<T, B> unused;
    return forward(x, unused);
  }

  /// Assignments per expert in the last forward (empty before the first).
  const MoELoad& last_load() const { return last_load_; }

  /// SigmoidBiasTopK's balancing step from the last forward's load (call after the optimiser
  /// step); a policy without a bias has nothing to update.
  void update_bias(double gamma) { update_bias(last_load_, gamma); }
  /// The same from a given load: a whole step's (its micro-batches', and in a data-parallel run
  /// every rank's, so that all ranks move the bias alike).
  void update_bias(const MoELoad& load, double gamma) {
    if constexpr (requires { routing.update_bias(load, gamma); }) routing.update_bias(load, gamma);
  }

  /// "MoE 8x256 top2 softmax_topk shared 1".
  std::string describe() const { return describe(config, Routing::name); }
  /// The same from a configuration.
  static std::string describe(const MoEConfig& c, const char* routing_name) {
    std::ostringstream os;
    os << "MoE " << c.experts << "x" << c.hidden() << " top" << c.top_k << " " << routing_name;
    if (c.shared_experts) os << " shared " << c.shared_experts;
    return os.str();
  }

  /// Visits "router.weight", "experts.<e>.fc.weight", "experts.<e>.proj.weight" (and "shared.*").
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    router.for_each_param(visit, child_name(prefix, "router"));
    for (std::size_t e = 0; e < experts.size(); ++e) {
      const std::string name = child_name(prefix, "experts." + std::to_string(e));
      experts[e].fc.for_each_param(visit, child_name(name, "fc"));
      experts[e].proj.for_each_param(visit, child_name(name, "proj"));
    }
    if (config.shared_experts > 0) shared.for_each_param(visit, child_name(prefix, "shared"));
  }

  /// Visits the routing rule's balancing bias as "routing.bias" when the rule has one
  /// (SigmoidBiasTopK): not a parameter, but it decides the experts, so checkpoints carry it.
  template <class Visitor>
  void for_each_state(Visitor&& visit, const std::string& prefix = "") {
    if constexpr (requires { routing.bias; }) visit(child_name(prefix, "routing.bias"), routing.bias);
  }

 private:
  mutable MoELoad last_load_;

  // The experts' MLPs over the dispatched rows (sorted by expert): under bf16 products with relu²,
  // one op that keeps the hidden activation in bf16 only and rounds relu²'s gradient where it
  // computes it (autograd/ops/relu2_linear.hpp; the same bits as the separate ops), as the dense
  // MLP does.
  V expert_mlps(const V& rows, const std::vector<index_t>& offsets) const {
    if constexpr (std::is_same_v<T, float> && std::is_same_v<Act, ReLU2>) {
      if (matmul_precision() == MatmulPrecision::bf16)
        return relu2_grouped_mlp_bf16(rows, stacked(&Expert::fc), stacked(&Expert::proj), offsets);
    }
    return grouped_matmul(Act::apply(grouped_matmul(rows, stacked(&Expert::fc), offsets)), stacked(&Expert::proj), offsets);
  }

  // The experts' `which` weights stacked (E, out, in) for the grouped product (its backward
  // hands each expert its slice of the gradient).
  V stacked(Linear<T, B> Expert::*which) const {
    std::vector<V> parts;
    parts.reserve(experts.size());
    for (const Expert& e : experts) {
      const V& w = (e.*which).weight.var;
      parts.push_back(reshape(w, Shape{1, w.shape()[0], w.shape()[1]}));
    }
    return concat(parts, 0);
  }

  // Each token's gates (tokens, k): the selected scores, divided by their sum per token when the
  // policy normalises.
  static V gates(const RouteDecision<T, B>& route, const DispatchPlan<B>& plan) {
    const index_t tokens = plan.tokens, k = plan.k, E = plan.experts;
    V selected = reshape(embedding(reshape(route.scores, Shape{tokens * E, 1}), plan.score_index), Shape{tokens, k});
    if (route.normalize) {
      const V ones(Tensor<T, B>::full(Shape{tokens}, T(1)));
      selected = scale_rows(selected, div(ones, sum(selected, -1)));
    }
    return selected;
  }
};

}  // namespace megacpp
