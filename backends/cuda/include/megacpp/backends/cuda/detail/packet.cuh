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

}  // namespace megacpp::cuda
