// megacpp/optim/muon.hpp: Muon, MomentUm Orthogonalized by Newton-Schulz (Jordan et al., 2024).
//
// For each 2-D hidden matrix W with gradient g (modded-nanogpt Muon.step; docs/recipe.md "Optimizers"):
//   buf = m buf + (1 - m) g                      (buf.lerp_(g, 1 - m))
//   g'  = (1 - m) g + m buf   if nesterov, else buf   (g.lerp_(buf, m))
//   O   = NewtonSchulz<Coefficients>(g')          (newton_schulz.hpp; NS5 by default)
//   W   = W (1 - lr wd) - lr scale(R, C) O        (decoupled weight decay; ShapeScale policy)
// with m = 0.95 and nesterov on by default; weight decay is off unless a group sets it.
//
// Muon takes only Role::matrix parameters of rank 2. An MTP parameter is a hard error naming it
// (docs/recipe.md: "Putting an MTP parameter under Muon is a hard error"); other roles are errors too,
// since AdamW owns embeddings, heads, norms, biases, scalars and routers.
//
// Distributed: step(comm) shards the Newton-Schulz work round-robin over comm's ranks and
// all-gathers the updates (shard_plan.hpp, over a dist/comm.hpp communicator). Over a full
// dist::Comm (non-blocking all-gather) each chunk's all-gather runs while the next chunk's
// Newton-Schulz is computed (step_overlapped). Momentum buffers are updated for every parameter on
// every rank (an elementwise pass, cheap beside NS), so every rank holds the full state: any rank's
// checkpoint is complete, and a run can resume at another world size.
//
// ZeRO-1 (shard(rank, world); docs/systems/distributed.md): each rank keeps the momentum of only
// the matrices it orthogonalises (the ShardPlan's round-robin over all of Muon's parameters) and
// updates only that momentum; the all-gather of updates is unchanged, so the result is bitwise
// the unsharded step's (when every matrix has a gradient: then both deal the same matrices).
//
// The update never records a graph: it runs Backend kernels on the parameters' tensors.
#pragma once

#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "megacpp/dist/comm.hpp"
#include "megacpp/optim/functors.hpp"
#include "megacpp/optim/shard_plan.hpp"
#include "megacpp/optim/muon_scale.hpp"
#include "megacpp/optim/newton_schulz.hpp"
#include "megacpp/optim/param_group.hpp"
#include "megacpp/optim/state.hpp"

namespace megacpp::optim {

/// Hyper-parameters of a Muon parameter group.
struct MuonOptions {
  double lr = 0.02;           ///< learning rate (multiplied by the schedule's lr scale)
  double momentum = 0.95;     ///< m in buf = m buf + (1 - m) g
  bool nesterov = true;       ///< use (1 - m) g + m buf instead of buf
  int ns_steps = 0;           ///< Newton-Schulz steps; 0 takes the coefficient policy's default (5)
  double weight_decay = 0.0;  ///< decoupled: W *= 1 - lr * weight_decay before the update
  bool ns_bf16 = false;       ///< Newton-Schulz GEMMs on bf16 operands (newton_schulz_bf16; float parameters only)
};

namespace detail {
inline void validate_muon_options(const MuonOptions& o, const std::string& group) {
  check(std::isfinite(o.lr) && o.lr >= 0, "Muon", "group '", group, "': lr must be finite and >= 0, got ", o.lr);
  check(o.momentum >= 0 && o.momentum < 1, "Muon", "group '", group, "': momentum must be in [0, 1), got ", o.momentum);
  check(o.ns_steps >= 0, "Muon", "group '", group, "': ns_steps must be >= 0 (0 = policy default), got ", o.ns_steps);
  check(std::isfinite(o.weight_decay) && o.weight_decay >= 0, "Muon", "group '", group,
        "': weight_decay must be finite and >= 0, got ", o.weight_decay);
}
}  // namespace detail

/// Muon over groups of 2-D Role::matrix parameters. `Coefficients` is the Newton-Schulz policy
/// (NS5, PolarExpress), `ShapeScale` the update's shape rule (SqrtAspectScale, MoonlightScale).
template <class T, Backend B, NsCoefficients Coefficients = NS5, MuonShapeScale ShapeScale = SqrtAspectScale>
class Muon {
 public:
  using value_type = T;                            ///< element type of parameters and state
  using backend_type = B;                          ///< backend of parameters and state
  using coefficients = Coefficients;               ///< Newton-Schulz policy
  using shape_scale = ShapeScale;                  ///< update scale policy
  using Group = ParamGroup<MuonOptions, T, B>;     ///< a group of parameters with its options

