// tests/cuda_emulation/emulator/options.hpp: how the emulator schedules and lays out fragments,
// and the faults it can inject through the shims (for the tests that show it catches them).
#pragma once

#include <cstddef>

namespace megacpp::cuda_emulation {

struct Options {
  // The order threads of a block run in. Round robin (the default) runs each runnable thread in
  // turn, so warps advance together; greedy always goes back to the first runnable thread, so the
  // first warps run as far ahead as the barriers let them (a missing __syncthreads between one
  // warp's reads and another's writes shows). Reversed: from the last thread instead. A kernel
  // without races gives the same bits under every schedule.
  bool reverse_schedule = false;
  bool greedy_schedule = false;
  // Which fixed element-to-lane mapping WMMA fragments use (0 or 1). The mapping is unspecified
  // by CUDA, so a correct kernel gives the same bits under both.
  unsigned fragment_mapping = 0;

  // ---- injected faults (none by default) ----
  long skip_barrier = -1;           // every thread treats its n-th __syncthreads (from 0) as a no-op
  unsigned skip_barrier_line = 0;  // every __syncthreads on this line (of any file) is a no-op
  long skip_syncwarp = -1;          // ... its n-th __syncwarp (from 0), in lane skip_syncwarp_lane
  int skip_syncwarp_lane = -1;      // -1: every lane
  unsigned skip_syncwarp_line = 0;  // every __syncwarp on this line (of any file) is a no-op, in every lane
  std::size_t wmma_pointer_shift = 0;  // bytes added to the pointer of every WMMA load
  unsigned wmma_ldm_shift = 0;         // elements added to the ldm of every WMMA load
  std::size_t ldmatrix_address_shift = 0;  // bytes added to the row address of every ldmatrix
  int ldmatrix_fault_lane = -1;            // ... in this lane only (-1: every lane)
  bool bf16_truncate = false;          // __float2bfloat16_rn truncates instead of rounding to nearest even
};

Options& options();

/// Sets the options for a scope, restoring the previous ones at its end.
class OptionsScope {
 public:
  explicit OptionsScope(const Options& o) : saved_(options()) { options() = o; }
  ~OptionsScope() { options() = saved_; }
  OptionsScope(const OptionsScope&) = delete;
  OptionsScope& operator=(const OptionsScope&) = delete;

 private:
  Options saved_;
};

}  // namespace megacpp::cuda_emulation
