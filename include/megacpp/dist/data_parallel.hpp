/// \file
/// megacpp/dist/data_parallel.hpp: data parallelism over any dist::Comm, with gradient buckets
/// whose all-reduce starts during backward.
///
/// Every rank holds the whole model and trains on its own slice of the data. DataParallel
/// (after PyTorch DDP, Li et al. 2020, "PyTorch Distributed", VLDB):
/// - broadcast_parameters() copies rank 0's initial values to every rank;
/// - the parameters are packed, in reverse registration order (backward reaches the last layers
///   first), into buckets of at most `bucket_bytes` (25 MB by default, PyTorch's default); each
///   parameter's gradient-ready hook (Var::on_grad_ready) counts the bucket down, and a bucket
///   whose gradients are all final is copied into its flat buffer and its all-reduce (average)
///   started, so communication overlaps the rest of backward. Buckets start strictly in index
///   order, so every rank issues the same collectives in the same order whatever its graph;
/// - finish() starts what is left (a parameter no op reached counts as a zero gradient), waits
///   for every bucket and writes the averaged gradients back: call it after the last backward of
///   the step, before clipping and the optimizer step;
/// - set_sync(false) turns the hooks off for the micro-batches of gradient accumulation before
///   the last one: their gradients accumulate locally, and only the last backward communicates.
///
/// The average of the ranks' gradients is their sum divided by the world size; with the loss of
/// each rank scaled by 1 / accumulation the result is the mean gradient over the global batch
/// (micro-batch x accumulation x world).
///
/// ZeRO-1 (DataParallelOptions::owners; Rajbhandari et al. 2020, sec. 5.1): when each rank's
/// optimiser updates only the parameters it owns (optim::Hybrid::shard), only the owner needs a
/// parameter's averaged gradient. Each bucket is then laid out by owner (rank 0's parameters
/// first, then rank 1's, ...) and reduce-scattered with blocks of unequal size
/// (Comm::ireduce_scatter_v) instead of all-reduced: each rank sends and receives (W - 1) / W of
/// the bucket once, where a ring all-reduce moves it twice, and the following all-gather of
/// updated parameters brings the step to DDP's volume. finish() writes the averaged gradient of
/// the owned parameters only; a parameter another rank owns keeps this rank's own local gradient
/// (not averaged: clip with optim::clip_grad_norm's sharded form, which reads owned gradients
/// only). The sums are the all-reduce's, element for element, so the owners' gradients are
/// bitwise those of the all-reduce.
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "megacpp/autograd/var.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/dist/comm.hpp"

namespace megacpp::dist {

/// DataParallel's settings.
struct DataParallelOptions {
  std::size_t bucket_bytes = std::size_t{25} << 20;  ///< gradient bytes per all-reduce (a parameter never splits)
  /// ZeRO-1: owners[k] is the rank that updates parameter k (optim::Hybrid::owners); each bucket
  /// is then reduce-scattered to the owners. Empty (the default): every rank gets every averaged
  /// gradient (all-reduce).
  std::vector<int> owners = {};
};

/// Bucketed, overlapped gradient averaging of `params` over `comm` (see the file comment).
/// Holds references to comm and to the parameters' states: both must outlive it.
template <class T, Backend B, class C>
  requires Comm<C, T, B>
class DataParallel {
  using Request = decltype(std::declval<C&>().template iall_reduce<T, B>(nullptr, index_t{0}, ReduceOp::avg));
  using ScatterRequest = decltype(std::declval<C&>().template ireduce_scatter_v<T, B>(
      nullptr, nullptr, std::span<const index_t>{}, ReduceOp::avg));
  static_assert(std::is_same_v<Request, ScatterRequest>, "DataParallel: a communicator's non-blocking collectives share one handle type");

