// tests/cuda_emulation/shim/cuda_runtime.h: what nvcc gives every CUDA translation unit (the
// execution space keywords, threadIdx and friends, the vector types, __syncthreads and the warp
// intrinsics), plus the few runtime API names the device headers mention, for g++ and clang++.
// Each maps onto the emulator (emulator/device.hpp); anything the device code uses and this shim
// lacks is a compile error here, never a silent stub.
#pragma once

#include <math.h>  // ::expf, ::logf, ::tanhf as device code calls them (host libm: not the GPU's ulp)

#include <cstdint>
#include <type_traits>

#include "emulator/device.hpp"

#define CUDART_VERSION 12000  // detail/check.cuh requires 12 or newer

// __expf: the device's is ex2.approx(x log2 e), within 2 + 1.16 |x| ulp ("Intrinsic Functions");
// host expf stands in for it, so the emulated P differs from a GPU's in the last bits only.
inline float __expf(float x) { return ::expf(x); }

// Execution spaces and qualifiers: host code here. __shared__ is thread_local (see
// emulator/shared_memory.hpp): a static one (block_reduce's `__shared__ T warp_results[32]`)
// becomes one array for every fiber of the block, and `extern __shared__` names the dynamic arena.
#define __global__
#define __device__
#define __host__
#define __shared__ thread_local
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

// The built-in variables, read from the emulated thread and block.
#define threadIdx (::megacpp::cuda_emulation::thread_index())
#define blockIdx (::megacpp::cuda_emulation::block_index())
#define blockDim (::megacpp::cuda_emulation::block_dim())
#define gridDim (::megacpp::cuda_emulation::grid_dim())

// Vector types with the alignment the CUDA C++ Programming Guide lists ("Built-in Vector Types"):
// a float4 access through a pointer not 16-byte aligned is a misaligned access on the GPU, and
// undefined behaviour here (UBSan's alignment check reports it in the asan preset).
struct __attribute__((aligned(16))) float4 {
  float x, y, z, w;
};
struct __attribute__((aligned(8))) float2 {
  float x, y;
};
struct __attribute__((aligned(16))) uint4 {
  unsigned x, y, z, w;
};

// ---- synchronization and warp intrinsics --------------------------------------------------------

inline void __syncthreads(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  ::megacpp::cuda_emulation::sync_threads(file, line);
}

// Full-warp masks only: the kernels use no other, and a partial mask would need the emulator to
// know which lanes are meant to take part.
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu, const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) {
  namespace emu = ::megacpp::cuda_emulation;
  if (mask != 0xFFFFFFFFu) emu::device_fail("__syncwarp with a partial mask (the emulator takes full warps only)");
  emu::warp_rendezvous({"__syncwarp", nullptr, mask, file, line}, {}, [](const emu::LaneOperands(&)[emu::kWarpSize]) {});
}

namespace megacpp::cuda_emulation {
// Lane l receives the value of lane l ^ laneMask ("Warp Shuffle Functions"; width 32).
template <class T>
void shuffle_xor(const LaneOperands (&lanes)[kWarpSize]) {
  for (unsigned l = 0; l < kWarpSize; ++l) {
    const unsigned source = l ^ (*static_cast<const unsigned*>(lanes[l][2]) & (kWarpSize - 1));
    *static_cast<T*>(lanes[l][1]) = *static_cast<const T*>(lanes[source][0]);
  }
}
}  // namespace megacpp::cuda_emulation

template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, const char* file = __builtin_FILE(),
                  unsigned line = __builtin_LINE()) {
  namespace emu = ::megacpp::cuda_emulation;
  static_assert(std::is_trivially_copyable_v<T>, "__shfl_xor_sync: a trivially copyable value");
  if (mask != 0xFFFFFFFFu || width != 32) emu::device_fail("__shfl_xor_sync with a partial mask or width (full warps only)");
  T out{};
  unsigned m = static_cast<unsigned>(lane_mask);
  emu::warp_rendezvous({"__shfl_xor_sync", nullptr, mask, file, line}, {&var, &out, &m, nullptr}, &emu::shuffle_xor<T>);
  return out;
}

namespace megacpp::cuda_emulation {
// Lane l receives the value of lane l + delta, or keeps its own where l + delta is past the warp
// ("Warp Shuffle Functions"; width 32).
template <class T>
void shuffle_down(const LaneOperands (&lanes)[kWarpSize]) {
  for (unsigned l = 0; l < kWarpSize; ++l) {
    const unsigned source = l + *static_cast<const unsigned*>(lanes[l][2]);
    *static_cast<T*>(lanes[l][1]) = *static_cast<const T*>(lanes[source < kWarpSize ? source : l][0]);
  }
}
}  // namespace megacpp::cuda_emulation

template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                   unsigned line = __builtin_LINE()) {
  namespace emu = ::megacpp::cuda_emulation;
  static_assert(std::is_trivially_copyable_v<T>, "__shfl_down_sync: a trivially copyable value");
  if (mask != 0xFFFFFFFFu || width != 32) emu::device_fail("__shfl_down_sync with a partial mask or width (full warps only)");
  T out{};
  emu::warp_rendezvous({"__shfl_down_sync", nullptr, mask, file, line}, {&var, &out, &delta, nullptr},
                       &emu::shuffle_down<T>);
  return out;
}

// ---- the runtime API names detail/check.cuh mentions (never called on a device path) ------------

enum cudaError_t { cudaSuccess = 0 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error (emulated)"; }
struct CUstream_st;
using cudaStream_t = CUstream_st*;
