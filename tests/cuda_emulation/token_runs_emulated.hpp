// tests/cuda_emulation/token_runs_emulated.hpp: add_token_sums (detail/token_runs_launch.cuh) on
// the emulator, mirrored launch for launch: the same two kernels, grids and partials (filled with
// NaN, as the device allocation leaves them uninitialized). For the emulated launches of the
// kernels that sum over every token (rotary_emulated.cpp, conv1d_emulated.cpp).
#pragma once

#include <vector>

#include "emulator/launch.hpp"
#include "host_arrays.hpp"
#include "launch_configs.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as kernels/*.cuh do around their detail headers
#include "megacpp/backends/cuda/detail/token_runs.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {

// Mirrors cuda::add_token_sums: out(c) += sum over tokens of term(t, c).
template <class T, class Term, class Out>
void emulated_add_token_sums(index_t tokens, index_t columns, const Term& term, const Out& out) {
  if (tokens <= 0 || columns <= 0) return;
  const cuda::TokenRuns runs = cuda::token_runs(tokens);
  std::vector<T> partials = uninitialized_device<T>(runs.count * columns);
  launch(cuda::token_run_partials_kernel<T, Term>, grid_stride_launch(runs.count * columns), runs, tokens, columns, term,
         partials.data());
  launch(cuda::add_token_runs_kernel<T, Out>, grid_stride_launch(columns), runs, columns, partials.data(), out);
}

}  // namespace megacpp::cuda_emulation
