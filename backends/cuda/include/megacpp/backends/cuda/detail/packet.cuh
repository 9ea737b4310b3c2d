// CUDA backend: a few consecutive elements as one aligned load or store (`Vec`), and `Packet`,
// the 16-byte one (float4 for float, two doubles, eight bf16), the widest a thread issues.
//
// A kernel moving one 4-byte element per thread keeps too few bytes in flight to reach the
// memory's bandwidth (Little's law: bytes in flight = bandwidth x latency): on an H100 such maps
// ran at 1.4-1.7 TB/s (ncu), about half of what the same kernels reach a packet per thread.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>
#include <cstdint>
#include <initializer_list>

namespace megacpp::cuda {

template <class T, int N>
struct alignas(N == 1 ? alignof(T) : N * sizeof(T)) Vec {
  static constexpr int kSize = N;
  T e[N];
};

inline constexpr std::size_t kPacketBytes = 16;
template <class T>
inline constexpr bool kHasPacket = kPacketBytes % sizeof(T) == 0;
template <class T>
using Packet = Vec<T, kHasPacket<T> ? static_cast<int>(kPacketBytes / sizeof(T)) : 1>;

inline bool packet_aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kPacketBytes == 0; }

// Whether `count` elements at each pointer may be taken as Packet<T>s: T has a packet, count is
// whole packets, every pointer is 16-byte aligned (a null one, an absent operand, passes).
template <class T>
bool fits_packets(std::int64_t count, std::initializer_list<const void*> pointers) {
  bool fit = kHasPacket<T> && count % Packet<T>::kSize == 0;
  for (const void* p : pointers) fit = fit && packet_aligned(p);
  return fit;
}

}  // namespace megacpp::cuda
