// tests/cuda_emulation/emulator/fiber.hpp: cooperative fibers in one OS thread, one per emulated
// CUDA thread.
//
// Why fibers: a CUDA thread of these kernels runs until it reaches a barrier or a warp collective
// and must then wait for its peers. Running each as a std::thread on a 2-core machine costs a
// kernel-level context switch per wait (an earlier throwaway emulator took 1m45 for 3 cases);
// a fiber switches in user space, and the schedule is deterministic (the same order every run).
// ucontext (POSIX makecontext/swapcontext) creates and switches them. Under AddressSanitizer every
// switch is announced with __sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber
// (compiler-rt's common_interface_defs.h), so ASan tracks which stack is live.
#pragma once

#include <ucontext.h>

#include <cstddef>

namespace megacpp::cuda_emulation {

class Fiber {
 public:
  explicit Fiber(std::size_t stack_bytes);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // Makes the next resume() run entry() from the top of the stack (entry must end in finish()).
  void start(void (*entry)());
  // From the scheduler: runs the fiber until it calls suspend() or finish().
  void resume();
  // From inside the fiber: back to the scheduler; returns when resumed.
  void suspend();
  // From inside the fiber, at its end: back to the scheduler for good.
  [[noreturn]] void finish();

 private:
  ucontext_t context_{};
  void* mapping_ = nullptr;  // guard page + stack
  std::size_t mapping_bytes_ = 0;
  char* stack_ = nullptr;  // lowest usable address
  std::size_t stack_bytes_ = 0;
  void* fake_stack_ = nullptr;  // ASan's fake stack of this fiber while it is switched out
};

}  // namespace megacpp::cuda_emulation
