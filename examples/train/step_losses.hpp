// examples/train/step_losses.hpp: the loss values of one training step, queued per micro-batch
// and read once every micro-batch's forward and backward is queued (megacpp-train's log and its
// divergence check).
//
// On a GPU a loss read before its backward held the backward's launches until the forward had run;
// read after the last backward, the host never waits in the middle of the step. Only the scalars
// are kept (a Var's value holds no graph), so the graphs go with their backward as before.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "megacpp/core/error.hpp"
#include "megacpp/core/tensor.hpp"

namespace megacpp::examples {

/// One training step's loss terms, weighted as megacpp-train logs them.
template <Backend B>
class StepLosses {
 public:
  /// What read() found: the weighted sums, or the first non-finite micro-batch.
  struct Totals {
    double loss = 0;           ///< next-token losses, weighted like the micro-batches' gradients
    double mtp = 0;            ///< MTP losses, weighted by each micro-batch's share of this rank's targets
    bool mtp_computed = false; ///< an MTP loss was computed (lambda > 0)
    double balance = 0;        ///< MoE balance losses (before their weight), summed over layers
    int balance_layers = 0;    ///< MoE layers that added a balance loss
    std::string bad_loss;      ///< "training loss is NaN (micro-batch i of n)", or empty when all are finite
  };

  /// Keeps micro-batch `micro`'s loss terms (LM::Losses), with its `weight` in the gradient and
  /// its `share` of this rank's learned targets.
  template <class Terms>
  void queue(index_t micro, double weight, double share, const Terms& terms) {
    Queued& q = queued_.emplace_back(Queued{micro, weight, share, terms.total.value(), terms.main.value(), {}});
    for (const auto& aux : terms.aux) q.aux.emplace_back(aux.name, aux.loss.value());
  }

  /// Reads every queued value (on a GPU, once the step is queued) and sums them in micro-batch
  /// order; stops at the first non-finite total of the step's `accumulation` micro-batches.
  Totals read(index_t accumulation) const {
    Totals t;
    for (const Queued& q : queued_) {
      const double value = q.total.item();
      if (!std::isfinite(value)) {
        t.bad_loss = megacpp::detail::concat("training loss is ", std::isnan(value) ? "NaN" : "infinite",
                                             " (micro-batch ", q.micro + 1, " of ", accumulation, ")");
        return t;
      }
      t.loss += q.weight * (q.aux.empty() ? value : static_cast<double>(q.main.item()));
      int balance_here = 0;
      for (const auto& [name, aux] : q.aux)
        if (name == "mtp") {
          t.mtp += q.share * static_cast<double>(aux.item());
          t.mtp_computed = true;
        } else if (name.ends_with(".balance")) {
          t.balance += q.share * static_cast<double>(aux.item());
          ++balance_here;
        }
      t.balance_layers = std::max(t.balance_layers, balance_here);
    }
    return t;
  }

 private:
  struct Queued {
    index_t micro;
    double weight, share;
    Tensor<float, B> total, main;                                // scalars: main + lambda * aux, and main
    std::vector<std::pair<std::string, Tensor<float, B>>> aux;  // name, value
  };
  std::vector<Queued> queued_;
};

}  // namespace megacpp::examples
