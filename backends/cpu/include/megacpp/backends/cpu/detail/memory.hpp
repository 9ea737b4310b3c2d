// CPU backend: 64-byte aligned host allocations with byte accounting for peak-memory figures.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "megacpp/core/backend.hpp"

namespace megacpp::cpu {

struct MemoryCounters {
  std::atomic<std::size_t> current{0};
  std::atomic<std::size_t> peak{0};
};
inline MemoryCounters& memory_counters() {
  static MemoryCounters counters;
  return counters;
}

inline std::size_t aligned_bytes(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

template <class T>
T* allocate(std::size_t n) {
  const std::size_t bytes = aligned_bytes(n * sizeof(T));
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  auto& c = memory_counters();
  const std::size_t now = c.current.fetch_add(bytes) + bytes;
  std::size_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
  return static_cast<T*>(p);
}

template <class T>
void deallocate(T* p, std::size_t n) {
  std::free(p);
  memory_counters().current.fetch_sub(aligned_bytes(n * sizeof(T)));
}

inline MemoryStats memory_stats() {
  return {memory_counters().current.load(), memory_counters().peak.load()};
}
inline void reset_peak_memory() { memory_counters().peak.store(memory_counters().current.load()); }

}  // namespace megacpp::cpu
