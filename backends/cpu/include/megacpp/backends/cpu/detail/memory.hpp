// CPU backend: 64-byte aligned host allocations with byte accounting for peak-memory figures.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/memory_counter.hpp"

namespace megacpp::cpu {

inline MemoryCounter& memory_counter() {
  static MemoryCounter counter;
  return counter;
}

inline std::size_t aligned_bytes(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

template <class T>
T* allocate(std::size_t n) {
  const std::size_t bytes = aligned_bytes(n * sizeof(T));
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw std::bad_alloc();
  memory_counter().allocated(bytes);
  return static_cast<T*>(p);
}

template <class T>
void deallocate(T* p, std::size_t n) {
  std::free(p);
  memory_counter().released(aligned_bytes(n * sizeof(T)));
}

inline MemoryStats memory_stats() {
  return memory_counter().stats();
}
inline void reset_peak_memory() { memory_counter().reset_peak(); }

}  // namespace megacpp::cpu
