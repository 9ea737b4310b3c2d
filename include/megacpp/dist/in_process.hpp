/// \file
/// megacpp/dist/in_process.hpp: an in-process fake of a communicator of any world size, whose
/// ranks are threads. Tests use it to show that a world of 2 gives bitwise the result of a world
/// of 1 (distributed Muon); it is not for production.
#pragma once

#include <barrier>
#include <vector>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/error.hpp"

namespace megacpp::dist {

class InProcessGroup;

/// One rank's endpoint of an InProcessGroup; use it from that rank's own thread.
class InProcessComm {
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
  InProcessComm(InProcessGroup* group, int rank) : group_(group), rank_(rank) {}
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
  InProcessComm comm(int r) {
    check(r >= 0 && r < world_, "InProcessGroup::comm", "rank ", r, " out of range for world size ", world_);
    return InProcessComm(this, r);
  }
  /// World size.
  int size() const { return world_; }

 private:
  friend class InProcessComm;
  int world_;
  std::barrier<> barrier_;
  std::vector<const void*> slots_;  // each rank's send buffer during an all-gather
  std::vector<index_t> counts_;     // each rank's count, checked equal
};

inline int InProcessComm::size() const { return group_->size(); }

template <class T, Backend B>
void InProcessComm::all_gather(const T* send, index_t count, T* recv) {
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
  check(counts_agree, "InProcessComm::all_gather", "rank ", rank_, " gathered ", count,
        " elements but another rank passed a different count");
}

}  // namespace megacpp::dist
