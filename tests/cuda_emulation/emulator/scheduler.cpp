// tests/cuda_emulation/emulator/scheduler.cpp: the blocks, their threads as fibers, the block
// barrier and the warp collectives (device.hpp, launch.hpp).
//
// Rules enforced, from the CUDA C++ Programming Guide:
//   __syncthreads ("Synchronization Functions"): allowed in conditional code only if the condition
//     is the same across the block; here every thread must reach the same call, and a barrier
//     some thread can no longer reach (it exited, or waits elsewhere) is a deadlock: an error.
//   warp collectives (__syncwarp, __shfl_*_sync, "Warp Matrix Functions"): every lane of the warp
//     executes the same call with the same warp-wide arguments; the emulator checks each lane's
//     sequence of collectives against the warp's, and a collective a lane never reaches is a
//     deadlock too. Blocks must be whole warps for the blocking collectives.
// Lanes of a warp do not run in lockstep here (independent thread scheduling, Volta and later):
// a lane runs ahead to its next blocking point, so data another lane writes is seen only after a
// __syncwarp/__syncthreads, and a missing one tends to show as a wrong or NaN result.
#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <sstream>
#include <vector>

#include "emulator/device.hpp"
#include "emulator/fiber.hpp"
#include "emulator/launch.hpp"
#include "emulator/options.hpp"
#include "emulator/shared_memory.hpp"

#include "emulator/sanitizer.hpp"
#if defined(MEGACPP_EMULATION_ASAN)
#include <sanitizer/asan_interface.h>
#endif

