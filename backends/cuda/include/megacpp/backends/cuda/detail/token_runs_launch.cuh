// CUDA backend: the launches of token_runs.cuh's sums over every token. Apart from the kernels, as
// the SSM scan's are (ssm/scan_launch.cuh), so that the CUDA emulation (tests/cuda_emulation)
// compiles the kernels with a host compiler and launches them as this file does.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"
#include "megacpp/backends/cuda/detail/token_runs.cuh"

namespace megacpp::cuda {

// out(c) += sum over tokens t < tokens of term(t, c), for every c < columns: each run's partial
// sums on their own threads, then added per column in run order.
template <class T, class Term, class Out>
void add_token_sums(index_t tokens, index_t columns, const Term& term, const Out& out) {
  if (tokens <= 0 || columns <= 0) return;
  const TokenRuns runs = token_runs(tokens);
  const DeviceBuffer<T> partials(static_cast<std::size_t>(runs.count * columns));  // (runs, columns)
  token_run_partials_kernel<T, Term><<<grid_for(runs.count * columns), kThreads, 0, kStream>>>(runs, tokens, columns, term,
                                                                                              partials.get());
  MEGACPP_CUDA_CHECK_LAUNCH(token_run_partials_kernel);
  add_token_runs_kernel<T, Out><<<grid_for(columns), kThreads, 0, kStream>>>(runs, columns, partials.get(), out);
  MEGACPP_CUDA_CHECK_LAUNCH(add_token_runs_kernel);
}

}  // namespace megacpp::cuda
