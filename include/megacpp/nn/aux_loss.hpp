// megacpp/nn/aux_loss.hpp: auxiliary losses a block or model part adds beside the next-token loss.
//
// Some layers train with a second objective: an MoE router's load-balancing loss (Switch
// Transformer, Fedus et al. 2021, eq. 4), a multi-token-prediction head's loss (DeepSeek-V3,
// arXiv 2412.19437, section 2.2). A forward that produces one adds it to the AuxLosses collector
// it is handed, with a name and a weight from its own configuration:
//
//   total loss = main loss + sum_i weight_i * aux_i                 (LM::loss, LM::losses)
//
// Names are scoped by where the producer sits: LM opens "blocks.<i>", Block opens "mixer" or
// "ffn", so an MoE feed-forward's "balance" in layer 3 is "blocks.3.ffn.balance" and the same
// block type in every layer still gives distinct names.
// The weight belongs to the producer (an MoE layer's `aux_loss_weight`, MTP's scheduled lambda),
// so a schedule changes it where it lives; a weight of 0 is allowed (the producer may then skip
// the computation). With no auxiliary loss the total is the main loss itself, the same graph and
// the same bits as a model without any.
#pragma once

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/core/error.hpp"

namespace megacpp {

/// The auxiliary losses of one forward pass, in the order they were added.
template <class T, Backend B>
class AuxLosses {
 public:
  /// One auxiliary loss: what it is, its scalar value and its weight in the total.
  struct Entry {
    std::string name;  ///< e.g. "moe_balance.blocks.3", "mtp"
    Var<T, B> loss;    ///< a scalar (shape ()), in the graph
    double weight;     ///< factor of the loss in the total
  };

  /// While alive, names added are prefixed with `part` (after the scopes already open); the
  /// scope closes when this object goes away.
  class Scope {
   public:
    /// Opens `part` inside `losses`' current scope.
    Scope(AuxLosses& losses, const std::string& part) : losses_(losses), saved_(losses.prefix_.size()) {
      losses_.prefix_ += losses_.prefix_.empty() ? part : "." + part;
    }
    ~Scope() { losses_.prefix_.resize(saved_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    AuxLosses& losses_;
    std::size_t saved_;
  };

  /// Adds `weight * loss` to the total under the current scope + `name`; throws when the loss is
  /// not a scalar, the weight is negative or not finite, or the name is already taken.
  void add(const std::string& part_name, Var<T, B> loss, double weight) {
    std::string name = prefix_.empty() ? part_name : prefix_ + "." + part_name;
    check(loss.defined() && loss.shape().numel() == 1 && loss.rank() == 0, "AuxLosses::add", "auxiliary loss '",
          name, "' must be a scalar, got shape ", loss.defined() ? loss.shape() : Shape{});
    check(std::isfinite(weight) && weight >= 0, "AuxLosses::add", "auxiliary loss '", name,
          "' has weight ", weight, ": weights are finite and >= 0");
    for (const Entry& e : entries_)
      check(e.name != name, "AuxLosses::add", "auxiliary loss '", name, "' was added twice in one forward pass");
    entries_.push_back({std::move(name), std::move(loss), weight});
  }

  /// The current scope ("blocks.3.ffn"; empty at the top).
  const std::string& scope() const { return prefix_; }

  /// True when nothing was added.
  bool empty() const { return entries_.empty(); }
  /// The losses in the order they were added.
  const std::vector<Entry>& entries() const { return entries_; }

  /// main + sum_i weight_i * loss_i (main itself when there is none, so a model without auxiliary
  /// losses gets its loss bit for bit).
  Var<T, B> add_to(const Var<T, B>& main) const {
    Var<T, B> total = main;
    for (const Entry& e : entries_) total = total + (e.weight == 1.0 ? e.loss : scale(e.loss, e.weight));
    return total;
  }

 private:
  std::vector<Entry> entries_;
  std::string prefix_;
};

}  // namespace megacpp
