/// \file
/// megacpp/dist/nccl.hpp: the NCCL communicator (component megacpp::nccl; the only header that
/// includes <nccl.h>).
///
/// One process per GPU (docs/systems/distributed.md). The ranks agree on an ncclUniqueId made by
/// rank 0 (NcclComm::unique_id) and passed to the others out of band, usually by an MPI broadcast
/// of its bytes. Collectives run on the communicator's own CUDA stream; the non-blocking forms
/// return a handle whose wait() makes the default stream (where the CUDA backend runs every kernel) wait for them (no host
/// synchronisation), the blocking forms synchronise the stream. Errors throw megacpp::Error with
/// NCCL's message. Buffers are device memory (the CUDA backend's).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/dist/comm.hpp"

namespace megacpp::dist {

namespace detail {
inline void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string("NcclComm::") + what, ncclGetErrorString(r));
}
inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("NcclComm::") + what, cudaGetErrorString(e));
}
template <class T>
ncclDataType_t nccl_datatype() {
  if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return ncclInt32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return ncclInt64;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return ncclUint8;
  else static_assert(sizeof(T) == 0, "NcclComm: element type must be float, double, int32, int64 or uint8");
}
inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return ncclAvg;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}
}  // namespace detail

/// The handle of a non-blocking NCCL collective: an event recorded on the communicator's stream.
class NcclRequest {
 public:
  /// A completed request.
  NcclRequest() = default;
  /// Takes ownership of `event`, recorded after the collective.
  explicit NcclRequest(cudaEvent_t event) : event_(event) {}
  /// Takes over `other`'s event.
  NcclRequest(NcclRequest&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  /// Takes over `other`'s event.
  NcclRequest& operator=(NcclRequest&& other) noexcept {
    if (this != &other) {
      release();
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  /// Destroys the event (without waiting: call wait() first).
  ~NcclRequest() { release(); }
  /// Orders the default stream after the collective (kernels launched next see its result).
  void wait() {
    if (event_) detail::check_cuda(cudaStreamWaitEvent(cudaStreamLegacy, event_, 0), "wait");
    release();
  }
  /// True once the collective has finished on the GPU.
  bool test() {
    if (!event_) return true;
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    detail::check_cuda(e, "test");
    release();
    return true;
  }

 private:
  void release() noexcept {
    if (event_) cudaEventDestroy(event_);
    event_ = nullptr;
  }
  cudaEvent_t event_ = nullptr;
};

/// The dist::Comm collectives over NCCL, one rank per GPU (the current CUDA device when built).
/// The collectives take device pointers; their backend parameter B only names whose memory it is
/// (NCCL needs none of the backend's functions), so host code compiles them without nvcc.
class NcclComm {
 public:
  /// A new id for a communicator: rank 0 makes it, every rank passes it to the constructor.
  static ncclUniqueId unique_id() {
    ncclUniqueId id;
    detail::check_nccl(ncclGetUniqueId(&id), "unique_id");
    return id;
  }
  /// Joins communicator `id` as `rank` of `world` on the current CUDA device (blocks until every
  /// rank has joined).
  NcclComm(const ncclUniqueId& id, int rank, int world) : rank_(rank), size_(world) {
    check(world >= 1 && rank >= 0 && rank < world, "NcclComm", "rank ", rank, " out of range for world size ", world);
    detail::check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    detail::check_nccl(ncclCommInitRank(&comm_, world, id, rank), "ncclCommInitRank");
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;
  /// Destroys the communicator, its stream and its scratch memory.
  ~NcclComm() {
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
    if (scratch_) cudaFree(scratch_);
  }

  /// This process's rank.
  int rank() const { return rank_; }
  /// The number of ranks.
  int size() const { return size_; }
  /// The stream the collectives run on.
  cudaStream_t stream() const { return stream_; }

  /// In place: every rank ends with the reduction of all ranks' data.
  template <class T, class B>
  void all_reduce(T* data, index_t count, ReduceOp op) { blocking(iall_reduce<T, B>(data, count, op)); }
  /// `send` holds size() * count elements; rank r receives the reduction of block r.
  template <class T, class B>
  void reduce_scatter(const T* send, T* recv, index_t count, ReduceOp op) {
    blocking(ireduce_scatter<T, B>(send, recv, count, op));
  }
  /// `send` holds the sum of `counts` elements; rank r receives the reduction of block r
  /// (counts[r] elements, after the blocks of the ranks before it).
  template <class T, class B>
  void reduce_scatter_v(const T* send, T* recv, std::span<const index_t> counts, ReduceOp op) {
    blocking(ireduce_scatter_v<T, B>(send, recv, counts, op));
  }
  /// recv[r * count + i] = send of rank r [i].
  template <class T, class B>
  void all_gather(const T* send, index_t count, T* recv) { blocking(iall_gather<T, B>(send, count, recv)); }
  /// Every rank ends with rank `root`'s data.
  template <class T, class B>
  void broadcast(T* data, index_t count, int root) { blocking(ibroadcast<T, B>(data, count, root)); }
  /// Returns once every rank has entered it (a one-element all-reduce, synchronised).
  void barrier() {
    if (!scratch_) detail::check_cuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(float)), "barrier");
    start();
    detail::check_nccl(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_), "barrier");
    detail::check_cuda(cudaStreamSynchronize(stream_), "barrier");
  }

  /// Non-blocking all_reduce (ncclAllReduce in place).
  template <class T, class B>
  NcclRequest iall_reduce(T* data, index_t count, ReduceOp op) {
    start();
    detail::check_nccl(ncclAllReduce(data, data, elements(count), detail::nccl_datatype<T>(), detail::nccl_op(op),
                                          comm_, stream_), "all_reduce");
    return finish();
  }
  /// Non-blocking reduce_scatter (ncclReduceScatter).
  template <class T, class B>
  NcclRequest ireduce_scatter(const T* send, T* recv, index_t count, ReduceOp op) {
    start();
    detail::check_nccl(ncclReduceScatter(send, recv, elements(count), detail::nccl_datatype<T>(),
                                              detail::nccl_op(op), comm_, stream_), "reduce_scatter");
    return finish();
  }
  /// Non-blocking reduce_scatter_v: NCCL has no reduce-scatter of unequal blocks, so one
  /// ncclReduce per rank (block r to root r) in one group, which NCCL runs as a single launch
  /// (the pattern of NCCL's documented "group calls" for variable-size collectives).
  template <class T, class B>
  NcclRequest ireduce_scatter_v(const T* send, T* recv, std::span<const index_t> counts, ReduceOp op) {
    check(counts.size() == static_cast<std::size_t>(size_), "NcclComm::reduce_scatter_v", "counts has ", counts.size(),
          " entries for ", size_, " ranks");
    start();
    detail::check_nccl(ncclGroupStart(), "reduce_scatter_v");
    std::size_t at = 0;
    for (int r = 0; r < size_; ++r) {
      const std::size_t n = elements(counts[static_cast<std::size_t>(r)]);
      if (n > 0)
        detail::check_nccl(ncclReduce(send + at, recv, n, detail::nccl_datatype<T>(), detail::nccl_op(op), r, comm_, stream_),
                           "reduce_scatter_v");
      at += n;
    }
    detail::check_nccl(ncclGroupEnd(), "reduce_scatter_v");
    return finish();
  }
  /// Non-blocking all_gather (ncclAllGather).
  template <class T, class B>
  NcclRequest iall_gather(const T* send, index_t count, T* recv) {
    start();
    detail::check_nccl(ncclAllGather(send, recv, elements(count), detail::nccl_datatype<T>(), comm_, stream_),
                            "all_gather");
    return finish();
  }
  /// Non-blocking broadcast (ncclBroadcast in place).
  template <class T, class B>
  NcclRequest ibroadcast(T* data, index_t count, int root) {
    check(root >= 0 && root < size_, "NcclComm::broadcast", "root ", root, " out of range for world size ", size_);
    start();
    detail::check_nccl(ncclBroadcast(data, data, elements(count), detail::nccl_datatype<T>(), root, comm_, stream_),
                            "broadcast");
    return finish();
  }

 private:
  static std::size_t elements(index_t count) {
    check(count >= 0, "NcclComm", "count must be >= 0, got ", count);
    return static_cast<std::size_t>(count);
  }
  // The collective starts after the work already queued on the default stream (its inputs): the
  // legacy one, where the CUDA backend runs (cuda::kStream), whatever --default-stream says.
  void start() {
    cudaEvent_t ready;
    detail::check_cuda(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    detail::check_cuda(cudaEventRecord(ready, cudaStreamLegacy), "cudaEventRecord");
    detail::check_cuda(cudaStreamWaitEvent(stream_, ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(ready);
  }
  NcclRequest finish() {
    cudaEvent_t done;
    detail::check_cuda(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    detail::check_cuda(cudaEventRecord(done, stream_), "cudaEventRecord");
    return NcclRequest(done);
  }
  void blocking(NcclRequest r) {
    r.wait();
    detail::check_cuda(cudaStreamSynchronize(cudaStreamLegacy), "synchronize");
  }

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;
  int rank_ = 0, size_ = 1;
};

}  // namespace megacpp::dist