  /// Muon over `groups`; throws for a parameter that is not a 2-D Role::matrix (naming it), for
  /// a parameter listed twice and for invalid options.
  explicit Muon(std::vector<Group> groups) : groups_(std::move(groups)) {
    detail::check_unique_params("Muon", groups_);
    for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
      const Group& g = groups_[gi];
      detail::validate_muon_options(g.options, g.name);
      check(!g.options.ns_bf16 || std::is_same_v<T, float>, "Muon", "group '", g.name,
            "': ns_bf16 needs float parameters (the bf16 GEMM sums into fp32)");
      for (const ParamRef<T, B>& p : g.params) {
        check(p.role != Role::mtp, "Muon", "parameter '", p.name,
              "' has Role::mtp: MTP parameters must never be optimised by Muon (docs/recipe.md \"Optimizers\"); "
              "give it to AdamW (Hybrid's default routing does)");
        check(p.role == Role::matrix, "Muon", "parameter '", p.name, "' has Role::", role_name(p.role),
              ": Muon takes only Role::matrix (2-D hidden weights); route it to AdamW");
        check(p.shape().rank() == 2, "Muon", "parameter '", p.name, "' has shape ", p.shape(),
              ": Muon needs a 2-D matrix (view a higher-rank weight as (out, rest) in the layer)");
        check(p.shape().numel() > 0, "Muon", "parameter '", p.name, "' has shape ", p.shape(), ": nothing to orthogonalise");
        Slot s{p, gi, Tensor<T, B>::zeros(p.shape()), p.shape()[0], p.shape()[1]};
        max_numel_ = std::max(max_numel_, s.rows * s.cols);
        slot_of_.emplace(p.name, slots_.size());
        slots_.push_back(std::move(s));
      }
    }
    if (max_numel_ > 0) send_ = Tensor<T, B>(Shape{max_numel_});
  }
  /// Muon over `params` as one group "muon" with `options`.
  explicit Muon(std::vector<ParamRef<T, B>> params, MuonOptions options = {})
      : Muon(std::vector<Group>{Group{"muon", options, std::move(params)}}) {}

  /// One update on this process alone (world size 1).
  void step() {
    dist::SingleProcess single;
    step(single);
  }

