// CPU backend: 64-byte aligned host allocations with byte accounting for peak-memory figures,
// through a cache of freed blocks.
//
// Why a cache: a training step allocates the same large activations and gradients every step,
// and glibc serves allocations above its mmap threshold (128 KiB rising to 32 MiB) with fresh
// mappings, so every step paid a page fault and a kernel page clear per 4 KiB touched (6-7% of
// bench/train_step's time in perf: clear_page_erms, exc_page_fault, and the first fill of each
// buffer). Freed blocks of at least kCachedMinBytes are kept, keyed by their exact size (a step
// asks for the same sizes again), and handed out again without touching the kernel.
//
// Bound: the process never holds more than twice its own high-water mark of live bytes. Before a
// block is allocated fresh, cached blocks are freed until live + cached + the new block fit under
// kCacheSlack x the largest live total seen so far. So sizes that stop being asked for are
// returned once memory is needed elsewhere, and a workload of ever-changing sizes cannot pile up
// a cache. Why slack at all: blocks are reused by exact size only, so a steady step needs somewhat
// more than its live peak (bench/train_step's dense step: 938 MiB held for an 882 MiB peak); with
// the bound at exactly the peak it freed and re-faulted ~110 MiB every step (28k page faults). MEGACPP_CPU_CACHE_MB additionally caps the cache (MiB; 0 turns it
// off, the default under AddressSanitizer so use-after-free stays visible). Cpu::empty_cache()
// frees every cached block. memory_stats() counts bytes handed to tensors (live), not the cache:
// peak figures mean what they meant without it; cached_bytes() reports the cache.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/memory_counter.hpp"

namespace megacpp::cpu {

inline MemoryCounter& memory_counter() {
  static MemoryCounter counter;
  return counter;
}

inline std::size_t aligned_bytes(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

// Held bytes (live + cached) stay under this multiple of the high-water mark of live bytes.
inline constexpr std::size_t kCacheSlack = 2;

// Blocks smaller than this go straight back to malloc, whose bins serve them without a syscall.
inline constexpr std::size_t kCachedMinBytes = std::size_t{64} << 10;

// The cache's hard cap in bytes: MEGACPP_CPU_CACHE_MB (MiB; 0 disables caching), read once;
// unset: no cap beyond the high-water rule, except under AddressSanitizer, where the default is 0.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kCacheByDefault = false;
#else
inline constexpr bool kCacheByDefault = true;
#endif
inline std::size_t cache_limit_bytes() {
  static const std::size_t limit = [] {
    const char* env = std::getenv("MEGACPP_CPU_CACHE_MB");
    if (env && *env) return static_cast<std::size_t>(std::strtoull(env, nullptr, 10)) << 20;
    return kCacheByDefault ? std::numeric_limits<std::size_t>::max() : std::size_t{0};
  }();
  return limit;
}

// Freed blocks by exact size; thread-safe (tensors may be created and dropped on any thread).
class BlockCache {
 public:
  // A cached block of exactly `bytes`, or nullptr.
  void* take(std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = free_.find(bytes);
    if (it == free_.end() || it->second.empty()) return nullptr;
    void* p = it->second.back();
    it->second.pop_back();
    cached_ -= bytes;
    return p;
  }
  // Keeps p for reuse; false (p not taken) when the cache would exceed its cap.
  bool keep(void* p, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bytes > cache_limit_bytes() - cached_) return false;
    free_[bytes].push_back(p);
    cached_ += bytes;
    return true;
  }
  // Before `bytes` are allocated fresh while `live` bytes are handed out: frees cached blocks
  // until live + bytes + cached fits under kCacheSlack x the high-water mark of live bytes.
  void make_room(std::size_t bytes, std::size_t live) {
    std::lock_guard<std::mutex> lock(mutex_);
    high_water_ = std::max(high_water_, live + bytes);
    const std::size_t bound = kCacheSlack * high_water_;
    for (auto it = free_.begin(); it != free_.end() && live + bytes + cached_ > bound;) {
      auto& [size, blocks] = *it;
      while (!blocks.empty() && live + bytes + cached_ > bound) {
        std::free(blocks.back());
        blocks.pop_back();
        cached_ -= size;
      }
      it = blocks.empty() ? free_.erase(it) : std::next(it);
    }
  }
  void release_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [bytes, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    cached_ = 0;
  }
  std::size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
  }
  std::size_t high_water_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return high_water_;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::size_t, std::vector<void*>> free_;
  std::size_t cached_ = 0;
  std::size_t high_water_ = 0;  // most live bytes (plus one new block) seen at a fresh allocation
};

// Never destroyed: a tensor with static storage duration may be freed after any other static.
inline BlockCache& block_cache() {
  static BlockCache* cache = new BlockCache;
  return *cache;
}

template <class T>
T* allocate(std::size_t n) {
  // n * sizeof(T) rounded up to 64 must not wrap: a wrapped size would hand out a small block
  // for a huge tensor (a corrupt shape read from a file reaches here through Tensor(shape)).
  check(n <= (std::numeric_limits<std::size_t>::max() - 63) / sizeof(T), "cpu::allocate", "a tensor of ", n,
        " elements of ", sizeof(T), " bytes does not fit in the address space");
  const std::size_t bytes = aligned_bytes(n * sizeof(T));
  const bool cacheable = bytes >= kCachedMinBytes;
  void* p = cacheable ? block_cache().take(bytes) : nullptr;
  if (!p) {
    if (cacheable) block_cache().make_room(bytes, memory_counter().stats().current_bytes);
    p = std::aligned_alloc(64, bytes);
  }
  if (!p) {  // the cache may hold the memory the system cannot give: return it and retry once
    block_cache().release_all();
    p = std::aligned_alloc(64, bytes);
  }
  if (!p) throw std::bad_alloc();
  memory_counter().allocated(bytes);
  return static_cast<T*>(p);
}

template <class T>
void deallocate(T* p, std::size_t n) {
  if (!p) return;
  const std::size_t bytes = aligned_bytes(n * sizeof(T));
  memory_counter().released(bytes);
  if (bytes < kCachedMinBytes || !block_cache().keep(p, bytes)) std::free(p);
}

inline MemoryStats memory_stats() {
  return memory_counter().stats();
}
inline void reset_peak_memory() { memory_counter().reset_peak(); }
inline std::size_t cached_bytes() { return block_cache().cached_bytes(); }
inline void empty_cache() { block_cache().release_all(); }

}  // namespace megacpp::cpu
