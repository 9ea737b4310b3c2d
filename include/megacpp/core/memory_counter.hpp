// megacpp/core/memory_counter.hpp: bytes a backend has allocated, now and at most.
//
// Every backend counts its allocations the same way (benches print peak memory from it); each
// keeps its own counter instance and rounds sizes to its own allocation unit.
#pragma once

#include <atomic>
#include <cstddef>

#include "megacpp/core/backend.hpp"

namespace megacpp {

/// Current and peak allocated bytes, safe to update from several threads.
class MemoryCounter {
 public:
  /// Records an allocation of `bytes` and raises the peak if needed.
  void allocated(std::size_t bytes) {
    const std::size_t now = current_.fetch_add(bytes) + bytes;
    std::size_t peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
  }
  /// Records a release of `bytes`.
  void released(std::size_t bytes) { current_.fetch_sub(bytes); }
  /// The current and peak figures.
  MemoryStats stats() const { return {current_.load(), peak_.load()}; }
  /// Restarts the high-water mark at the current figure.
  void reset_peak() { peak_.store(current_.load()); }

 private:
  std::atomic<std::size_t> current_{0};
  std::atomic<std::size_t> peak_{0};
};

}  // namespace megacpp