 public:
  /// Registers `params` (every rank passes the same parameters in the same order) and installs
  /// their gradient-ready hooks.
  DataParallel(C& comm, std::vector<Var<T, B>> params, DataParallelOptions options = {})
      : comm_(comm), params_(std::move(params)), options_(options) {
    check(options.bucket_bytes > 0, "DataParallel", "bucket_bytes must be > 0, got ", options.bucket_bytes);
    const bool sharded = !options_.owners.empty();
    check(!sharded || options_.owners.size() == params_.size(), "DataParallel", "owners has ", options_.owners.size(),
          " entries for ", params_.size(), " parameters");
    for (std::size_t k = 0; k < options_.owners.size(); ++k)
      check(options_.owners[k] >= 0 && options_.owners[k] < comm_.size(), "DataParallel", "owner ", options_.owners[k],
            " of parameter ", k, " is out of range for world size ", comm_.size());
    bucket_of_.resize(params_.size());
    for (std::size_t k = params_.size(); k-- > 0;) {
      check(params_[k].defined() && params_[k].requires_grad() && params_[k].is_leaf(), "DataParallel",
            "parameter ", k, " is not a leaf that requires a gradient");
      const std::size_t bytes = static_cast<std::size_t>(params_[k].numel()) * sizeof(T);
      if (buckets_.empty() || (buckets_.back().bytes > 0 && buckets_.back().bytes + bytes > options_.bucket_bytes))
        buckets_.emplace_back();
      Bucket& b = buckets_.back();
      b.members.push_back(k);
      b.bytes += bytes;
      bucket_of_[k] = buckets_.size() - 1;
    }
    for (Bucket& b : buckets_) {
      index_t n = 0;
      for (std::size_t k : b.members) n += params_[k].numel();
      b.flat = Tensor<T, B>(Shape{std::max<index_t>(n, 1)});
      b.numel = n;
      if (!sharded) continue;
      // Owner order (rank 0's members first, each rank's in backward order): block r of the
      // reduce-scatter is rank r's parameters.
      std::stable_sort(b.members.begin(), b.members.end(),
                       [&](std::size_t x, std::size_t y) { return options_.owners[x] < options_.owners[y]; });
      b.counts.assign(static_cast<std::size_t>(comm_.size()), 0);
      for (std::size_t k : b.members) b.counts[static_cast<std::size_t>(options_.owners[k])] += params_[k].numel();
      b.owned = Tensor<T, B>(Shape{std::max<index_t>(b.counts[static_cast<std::size_t>(comm_.rank())], 1)});
    }
    for (std::size_t k = 0; k < params_.size(); ++k) params_[k].on_grad_ready([this, k] { grad_ready(k); });
    reset();
  }
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;
  ~DataParallel() {
    for (Var<T, B>& p : params_) p.on_grad_ready({});
  }

  /// Copies rank `root`'s parameter values to every rank (call once, before training).
  void broadcast_parameters(int root = 0) {
    for (Var<T, B>& p : params_) comm_.template broadcast<T, B>(p.mutable_value().data(), p.numel(), root);
  }

  /// Whether the next backward communicates: false for the micro-batches of an accumulation
  /// before the last one (their gradients only accumulate), true (the default) otherwise.
  void set_sync(bool on) { sync_ = on; }
  /// True when the next backward communicates.
  bool sync() const { return sync_; }

  /// Starts the buckets not started yet, waits for all, and writes the averaged gradients into
  /// every parameter (a parameter without a gradient gets one). Then ready for the next step.
  void finish() {
    for (std::size_t i = 0; i < buckets_.size(); ++i) buckets_[i].forced = true;
    launch_ready();
    for (Bucket& b : buckets_) {
      if (b.request) b.request->wait();
      b.request.reset();
      unpack(b);
    }
    reset();
  }

