// CUDA backend: device allocations (cudaMalloc, never managed memory, freed blocks cached for
// reuse) with the same byte accounting as the CPU backend, host <-> device copies (small ones as
// launches' parameters, larger ones through pinned blocks), and the device query.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/inline_upload.cuh"
#include "megacpp/backends/cuda/detail/pinned_staging.cuh"
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
// kernel, cuBLAS call and copy runs on the one legacy default stream (kStream): the next user of a
// block runs after all work queued on it before. Blocks are kept per device and exact size class
// (256-byte units, 1 MiB units from 1 MiB), which a training loop's recurring shapes hit step after
// step; a block goes back to its own device's list whichever device is current when it is freed
// (a process may drive one GPU per host thread), so it is never handed to a tensor on another GPU.
// The accounting (memory_stats) counts live tensors, not the cache; empty_cache() returns the cache
// to the driver, and an allocation that fails empties it and tries once more.
class BlockCache {
 public:
  static std::size_t size_class(std::size_t bytes) {
    constexpr std::size_t kMiB = std::size_t{1} << 20;
    return bytes < kMiB ? bytes : (bytes + kMiB - 1) / kMiB * kMiB;
  }
  // A cached block of `size` bytes on `device` (recorded as live), or nullptr.
  void* take(int device, std::size_t size) {
    const std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find({device, size});
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    device_of_.emplace(p, device);
    return p;
  }
  // Records a block cudaMalloc just made on `device` as live.
  void track(void* p, int device) {
    const std::lock_guard<std::mutex> lock(mutex_);
    device_of_.emplace(p, device);
  }
  // Caches a live block of `size` bytes under the device it was allocated on. (A block it does not
  // know, which allocate() never hands out, goes back to the driver: a deleter cannot throw.)
  void give(void* p, std::size_t size) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto live = device_of_.find(p);
    if (live == device_of_.end()) {
      note_host_wait();  // cudaFree waits for the device
      cudaFree(p);
      return;
    }
    free_[{live->second, size}].push_back(p);
    device_of_.erase(live);
  }
  // Returns every cached block to the driver (cudaFree waits for the device once per block). The
  // cache is emptied first and every block is freed before the first error is thrown (cudaFree
  // also reports earlier asynchronous errors), so no freed block stays cached to be handed out or
  // freed again.
  void release() {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto blocks = std::exchange(free_, {});
    cudaError_t first_error = cudaSuccess;
    for (const auto& [key, list] : blocks)
      for (void* p : list) {
        note_host_wait();
        const cudaError_t e = cudaFree(p);
        if (first_error == cudaSuccess) first_error = e;
      }
    check_cuda(first_error, "cudaFree (BlockCache::release)", __FILE__, __LINE__);
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<int, std::size_t>, std::vector<void*>> free_;  // (device, size class) -> blocks
  std::unordered_map<void*, int> device_of_;                          // live block -> its device
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
  int device = 0;
  MEGACPP_CUDA_CHECK(cudaGetDevice(&device));
  void* p = block_cache().take(device, size);
  if (!p) {
    if (cudaMalloc(&p, size) != cudaSuccess) {
      cudaGetLastError();  // the failed cudaMalloc's error must not reach the next launch check
      block_cache().release();
      MEGACPP_CUDA_CHECK(cudaMalloc(&p, size));
    }
    block_cache().track(p, device);
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

// The CUDA calls PinnedStaging (pinned_staging.cuh) makes: portable page-locked blocks, events
// without timing, copies and records on kStream.
struct PinnedStagingRuntime {
  using Event = cudaEvent_t;
  int device() const {
    int d = 0;
    MEGACPP_CUDA_CHECK(cudaGetDevice(&d));
    return d;
  }
  void* allocate_pinned(std::size_t bytes) const {
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) == cudaSuccess) return p;
    cudaGetLastError();  // out of page-locked memory is not an error here: the copy waits instead
    return nullptr;
  }
  void free_pinned(void* p) const {
    note_host_wait();  // cudaFreeHost synchronizes the device
    cudaFreeHost(p);
  }
  void destroy_event(Event e) const { cudaEventDestroy(e); }  // as a deleter: an error is not raised here
  Event make_event() const {
    cudaEvent_t e = nullptr;
    MEGACPP_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }
  bool completed(Event e) const {
    const cudaError_t status = cudaEventQuery(e);
    if (status == cudaErrorNotReady) {
      cudaGetLastError();  // "not ready" is an answer, not an error for the next launch check to see
      return false;
    }
    MEGACPP_CUDA_CHECK(status);
    return true;
  }
  void copy_async(void* dst, const void* pinned, std::size_t bytes) const {
    MEGACPP_CUDA_CHECK(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, kStream));
  }
  void record(Event e) const { MEGACPP_CUDA_CHECK(cudaEventRecord(e, kStream)); }
};

// One per process, never destroyed (as block_cache(): the blocks go back with the context).
inline PinnedStaging<PinnedStagingRuntime>& pinned_staging() {
  static auto* staging = new PinnedStaging<PinnedStagingRuntime>(PinnedStagingRuntime{});
  return *staging;
}

// Returns the cached free blocks to the driver (e.g. before handing the GPU to another library),
// and the pinned staging blocks whose copies have completed.
inline void empty_cache() {
  block_cache().release();
  pinned_staging().release();
}

// Host -> device; the caller may reuse `src` on return and later kernels on the stream see the
// data. Up to kInlineUploadLaunches x kInlineUploadBytes travel as kernels' parameters, a launch
// per kInlineUploadBytes, without the stream wait a pageable cudaMemcpy makes (inline_upload.cuh);
// larger copies, up to kMaxStagedCopy, go through a reused pinned block and cudaMemcpyAsync, also
// without a wait (pinned_staging.cuh); the rest, and any a full staging cap refuses, are
// cudaMemcpy, which returns once the host buffer has been staged. `dst` must be on the current
// device (the launches and copies run there), as every tensor of a host thread's device is.
template <class T>
void copy_from_host(T* dst, const T* src, std::size_t n) {
  if (n == 0) return;
  const std::size_t bytes = n * sizeof(T);
  if (bytes <= kInlineUploadBytes * kInlineUploadLaunches) {
    const auto* from = reinterpret_cast<const unsigned char*>(src);
    auto* to = reinterpret_cast<unsigned char*>(dst);
    for (std::size_t at = 0; at < bytes; at += kInlineUploadBytes) {
      const std::size_t part = std::min(kInlineUploadBytes, bytes - at);
      InlineUpload payload{};
      std::memcpy(payload.bytes, from + at, part);
      store_inline_upload_kernel<unsigned char><<<1, kThreads, 0, kStream>>>(payload, static_cast<index_t>(part), to + at);
      MEGACPP_CUDA_CHECK_LAUNCH(store_inline_upload_kernel);
    }
    return;
  }
  if (pinned_staging().upload(dst, src, bytes)) return;
  note_host_wait();  // a pageable cudaMemcpy first waits for the stream
  MEGACPP_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

// Device -> host waits for every kernel queued before it (the default stream is in order) and
// for the copy itself: the host may read `dst` on return.
template <class T>
void copy_to_host(T* dst, const T* src, std::size_t n) {
  note_host_wait();
  if (n) MEGACPP_CUDA_CHECK(cudaMemcpy(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost));
  MEGACPP_CUDA_CHECK(cudaStreamSynchronize(kStream));
}

template <class T>
void copy(T* dst, const T* src, std::size_t n) {
  if (n) MEGACPP_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, kStream));
}

inline void synchronize() {
  note_host_wait();
  MEGACPP_CUDA_CHECK(cudaDeviceSynchronize());
}

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
