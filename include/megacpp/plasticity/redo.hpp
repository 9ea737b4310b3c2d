// megacpp/plasticity/redo.hpp: ReDo, recycling dormant hidden units of MLP-like layers.
//
// ReDo (Sokar, Agarwal, Castro, Evci, "The Dormant Neuron Phenomenon in Deep Reinforcement
// Learning", ICML 2023, arXiv 2302.12902): a hidden unit i of a layer is tau-dormant when its
// score s_i = E|h_i| / mean_j E|h_j| is at most tau (0.025 in the paper). Here E|h_i| is an EMA
// (decay ema_decay) of the mean absolute activation over each recorded forward pass's tokens. A
// layer is judged only after min_history recorded passes (a lull is not dormancy); then each
// dormant unit is recycled:
//   incoming row  W_in[i, :]  <- N(0, 1 / in_features)   (the layer's own init, Linear)
//   outgoing col  W_out[:, i] <- outgoing_scale W_out[:, i]   (only perturbed: the unit comes
//                 back without a jump in the layer's output; the paper zeroes it, which also
//                 zeroes the gradient reaching the new incoming row until W_out relearns it)
//   bias          b_in[i] <- 0 when the incoming projection has a bias (the dense MLP has none)
// and the optimiser state of exactly those rows, columns and bias entries is cleared
// (state_repair.hpp). A layer with no dormant unit is left bitwise unchanged. After a recycle the
// layer's statistics restart, so the next judgement rests on fresh evidence.
//
// Hook: an MLP-like layer opts in by having a member
//   std::function<void(const Tensor<T, B>&)> hidden_observer;   called with act(fc(x)) (..., hidden)
// and naming its projections (static redo_incoming, redo_outgoing: "fc", "proj" for nn/mlp.hpp);
// an MoE expert opts in the same way. The observer only reads the activation, so forward results
// are unchanged; an unset observer costs one branch, and a set one records only while the tracker
// is enabled and gradients are being recorded (training forwards, not evaluation under NoGrad).
//
// Shards and data parallelism: each rank sees its own micro-batches, so dormant_units() averages
// the ranks' EMAs over the communicator before judging: every rank gets the same units. Each rank
// then rewrites only the incoming rows it owns and the outgoing columns within its own outgoing
// rows; the new incoming row of unit i is drawn from an Rng seeded by (seed, i), so it does not
// depend on which rank draws it and world N equals world 1 bitwise.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/core/random.hpp"
#include "megacpp/optim/param_group.hpp"
#include "megacpp/optim/state.hpp"
#include "megacpp/plasticity/shard.hpp"
#include "megacpp/plasticity/state_repair.hpp"

