// CUDA backend: error checks on every CUDA runtime and cuBLAS call, and launch geometry.
//
// Every failure becomes megacpp::Error("cuda", "<call> failed: <reason> at file:line"), the same
// exception type as every other megacpp error, so callers handle one type whatever the backend.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"

#if !defined(CUDART_VERSION) || CUDART_VERSION < 12000
#error "megacpp/backends/cuda.cuh needs CUDA 12 or newer (it uses cuBLAS's 64-bit GEMM API)"
#endif

namespace megacpp::cuda {

[[noreturn]] inline void throw_cuda_error(const char* call, const char* reason, const char* file, int line) {
  fail("cuda", call, " failed: ", reason, " at ", file, ":", line);
}

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  // Clears the (non-sticky) error so that a caller who catches this, e.g. an out-of-memory
  // cudaMalloc, does not see it again from the next launch check.
  cudaGetLastError();
  throw_cuda_error(call, cudaGetErrorString(status), file, line);
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cuda_error(call, cublasGetStatusString(status), file, line);
}

}  // namespace megacpp::cuda

#define MEGACPP_CUDA_CHECK(call) ::megacpp::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define MEGACPP_CUBLAS_CHECK(call) ::megacpp::cuda::check_cublas((call), #call, __FILE__, __LINE__)
// A kernel launch reports bad configurations through cudaGetLastError; errors raised while the
// kernel runs surface at the next synchronizing call (copy_to_host, synchronize).
#define MEGACPP_CUDA_CHECK_LAUNCH(kernel) \
  ::megacpp::cuda::check_cuda(cudaGetLastError(), #kernel "<<<...>>>", __FILE__, __LINE__)

namespace megacpp::cuda {

// Every kernel runs on the legacy default stream, so kernels, cuBLAS calls and copies are ordered
// with respect to each other exactly as the CPU backend's synchronous calls are. Named by its
// handle rather than as 0: a program built with --default-stream per-thread (which makes 0 each
// host thread's own stream) still gets the one stream the block cache's reuse relies on (memory.cuh).
inline const cudaStream_t kStream = cudaStreamLegacy;

// Every time the backend makes the host wait for the GPU (a device-to-host read, a host-to-device
// copy not staged through pinned memory (too large, or no room), synchronize(), the index range check's and
// the MoE routing's read-backs, cudaFree when the block cache is emptied), counted per process: the host waits a step makes are what keeps it
// from running ahead of the GPU, and tests and benches read the count (Cuda::host_waits()) to say
// how many there are and to keep them from creeping back.
inline std::atomic<std::uint64_t>& host_wait_count() {
  static std::atomic<std::uint64_t> count{0};
  return count;
}
inline void note_host_wait() { host_wait_count().fetch_add(1, std::memory_order_relaxed); }

inline constexpr int kThreads = 256;  // threads per block of the elementwise and row kernels

// Blocks for a grid-stride loop over n items: enough to fill an H100 (132 SMs x 2048 threads)
// several times over; the loop covers the rest, so n beyond 2^31 is fine.
inline unsigned grid_for(index_t n, int threads = kThreads) {
  constexpr index_t kMaxBlocks = index_t{1} << 16;
  return static_cast<unsigned>(std::clamp<index_t>((n + threads - 1) / threads, 1, kMaxBlocks));
}

// One block per item (a row, an output), looping when there are more items than blocks.
inline unsigned grid_per_item(index_t items) {
  constexpr index_t kMaxBlocks = (index_t{1} << 31) - 1;
  return static_cast<unsigned>(std::clamp<index_t>(items, 1, kMaxBlocks));
}

// The global thread index and the grid-stride step, in 64-bit.
__device__ inline index_t global_thread() {
  return static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline index_t grid_stride() { return static_cast<index_t>(gridDim.x) * blockDim.x; }

}  // namespace megacpp::cuda
