/// \file
/// megacpp/dist/comm.hpp: what a communicator is, and the world of one process.
///
/// A communicator connects the ranks of a data-parallel run (one process per rank: MPI on CPU
/// clusters, megacpp/dist/mpi.hpp; NCCL on GPUs, megacpp/dist/nccl.hpp; docs/systems/distributed.md).
/// Collectives take backend memory and are called by every rank in the same order with the same
/// counts. Each has a non-blocking form (`i` prefix) that returns a handle whose wait() completes
/// it; the buffers must stay alive and untouched until then. SingleProcess is the world of size
/// 1, the default everywhere; megacpp/dist/in_process.hpp is an in-process fake of any world size
/// for tests.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <span>
#include <vector>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/error.hpp"

namespace megacpp::dist {

/// How all_reduce and reduce_scatter combine the ranks' elements.
enum class ReduceOp {
  sum,  ///< the sum over ranks
  avg,  ///< the sum over ranks divided by the world size (data-parallel gradients)
  max,  ///< the largest value over ranks
};

namespace detail {
// The reduction of element `at` of every rank's buffer (slots[r]: rank r's, host memory),
// combined in rank order and divided by the world size for avg: the same bits on every rank and
// for every communicator that reduces on the host (the in-process fake, MpiComm's
// reduce_scatter_v).
template <class T>
T reduce_at(const std::vector<const void*>& slots, index_t at, ReduceOp op) {
  T acc = static_cast<const T*>(slots[0])[at];
  for (std::size_t r = 1; r < slots.size(); ++r) {
    const T x = static_cast<const T*>(slots[r])[at];
    acc = op == ReduceOp::max ? std::max(acc, x) : static_cast<T>(acc + x);
  }
  if (op == ReduceOp::avg) acc = static_cast<T>(acc / static_cast<T>(slots.size()));
  return acc;
}
}  // namespace detail

/// A handle of a non-blocking collective: wait() returns once the collective's result is in the
/// receive buffer (and the send buffer may be reused).
template <class H>
concept Waitable = std::movable<H> && requires(H& h) { h.wait(); };

/// A communicator that can all-gather: rank(), size(), and an all-gather of `count` elements
/// per rank, `recv[r * count + i] = send_of_rank_r[i]`, on backend B's memory (all distributed
/// Muon needs).
template <class C, class T, class B>
concept GatherComm = requires(C& comm, const T* send, T* recv, index_t count) {
  { comm.rank() } -> std::convertible_to<int>;
  { comm.size() } -> std::convertible_to<int>;
  comm.template all_gather<T, B>(send, count, recv);
};

/// A full communicator for element type T on backend B:
/// - all_reduce(data, count, op): in place, every rank ends with the reduction of all ranks' data;
/// - reduce_scatter(send, recv, count, op): send holds size() * count elements, rank r receives
///   the reduction of every rank's block r (count elements);
/// - reduce_scatter_v(send, recv, counts, op): the same with blocks of different sizes: counts
///   has size() entries, send holds their sum, block r starts at counts[0] + ... + counts[r - 1],
///   and rank r receives counts[r] elements (ZeRO-1's gradients, where each rank owns whole
///   parameters: MPI_Reduce_scatter's recvcounts);
/// - all_gather(send, count, recv): recv[r * count + i] = send of rank r [i];
/// - broadcast(data, count, root): every rank ends with root's data;
/// - barrier(): returns once every rank has entered it;
/// and the non-blocking iall_reduce, ireduce_scatter, ireduce_scatter_v, iall_gather,
/// ibroadcast, returning a Waitable handle (counts may go out of scope once a call returns).
template <class C, class T, class B>
concept Comm = GatherComm<C, T, B> && requires(C& comm, const T* send, T* data, index_t count, ReduceOp op, int root,
                                               std::span<const index_t> counts) {
  comm.template all_reduce<T, B>(data, count, op);
  comm.template reduce_scatter<T, B>(send, data, count, op);
  comm.template reduce_scatter_v<T, B>(send, data, counts, op);
  comm.template broadcast<T, B>(data, count, root);
  comm.barrier();
  { comm.template iall_reduce<T, B>(data, count, op) } -> Waitable;
  { comm.template ireduce_scatter<T, B>(send, data, count, op) } -> Waitable;
  { comm.template ireduce_scatter_v<T, B>(send, data, counts, op) } -> Waitable;
  { comm.template iall_gather<T, B>(send, count, data) } -> Waitable;
  { comm.template ibroadcast<T, B>(data, count, root) } -> Waitable;
};

/// The handle of a collective that completed when it was started.
struct Completed {
  /// Nothing left to do.
  void wait() {}
  /// Always true: the collective is done.
  bool test() { return true; }
};

/// The non-blocking collectives of a communicator whose collectives complete before they return
/// (the world of one process, the in-process fake): each runs the blocking one of `Derived` and
/// hands back a Completed handle. `Derived` derives from CompletesAtOnce<Derived>.
template <class Derived>
struct CompletesAtOnce {
  /// all_reduce, completed before it returns.
  template <class T, Backend B>
  Completed iall_reduce(T* data, index_t count, ReduceOp op) {
    self().template all_reduce<T, B>(data, count, op);
    return {};
  }
  /// reduce_scatter, completed before it returns.
  template <class T, Backend B>
  Completed ireduce_scatter(const T* send, T* recv, index_t count, ReduceOp op) {
    self().template reduce_scatter<T, B>(send, recv, count, op);
    return {};
  }
  /// reduce_scatter_v, completed before it returns.
  template <class T, Backend B>
  Completed ireduce_scatter_v(const T* send, T* recv, std::span<const index_t> counts, ReduceOp op) {
    self().template reduce_scatter_v<T, B>(send, recv, counts, op);
    return {};
  }
  /// all_gather, completed before it returns.
  template <class T, Backend B>
  Completed iall_gather(const T* send, index_t count, T* recv) {
    self().template all_gather<T, B>(send, count, recv);
    return {};
  }
  /// broadcast, completed before it returns.
  template <class T, Backend B>
  Completed ibroadcast(T* data, index_t count, int root) {
    self().template broadcast<T, B>(data, count, root);
    return {};
  }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

/// World size 1: reductions and broadcasts leave the data as it is, gathers and scatters copy
/// (nothing when send and recv are the same buffer).
struct SingleProcess : CompletesAtOnce<SingleProcess> {
  /// Always 0.
  int rank() const { return 0; }
  /// Always 1.
  int size() const { return 1; }
  /// recv[0, count) = send[0, count).
  template <class T, Backend B>
  void all_gather(const T* send, index_t count, T* recv) {
    if (send != recv && count > 0) B::template copy<T>(recv, send, static_cast<std::size_t>(count));
  }
  /// The reduction over one rank is the data itself.
  template <class T, Backend B>
  void all_reduce(T*, index_t, ReduceOp) {}
  /// recv[0, count) = send[0, count).
  template <class T, Backend B>
  void reduce_scatter(const T* send, T* recv, index_t count, ReduceOp) {
    all_gather<T, B>(send, count, recv);
  }
  /// recv[0, counts[0]) = send[0, counts[0]).
  template <class T, Backend B>
  void reduce_scatter_v(const T* send, T* recv, std::span<const index_t> counts, ReduceOp) {
    check(counts.size() == 1, "SingleProcess::reduce_scatter_v", "counts has ", counts.size(), " entries for 1 rank");
    all_gather<T, B>(send, counts[0], recv);
  }
  /// Rank 0 already holds its own data.
  template <class T, Backend B>
  void broadcast(T*, index_t, int) {}
  /// Nothing to wait for.
  void barrier() {}
};

}  // namespace megacpp::dist
