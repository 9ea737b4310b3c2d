// CPU backend: the OpenMP runtime calls its kernels make, or their meaning in a build without
// OpenMP (no -fopenmp: `_OPENMP` undefined, every `#pragma omp` ignored, one thread).
//
// The kernels call these unqualified from namespace megacpp::cpu, so both cases resolve here: with
// OpenMP, using-declarations of the runtime's functions; without, a team of one thread. Every
// kernel's result depends only on the thread count (parallel.hpp), so a build without OpenMP
// computes exactly what an OpenMP build computes with one thread (tests/consumer/no_openmp checks
// a training step bit for bit).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace megacpp::cpu {

#ifdef _OPENMP
using ::omp_get_max_threads;
using ::omp_get_num_threads;
using ::omp_get_thread_num;
using ::omp_in_parallel;
#else
/// Threads a parallel region would use: one.
inline int omp_get_max_threads() noexcept { return 1; }
/// Threads in the current team: one.
inline int omp_get_num_threads() noexcept { return 1; }
/// This thread's number in its team: 0.
inline int omp_get_thread_num() noexcept { return 0; }
/// Whether a parallel region is active: never.
inline int omp_in_parallel() noexcept { return 0; }
#endif

}  // namespace megacpp::cpu