  /// One update with the Newton-Schulz work shared over `comm`'s ranks (every rank calls it with
  /// the same parameters and gradients; the result is bitwise the same as step()). Parameters
  /// without a gradient are skipped (their momentum is not decayed).
  template <class Comm>
    requires dist::GatherComm<Comm, T, B>
  void step(Comm& comm) {
    const int world = comm.size(), rank = comm.rank();
    check(world >= 1 && rank >= 0 && rank < world, "Muon::step", "communicator has rank ", rank, " of ", world);
    check(shard_world_ == 1 || (world == shard_world_ && rank == shard_rank_), "Muon::step", "the momentum is sharded for rank ",
          shard_rank_, " of ", shard_world_, " (ZeRO-1) but the communicator is rank ", rank, " of ", world);
    // Unsharded: the slots with a gradient, in order (the same on every rank). Sharded: every
    // slot (the owners are fixed), those without a gradient skipped by orthogonalise and apply.
    std::vector<std::size_t> active;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.param.has_grad()) {
        if (shard_world_ > 1) active.push_back(i);
        continue;
      }
      check(s.param.grad().shape() == s.param.shape(), "Muon::step", "gradient of '", s.param.name, "' has shape ",
            s.param.grad().shape(), " but the parameter is ", s.param.shape());
      active.push_back(i);
    }
    // buf = m buf + (1 - m) g for every parameter with a gradient whose momentum this rank holds
    // (every one unsharded: replicated state).
    for (std::size_t i : active) {
      Slot& s = slots_[i];
      if (!s.param.has_grad() || !s.momentum_buffer.defined()) continue;
      const double m = groups_[s.group].options.momentum;
      T* buf = s.momentum_buffer.data();
      B::template map<T>(1, s.rows * s.cols, fn::Lerp{1.0 - m}, buf, In<T>{buf}, In<T>{s.param.grad().data()});
    }
    const ShardPlan plan(static_cast<index_t>(active.size()), world);
    if constexpr (dist::Comm<Comm, T, B>) {
      if (world > 1) {
        step_overlapped(comm, active, plan);
        return;
      }
    }
    if (world > 1 && recv_.numel() < world * max_numel_) recv_ = Tensor<T, B>(Shape{world * max_numel_});
    for (index_t k = 0; k < plan.chunks(); ++k) {
      const index_t begin = plan.chunk_begin(k), end = plan.chunk_end(k);
      index_t count = 0;  // the chunk's largest update: every rank sends this many elements
      for (index_t j = begin; j < end; ++j) count = std::max(count, slots_[active[static_cast<std::size_t>(j)]].numel());
      const index_t mine = begin + rank;
      if (mine < end && slots_[active[static_cast<std::size_t>(mine)]].param.has_grad())
        orthogonalise(slots_[active[static_cast<std::size_t>(mine)]], send_.data());
      const T* updates = send_.data();
      if (world > 1) {
        comm.template all_gather<T, B>(send_.data(), count, recv_.data());
        updates = recv_.data();
      }
      for (index_t j = begin; j < end; ++j) apply(slots_[active[static_cast<std::size_t>(j)]], updates + (j - begin) * count);
    }
  }

  /// The step over a full communicator: chunk k's all-gather is started without waiting, and
  /// waited for (and its updates applied) only after chunk k + 1's Newton-Schulz has run, so the
  /// communication of one chunk overlaps the next chunk's compute (two send/receive buffers
  /// alternate). The updates are the same bits as the blocking path's; only the order in which
  /// chunks are applied to their (distinct) parameters moves.
  template <class Comm>
  void step_overlapped(Comm& comm, const std::vector<std::size_t>& active, const ShardPlan& plan) {
    const int world = comm.size(), rank = comm.rank();
    if (send_.numel() < 2 * max_numel_) send_ = Tensor<T, B>(Shape{2 * max_numel_});
    if (recv_.numel() < 2 * world * max_numel_) recv_ = Tensor<T, B>(Shape{2 * world * max_numel_});
    using Handle = decltype(comm.template iall_gather<T, B>(send_.data(), index_t{0}, recv_.data()));
    std::optional<Handle> in_flight;
    index_t flight_chunk = 0, flight_count = 0;
    const auto apply_chunk = [&](index_t k, index_t count) {
      const T* updates = recv_.data() + (k % 2) * world * max_numel_;
      for (index_t j = plan.chunk_begin(k); j < plan.chunk_end(k); ++j)
        apply(slots_[active[static_cast<std::size_t>(j)]], updates + (j - plan.chunk_begin(k)) * count);
    };
    for (index_t k = 0; k < plan.chunks(); ++k) {
      const index_t begin = plan.chunk_begin(k), end = plan.chunk_end(k);
      index_t count = 0;  // the chunk's largest update: every rank sends this many elements
      for (index_t j = begin; j < end; ++j) count = std::max(count, slots_[active[static_cast<std::size_t>(j)]].numel());
      T* send = send_.data() + (k % 2) * max_numel_;
      const index_t mine = begin + rank;
      if (mine < end && slots_[active[static_cast<std::size_t>(mine)]].param.has_grad())
        orthogonalise(slots_[active[static_cast<std::size_t>(mine)]], send);  // overlaps chunk k - 1's gather
      Handle started = comm.template iall_gather<T, B>(send, count, recv_.data() + (k % 2) * world * max_numel_);
      if (in_flight) {
        in_flight->wait();
        apply_chunk(flight_chunk, flight_count);
      }
      in_flight.emplace(std::move(started));
      flight_chunk = k, flight_count = count;
    }
    if (in_flight) {
      in_flight->wait();
      apply_chunk(flight_chunk, flight_count);
    }
  }

  /// Forgets every parameter's gradient.
  void zero_grad() {
    for (Slot& s : slots_) s.param.var.zero_grad();
  }
  /// Multiplies every group's lr by `scale` from the next step on (the LR schedule's value).
  void set_lr_scale(double scale) {
    check(std::isfinite(scale) && scale >= 0, "Muon::set_lr_scale", "scale must be finite and >= 0, got ", scale);
    lr_scale_ = scale;
  }
  /// The current lr multiplier.
  double lr_scale() const { return lr_scale_; }
  /// Sets every group's momentum (Muon momentum warmup, schedule.hpp).
  void set_momentum(double m) {
    check(m >= 0 && m < 1, "Muon::set_momentum", "momentum must be in [0, 1), got ", m);
    for (Group& g : groups_) g.options.momentum = m;
  }

  /// Visits the state: visit("momentum_buffer.<param name>", Tensor<T, B>&) per parameter
  /// (sharded: per parameter this rank owns).
  template <class Visitor>
  void for_each_state(Visitor&& visit) {
    for (Slot& s : slots_)
      if (s.momentum_buffer.defined()) visit("momentum_buffer." + s.param.name, s.momentum_buffer);
  }

  /// ZeRO-1: from now on this rank keeps the momentum of only the matrices it orthogonalises of
  /// `world` ranks (parameter i: rank i % world, ShardPlan); the others' buffers are freed
  /// (shard a fresh optimiser, or one whose state was just loaded in full). world 1 is
  /// unsharded. Throws for a rank outside [0, world).
  void shard(int rank, int world) {
    check(world >= 1 && rank >= 0 && rank < world, "Muon::shard", "rank ", rank, " of ", world, " is out of range");
    const ShardPlan plan(static_cast<index_t>(slots_.size()), world);
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      const bool mine = plan.owner(static_cast<index_t>(i)) == rank;
      if (!mine && s.momentum_buffer.defined()) s.momentum_buffer = Tensor<T, B>();
      if (mine && !s.momentum_buffer.defined()) s.momentum_buffer = Tensor<T, B>::zeros(s.param.shape());
    }
    shard_rank_ = rank, shard_world_ = world;
  }
  /// Undoes shard(): every rank receives every matrix's momentum from its owner (one broadcast
  /// per matrix), so that a checkpoint written from any rank is complete; shard() again
  /// afterwards to free them. Collective: every rank of `comm` calls it.
  template <class Comm>
    requires dist::Comm<Comm, T, B>
  void unshard(Comm& comm) {
    if (shard_world_ == 1) return;
    check(comm.size() == shard_world_ && comm.rank() == shard_rank_, "Muon::unshard", "the momentum is sharded for rank ",
          shard_rank_, " of ", shard_world_, " but the communicator is rank ", comm.rank(), " of ", comm.size());
    const ShardPlan plan(static_cast<index_t>(slots_.size()), shard_world_);
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      if (!s.momentum_buffer.defined()) s.momentum_buffer = Tensor<T, B>::zeros(s.param.shape());
      comm.template broadcast<T, B>(s.momentum_buffer.data(), s.numel(), plan.owner(static_cast<index_t>(i)));
    }
    shard_rank_ = 0, shard_world_ = 1;
  }
  /// Ranks the momentum is sharded over (1: unsharded).
  int shard_world() const { return shard_world_; }
  /// The rank that orthogonalises matrix `name` when sharded, and so needs its averaged
  /// gradient (ShardPlan's round-robin; 0 when unsharded); throws for a name this optimiser does
  /// not own.
  int owner(const std::string& name) const {
    check(owns(name), "Muon::owner", "no parameter named '", name, "' in this optimiser");
    return ShardPlan(static_cast<index_t>(slots_.size()), shard_world_).owner(static_cast<index_t>(slot_of_.at(name)));
  }
  /// Bytes of momentum buffers this rank holds.
  std::size_t state_bytes() const {
    std::size_t n = 0;
    for (const Slot& s : slots_)
      if (s.momentum_buffer.defined()) n += static_cast<std::size_t>(s.numel()) * sizeof(T);
    return n;
  }
  /// Bytes of momentum buffers an unsharded Muon holds.
  std::size_t unsharded_state_bytes() const {
    std::size_t n = 0;
    for (const Slot& s : slots_) n += static_cast<std::size_t>(s.numel()) * sizeof(T);
    return n;
  }
  /// Zeroes the momentum of the named parameters (FIRE, ReDo); throws naming any name this
  /// optimiser does not own, before changing anything.
  void reset_state(const std::vector<std::string>& names) {
    for (const std::string& n : names)
      check(owns(n), "Muon::reset_state", "no parameter named '", n, "' in this optimiser");
    for (const std::string& n : names)
      if (slots_[slot_of_.at(n)].momentum_buffer.defined()) slots_[slot_of_.at(n)].momentum_buffer.fill(T(0));
  }
  /// True when `name` is one of this optimiser's parameters.
  bool owns(const std::string& name) const { return slot_of_.count(name) > 0; }

  /// The parameter groups (options as currently set).
  const std::vector<Group>& groups() const { return groups_; }
  /// Number of parameters.
  std::size_t size() const { return slots_.size(); }
  /// Newton-Schulz steps a group runs.
  static int ns_steps(const MuonOptions& o) { return o.ns_steps > 0 ? o.ns_steps : Coefficients::default_steps; }

 private:
  struct Slot {
    ParamRef<T, B> param;
    std::size_t group;
    Tensor<T, B> momentum_buffer;  // (rows, cols)
    index_t rows, cols;
    index_t numel() const { return rows * cols; }
  };

  NsWorkspace<T, B>& workspace(index_t rows, index_t cols) {
    auto it = workspaces_.find({rows, cols});
    if (it == workspaces_.end()) it = workspaces_.emplace(std::pair{rows, cols}, NsWorkspace<T, B>(rows, cols)).first;
    return it->second;
  }

  // out[0, numel) = NewtonSchulz(g') with g' the Nesterov mix (or the momentum buffer).
  void orthogonalise(Slot& s, T* out) {
    const MuonOptions& o = groups_[s.group].options;
    NsWorkspace<T, B>& ws = workspace(s.rows, s.cols);
    const T* g = s.momentum_buffer.data();
    if (o.nesterov) {  // g' = g.lerp(buf, m) = (1 - m) g + m buf
      B::template map<T>(1, s.numel(), fn::Lerp{o.momentum}, ws.input.data(), In<T>{s.param.grad().data()},
                         In<T>{s.momentum_buffer.data()});
      g = ws.input.data();
    }
    if constexpr (std::is_same_v<T, float>) {
      if (o.ns_bf16) {
        newton_schulz_bf16<Coefficients, B>(g, out, ws, ns_steps(o));
        return;
      }
    }
    newton_schulz<Coefficients, T, B>(g, out, ws, ns_steps(o));
  }

  // W = W (1 - lr wd) - lr scale(R, C) O (nothing for a matrix without a gradient), in one pass
  // that also writes W's bf16 copy when mixed-precision products read one (Var::update_value).
  void apply(Slot& s, const T* update) {
    if (!s.param.has_grad()) return;
    const MuonOptions& o = groups_[s.group].options;
    const double lr = o.lr * lr_scale_;
    const fn::MuonStep step{fn::MuonUpdate{1.0 - lr * o.weight_decay, lr * ShapeScale::factor(s.rows, s.cols)}};
    s.param.var.update_value([&](T* w, bf16* w_rounded) { B::template update_in_place<T>(s.numel(), step, w, update, w_rounded); });
  }

  std::vector<Group> groups_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, std::size_t> slot_of_;
  std::map<std::pair<index_t, index_t>, NsWorkspace<T, B>> workspaces_;  // by (rows, cols)
  Tensor<T, B> send_;  // this rank's update: (max numel)
  Tensor<T, B> recv_;  // every rank's updates of a chunk: (world * max numel)
  index_t max_numel_ = 0;
  double lr_scale_ = 1.0;
  int shard_rank_ = 0, shard_world_ = 1;  // ZeRO-1 sharding (world 1: unsharded)
};

}  // namespace megacpp::optim
