// examples/train/data_parallel_run.hpp: megacpp-train's data parallelism and ZeRO-1, set up
// from the options (docs/systems/distributed.md).
//
// At world size 1 nothing communicates. At world > 1 the gradients are averaged in buckets during
// the last micro-batch's backward (dist::DataParallel) after rank 0's parameters are broadcast.
// --zero1 shards the optimizer state (after a checkpoint's full state is loaded, each rank keeps
// its share) and reduce-scatters each gradient to its owner, so each rank averages only the
// gradients its optimizer reads, and the global-norm clip takes its sharded form. DASH
// (--dash_every) reads every matrix's gradient on every rank: with it the gradients stay
// all-reduced.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <utility>
#include <vector>

#include "megacpp/dist/data_parallel.hpp"
#include "megacpp/optim.hpp"
#include "options.hpp"

namespace megacpp::examples {

/// The data-parallel side of a training run on `Comm` (see the file comment), its parameters on
/// backend B.
template <class Comm, class B>
class DataParallelRun {
 public:
  /// Shards `opt` under --zero1 and, at world > 1, broadcasts rank 0's parameters and installs
  /// the gradient buckets. Collective.
  template <class Optimizer>
  DataParallelRun(const TrainOptions& o, Comm& comm, const std::vector<optim::ParamRef<float, B>>& params, Optimizer& opt)
      : comm_(comm), params_(params), zero1_(o.zero1) {
    const int world = comm.size();
    if (o.zero1) opt.shard(comm.rank(), world);
    if (o.zero1 && world > 1 && o.plasticity.dash_every == 0) owners_ = opt.owners(params);
    if (world > 1) {
      std::vector<Var<float, B>> vars;
      for (const auto& param : params) vars.push_back(param.var);
      buckets_.emplace(comm, std::move(vars), dist::DataParallelOptions{.owners = owners_});
      buckets_->broadcast_parameters(0);
    }
  }

  /// Whether the next backward communicates (the last micro-batch of a step only).
  void set_sync(bool on) {
    if (buckets_) buckets_->set_sync(on);
  }
  /// Waits for the step's averaged gradients (after the last backward).
  void finish() {
    if (buckets_) buckets_->finish();
  }
  /// The global-norm clip of the step's gradients: the sharded form when they were
  /// reduce-scattered (each rank holds only its owned parameters' averages).
  optim::ClipResult clip(double max_norm) {
    if (owners_.empty()) return optim::clip_grad_norm(params_, max_norm, optim::NonFinitePolicy::skip);
    return optim::clip_grad_norm(params_, comm_, owners_, max_norm, optim::NonFinitePolicy::skip);
  }

  /// The run summary's lines: the buckets and how they are reduced, and the optimizer state per
  /// rank (collective: every rank calls it).
  template <class Optimizer>
  void print_summary(const Optimizer& opt, std::int64_t accumulation, std::int64_t micro_batch, std::int64_t seq_len,
                     std::int64_t total_batch) {
    const int world = comm_.size();
    if (buckets_)
      std::printf("data parallel: %d ranks x %lld micro-batches x %lld rows x %lld tokens = %lld tokens per step; "
                  "gradient buckets of %zu MB, %zu buckets, %s\n",
                  world, static_cast<long long>(accumulation), static_cast<long long>(micro_batch),
                  static_cast<long long>(seq_len), static_cast<long long>(total_batch),
                  dist::DataParallelOptions{}.bucket_bytes >> 20, buckets_->buckets(),
                  owners_.empty() ? "all-reduced" : "reduce-scattered to their owners (ZeRO-1)");
    if (!zero1_ && world == 1) return;
    auto largest = static_cast<std::int64_t>(opt.state_bytes());
    comm_.template all_reduce<std::int64_t, Cpu>(&largest, 1, dist::ReduceOp::max);
    std::printf("optimizer state per rank: %.2f MB on rank 0, %.2f MB at most (unsharded %.2f MB; %s)\n",
                static_cast<double>(opt.state_bytes()) / 1e6, static_cast<double>(largest) / 1e6,
                static_cast<double>(opt.unsharded_state_bytes()) / 1e6,
                !zero1_ ? "replicated on every rank, --zero1 shards it"
                : world > 1 ? "ZeRO-1: sharded over the ranks"
                            : "--zero1 at world size 1: nothing to shard");
  }

 private:
  Comm& comm_;
  const std::vector<optim::ParamRef<float, B>>& params_;
  bool zero1_;
  std::vector<int> owners_;  // ZeRO-1's reduce-scatter: each parameter's owner (empty: all-reduce)
  std::optional<dist::DataParallel<float, B, Comm>> buckets_;
};

}  // namespace megacpp::examples