namespace megacpp::plasticity {

/// ReDo's knobs.
struct ReDoOptions {
  double tau = 0.025;           ///< dormant when E|h_i| / mean_j E|h_j| <= tau
  double ema_decay = 0.99;      ///< EMA of each unit's mean |activation| per recorded pass
  index_t min_history = 100;    ///< recorded passes a layer needs before it may be judged
  double outgoing_scale = 0.1;  ///< a recycled unit's outgoing column is multiplied by it
  bool repair_state = true;     ///< clear the optimiser state of the rewritten entries
  std::uint64_t seed = 0x5eed;  ///< base seed of the re-initialisation draws
};

/// An MLP-like layer ReDo can observe and recycle (see the header comment).
template <class L, class T, class B>
concept ReDoLayer = requires(L& l) {
  l.hidden_observer = std::function<void(const Tensor<T, B>&)>{};
  { L::redo_incoming } -> std::convertible_to<std::string_view>;
  { L::redo_outgoing } -> std::convertible_to<std::string_view>;
};

/// Mean |h| over every leading position, per unit of the last axis: h (..., hidden) -> (hidden).
template <class T, Backend B>
std::vector<double> mean_abs_per_unit(const Tensor<T, B>& h) {
  check(h.rank() >= 1 && h.shape()[-1] > 0, "redo", "activation needs a last (hidden) axis, got ", h.shape());
  const index_t hidden = h.shape()[-1], rows = h.numel() / hidden;
  std::vector<T> copy;
  const T* data = nullptr;
  if constexpr (B::host_accessible) data = h.data();
  else data = (copy = h.to_host()).data();
  std::vector<double> m(static_cast<std::size_t>(hidden), 0.0);
  for (index_t r = 0; r < rows; ++r)
    for (index_t i = 0; i < hidden; ++i) m[static_cast<std::size_t>(i)] += std::abs(static_cast<double>(data[r * hidden + i]));
  for (double& v : m) v /= static_cast<double>(rows ? rows : 1);
  return m;
}

/// The units whose score ema_i / mean_j ema_j is at most tau, with `ema` averaged over the ranks of
/// `comm` first (every rank must pass an EMA of the same length). A layer whose mean is zero is
/// dormant as a whole: every unit is returned.
template <Backend B, class Comm = dist::SingleProcess>
  requires dist::GatherComm<Comm, double, B>
std::vector<index_t> dormant_units(std::vector<double> ema, double tau, Comm& comm) {
  check(tau >= 0, "redo", "tau must be >= 0, got ", tau);
  sum_over_ranks<B>(comm, ema);
  double mean = 0;
  for (double& v : ema) mean += (v /= comm.size());
  mean /= static_cast<double>(ema.empty() ? 1 : ema.size());
  std::vector<index_t> units;
  for (std::size_t i = 0; i < ema.size(); ++i)
    if (mean == 0 || ema[i] / mean <= tau) units.push_back(static_cast<index_t>(i));
  return units;
}

/// Recycles `units` (sorted or not, global hidden indices): incoming rows this rank owns
/// (`in_local` holds rows in_range of the (hidden, in) incoming weight) are redrawn from
/// N(0, init_std^2) with an Rng seeded by (seed, unit); every row of `out_local` (this rank's rows
/// of the (out, hidden) outgoing weight) has column `unit` scaled by outgoing_scale; the owned
/// entries of `bias_local` (in_range of the incoming bias, or nullptr) are zeroed.
template <class T, Backend B>
void recycle_units(Tensor<T, B>& in_local, RowRange in_range, Tensor<T, B>& out_local, Tensor<T, B>* bias_local,
                   const std::vector<index_t>& units, double init_std, double outgoing_scale, std::uint64_t seed) {
  check(in_local.rank() == 2 && out_local.rank() == 2, "redo", "incoming ", in_local.shape(), " and outgoing ",
        out_local.shape(), " weights must be 2-D");
  check(in_range.size() == in_local.size(0), "redo", "owned range [", in_range.begin, ", ", in_range.end,
        ") does not match the local incoming rows ", in_local.shape());
  check(!bias_local || bias_local->numel() == in_range.size(), "redo", "the local bias has ",
        bias_local ? bias_local->numel() : 0, " entries for ", in_range.size(), " owned units");
  const index_t in_f = in_local.size(1), hidden = out_local.size(1), out_rows = out_local.size(0);
  for (index_t u : units) check(u >= 0 && u < hidden, "redo", "unit ", u, " is out of range for ", hidden, " hidden units");
  if (units.empty()) return;
  std::vector<T> w_in = in_local.to_host(), w_out = out_local.to_host();
  std::vector<T> b = bias_local ? bias_local->to_host() : std::vector<T>{};
  for (index_t u : units) {
    for (index_t r = 0; r < out_rows; ++r) {
      T& x = w_out[static_cast<std::size_t>(r * hidden + u)];
      x = static_cast<T>(static_cast<double>(x) * outgoing_scale);
    }
    if (!in_range.contains(u)) continue;
    Rng rng(seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(u) + 1);
    const index_t row = u - in_range.begin;
    for (index_t j = 0; j < in_f; ++j) w_in[static_cast<std::size_t>(row * in_f + j)] = static_cast<T>(init_std * rng.normal());
    if (bias_local) b[static_cast<std::size_t>(row)] = T(0);
  }
  in_local.assign(Tensor<T, B>::from_host(in_local.shape(), w_in));
  out_local.assign(Tensor<T, B>::from_host(out_local.shape(), w_out));
  if (bias_local) bias_local->assign(Tensor<T, B>::from_host(bias_local->shape(), b));
}

/// What a recycle pass did to one layer.
struct ReDoEntry {
  std::string layer;            ///< the layer's prefix ("blocks.0.ffn")
  index_t hidden = 0;           ///< hidden units
  std::vector<index_t> units;   ///< units recycled
};

/// Activation statistics of the layers it is attached to, and the recycle pass over them.
template <class T, Backend B>
class ReDoTracker {
 public:
  /// Statistics of one attached layer.
  struct LayerStats {
    std::string prefix;        ///< the layer's parameter prefix
    std::string incoming;      ///< incoming weight's name ("<prefix>.fc.weight")
    std::string incoming_bias; ///< incoming bias's name ("<prefix>.fc.bias"; used when present)
    std::string outgoing;      ///< outgoing weight's name ("<prefix>.proj.weight")
    std::vector<double> ema;   ///< EMA of mean |h_i|: (hidden); empty before the first pass
    index_t history = 0;       ///< recorded passes since attach or the last recycle
  };

