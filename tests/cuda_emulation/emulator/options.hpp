// tests/cuda_emulation/emulator/options.hpp: how the emulator schedules threads, and the faults
// it can inject through the shims (for the tests that show it catches them).
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

  // ---- injected faults (none by default) ----
  long skip_barrier = -1;                  // every thread treats its n-th __syncthreads (from 0) as a no-op
  unsigned skip_barrier_line = 0;          // every __syncthreads on this line (of any file) is a no-op
  std::size_t ldmatrix_address_shift = 0;  // bytes added to the row address of every ldmatrix
  int ldmatrix_fault_lane = -1;            // ... in this lane only (-1: every lane)
  bool bf16_truncate = false;              // __float2bfloat16_rn truncates instead of rounding to nearest even
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