  /// The number of buckets.
  std::size_t buckets() const { return buckets_.size(); }
  /// True when the buckets are reduce-scattered to their owners (ZeRO-1), false when all-reduced.
  bool reduce_scatters() const { return !options_.owners.empty(); }
  /// Gradient elements this rank sends per step in a ring implementation (2 (W - 1) / W of the
  /// gradients for the all-reduce, (W - 1) / W for the reduce-scatter): the figure ZeRO halves.
  double ring_elements_sent() const {
    const double world = comm_.size();
    double total = 0;
    for (const Bucket& b : buckets_) total += static_cast<double>(b.numel);
    return (reduce_scatters() ? 1.0 : 2.0) * (world - 1) / world * total;
  }
  /// Buckets whose all-reduce was started from a backward hook in the last step (the others were
  /// started by finish()): how much of the communication could overlap backward.
  std::size_t buckets_started_in_backward() const { return started_in_backward_last_; }

 private:
  struct Bucket {
    std::vector<std::size_t> members;  // parameter indices, in the order backward tends to finish them
    std::size_t bytes = 0;
    index_t numel = 0;
    Tensor<T, B> flat;
    std::vector<index_t> counts;  // ZeRO-1: elements per owner (block r of the reduce-scatter)
    Tensor<T, B> owned;           // ZeRO-1: this rank's averaged block
    std::size_t pending = 0;  // members whose gradient is not final yet in this pass
    bool forced = false;      // finish(): start whatever is pending
    bool started = false;
    std::optional<Request> request;
  };

  void reset() {
    for (Bucket& b : buckets_) b.pending = b.members.size(), b.forced = false, b.started = false;
    next_ = 0;
    started_in_backward_last_ = started_in_backward_;
    started_in_backward_ = 0;
  }

  void grad_ready(std::size_t k) {
    if (!sync_) return;
    Bucket& b = buckets_[bucket_of_[k]];
    if (b.pending > 0) --b.pending;
    const std::size_t before = next_;
    launch_ready();
    started_in_backward_ += next_ - before;
    // Open MPI moves a non-blocking collective forward only inside MPI calls: poll the ones in flight.
    if constexpr (requires(Request& r) { r.test(); })
      for (std::size_t i = 0; i < next_; ++i)
        if (buckets_[i].request) buckets_[i].request->test();
  }

  // Starts buckets in index order while the next one is complete (or forced).
  void launch_ready() {
    while (next_ < buckets_.size() && (buckets_[next_].pending == 0 || buckets_[next_].forced)) {
      Bucket& b = buckets_[next_++];
      pack(b);
      if (reduce_scatters())
        b.request.emplace(comm_.template ireduce_scatter_v<T, B>(b.flat.data(), b.owned.data(), b.counts, ReduceOp::avg));
      else
        b.request.emplace(comm_.template iall_reduce<T, B>(b.flat.data(), b.numel, ReduceOp::avg));
      b.started = true;
    }
  }

  void pack(Bucket& b) {
    index_t at = 0;
    for (std::size_t k : b.members) {
      const Var<T, B>& p = params_[k];
      const auto n = static_cast<std::size_t>(p.numel());
      if (p.grad().defined()) B::template copy<T>(b.flat.data() + at, p.grad().data(), n);
      else B::template fill<T>(b.flat.data() + at, n, T(0));
      at += p.numel();
    }
  }

  // All-reduce: every member's gradient from the bucket. Reduce-scatter: the owned members'
  // from this rank's block; the others keep their local gradient (one is created, as zeros,
  // where backward left none, so every rank sees the same has_grad()).
  void unpack(Bucket& b) {
    const T* from = reduce_scatters() ? b.owned.data() : b.flat.data();
    index_t at = 0;
    for (std::size_t k : b.members) {
      const Var<T, B>& p = params_[k];
      if (reduce_scatters() && options_.owners[k] != comm_.rank()) {
        (void)p.grad_buffer();
        continue;
      }
      B::template copy<T>(p.grad_buffer().data(), from + at, static_cast<std::size_t>(p.numel()));
      at += p.numel();
    }
  }

  C& comm_;
  std::vector<Var<T, B>> params_;
  DataParallelOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<std::size_t> bucket_of_;
  std::size_t next_ = 0;  // the next bucket to start
  bool sync_ = true;
  std::size_t started_in_backward_ = 0, started_in_backward_last_ = 0;
};

}  // namespace megacpp::dist
