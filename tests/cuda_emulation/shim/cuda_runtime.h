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
#define __grid_constant__
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
// The lane a shuffle's lane l reads, given its argument ("Warp Shuffle Functions"; width 32):
// l ^ laneMask for __shfl_xor_sync; l + delta for __shfl_down_sync, or l itself past the warp.
inline unsigned xor_source(unsigned lane, unsigned lane_mask) { return lane ^ (lane_mask & (kWarpSize - 1)); }
inline unsigned down_source(unsigned lane, unsigned delta) { return delta < kWarpSize - lane ? lane + delta : lane; }

// Every lane l receives the value of lane Source(l, its argument).
template <class T, unsigned (*Source)(unsigned, unsigned)>
void shuffle(const LaneOperands (&lanes)[kWarpSize]) {
  for (unsigned l = 0; l < kWarpSize; ++l) {
    const unsigned source = Source(l, *static_cast<const unsigned*>(lanes[l][2]));
    *static_cast<T*>(lanes[l][1]) = *static_cast<const T*>(lanes[source][0]);
  }
}

// A full-warp shuffle called `name`: the whole warp meets here and each lane gets its value.
template <class T, unsigned (*Source)(unsigned, unsigned)>
T warp_shuffle(const char* name, unsigned mask, T var, unsigned argument, int width, const char* file, unsigned line) {
  static_assert(std::is_trivially_copyable_v<T>, "a warp shuffle moves a trivially copyable value");
  if (mask != 0xFFFFFFFFu || width != 32) device_fail(std::string(name) + " with a partial mask or width (full warps only)");
  T out{};
  warp_rendezvous({name, nullptr, mask, file, line}, {&var, &out, &argument, nullptr}, &shuffle<T, Source>);
  return out;
}
}  // namespace megacpp::cuda_emulation

template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32, const char* file = __builtin_FILE(),
                  unsigned line = __builtin_LINE()) {
  namespace emu = ::megacpp::cuda_emulation;
  return emu::warp_shuffle<T, &emu::xor_source>("__shfl_xor_sync", mask, var, static_cast<unsigned>(lane_mask), width,
                                                file, line);
}

template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32, const char* file = __builtin_FILE(),
                   unsigned line = __builtin_LINE()) {
  namespace emu = ::megacpp::cuda_emulation;
  return emu::warp_shuffle<T, &emu::down_source>("__shfl_down_sync", mask, var, delta, width, file, line);
}

// min and max of two ints, which CUDA's math API declares in the global namespace for device code
// (the index range check calls them unqualified).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
// Only those: device code calling min or max on other types would convert to int here where nvcc
// has an overload, so it is a compile error until the shim provides it.
template <class A, class B>
void min(A, B) = delete;
template <class A, class B>
void max(A, B) = delete;

// ---- atomics ---------------------------------------------------------------------------------------

// atomicMin ("Atomic Functions"): stores min(*address, val) and returns the old value. The
// threads are cooperative fibers that switch only at barriers and warp intrinsics, so a plain
// read-modify-write is atomic here; the order threads reach it in is the schedule's (the
// reversed schedule shows a result that depends on it).
inline unsigned long long atomicMin(unsigned long long* address, unsigned long long val) {
  const unsigned long long old = *address;
  if (val < old) *address = val;
  return old;
}

// atomicMin and atomicMax on int (the index range check's result, detail/elementwise.cuh): the same
// plain read-modify-write.
inline int atomicMin(int* address, int val) {
  const int old = *address;
  if (val < old) *address = val;
  return old;
}
inline int atomicMax(int* address, int val) {
  const int old = *address;
  if (val > old) *address = val;
  return old;
}

// ---- the runtime API names detail/check.cuh mentions (never called on a device path) ------------

enum cudaError_t { cudaSuccess = 0 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "no error (emulated)"; }
struct CUstream_st;
using cudaStream_t = CUstream_st*;
#define cudaStreamLegacy (reinterpret_cast<cudaStream_t>(0x1))
