// CPU backend: OpenMP loops with a static schedule.
//
// Static schedules assign the same iterations to the same thread every run, and every kernel
// computes each output element on exactly one thread in a fixed order, so results are bitwise
// reproducible for a given thread count (and, for all but GEMM, independent of it).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include "megacpp/backends/cpu/detail/openmp.hpp"

#include <algorithm>
#include <utility>

#include "megacpp/core/config.hpp"

namespace megacpp::cpu {

// Below this many scalar operations a kernel runs on the calling thread: the fork/join costs
// more than the work (measured ~2-5 us per parallel region on 2 cores).
inline constexpr index_t kParallelThreshold = 1 << 15;

// Runs body(i) for i in [0, n); `cost` is the approximate scalar work per iteration.
template <class Body>
void parallel_for(index_t n, index_t cost, Body&& body) {
  if (n <= 1 || n * cost < kParallelThreshold || omp_in_parallel()) {
    for (index_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (index_t i = 0; i < n; ++i) body(i);
}

// The contiguous chunk [begin, end) of [0, n) that thread t of `threads` takes. Boundaries fall
// on multiples of `grain` (the last chunk ends at n), so a kernel working in blocks of `grain`
// items gets whole blocks.
inline std::pair<index_t, index_t> thread_chunk(index_t n, index_t t, index_t threads, index_t grain = 1) {
  const index_t blocks = (n + grain - 1) / grain;
  return {std::min(n, blocks * t / threads * grain), std::min(n, blocks * (t + 1) / threads * grain)};
}

// Runs body(begin, end) over contiguous chunks of [0, n), one chunk per thread.
template <class Body>
void parallel_chunks(index_t n, index_t cost, Body&& body) {
  if (n <= 1 || n * cost < kParallelThreshold || omp_in_parallel()) {
    body(index_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const auto [begin, end] = thread_chunk(n, omp_get_thread_num(), omp_get_num_threads());
    if (begin < end) body(begin, end);
  }
}

}  // namespace megacpp::cpu
