// megacpp/optim/adamw.hpp: AdamW, Adam with decoupled weight decay.
//
// Per parameter p with gradient g, at its step t (counted per parameter, so a reset restarts its
// bias correction) (Kingma & Ba 2015, Algorithm 1; Loshchilov & Hutter 2019, Algorithm 2; the
// operation order of PyTorch's single-tensor torch.optim.AdamW):
//   m = m + (1 - beta1) (g - m)                        (exp_avg.lerp_(g, 1 - beta1))
//   v = beta2 v + (1 - beta2) g^2
//   p = p (1 - lr wd) - (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps),   bc_i = 1 - beta_i^t
// State is kept in the parameter's element type (fp32 for fp32 parameters; bf16 is never used
// for moments), allocated as zeros at construction so a fresh optimiser can load a checkpoint.
//
// AdamW takes any Role and any rank; the Hybrid optimiser decides which parameters come here
// (everything but 2-D hidden matrices) and which groups decay.
//
// ZeRO-1 (Rajbhandari et al. 2020, stage 1; docs/systems/distributed.md): shard(rank, world)
// keeps the moments of only the parameters this rank owns (whole parameters, balanced by size:
// balanced_owners in shard_plan.hpp); step(comm) updates the owned parameters from the
// (already averaged) gradients and all-gathers every rank's updated parameters in one packed
// collective. The arithmetic per element is the unsharded step's, so the result is bitwise the
// same.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "megacpp/dist/comm.hpp"
#include "megacpp/optim/functors.hpp"
#include "megacpp/optim/param_group.hpp"
#include "megacpp/optim/shard_plan.hpp"
#include "megacpp/optim/state.hpp"

namespace megacpp::optim {

/// Hyper-parameters of an AdamW parameter group.
struct AdamWOptions {
  double lr = 1e-3;           ///< learning rate (multiplied by the schedule's lr scale)
  double beta1 = 0.9;         ///< first-moment decay
  double beta2 = 0.999;       ///< second-moment decay
  double eps = 1e-8;          ///< added to the bias-corrected sqrt(v)
  double weight_decay = 0.0;  ///< decoupled: p *= 1 - lr * weight_decay before the update
};

namespace detail {
inline void validate_adamw_options(const AdamWOptions& o, const std::string& group) {
  check(std::isfinite(o.lr) && o.lr >= 0, "AdamW", "group '", group, "': lr must be finite and >= 0, got ", o.lr);
  check(o.beta1 >= 0 && o.beta1 < 1, "AdamW", "group '", group, "': beta1 must be in [0, 1), got ", o.beta1);
  check(o.beta2 >= 0 && o.beta2 < 1, "AdamW", "group '", group, "': beta2 must be in [0, 1), got ", o.beta2);
  check(std::isfinite(o.eps) && o.eps > 0, "AdamW", "group '", group, "': eps must be finite and > 0, got ", o.eps);
  check(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "AdamW", "group '", group,
        "': weight_decay must be finite and >= 0, got ", o.weight_decay);
}
}  // namespace detail

/// AdamW over groups of parameters of any shape and Role.
template <class T, Backend B>
class AdamW {
 public:
  using value_type = T;                          ///< element type of parameters and state
  using backend_type = B;                        ///< backend of parameters and state
  using Group = ParamGroup<AdamWOptions, T, B>;  ///< a group of parameters with its options

  /// AdamW over `groups`; throws for a parameter listed twice and for invalid options.
  explicit AdamW(std::vector<Group> groups) : groups_(std::move(groups)) {
    detail::check_unique_params("AdamW", groups_);
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      detail::validate_adamw_options(groups_[gi].options, groups_[gi].name);
      for (const ParamRef<T, B>& p : groups_[gi].params) {
        slot_of_.emplace(p.name, slots_.size());
        slots_.push_back(Slot{p, gi, Tensor<T, B>::zeros(p.shape()), Tensor<T, B>::zeros(p.shape()), 0, 0});
      }
    }
  }
  /// AdamW over `params` as one group "adamw" with `options`.
  explicit AdamW(std::vector<ParamRef<T, B>> params, AdamWOptions options = {})
      : AdamW(std::vector<Group>{Group{"adamw", options, std::move(params)}}) {}

  /// One update of every parameter that has a gradient (the others keep their state and step).
  /// Throws when the state is sharded over more than one rank (use step(comm)).
  void step() {
    check(world_ == 1, "AdamW::step", "the state is sharded over ", world_, " ranks (ZeRO-1): call step(comm)");
    update_owned();
  }

