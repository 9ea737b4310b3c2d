// CUDA backend: a row of tokens cut into fixed runs of consecutive tokens, for the kernels whose
// CPU form walks every token on one thread: a sum over all tokens (a bias's or a filter's weight
// gradient) and a running sum along a row (Mamba-3's rotary angles, forward and reversed).
//
//   sums   out[c] += sum_k P[k, c],  P[k, c] = sum_{t in run k} term(t, c)    (k, then t, in order)
//   scans  each run from 0 on its own thread, the runs' ends carried along the row on one thread
//          per walk, then each run again from what enters it (rotary.cuh)
//
// One thread walking T tokens is a chain of T dependent steps, each waiting on its loads, on a few
// hundred threads (one per bias element, or per (row, head, angle)): most of the GPU idle. Cut
// into runs, the chains are at most max(kMinTokenRun, T / kMaxTokenRuns) tokens long and there are
// runs-times more threads; the pass over the runs is at most kMaxTokenRuns long. The cut depends
// on the token count alone and every sum is taken in a fixed order, so results are bitwise the same
// run to run (no atomics); against the CPU's one serial sum they differ by rounding only. A
// deterministic two-level reduction, as the CUDA reductions in reduce.cuh are.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <algorithm>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/core/config.hpp"

namespace megacpp::cuda {

inline constexpr index_t kMinTokenRun = 32;    // tokens: a thread's walk worth its launch
inline constexpr index_t kMaxTokenRuns = 512;  // runs: the serial pass over them stays short

// Runs [k length, min((k + 1) length, tokens)) for k < count.
struct TokenRuns {
  index_t length = 0, count = 0;
  MEGACPP_HD index_t begin(index_t k) const { return k * length; }
  MEGACPP_HD index_t end(index_t k, index_t tokens) const { return (k + 1) * length < tokens ? (k + 1) * length : tokens; }
};

// The cut of `tokens` tokens: runs of at least kMinTokenRun, at most kMaxTokenRuns of them
// (no runs when there are no tokens).
inline TokenRuns token_runs(index_t tokens) {
  if (tokens <= 0) return {kMinTokenRun, 0};
  const index_t length = std::max(kMinTokenRun, (tokens + kMaxTokenRuns - 1) / kMaxTokenRuns);
  return {length, (tokens + length - 1) / length};
}

// ---- sums over tokens ---------------------------------------------------------------------------

// partials[k * columns + c] = P[k, c] (term(t, c) over run k's tokens in order), items with c
// fastest: neighbouring threads read neighbouring columns of a token.
template <class T, class Term>
__global__ void token_run_partials_kernel(TokenRuns runs, index_t tokens, index_t columns, Term term, T* partials) {
  const index_t n = runs.count * columns;
  for (index_t i = global_thread(); i < n; i += grid_stride()) {
    const index_t c = i % columns, k = i / columns;
    T acc = 0;
    for (index_t t = runs.begin(k); t < runs.end(k, tokens); ++t) acc += term(t, c);
    partials[i] = acc;
  }
}

// out(c) from its old value plus every run's partial, in run order.
template <class T, class Out>
__global__ void add_token_runs_kernel(TokenRuns runs, index_t columns, const T* partials, Out out) {
  for (index_t c = global_thread(); c < columns; c += grid_stride()) {
    T acc = out(c);
    for (index_t k = 0; k < runs.count; ++k) acc += partials[k * columns + c];
    out(c) = acc;
  }
}

// Out for add_token_runs_kernel: column c is base[c].
template <class T>
struct ColumnsAt {
  T* base;
  MEGACPP_HD T& operator()(index_t c) const { return base[c]; }
};

}  // namespace megacpp::cuda
