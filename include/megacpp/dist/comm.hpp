/// \file
/// megacpp/dist/comm.hpp: what a communicator is, and the world of one process.
///
/// A communicator connects the ranks of a data-parallel run (one process per rank: MPI on CPU
/// clusters, NCCL on GPUs; docs/systems/muon.md for distributed Muon, which is built on it).
/// Collectives take backend memory and copy with the backend's own kernels. SingleProcess is the
/// world of size 1, the default everywhere; megacpp/dist/in_process.hpp is an in-process fake of
/// any world size for tests.
#pragma once

#include <concepts>
#include <cstddef>

#include "megacpp/core/backend.hpp"

namespace megacpp::dist {

/// A communicator that can all-gather: rank(), size(), and an all-gather of `count` elements
/// per rank, `recv[r * count + i] = send_of_rank_r[i]`, on backend B's memory (what distributed
/// Muon needs; the other collectives join with the MPI and NCCL communicators).
template <class C, class T, class B>
concept GatherComm = requires(C& comm, const T* send, T* recv, index_t count) {
  { comm.rank() } -> std::convertible_to<int>;
  { comm.size() } -> std::convertible_to<int>;
  comm.template all_gather<T, B>(send, count, recv);
};

/// World size 1: the all-gather is a copy (none when send and recv are the same buffer).
struct SingleProcess {
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

}  // namespace megacpp::dist
