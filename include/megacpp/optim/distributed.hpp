// megacpp/optim/distributed.hpp: the hook that lets ranks share Muon's Newton-Schulz work.
//
// Distributed Muon (modded-nanogpt, @YouJiacheng; RECIPE.md "Optimizers"): gradients are already
// averaged over ranks, so every rank would compute the same orthogonalised updates. Instead the
// parameters are dealt round-robin (ShardPlan: parameter i belongs to rank i % world); in each
// chunk of `world` consecutive parameters every rank orthogonalises its own one, and an
// all-gather hands every rank all of the chunk's updates, which every rank then applies.
//
// The communicator is a concept (GatherComm) so that the dist layer's communicators (MPI, NCCL)
// plug in later. Two implementations live here: SingleProcessGather (world size 1, the default)
// and InProcessGroup, an in-process fake of any world size whose ranks are threads. Tests use the
// fake to show that world size 2 gives bitwise the result of world size 1.
#pragma once

#include <algorithm>
#include <barrier>
#include <concepts>
#include <cstddef>
#include <memory>
#include <vector>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/error.hpp"

namespace megacpp::optim {

/// A communicator Muon can shard with: rank(), size(), and an all-gather of `count` elements
/// per rank, `recv[r * count + i] = send_of_rank_r[i]`, on backend B's memory.
template <class C, class T, class B>
concept GatherComm = requires(C& comm, const T* send, T* recv, index_t count) {
  { comm.rank() } -> std::convertible_to<int>;
  { comm.size() } -> std::convertible_to<int>;
  comm.template all_gather<T, B>(send, count, recv);
};

/// World size 1: the all-gather is a copy (none when send and recv are the same buffer).
struct SingleProcessGather {
  /// Always 0.
  int rank() const { return 0; }
  /// Always 1.
  int size() const { return 1; }
  /// recv[0, count) = send[0, count).
  template <class T, Backend B>
  void all_gather(const T* send, index_t count, T* recv) {
    if (send != recv && count > 0) B::template copy<T>(recv, send, static_cast<std::size_t>(count));
  }
};

/// Round-robin assignment of `count` parameters to `world` ranks: parameter i is orthogonalised
/// by rank i % world, in chunks of `world` consecutive parameters gathered together.
struct ShardPlan {
  index_t count = 0;  ///< parameters to update
  int world = 1;      ///< ranks

  /// The plan for `count` parameters over `world` ranks.
  ShardPlan(index_t n, int w) : count(n), world(w) {
    check(w >= 1, "ShardPlan", "world size must be >= 1, got ", w);
    check(n >= 0, "ShardPlan", "parameter count must be >= 0, got ", n);
  }
  /// The rank that orthogonalises parameter i.
  int owner(index_t i) const { return static_cast<int>(i % world); }
  /// Number of all-gathers: ceil(count / world).
  index_t chunks() const { return (count + world - 1) / world; }
  /// First parameter of chunk k.
  index_t chunk_begin(index_t k) const { return k * world; }
  /// One past the last parameter of chunk k.
  index_t chunk_end(index_t k) const { return std::min(count, (k + 1) * index_t{world}); }
};

class InProcessGroup;

/// One rank's endpoint of an InProcessGroup; use it from that rank's own thread.
class InProcessGather {
 public:
  /// This endpoint's rank.
  int rank() const { return rank_; }
  /// The group's world size.
  int size() const;
  /// Blocks until every rank has called it with the same `count`, then copies every rank's
  /// `send` into `recv` in rank order. Backend B's `copy` moves the data.
  template <class T, Backend B>
  void all_gather(const T* send, index_t count, T* recv);

 private:
  friend class InProcessGroup;
  InProcessGather(InProcessGroup* group, int rank) : group_(group), rank_(rank) {}
  InProcessGroup* group_;
  int rank_;
};

/// An in-process fake of a `world`-rank communicator: each rank runs on its own thread with its
/// own endpoint (comm(r)). Collective calls synchronise the threads with a barrier. Every rank
/// must make the same sequence of calls; a rank that throws leaves the others waiting, as a real
/// collective would. For tests and single-node simulation, not for production.
class InProcessGroup {
 public:
  /// A group of `world` ranks.
  explicit InProcessGroup(int world)
      : world_((check(world >= 1, "InProcessGroup", "world size must be >= 1, got ", world), world)),
        barrier_(world), slots_(static_cast<std::size_t>(world)), counts_(static_cast<std::size_t>(world)) {}
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  /// The endpoint of rank r.
  InProcessGather comm(int r) {
    check(r >= 0 && r < world_, "InProcessGroup::comm", "rank ", r, " out of range for world size ", world_);
    return InProcessGather(this, r);
  }
  /// World size.
  int size() const { return world_; }

 private:
  friend class InProcessGather;
  int world_;
  std::barrier<> barrier_;
  std::vector<const void*> slots_;  // each rank's send buffer during an all-gather
  std::vector<index_t> counts_;     // each rank's count, checked equal
};

inline int InProcessGather::size() const { return group_->size(); }

template <class T, Backend B>
void InProcessGather::all_gather(const T* send, index_t count, T* recv) {
  InProcessGroup& g = *group_;
  g.slots_[static_cast<std::size_t>(rank_)] = send;
  g.counts_[static_cast<std::size_t>(rank_)] = count;
  g.barrier_.arrive_and_wait();  // every rank's send buffer is published
  for (int r = 0; r < g.world_; ++r) {
    // A count mismatch is a bug in the caller's plan; every rank sees it and throws after the
    // second barrier is passed, so no thread is left waiting.
    if (g.counts_[static_cast<std::size_t>(r)] == count && count > 0)
      B::template copy<T>(recv + r * count, static_cast<const T*>(g.slots_[static_cast<std::size_t>(r)]),
                          static_cast<std::size_t>(count));
  }
  bool counts_agree = true;
  for (int r = 0; r < g.world_; ++r) counts_agree = counts_agree && g.counts_[static_cast<std::size_t>(r)] == count;
  g.barrier_.arrive_and_wait();  // every rank has finished reading the others' buffers
  check(counts_agree, "InProcessGather::all_gather", "rank ", rank_, " gathered ", count,
        " elements but another rank passed a different count");
}

}  // namespace megacpp::optim