  /// One update over `comm`'s ranks: unsharded, every rank updates every parameter (the
  /// gradients are the same on every rank); sharded (shard()), each rank updates the parameters
  /// it owns and one all-gather hands every rank all of them. Bitwise the same as step().
  template <class Comm>
    requires dist::GatherComm<Comm, T, B>
  void step(Comm& comm) {
    if (world_ == 1) {
      update_owned();
      return;
    }
    check(comm.size() == world_ && comm.rank() == rank_, "AdamW::step", "the state is sharded for rank ", rank_, " of ",
          world_, " but the communicator is rank ", comm.rank(), " of ", comm.size());
    update_owned();
    // Pack the owned parameters (owner order), gather every rank's pack, unpack the others'.
    index_t at = 0;
    for (Slot& s : slots_)
      if (s.owner == rank_) {
        B::template copy<T>(send_.data() + at, s.param.var.value().data(), static_cast<std::size_t>(s.numel()));  // a read: keeps the bf16 copy
        at += s.numel();
      }
    comm.template all_gather<T, B>(send_.data(), pack_, recv_.data());
    std::vector<index_t> offset(static_cast<std::size_t>(world_), 0);
    for (Slot& s : slots_) {
      index_t& o = offset[static_cast<std::size_t>(s.owner)];
      if (s.owner != rank_)
        B::template copy<T>(s.param.value().data(), recv_.data() + s.owner * pack_ + o, static_cast<std::size_t>(s.numel()));
      o += s.numel();
    }
  }

