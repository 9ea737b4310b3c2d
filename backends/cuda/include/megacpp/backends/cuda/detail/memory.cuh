// CUDA backend: device allocations (cudaMalloc, never managed memory, freed blocks cached for
// reuse) with the same byte accounting as the CPU backend, host <-> device copies, and the device query.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

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

// Freed device blocks are kept for reuse instead of returned with cudaFree, which waits for the
// whole device: a training step frees its temporaries throughout, and every free would stall
// the GPU (PyTorch's CUDACachingAllocator exists for the same reason). Reuse is safe because every
// kernel, cuBLAS call and copy runs on the one default stream: the next user of a block runs after
// all work queued on it before. Blocks are kept per exact size class (256-byte units, 1 MiB units
// from 1 MiB), which a training loop's recurring shapes hit step after step. The accounting
// (memory_stats) counts live tensors, not the cache; empty_cache() returns the cache to the driver,
// and an allocation that fails empties it and tries once more.
class BlockCache {
 public:
  static std::size_t size_class(std::size_t bytes) {
    constexpr std::size_t kMiB = std::size_t{1} << 20;
    return bytes < kMiB ? bytes : (bytes + kMiB - 1) / kMiB * kMiB;
  }
  void* take(std::size_t size) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }
  void give(void* p, std::size_t size) {
    const std::lock_guard<std::mutex> lock(mutex_);
    free_[size].push_back(p);
  }
  // Returns every cached block to the driver (cudaFree waits for the device once per block).
  void release() {
    const std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : free_)
      for (void* p : blocks) MEGACPP_CUDA_CHECK(cudaFree(p));
    free_.clear();
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
};

// One cache per process, never destroyed: blocks still cached at exit go back with the context
// (a destructor running after the CUDA runtime has unloaded could not free them).
inline BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache;
  return *cache;
}

template <class T>
T* allocate(std::size_t n) {
  if (n == 0) return nullptr;
  // n * sizeof(T) rounded up to 256 must not wrap (the CPU backend's check, cpu/detail/memory.hpp).
  check(n <= (std::numeric_limits<std::size_t>::max() - (std::size_t{1} << 20)) / sizeof(T), "cuda::allocate",
        "a tensor of ", n, " elements of ", sizeof(T), " bytes does not fit in the address space");
  const std::size_t bytes = aligned_bytes(n * sizeof(T)), size = BlockCache::size_class(bytes);
  void* p = block_cache().take(size);
  if (!p && cudaMalloc(&p, size) != cudaSuccess) {
    cudaGetLastError();  // the failed cudaMalloc's error must not reach the next launch check
    block_cache().release();
    MEGACPP_CUDA_CHECK(cudaMalloc(&p, size));
  }
  memory_counter().allocated(bytes);
  return static_cast<T*>(p);
}

// Called from Tensor's deleter: the block goes to the cache (no device wait).
template <class T>
void deallocate(T* p, std::size_t n) {
  if (!p) return;
  const std::size_t bytes = aligned_bytes(n * sizeof(T));
  block_cache().give(p, BlockCache::size_class(bytes));
  memory_counter().released(bytes);
}

// Returns the cached free blocks to the driver (e.g. before handing the GPU to another library).
inline void empty_cache() { block_cache().release(); }

// n elements of device scratch for the duration of one kernel call, returned to the cache on every
// exit path (exceptions included). Reuse is stream-ordered, so the kernels queued on it finish
// first.
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n) : n_(n), data_(allocate<T>(n)) {}
  ~DeviceBuffer() { deallocate<T>(data_, n_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return data_; }

 private:
  std::size_t n_;
  T* data_;
};

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

// The current device's name and memory, e.g. "NVIDIA H100 80GB HBM3, 79.1 GiB" (for run logs).
inline std::string device_name() {
  int device = 0;
  MEGACPP_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  MEGACPP_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  char memory[32];
  std::snprintf(memory, sizeof memory, ", %.1f GiB", static_cast<double>(prop.totalGlobalMem) / (1ull << 30));
  return std::string(prop.name) + memory;
}

}  // namespace megacpp::cuda
