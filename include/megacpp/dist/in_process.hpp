/// \file
/// megacpp/dist/in_process.hpp: an in-process fake of a communicator of any world size, whose
/// ranks are threads. Tests use it to show that a world of 2 gives bitwise the result of a world
/// of 1 (distributed Muon, data parallelism); it is not for production. Reductions read the
/// ranks' buffers on the host (CPU-backend memory) in rank order, so every rank gets the same
/// bits; the non-blocking forms complete before they return.
#pragma once

#include <algorithm>
#include <barrier>
#include <numeric>
#include <span>
#include <vector>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/dist/comm.hpp"

namespace megacpp::dist {

class InProcessGroup;

/// One rank's endpoint of an InProcessGroup; use it from that rank's own thread.
class InProcessComm : public CompletesAtOnce<InProcessComm> {
 public:
  /// This endpoint's rank.
  int rank() const { return rank_; }
  /// The group's world size.
  int size() const;
  /// Blocks until every rank has called it with the same `count`, then copies every rank's
  /// `send` into `recv` in rank order. Backend B's `copy` moves the data.
  template <class T, Backend B>
  void all_gather(const T* send, index_t count, T* recv);
  /// In place: every rank ends with the reduction of all ranks' `data`, combined in rank order.
  template <class T, Backend B>
  void all_reduce(T* data, index_t count, ReduceOp op);
  /// `send` holds size() * count elements; this rank receives the reduction of block rank().
  template <class T, Backend B>
  void reduce_scatter(const T* send, T* recv, index_t count, ReduceOp op);
  /// `send` holds counts[0] + ... + counts[size() - 1] elements; this rank receives the
  /// reduction of block rank() (counts[rank()] elements, starting after the blocks before it).
  template <class T, Backend B>
  void reduce_scatter_v(const T* send, T* recv, std::span<const index_t> counts, ReduceOp op);
  /// Every rank ends with rank `root`'s `data`.
  template <class T, Backend B>
  void broadcast(T* data, index_t count, int root);
  /// Returns once every rank has entered it.
  void barrier();

 private:
  // Publishes `buffer` and `count`, waits for every rank, runs read(slots), waits again (so no
  // rank's buffer changes while another reads it), then throws if the counts disagreed.
  template <class F>
  void exchange(const void* buffer, index_t count, const char* op, F&& read);
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

template <class F>
void InProcessComm::exchange(const void* buffer, index_t count, const char* op, F&& read) {
  InProcessGroup& g = *group_;
  g.slots_[static_cast<std::size_t>(rank_)] = buffer;
  g.counts_[static_cast<std::size_t>(rank_)] = count;
  g.barrier_.arrive_and_wait();  // every rank's buffer is published
  bool counts_agree = true;
  for (int r = 0; r < g.world_; ++r) counts_agree = counts_agree && g.counts_[static_cast<std::size_t>(r)] == count;
  if (counts_agree) read(g.slots_);
  g.barrier_.arrive_and_wait();  // every rank has finished reading the others' buffers
  check(counts_agree, op, "rank ", rank_, " passed count ", count, " but another rank passed a different count");
}

template <class T, Backend B>
void InProcessComm::all_reduce(T* data, index_t count, ReduceOp op) {
  static_assert(B::host_accessible, "InProcessComm reduces on the host: CPU-backend memory only");
  std::vector<T> result(static_cast<std::size_t>(std::max<index_t>(count, 0)));
  exchange(data, count, "InProcessComm::all_reduce", [&](const std::vector<const void*>& slots) {
    for (index_t i = 0; i < count; ++i) result[static_cast<std::size_t>(i)] = detail::reduce_at<T>(slots, i, op);
  });
  std::copy(result.begin(), result.end(), data);
}

template <class T, Backend B>
void InProcessComm::reduce_scatter(const T* send, T* recv, index_t count, ReduceOp op) {
  static_assert(B::host_accessible, "InProcessComm reduces on the host: CPU-backend memory only");
  std::vector<T> result(static_cast<std::size_t>(std::max<index_t>(count, 0)));
  exchange(send, count, "InProcessComm::reduce_scatter", [&](const std::vector<const void*>& slots) {
    for (index_t i = 0; i < count; ++i)
      result[static_cast<std::size_t>(i)] = detail::reduce_at<T>(slots, rank_ * count + i, op);
  });
  std::copy(result.begin(), result.end(), recv);
}

template <class T, Backend B>
void InProcessComm::reduce_scatter_v(const T* send, T* recv, std::span<const index_t> counts, ReduceOp op) {
  static_assert(B::host_accessible, "InProcessComm reduces on the host: CPU-backend memory only");
  check(counts.size() == static_cast<std::size_t>(size()), "InProcessComm::reduce_scatter_v", "counts has ",
        counts.size(), " entries for ", size(), " ranks");
  for (index_t c : counts) check(c >= 0, "InProcessComm::reduce_scatter_v", "count ", c, " is negative");
  const index_t at = std::accumulate(counts.begin(), counts.begin() + rank_, index_t{0});
  const index_t total = std::accumulate(counts.begin(), counts.end(), index_t{0});
  const index_t mine = counts[static_cast<std::size_t>(rank_)];
  std::vector<T> result(static_cast<std::size_t>(mine));
  // The ranks agree on the total (exchange checks it); each reads its own block of every rank's send.
  exchange(send, total, "InProcessComm::reduce_scatter_v", [&](const std::vector<const void*>& slots) {
    for (index_t i = 0; i < mine; ++i) result[static_cast<std::size_t>(i)] = detail::reduce_at<T>(slots, at + i, op);
  });
  std::copy(result.begin(), result.end(), recv);
}

template <class T, Backend B>
void InProcessComm::broadcast(T* data, index_t count, int root) {
  check(root >= 0 && root < size(), "InProcessComm::broadcast", "root ", root, " out of range for world size ", size());
  exchange(data, count, "InProcessComm::broadcast", [&](const std::vector<const void*>& slots) {
    if (rank_ != root && count > 0)
      B::template copy<T>(data, static_cast<const T*>(slots[static_cast<std::size_t>(root)]), static_cast<std::size_t>(count));
  });
}

inline void InProcessComm::barrier() { group_->barrier_.arrive_and_wait(); }

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