  /// ZeRO-1: from now on this rank keeps the moments of only the parameters it owns of `world`
  /// ranks (balanced_owners); the others' moments are freed (whatever they held is dropped:
  /// shard a fresh optimiser, or one whose state was just loaded in full). world 1 is
  /// unsharded. Throws for a rank outside [0, world).
  void shard(int rank, int world) {
    check(world >= 1 && rank >= 0 && rank < world, "AdamW::shard", "rank ", rank, " of ", world, " is out of range");
    std::vector<index_t> sizes;
    for (const Slot& s : slots_) sizes.push_back(s.numel());
    const std::vector<int> owners = balanced_owners(sizes, world);
    std::vector<index_t> load(static_cast<std::size_t>(world), 0);
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      s.owner = world == 1 ? 0 : owners[i];
      load[static_cast<std::size_t>(s.owner)] += s.numel();
      if (s.owner != rank && s.exp_avg.defined()) s.exp_avg = Tensor<T, B>(), s.exp_avg_sq = Tensor<T, B>();
      if (s.owner == rank && !s.exp_avg.defined())
        s.exp_avg = Tensor<T, B>::zeros(s.param.shape()), s.exp_avg_sq = Tensor<T, B>::zeros(s.param.shape());
    }
    rank_ = rank, world_ = world;
    pack_ = *std::max_element(load.begin(), load.end());
    send_ = world > 1 && pack_ > 0 ? Tensor<T, B>(Shape{pack_}) : Tensor<T, B>();
    recv_ = world > 1 && pack_ > 0 ? Tensor<T, B>(Shape{world * pack_}) : Tensor<T, B>();
  }
  /// Undoes shard(): every rank receives every parameter's moments from its owner (one
  /// broadcast per moment), so that a checkpoint written from any rank is complete; shard()
  /// again afterwards to free them. Collective: every rank of `comm` calls it.
  template <class Comm>
    requires dist::Comm<Comm, T, B>
  void unshard(Comm& comm) {
    if (world_ == 1) return;
    check(comm.size() == world_ && comm.rank() == rank_, "AdamW::unshard", "the state is sharded for rank ", rank_, " of ",
          world_, " but the communicator is rank ", comm.rank(), " of ", comm.size());
    for (Slot& s : slots_) {
      if (!s.exp_avg.defined())
        s.exp_avg = Tensor<T, B>::zeros(s.param.shape()), s.exp_avg_sq = Tensor<T, B>::zeros(s.param.shape());
      comm.template broadcast<T, B>(s.exp_avg.data(), s.numel(), s.owner);
      comm.template broadcast<T, B>(s.exp_avg_sq.data(), s.numel(), s.owner);
      s.owner = 0;
    }
    rank_ = 0, world_ = 1;
  }
  /// Ranks the state is sharded over (1: unsharded).
  int shard_world() const { return world_; }
  /// The rank that updates parameter `name` and so needs its averaged gradient (ZeRO-1's
  /// reduce-scatter target; 0 when unsharded); throws for a name this optimiser does not own.
  int owner(const std::string& name) const {
    check(owns(name), "AdamW::owner", "no parameter named '", name, "' in this optimiser");
    return slots_[slot_of_.at(name)].owner;
  }
  /// Bytes of moment buffers this rank holds (both moments of its owned parameters).
  std::size_t state_bytes() const {
    std::size_t n = 0;
    for (const Slot& s : slots_)
      if (s.exp_avg.defined()) n += 2 * static_cast<std::size_t>(s.numel()) * sizeof(T);
    return n;
  }
  /// Bytes of moment buffers an unsharded AdamW holds.
  std::size_t unsharded_state_bytes() const {
    std::size_t n = 0;
    for (const Slot& s : slots_) n += 2 * static_cast<std::size_t>(s.numel()) * sizeof(T);
    return n;
  }

 private:
  // The step of the parameters this rank owns (all of them when unsharded); the step counters
  // of every parameter with a gradient advance on every rank.
  void update_owned() {
    for (Slot& s : slots_) {
      if (!s.param.has_grad()) continue;
      if (s.owner != rank_) {
        ++s.step;
        continue;
      }
      check(s.param.grad().shape() == s.param.shape(), "AdamW::step", "gradient of '", s.param.name, "' has shape ",
            s.param.grad().shape(), " but the parameter is ", s.param.shape());
      const AdamWOptions& o = groups_[s.group].options;
      ++s.step;
      const double lr = o.lr * lr_scale_;
      const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(s.step));
      const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(s.step));
      const index_t n = s.param.shape().numel();
      const T* g = s.param.grad().data();
      T* m = s.exp_avg.data();
      T* v = s.exp_avg_sq.data();
      // One pass over p, m, v and g (three maps read g twice and m, v once more: ~2% of a train
      // step), which also writes p's bf16 copy when mixed-precision products read one (Var::update_value).
      s.param.var.update_value([&](T* p, bf16* p_rounded) {
        B::template update_in_place<T>(
            n, fn::AdamWStep{fn::Lerp{1.0 - o.beta1}, fn::EmaSquare{o.beta2},
                             fn::AdamWUpdate{1.0 - lr * o.weight_decay, lr / bc1, std::sqrt(bc2), o.eps}},
            p, m, v, g, p_rounded);
      });
    }
  }

 public:
  /// Forgets every parameter's gradient.
  void zero_grad() {
    for (Slot& s : slots_) s.param.var.zero_grad();
  }
  /// Multiplies every group's lr by `scale` from the next step on (the LR schedule's value).
  void set_lr_scale(double scale) {
    check(std::isfinite(scale) && scale >= 0, "AdamW::set_lr_scale", "scale must be finite and >= 0, got ", scale);
    lr_scale_ = scale;
  }
  /// The current lr multiplier.
  double lr_scale() const { return lr_scale_; }

  /// Visits the state: per parameter "exp_avg.<name>" and "exp_avg_sq.<name>" (Tensor<T, B>&)
  /// and "step.<name>" (std::int64_t&); sharded, only the parameters this rank owns.
  template <class Visitor>
  void for_each_state(Visitor&& visit) {
    for (Slot& s : slots_) {
      if (s.owner != rank_) continue;
      visit("exp_avg." + s.param.name, s.exp_avg);
      visit("exp_avg_sq." + s.param.name, s.exp_avg_sq);
      visit("step." + s.param.name, s.step);
    }
  }
  /// Zeroes the moments and the step count of the named parameters (FIRE, ReDo), so their bias
  /// correction restarts; throws naming any name this optimiser does not own, before changing
  /// anything.
  void reset_state(const std::vector<std::string>& names) {
    for (const std::string& n : names)
      check(owns(n), "AdamW::reset_state", "no parameter named '", n, "' in this optimiser");
    for (const std::string& n : names) {
      Slot& s = slots_[slot_of_.at(n)];
      if (s.exp_avg.defined()) s.exp_avg.fill(T(0)), s.exp_avg_sq.fill(T(0));
      s.step = 0;
    }
  }
  /// True when `name` is one of this optimiser's parameters.
  bool owns(const std::string& name) const { return slot_of_.count(name) > 0; }

  /// The parameter groups.
  const std::vector<Group>& groups() const { return groups_; }
  /// Number of parameters.
  std::size_t size() const { return slots_.size(); }

 private:
  struct Slot {
    ParamRef<T, B> param;
    std::size_t group;
    Tensor<T, B> exp_avg;     // m: parameter's shape
    Tensor<T, B> exp_avg_sq;  // v: parameter's shape
    std::int64_t step;        // steps taken by this parameter
    int owner;                // the rank that updates it and holds its moments (ZeRO-1)
    index_t numel() const { return param.shape().numel(); }
  };

  std::vector<Group> groups_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, std::size_t> slot_of_;
  double lr_scale_ = 1.0;
  int rank_ = 0, world_ = 1;   // ZeRO-1 sharding (world 1: unsharded)
  index_t pack_ = 0;           // elements per rank in the all-gather: the largest owned total
  Tensor<T, B> send_, recv_;   // the packed all-gather's buffers
};

}  // namespace megacpp::optim
