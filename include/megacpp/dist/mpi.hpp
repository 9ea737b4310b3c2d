/// \file
/// megacpp/dist/mpi.hpp: the MPI communicator (component megacpp::mpi; the only header that
/// includes <mpi.h>).
///
/// One process per rank, launched by `mpirun -np N` or `srun` (docs/systems/distributed.md).
/// MpiEnvironment initialises and finalises MPI; MpiComm runs the dist::Comm collectives on a
/// duplicate of MPI_COMM_WORLD whose error handler returns errors, so a failed call throws a
/// megacpp::Error naming the operation and MPI's message instead of aborting silently. A rank
/// that cannot go on calls MpiComm::abort, which ends every rank of the job (MPI_Abort) rather
/// than leaving the others waiting in a collective. A rank that hangs or dies without an error
/// (deadlock, OOM kill under a launcher that does not end the job) would leave the others in a
/// collective for ever: MpiComm::set_timeout bounds every wait, after which the waiting rank
/// throws naming the collective and the time, and its caller aborts the job (as PyTorch's
/// process-group timeout does). Buffers are host memory (B::host_accessible;
/// CUDA-aware MPI is not assumed: GPUs use megacpp/dist/nccl.hpp). ReduceOp::avg is a sum
/// divided by the world size when the operation completes.
#pragma once

// The C API only: Open MPI's and MPICH's deprecated C++ bindings do not compile with -Wextra -Werror.
#ifndef OMPI_SKIP_MPICXX
/// Open MPI: leave out the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
/// MPICH: leave out the C++ bindings.
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/dist/comm.hpp"

namespace megacpp::dist {

namespace detail {
template <class T>
MPI_Datatype mpi_datatype() {
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
  else static_assert(sizeof(T) == 0, "MpiComm: element type must be float, double, int32, int64 or uint8");
}
inline MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::max ? MPI_MAX : MPI_SUM; }
// Throws megacpp::Error for an MPI error code, with MPI's own message.
inline void check_mpi(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  throw Error(std::string("MpiComm::") + what,
              "MPI error " + std::to_string(code) + ": " + std::string(message, static_cast<std::size_t>(length)));
}
// The completion steps (and so the staging buffers) of requests abandoned after a timeout, which
// MPI may still write into: kept reachable until the process ends.
inline std::vector<std::function<void()>>& abandoned_buffers() {
  static std::vector<std::function<void()>> kept;
  return kept;
}
template <class T>
void mpi_divide(T* data, index_t count, int world) {
  for (index_t i = 0; i < count; ++i) data[i] = static_cast<T>(data[i] / static_cast<T>(world));
}
}  // namespace detail

/// True when this process was started by an MPI launcher (mpirun/mpiexec of Open MPI or MPICH,
/// srun with PMI/PMIx): the trainer then runs data-parallel over MPI.
inline bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(name)) return true;
  return false;
}

/// Initialises MPI for the lifetime of the object (MPI_THREAD_FUNNELED: only the thread that
/// created it calls MPI; OpenMP threads inside kernels never do) and finalises it at the end.
/// One per process.
class MpiEnvironment {
 public:
  /// MPI_Init_thread with the program's arguments (either may be null).
  MpiEnvironment(int* argc = nullptr, char*** argv = nullptr) {
    int initialised = 0;
    MPI_Initialized(&initialised);
    check(!initialised, "MpiEnvironment", "MPI is already initialised in this process");
    int provided = 0;
    detail::check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  }
  MpiEnvironment(const MpiEnvironment&) = delete;
  MpiEnvironment& operator=(const MpiEnvironment&) = delete;
  /// MPI_Finalize.
  ~MpiEnvironment() { MPI_Finalize(); }
};

