// megacpp/nn/moe/routing.hpp: the routing rules of MoE, as policies.
//
// A policy turns the router's logits (tokens, E) into the differentiable scores (tokens, E) whose
// selected entries become the gates, normalised over the k selected when `normalize` is set, and
// says what the experts are chosen by: the scores (or `choose_by`), plus a bias when it has one.
// The choice itself, each token's k largest keys with ties to the lower expert index, is the
// ExpertRouting kernel's (megacpp/core/kernels/expert_routing.hpp), on the scores' backend.
//
//   SoftmaxTopK      p = softmax(logits); top-k of p; gates p_sel / sum p_sel (Mixtral,
//                    arXiv 2401.04088) or p_sel (Switch with k = 1: normalize = false).
//                    Load-balancing loss (Switch Transformer, Fedus et al. 2021, arXiv 2101.03961,
//                    eq. 4):  balance = E * sum_e f_e P_e,  f_e = share of the step's (token, slot)
//                    assignments that went to e (a constant), P_e = mean over tokens of p[:, e].
//                    It is 1 when balanced, E when everything goes to one expert.
//   SigmoidBiasTopK  s = sigmoid(logits); top-k of s + bias (bias for the choice only);
//                    gates s_sel / sum s_sel (DeepSeek-V3, arXiv 2412.19437, sec. 2.1.2, eqs.
//                    15-16). No auxiliary loss: after each optimiser step the trainer calls
//                    update_bias(load, gamma):  bias_e += gamma * sign(mean load - load_e)
//                    (the auxiliary-loss-free balancing of Wang et al., arXiv 2408.15664).
//
// State: SigmoidBiasTopK's bias is host state of the balancing controller, changed only by
// update_bias, never by the gradient; it is not a Param but layer state (MoE::for_each_state), which
// checkpoints save beside the weights, so a resumed run continues with the bias it had. The balance loss is computed from the step's batch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "megacpp/autograd/ops/reduce.hpp"
#include "megacpp/autograd/ops/softmax.hpp"
#include "megacpp/nn/aux_loss.hpp"
#include "megacpp/nn/moe/dispatch.hpp"
#include "megacpp/nn/moe/router.hpp"

namespace megacpp {

/// What a routing policy decided for one step.
template <class T, Backend B>
struct RouteDecision {
  Var<T, B> scores;                           ///< (tokens, E): the gates are its selected entries
  bool normalize = true;                      ///< divide each token's k gates by their sum
  const std::vector<double>* bias = nullptr;  ///< (E), host: added to the keys for the choice only
  std::optional<Tensor<T, B>> choose_by;      ///< (tokens, E): the keys' scores, when not `scores`

  /// The scores the experts are chosen by.
  const Tensor<T, B>& choice() const { return choose_by ? *choose_by : scores.value(); }
};

/// Softmax scores, top-k, Switch's load-balancing auxiliary loss.
struct SoftmaxTopK {
  static constexpr const char* name = "softmax_topk";  ///< for describe()
  bool normalize = true;  ///< Mixtral's renormalised top-k gates; false: the raw probabilities (Switch, k = 1)

  /// No per-expert state.
  void reset(index_t) {}

  /// p = softmax(logits), the experts chosen by p.
  template <class T, Backend B>
  RouteDecision<T, B> route(const Var<T, B>& logits, index_t) const {
    return {softmax(logits), normalize, nullptr, std::nullopt};
  }

  /// balance = E * sum_e f_e P_e (eq. 4 of Fedus et al.), added to `aux` as "balance".
  template <class T, Backend B>
  void add_aux_loss(const RouteDecision<T, B>& d, const MoELoad& load, AuxLosses<T, B>& aux, double weight) const {
    const index_t experts = d.scores.shape()[1];
    std::vector<T> f(static_cast<std::size_t>(experts));
    for (index_t e = 0; e < experts; ++e)
      f[e] = static_cast<T>(static_cast<double>(load.tokens_per_expert[e]) / static_cast<double>(load.assignments));
    const Var<T, B> P = mean(d.scores, 0);  // (E)
    const Var<T, B> fv(Tensor<T, B>::from_host(Shape{experts}, f));
    aux.add("balance", scale(sum(mul(P, fv)), static_cast<double>(experts)), weight);
  }
};

/// Sigmoid scores, top-k of score + bias, the bias moved toward balance outside the gradient.
struct SigmoidBiasTopK {
  static constexpr const char* name = "sigmoid_bias_topk";  ///< for describe()
  std::vector<double> bias;  ///< (E): added to the scores for the choice only

  /// E zeros.
  void reset(index_t experts) { bias.assign(static_cast<std::size_t>(experts), 0.0); }

  /// s = sigmoid(logits), the experts chosen by s + bias; gates normalised.
  template <class T, Backend B>
  RouteDecision<T, B> route(const Var<T, B>& logits, index_t) const {
    check(static_cast<index_t>(bias.size()) == logits.shape()[1], "SigmoidBiasTopK", "bias has ", bias.size(),
          " entries for ", logits.shape()[1], " experts (call reset(experts))");
    return {sigmoid(logits), true, &bias, std::nullopt};
  }

  /// bias_e += gamma * sign(mean load - load_e), from the last step's load (DeepSeek-V3 sec.
  /// 2.1.2, gamma the "bias update speed", 0.001 there).
  void update_bias(const MoELoad& load, double gamma) {
    check(gamma >= 0 && load.tokens_per_expert.size() == bias.size(), "SigmoidBiasTopK::update_bias", "gamma ", gamma,
          " must be >= 0 and the load must have one count per expert (", load.tokens_per_expert.size(), " for ",
          bias.size(), ")");
    const double mean = static_cast<double>(load.assignments) / static_cast<double>(bias.size());
    for (std::size_t e = 0; e < bias.size(); ++e) {
      const double c = static_cast<double>(load.tokens_per_expert[e]);
      bias[e] += gamma * (c < mean ? 1.0 : c > mean ? -1.0 : 0.0);
    }
  }
};

}  // namespace megacpp
