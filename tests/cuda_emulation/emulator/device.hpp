// tests/cuda_emulation/emulator/device.hpp: what the shims (shim/*.h) call into: the current
// CUDA thread's indices, the block barrier, warp collectives and device-side failures.
//
// One emulated grid runs at a time, on one OS thread: its blocks one after another, and the
// threads of a block as cooperative fibers (fiber.hpp) scheduled in a fixed order. A thread runs
// until it waits (a barrier, a blocking warp collective) or ends; the last thread to arrive at a
// barrier releases it and runs on. Everything the emulator detects (a deadlock, divergent warp
// collectives, an ldmatrix or cp.async rule broken) ends the launch with an EmulationError naming the thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

namespace megacpp::cuda_emulation {

/// A rule of the CUDA execution model the emulated kernel broke (or a deadlock).
struct EmulationError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline constexpr unsigned kWarpSize = 32;

const uint3& thread_index();
const uint3& block_index();
const dim3& block_dim();
const dim3& grid_dim();
unsigned lane_index();  // threadIdx linear % 32

/// Ends the launch with an EmulationError: from a device thread it records the message and unwinds
/// the thread's stack (an exception the emulator catches), from the host it throws.
[[noreturn]] void device_fail(const std::string& message);

/// __syncthreads: every thread of the block must reach the same barrier call.
void sync_threads(const char* file, unsigned line);

/// One warp collective as a lane issues it. Every lane of a warp must issue the same sequence of
/// collectives (CUDA C++ Programming Guide, "Warp Matrix Functions": mptr, ldm, layout and all
/// template parameters the same for all threads of the warp; "Warp Shuffle Functions": every
/// thread of the mask executes the same intrinsic). `op` names the function and its template
/// arguments; `pointer` and `stride` are the per-warp arguments (0 where none).
struct Collective {
  const char* op;
  const void* pointer;
  std::uint64_t stride;
  const char* file;
  unsigned line;
};
bool same_collective(const Collective& a, const Collective& b);

/// A lane's operands of a blocking collective, and the function that completes it for the whole
/// warp once every lane has arrived (run by the last lane to arrive).
using LaneOperands = std::array<void*, 4>;
using Completion = void (*)(const LaneOperands (&lanes)[kWarpSize]);

/// Checks `c`, then waits until every lane of the warp has issued it; the last lane runs complete.
void warp_rendezvous(const Collective& c, const LaneOperands& operands, Completion complete);

/// cp.async, per thread (PTX ISA, "cp.async", "cp.async.wait_group"): async_copy adds a copy to
/// the calling thread's open group, async_commit closes the group, async_wait lands the oldest
/// groups until at most `groups_in_flight` are left. A copy's bytes reach shared memory only when
/// its group is waited for, so a read before the wait sees the old bytes, as it may on a GPU.
struct AsyncCopy {
  void* shared;
  const void* global;
  std::size_t bytes;
};
void async_copy(const AsyncCopy& copy);
void async_commit();
void async_wait(unsigned groups_in_flight);

/// Whether p lies in an arena of dynamic shared memory (ldmatrix and cp.async take shared addresses).
bool in_shared_memory(const void* p);

/// Dynamic shared memory of the running block: [base, base + requested) is the kernel's.
/// Returns false if [p, p + bytes) starts in an arena of dynamic shared memory but runs past the
/// bytes the launch requested (ldmatrix and cp.async are checked against it; any other write past it is
/// caught when the block ends, and any access under AddressSanitizer).
bool within_requested_shared(const void* p, std::size_t bytes);

}  // namespace megacpp::cuda_emulation