/// The handle of a non-blocking MPI collective; wait() completes it and then runs its
/// completion step (ReduceOp::avg's division by the world size; reduce_scatter_v's reduction of
/// the received blocks). A handle that is destroyed unwaited is waited for then (without the
/// completion step, whose result nobody can read any more).
class MpiRequest {
 public:
  /// A completed request.
  MpiRequest() = default;
  /// Wraps `request` of collective `what`; `complete` runs once when it completes (it may own
  /// buffers MPI uses until then: count arrays, a staging buffer); wait() gives up after
  /// `timeout_s` seconds (0: never).
  MpiRequest(MPI_Request request, const char* what, double timeout_s, std::function<void()> complete = {})
      : request_(request), what_(what), timeout_s_(timeout_s), complete_(std::move(complete)) {}
  /// Takes over `other`'s pending request.
  MpiRequest(MpiRequest&& other) noexcept { *this = std::move(other); }
  /// Takes over `other`'s pending request (waiting for this one first).
  MpiRequest& operator=(MpiRequest&& other) noexcept {
    if (this != &other) {
      finish_quietly();
      request_ = std::exchange(other.request_, MPI_REQUEST_NULL);
      what_ = other.what_, timeout_s_ = other.timeout_s_;
      complete_ = std::exchange(other.complete_, {});
    }
    return *this;
  }
  /// Waits for a request still pending (errors cannot be thrown from here: call wait()).
  ~MpiRequest() { finish_quietly(); }

  /// Blocks until the collective is complete. With a timeout, throws megacpp::Error once it has
  /// waited that long: the request is then abandoned (never waited for again, its buffers must
  /// outlive the process) and the communicator is unusable: end the job (MpiComm::abort).
  void wait() {
    if (request_ != MPI_REQUEST_NULL && timeout_s_ <= 0)
      detail::check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "wait");
    if (request_ != MPI_REQUEST_NULL) {
      const auto start = std::chrono::steady_clock::now();
      for (;;) {
        int done = 0;
        detail::check_mpi(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "wait");
        if (done) break;
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (waited > timeout_s_) {
          request_ = MPI_REQUEST_NULL;  // abandoned: MPI_Wait in the destructor would hang
          // MPI may still write into the buffers the completion step owns: keep them for ever.
          detail::abandoned_buffers().push_back(std::exchange(complete_, {}));
          fail(std::string("MpiComm::") + what_, "no completion after ", timeout_s_,
               " s (the collective timeout): another rank has died, hangs, or is not calling it; "
               "this rank cannot go on");
        }
        std::this_thread::yield();  // MPI_Wait polls too; yield lets a co-scheduled rank run
      }
    }
    complete();
  }
  /// Drives MPI's progress and returns true once the collective is complete (Open MPI moves a
  /// non-blocking collective forward only inside MPI calls: data parallelism polls from backward).
  bool test() {
    if (request_ != MPI_REQUEST_NULL) {
      int done = 0;
      detail::check_mpi(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "test");
      if (!done) return false;
    }
    complete();
    return true;
  }

 private:
  void complete() {
    if (complete_) std::exchange(complete_, {})();
  }
  void finish_quietly() noexcept {
    if (request_ != MPI_REQUEST_NULL) MPI_Wait(&request_, MPI_STATUS_IGNORE);
    request_ = MPI_REQUEST_NULL;
  }

  MPI_Request request_ = MPI_REQUEST_NULL;
  const char* what_ = "wait";       // the collective, for the timeout's message
  double timeout_s_ = 0;            // 0: wait for ever
  std::function<void()> complete_;  // the completion step, with the buffers it owns
};