namespace megacpp::cuda_emulation {

Options& options() {
  static Options o;
  return o;
}

namespace {

enum class Wait : unsigned char { none, barrier, warp, exited };

struct Thread {
  uint3 index{};
  unsigned linear = 0, warp = 0, lane = 0;
  Wait wait = Wait::none;
  const char* what = "";  // what it waits at, and where
  const char* file = "";
  unsigned line = 0;
  std::uint64_t collectives = 0;  // warp collectives issued so far
  long barriers = 0;
  Fiber* fiber = nullptr;
  // cp.async: the copies of the open group, then the committed groups in flight, oldest first.
  std::vector<AsyncCopy> open_copies;
  std::deque<std::vector<AsyncCopy>> copy_groups;
};

struct Warp {
  unsigned first = 0, lanes = 0, exited = 0;
  std::vector<Collective> log;  // the collectives at sequence numbers log_base, log_base + 1, ...
  std::uint64_t log_base = 0;
  unsigned arrived = 0;  // lanes waiting at the current blocking collective
  LaneOperands operands[kWarpSize]{};
};

struct Block {
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  unsigned exited = 0, barrier_arrived = 0;
  const char* barrier_file = "";
  unsigned barrier_line = 0;
  Thread* current = nullptr;
  bool failed = false;
  std::string error;
};

struct Grid {
  LaunchConfig config;
  uint3 block{};
  void (*body)(void*) = nullptr;
  void* context = nullptr;
};

Grid grid;
Block block;
std::vector<std::unique_ptr<Fiber>> fibers;
// Kernel frames are small, but a Debug build under AddressSanitizer grows them several times: the
// deepest fiber stack measured (mincore over every fiber's pages, the whole suite, asan preset)
// was 12 KiB. 64 KiB leaves five times that; an overflow hits the guard page below the stack.
// Not more: ASan's swapcontext interceptor clears the shadow of the target context's whole stack
// on every switch, which at 256 KiB stacks was 30% of the sanitized emulation's time.
constexpr std::size_t kStackBytes = 64 * 1024;

const char* base_name(const char* file) {
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}

std::string describe(const Thread& t) {
  std::ostringstream s;
  s << "thread (" << t.index.x << ", " << t.index.y << ", " << t.index.z << ") [warp " << t.warp << " lane " << t.lane
    << "] of block (" << grid.block.x << ", " << grid.block.y << ", " << grid.block.z << ")";
  return s.str();
}

std::string site(const char* what, const char* file, unsigned line) {
  return std::string(what) + " at " + base_name(file) + ":" + std::to_string(line);
}

Thread& current() {
  if (!block.current) device_fail("a device function was called outside an emulated kernel");
  return *block.current;
}

// Threads grouped by what they are doing, for a deadlock report: "threads 0-63: ...".
std::string wait_report() {
  std::ostringstream s;
  std::size_t i = 0;
  while (i < block.threads.size()) {
    const Thread& t = block.threads[i];
    auto state = [](const Thread& u) {
      switch (u.wait) {
        case Wait::exited: return std::string("exited");
        case Wait::none: return std::string("runnable");
        default: return "waiting in " + site(u.what, u.file, u.line);
      }
    };
    const std::string what = state(t);
    std::size_t j = i + 1;
    while (j < block.threads.size() && state(block.threads[j]) == what) ++j;
    s << "\n  threads " << i << "-" << j - 1 << ": " << what;
    i = j;
  }
  return s.str();
}

// Thrown inside a fiber once its launch has failed: unwinds the fiber's stack (destroying what its
// frames own) up to thread_main, so no fiber is left suspended mid-kernel.
struct Unwind {};

// Suspends the current thread until the scheduler resumes it; unwinds it if the launch failed meanwhile.
void wait_here(Thread& t) {
  t.fiber->suspend();
  if (block.failed) throw Unwind{};
}

void record_failure(const Thread& t, const std::string& message) {
  if (block.failed) return;
  block.failed = true;
  block.error = describe(t) + ": " + message;
}

void thread_main() {
  Thread& t = current();
  try {
    if (!block.failed) grid.body(grid.context);
    t.wait = Wait::exited;
    ++block.exited;
    Warp& w = block.warps[t.warp];
    if (++w.exited == w.lanes && !block.failed) {
      for (unsigned l = 0; l < w.lanes; ++l) {
        const Thread& u = block.threads[w.first + l];
        if (u.collectives != t.collectives)
          device_fail("warp " + std::to_string(t.warp) + " ended with lane " + std::to_string(u.lane) + " having issued " +
                      std::to_string(u.collectives) + " warp collectives and lane " + std::to_string(t.lane) + " " +
                      std::to_string(t.collectives) + " (every lane must issue the same ones)");
      }
    }
  } catch (const Unwind&) {
  } catch (const std::exception& e) {
    record_failure(t, std::string("an exception left the device code: ") + e.what());
  } catch (...) {
    record_failure(t, "an exception left the device code");
  }
  if (t.wait != Wait::exited) {
    t.wait = Wait::exited;
    ++block.exited;
  }
  t.fiber->finish();
}

// After a failure: resumes every thread that has not ended, which unwinds it (wait_here, or
// thread_main's start), then reports the failure.
[[noreturn]] void fail_block() {
  for (Thread& t : block.threads) {
    if (t.wait == Wait::exited) continue;
    block.current = &t;
    t.fiber->resume();
    block.current = nullptr;
  }
  throw EmulationError(block.error);
}

void check_sequence(Thread& t, Warp& w, const Collective& c) {
  const std::uint64_t k = t.collectives - w.log_base;
  if (k < w.log.size()) {
    const Collective& expected = w.log[k];
    if (!same_collective(expected, c))
      device_fail("divergent warp collectives: warp collective #" + std::to_string(t.collectives) + " of this lane is " +
                  site(c.op, c.file, c.line) + " (pointer " + std::to_string(reinterpret_cast<std::uintptr_t>(c.pointer)) +
                  ", stride " + std::to_string(c.stride) + "), another lane's is " +
                  site(expected.op, expected.file, expected.line) + " (pointer " +
                  std::to_string(reinterpret_cast<std::uintptr_t>(expected.pointer)) + ", stride " +
                  std::to_string(expected.stride) + ")");
  } else {
    w.log.push_back(c);
  }
  ++t.collectives;
}

void run_block() {
  const dim3& bd = grid.config.block;
  const unsigned n = bd.x * bd.y * bd.z;
  block.threads.assign(n, Thread{});
  block.warps.assign((n + kWarpSize - 1) / kWarpSize, Warp{});
  block.exited = block.barrier_arrived = 0;
  block.failed = false;
  block.error.clear();
  while (fibers.size() < n) fibers.push_back(std::make_unique<Fiber>(kStackBytes));
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = block.threads[i];
    t.index = {i % bd.x, i / bd.x % bd.y, i / (bd.x * bd.y)};
    t.linear = i;
    t.warp = i / kWarpSize;
    t.lane = i % kWarpSize;
    t.fiber = fibers[i].get();
    t.fiber->start(thread_main);
    Warp& w = block.warps[t.warp];
    if (t.lane == 0) w.first = i;
    ++w.lanes;
  }
  for (const SharedArena* a = shared_arenas(); a->name; ++a) {
#if defined(MEGACPP_EMULATION_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(a->data, a->bytes);  // a launch that failed left its tail poisoned
#endif
    std::memset(a->data, 0xFF, a->bytes);
#if defined(MEGACPP_EMULATION_ASAN)
    ASAN_POISON_MEMORY_REGION(a->data + grid.config.shared_bytes, a->bytes - grid.config.shared_bytes);
#endif
  }
  const bool reverse = options().reverse_schedule, greedy = options().greedy_schedule;
  for (;;) {
    bool ran = false;
    for (unsigned i = 0; i < n; ++i) {
      Thread& t = block.threads[reverse ? n - 1 - i : i];
      if (t.wait != Wait::none) continue;
      block.current = &t;
      t.fiber->resume();
      block.current = nullptr;
      ran = true;
      if (block.failed) fail_block();
      if (greedy) break;  // back to the first runnable thread
    }
    if (block.exited == n) break;
    if (!ran) {
      std::ostringstream s;
      s << "deadlock in block (" << grid.block.x << ", " << grid.block.y << ", " << grid.block.z
        << "): no thread can go on" << wait_report();
      block.failed = true;
      block.error = s.str();
      fail_block();
    }
  }
  for (const SharedArena* a = shared_arenas(); a->name; ++a) {
#if defined(MEGACPP_EMULATION_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(a->data, a->bytes);
#endif
    for (std::size_t i = grid.config.shared_bytes; i < a->bytes; ++i)
      if (a->data[i] != 0xFF)
        throw EmulationError("block (" + std::to_string(grid.block.x) + ", " + std::to_string(grid.block.y) + ", " +
                             std::to_string(grid.block.z) + ") wrote byte " + std::to_string(i) + " of `" + a->name +
                             "`, past the " + std::to_string(grid.config.shared_bytes) +
                             " bytes of dynamic shared memory the launch requested");
  }
}

}  // namespace