  /// A tracker with options `o`; throws naming the option for tau < 0, an EMA decay outside
  /// [0, 1) or a minimum history below 1.
  explicit ReDoTracker(ReDoOptions o = {}) : state_(std::make_shared<State>()) {
    check(o.tau >= 0 && o.ema_decay >= 0 && o.ema_decay < 1 && o.min_history >= 1, "redo",
          "need tau >= 0, ema_decay in [0, 1) and min_history >= 1, got ", o.tau, ", ", o.ema_decay, ", ", o.min_history);
    state_->options = o;
  }

  /// Installs the observer on `layer` (parameters under `prefix`); recording starts disabled.
  template <class L>
    requires ReDoLayer<L, T, B>
  void attach(L& layer, const std::string& prefix) {
    const std::size_t index = state_->layers.size();
    state_->layers.push_back(LayerStats{prefix, child_name(prefix, L::redo_incoming) + ".weight",
                                        child_name(prefix, L::redo_incoming) + ".bias",
                                        child_name(prefix, L::redo_outgoing) + ".weight", {}, 0});
    layer.hidden_observer = [state = state_, index](const Tensor<T, B>& h) { state->observe(index, h); };
  }
  /// Starts or stops recording (off outside the phases that run ReDo: no cost beyond a branch).
  void set_enabled(bool on) { state_->enabled = on; }
  /// Whether recording is on.
  bool enabled() const { return state_->enabled; }
  /// The attached layers' statistics.
  const std::vector<LayerStats>& layers() const { return state_->layers; }
  /// The options.
  const ReDoOptions& options() const { return state_->options; }
  /// Replaces layer i's statistics (a resumed run restores what its checkpoint saved).
  void restore(std::size_t i, std::vector<double> ema, index_t history) {
    check(i < state_->layers.size(), "redo", "no attached layer ", i, " (", state_->layers.size(), " attached)");
    check(history >= 0 && (history == 0 || !ema.empty()), "redo", "layer '", state_->layers[i].prefix,
          "': history ", history, " with ", ema.size(), " units");
    state_->layers[i].ema = std::move(ema);
    state_->layers[i].history = history;
  }
  /// Recycle passes so far: each pass draws fresh rows (seeded by it), so a resumed run restores it.
  std::uint64_t passes() const { return state_->recycles; }
  /// Sets the recycle pass count (a resumed run restores what its checkpoint saved).
  void set_passes(std::uint64_t n) { state_->recycles = n; }
  /// True when every attached layer has min_history recorded passes.
  bool ready() const {
    for (const LayerStats& l : state_->layers)
      if (l.history < state_->options.min_history) return false;
    return !state_->layers.empty();
  }

  /// Recycles the dormant units of every attached layer (world size 1) and clears their optimiser
  /// state; throws, before changing anything, when a layer lacks min_history recorded passes or a
  /// projection is missing from `params`.
  template <optim::Optimizer Opt>
  std::vector<ReDoEntry> recycle(std::vector<optim::ParamRef<T, B>>& params, Opt& opt) {
    dist::SingleProcess single;
    return recycle(params, opt, single);
  }