/// The dist::Comm collectives over MPI (a duplicate of MPI_COMM_WORLD, errors returned and thrown).
/// Needs an MpiEnvironment alive.
class MpiComm {
 public:
  /// Duplicates `base` (MPI_COMM_WORLD by default) so that megacpp's traffic never mixes with
  /// the application's.
  explicit MpiComm(MPI_Comm base = MPI_COMM_WORLD) {
    detail::check_mpi(MPI_Comm_dup(base, &comm_), "MPI_Comm_dup");
    detail::check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  /// Frees the duplicated communicator (unless MPI is already finalised).
  ~MpiComm() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  /// This process's rank.
  int rank() const { return rank_; }
  /// The number of ranks.
  int size() const { return size_; }
  /// The underlying communicator.
  MPI_Comm native() const { return comm_; }
  /// Bounds every wait on a collective to `seconds` (0, the default: wait for ever; the barrier
  /// too). A wait that runs out throws megacpp::Error naming the collective; the communicator
  /// is then unusable and the caller should abort(). Set it above the longest time a rank may
  /// legitimately spend outside collectives (an evaluation, a checkpoint write).
  void set_timeout(double seconds) {
    check(std::isfinite(seconds) && seconds >= 0, "MpiComm::set_timeout", "seconds must be finite and >= 0, got ",
          seconds);
    timeout_s_ = seconds;
  }
  /// The collective timeout in seconds (0: none).
  double timeout() const { return timeout_s_; }

  /// Ends every rank of the job with exit status `code` after printing `message` on stderr
  /// (a failing rank must not leave the others blocked in a collective). Does not return.
  [[noreturn]] void abort(int code, const std::string& message) const {
    std::fprintf(stderr, "rank %d of %d: %s; aborting the MPI job\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

  /// In place: every rank ends with the reduction of all ranks' data.
  template <class T, Backend B>
  void all_reduce(T* data, index_t count, ReduceOp op) { iall_reduce<T, B>(data, count, op).wait(); }
  /// `send` holds size() * count elements; rank r receives the reduction of block r.
  template <class T, Backend B>
  void reduce_scatter(const T* send, T* recv, index_t count, ReduceOp op) {
    ireduce_scatter<T, B>(send, recv, count, op).wait();
  }
  /// `send` holds the sum of `counts` elements; rank r receives the reduction of block r
  /// (counts[r] elements, after the blocks of the ranks before it).
  template <class T, Backend B>
  void reduce_scatter_v(const T* send, T* recv, std::span<const index_t> counts, ReduceOp op) {
    ireduce_scatter_v<T, B>(send, recv, counts, op).wait();
  }
  /// recv[r * count + i] = send of rank r [i].
  template <class T, Backend B>
  void all_gather(const T* send, index_t count, T* recv) { iall_gather<T, B>(send, count, recv).wait(); }
  /// Every rank ends with rank `root`'s data.
  template <class T, Backend B>
  void broadcast(T* data, index_t count, int root) { ibroadcast<T, B>(data, count, root).wait(); }
  /// Returns once every rank has entered it (MPI_Ibarrier, waited for under the timeout).
  void barrier() {
    MPI_Request r;
    detail::check_mpi(MPI_Ibarrier(comm_, &r), "barrier");
    MpiRequest(r, "barrier", timeout_s_).wait();
  }

  /// Non-blocking all_reduce (MPI_Iallreduce in place).
  template <class T, Backend B>
  MpiRequest iall_reduce(T* data, index_t count, ReduceOp op) {
    host_only<B>();
    MPI_Request r;
    detail::check_mpi(MPI_Iallreduce(MPI_IN_PLACE, data, to_int(count, "iall_reduce"), detail::mpi_datatype<T>(),
                                         detail::mpi_op(op), comm_, &r), "iall_reduce");
    return MpiRequest(r, "all_reduce", timeout_s_, average(data, count, op));
  }
  /// Non-blocking reduce_scatter (MPI_Ireduce_scatter_block).
  template <class T, Backend B>
  MpiRequest ireduce_scatter(const T* send, T* recv, index_t count, ReduceOp op) {
    host_only<B>();
    MPI_Request r;
    detail::check_mpi(MPI_Ireduce_scatter_block(send, recv, to_int(count, "ireduce_scatter"), detail::mpi_datatype<T>(),
                                                    detail::mpi_op(op), comm_, &r), "ireduce_scatter");
    return MpiRequest(r, "reduce_scatter", timeout_s_, average(recv, count, op));
  }
  /// Non-blocking reduce_scatter_v: one MPI_Ialltoallv sends block r to rank r (each rank
  /// sends and receives (W - 1) / W of the buffer once, the bandwidth bound of a reduce-scatter,
  /// where Open MPI's non-blocking MPI_Ireduce_scatter reduces everything to rank 0 and then
  /// scatters: ompi/mca/coll/libnbc/nbc_ireduce_scatter.c), and wait() reduces the W received blocks in rank order: the same bits whatever
  /// algorithm MPI picks, and the same order as dist::InProcessComm.
  template <class T, Backend B>
  MpiRequest ireduce_scatter_v(const T* send, T* recv, std::span<const index_t> counts, ReduceOp op) {
    host_only<B>();
    check(counts.size() == static_cast<std::size_t>(size_), "MpiComm::reduce_scatter_v", "counts has ", counts.size(),
          " entries for ", size_, " ranks");
    std::vector<int> send_counts, send_at, recv_counts, recv_at;
    index_t at = 0;
    for (index_t c : counts) {
      send_counts.push_back(to_int(c, "ireduce_scatter_v"));
      send_at.push_back(to_int(at, "ireduce_scatter_v"));
      at += c;
    }
    const index_t mine = counts[static_cast<std::size_t>(rank_)];
    to_int(mine * size_, "ireduce_scatter_v");
    for (int q = 0; q < size_; ++q) recv_counts.push_back(static_cast<int>(mine)), recv_at.push_back(static_cast<int>(mine * q));
    std::vector<T> blocks(static_cast<std::size_t>(mine * size_));  // rank q's block r at q * mine
    MPI_Request r;
    detail::check_mpi(MPI_Ialltoallv(send, send_counts.data(), send_at.data(), detail::mpi_datatype<T>(), blocks.data(),
                                     recv_counts.data(), recv_at.data(), detail::mpi_datatype<T>(), comm_, &r),
                      "ireduce_scatter_v");
    const int world = size_;
    // The arrays MPI reads and writes move into the completion step (their storage stays put).
    return MpiRequest(r, "reduce_scatter_v", timeout_s_, [recv, mine, world, op, blocks = std::move(blocks),
                                                          keep = std::array{std::move(send_counts), std::move(send_at),
                                                                            std::move(recv_counts), std::move(recv_at)}] {
      (void)keep;
      std::vector<const void*> slots;  // rank q's block at q * mine
      for (int q = 0; q < world; ++q) slots.push_back(blocks.data() + q * mine);
      for (index_t i = 0; i < mine; ++i) recv[i] = detail::reduce_at<T>(slots, i, op);
    });
  }
  /// Non-blocking all_gather (MPI_Iallgather).
  template <class T, Backend B>
  MpiRequest iall_gather(const T* send, index_t count, T* recv) {
    host_only<B>();
    const int n = to_int(count, "iall_gather");
    MPI_Request r;
    detail::check_mpi(MPI_Iallgather(send, n, detail::mpi_datatype<T>(), recv, n, detail::mpi_datatype<T>(), comm_, &r),
                          "iall_gather");
    return MpiRequest(r, "all_gather", timeout_s_);
  }
  /// Non-blocking broadcast (MPI_Ibcast).
  template <class T, Backend B>
  MpiRequest ibroadcast(T* data, index_t count, int root) {
    host_only<B>();
    check(root >= 0 && root < size_, "MpiComm::broadcast", "root ", root, " out of range for world size ", size_);
    MPI_Request r;
    detail::check_mpi(MPI_Ibcast(data, to_int(count, "ibroadcast"), detail::mpi_datatype<T>(), root, comm_, &r),
                          "ibroadcast");
    return MpiRequest(r, "broadcast", timeout_s_);
  }

 private:
  // ReduceOp::avg's completion step: divide the result by the world size.
  template <class T>
  std::function<void()> average(T* data, index_t count, ReduceOp op) const {
    if (op != ReduceOp::avg) return {};
    return [data, count, world = size_] { detail::mpi_divide(data, count, world); };
  }
  template <class B>
  static void host_only() {
    static_assert(B::host_accessible, "MpiComm moves host memory: use NcclComm (megacpp/dist/nccl.hpp) for GPU buffers");
  }
  static int to_int(index_t count, const char* what) {
    check(count >= 0 && count <= INT32_MAX, "MpiComm", what, ": count ", count, " is negative or over MPI's int limit");
    return static_cast<int>(count);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 0;  // set_timeout: 0 waits for ever
};

}  // namespace megacpp::dist