bool same_collective(const Collective& a, const Collective& b) {
  return std::strcmp(a.op, b.op) == 0 && a.pointer == b.pointer && a.stride == b.stride && a.line == b.line &&
         std::strcmp(a.file, b.file) == 0;
}

const uint3& thread_index() { return current().index; }
const uint3& block_index() { return grid.block; }
const dim3& block_dim() { return grid.config.block; }
const dim3& grid_dim() { return grid.config.grid; }
unsigned lane_index() { return current().lane; }

void device_fail(const std::string& message) {
  if (!block.current) throw EmulationError(message);
  record_failure(*block.current, message);
  throw Unwind{};
}

void sync_threads(const char* file, unsigned line) {
  Thread& t = current();
  if (t.barriers++ == options().skip_barrier || line == options().skip_barrier_line) return;  // injected faults
  if (block.barrier_arrived > 0 && (block.barrier_line != line || std::strcmp(block.barrier_file, file) != 0))
    device_fail("threads reach different __syncthreads: this one " + site("__syncthreads", file, line) + ", others " +
                site("__syncthreads", block.barrier_file, block.barrier_line));
  block.barrier_file = file;
  block.barrier_line = line;
  if (++block.barrier_arrived == block.threads.size()) {
    block.barrier_arrived = 0;
    for (Thread& u : block.threads) u.wait = Wait::none;
    return;
  }
  t.wait = Wait::barrier;
  t.what = "__syncthreads";
  t.file = file;
  t.line = line;
  wait_here(t);
}

void warp_rendezvous(const Collective& c, const LaneOperands& operands, Completion complete) {
  Thread& t = current();
  Warp& w = block.warps[t.warp];
  if (w.lanes != kWarpSize) device_fail(std::string(c.op) + " in a partial warp (blocks must be whole warps)");
  check_sequence(t, w, c);
  w.operands[t.lane] = operands;
  if (++w.arrived < kWarpSize) {
    t.wait = Wait::warp;
    t.what = c.op;
    t.file = c.file;
    t.line = c.line;
    wait_here(t);
    return;  // the last lane completed the collective
  }
  w.arrived = 0;
  complete(w.operands);
  // Every lane stands at the same sequence number now: the log starts over.
  w.log.clear();
  w.log_base = t.collectives;
  for (unsigned l = 0; l < kWarpSize; ++l) block.threads[w.first + l].wait = Wait::none;
}

void async_copy(const AsyncCopy& copy) { current().open_copies.push_back(copy); }

void async_commit() {
  Thread& t = current();
  t.copy_groups.push_back(std::move(t.open_copies));
  t.open_copies.clear();
}

void async_wait(unsigned groups_in_flight) {
  Thread& t = current();
  while (t.copy_groups.size() > groups_in_flight) {
    for (const AsyncCopy& c : t.copy_groups.front()) std::memcpy(c.shared, c.global, c.bytes);
    t.copy_groups.pop_front();
  }
}

bool in_shared_memory(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (const SharedArena* a = shared_arenas(); a->name; ++a)
    if (c >= a->data && c < a->data + a->bytes) return true;
  return false;
}

bool within_requested_shared(const void* p, std::size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (const SharedArena* a = shared_arenas(); a->name; ++a)
    if (c >= a->data && c < a->data + a->bytes)
      return static_cast<std::size_t>(c - a->data) + bytes <= grid.config.shared_bytes;
  return true;
}

void run_grid(const LaunchConfig& config, void (*body)(void*), void* context) {
  const unsigned threads = config.block.x * config.block.y * config.block.z;
  if (threads == 0 || threads > 1024)
    throw EmulationError("launch: " + std::to_string(threads) + " threads per block (1 to 1024)");
  if (config.grid.x == 0 || config.grid.y == 0 || config.grid.z == 0 || config.grid.y > 65535 || config.grid.z > 65535)
    throw EmulationError("launch: bad grid dimensions");
  if (config.shared_bytes > kMaxDynamicShared)
    throw EmulationError("launch: " + std::to_string(config.shared_bytes) + " bytes of dynamic shared memory, above " +
                         std::to_string(kMaxDynamicShared));
  if (block.current) throw EmulationError("launch from inside an emulated kernel");
  grid = Grid{config, {}, body, context};
  for (unsigned z = 0; z < config.grid.z; ++z)
    for (unsigned y = 0; y < config.grid.y; ++y)
      for (unsigned x = 0; x < config.grid.x; ++x) {
        grid.block = {x, y, z};
        run_block();
      }
}

}  // namespace megacpp::cuda_emulation
