// CUDA backend: device allocations (cudaMalloc, never managed memory) with the same byte
// accounting as the CPU backend, host <-> device copies, and the device query.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>
#include <limits>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/core/backend.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/memory_counter.hpp"

namespace megacpp::cuda {

inline MemoryCounter& memory_counter() {
  static MemoryCounter counter;
  return counter;
}

// cudaMalloc hands out 256-byte aligned blocks; counting in that unit makes the figures the
// memory a tensor really occupies, as the CPU backend counts its 64-byte aligned blocks.
inline std::size_t aligned_bytes(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

template <class T>
T* allocate(std::size_t n) {
  if (n == 0) return nullptr;
  // n * sizeof(T) rounded up to 256 must not wrap (the CPU backend's check, cpu/detail/memory.hpp).
  check(n <= (std::numeric_limits<std::size_t>::max() - 255) / sizeof(T), "cuda::allocate", "a tensor of ", n,
        " elements of ", sizeof(T), " bytes does not fit in the address space");
  const std::size_t bytes = aligned_bytes(n * sizeof(T));
  void* p = nullptr;
  MEGACPP_CUDA_CHECK(cudaMalloc(&p, bytes));
  memory_counter().allocated(bytes);
  return static_cast<T*>(p);
}

// Called from Tensor's deleter, i.e. from destructors: a failure here throws from a noexcept
// context and terminates, which is what an unrecoverable device error deserves. The one status
// tolerated is the runtime already shutting down (a tensor outliving main), where the driver
// releases the memory anyway. cudaFree waits for the device; should that show in profiles, the
// fix is a caching allocator (as PyTorch's), not a change to the kernels.
template <class T>
void deallocate(T* p, std::size_t n) {
  if (!p) return;
  const cudaError_t status = cudaFree(p);
  if (status != cudaErrorCudartUnloading) check_cuda(status, "cudaFree(p)", __FILE__, __LINE__);
  memory_counter().released(aligned_bytes(n * sizeof(T)));
}

inline MemoryStats memory_stats() {
  return memory_counter().stats();
}
inline void reset_peak_memory() { memory_counter().reset_peak(); }

// Pageable host -> device: cudaMemcpy returns once the host buffer has been staged, so the
// caller may reuse it; later kernels on the default stream see the data.
template <class T>
void copy_from_host(T* dst, const T* src, std::size_t n) {
  if (n) MEGACPP_CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(T), cudaMemcpyHostToDevice));
}

// Device -> host waits for every kernel queued before it (the default stream is in order) and
// for the copy itself: the host may read `dst` on return.
template <class T>
void copy_to_host(T* dst, const T* src, std::size_t n) {
  if (n) MEGACPP_CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost));
  MEGACPP_CUDA_CHECK(cudaStreamSynchronize(kStream));
}

template <class T>
void copy(T* dst, const T* src, std::size_t n) {
  if (n) MEGACPP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, kStream));
}

inline void synchronize() { MEGACPP_CUDA_CHECK(cudaDeviceSynchronize()); }

// True when a CUDA device can be used. Never throws: without a driver (CI machines),
// cudaGetDeviceCount reports cudaErrorInsufficientDriver or cudaErrorNoDevice, which mean "no".
inline bool device_available() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // leave no error behind for the next launch check
    return false;
  }
  return count > 0;
}

}  // namespace megacpp::cuda