  /// The same in a data-parallel run: the activation EMAs are averaged over `comm`'s ranks before
  /// judging (dormant_units), so every rank recycles the same units with the same draws (the seed
  /// does not depend on the rank) and the replicas stay equal. Every rank must call it.
  template <optim::Optimizer Opt, class Comm>
    requires dist::GatherComm<Comm, double, B>
  std::vector<ReDoEntry> recycle(std::vector<optim::ParamRef<T, B>>& params, Opt& opt, Comm& comm) {
    const ReDoOptions& o = state_->options;
    struct Plan {
      LayerStats* stats;
      optim::ParamRef<T, B>* in;
      optim::ParamRef<T, B>* bias;
      optim::ParamRef<T, B>* out;
    };
    const auto find = [&](const std::string& name) -> optim::ParamRef<T, B>* {
      for (optim::ParamRef<T, B>& p : params)
        if (p.name == name) return &p;
      return nullptr;
    };
    std::vector<Plan> plans;
    for (LayerStats& l : state_->layers) {
      check(l.history >= o.min_history, "redo", "layer '", l.prefix, "' has ", l.history, " recorded passes, fewer than min_history ",
            o.min_history, ": ReDo needs activation history (enable the tracker for that many training steps first)");
      Plan p{&l, find(l.incoming), find(l.incoming_bias), find(l.outgoing)};
      check(p.in && p.out, "redo", "layer '", l.prefix, "': no parameter '", p.in ? l.outgoing : l.incoming, "'");
      check(p.in->shape().rank() == 2 && p.out->shape().rank() == 2 && p.in->shape()[0] == p.out->shape()[1] &&
                static_cast<index_t>(l.ema.size()) == p.in->shape()[0],
            "redo", "layer '", l.prefix, "': incoming ", p.in->shape(), ", outgoing ", p.out->shape(), " and ", l.ema.size(),
            " observed units do not agree");
      if (o.repair_state)
        for (optim::ParamRef<T, B>* q : {p.in, p.bias, p.out})
          if (q)  // (check's message arguments are evaluated whatever the condition: no q->name on null)
            check(opt.owns(q->name), "redo", "'", q->name, "' is not owned by the optimiser whose state ReDo must clear");
      plans.push_back(p);
    }
    std::vector<ReDoEntry> out;
    for (Plan& p : plans) {
      ReDoEntry e{p.stats->prefix, p.in->shape()[0], dormant_units<B>(p.stats->ema, o.tau, comm)};
      const index_t hidden = e.hidden;
      const double init_std = 1.0 / std::sqrt(static_cast<double>(p.in->shape()[1]));
      recycle_units<T, B>(p.in->value(), all_rows(hidden), p.out->value(), p.bias ? &p.bias->value() : nullptr, e.units,
                          init_std, o.outgoing_scale, o.seed + state_->recycles * 0x100000001B3ull + layer_hash(p.stats->prefix));
      if (o.repair_state && !e.units.empty()) {
        clear_state_rows(opt, p.in->name, e.units);
        if (p.bias) clear_state_rows(opt, p.bias->name, e.units);
        clear_state_cols(opt, p.out->name, e.units);
      }
      p.stats->ema.clear();
      p.stats->history = 0;
      out.push_back(std::move(e));
    }
    ++state_->recycles;
    return out;
  }

 private:
  struct State {
    ReDoOptions options;
    std::vector<LayerStats> layers;
    bool enabled = false;
    std::uint64_t recycles = 0;  // recycle passes so far: each draws fresh rows

    void observe(std::size_t index, const Tensor<T, B>& h) {
      if (!enabled || !grad_enabled()) return;
      LayerStats& l = layers[index];
      const std::vector<double> m = mean_abs_per_unit(h);
      if (l.ema.empty()) {
        l.ema = m;
      } else {
        check(l.ema.size() == m.size(), "redo", "layer '", l.prefix, "' had ", l.ema.size(), " hidden units, now ", m.size());
        for (std::size_t i = 0; i < m.size(); ++i) l.ema[i] = options.ema_decay * l.ema[i] + (1 - options.ema_decay) * m[i];
      }
      ++l.history;
    }
  };

  static std::uint64_t layer_hash(const std::string& s) {  // FNV-1a: a stable per-layer seed offset
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char ch : s) h = (h ^ ch) * 0x100000001B3ull;
    return h;
  }

  std::shared_ptr<State> state_;
};

}  // namespace megacpp::plasticity
