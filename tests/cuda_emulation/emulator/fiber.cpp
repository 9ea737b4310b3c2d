// tests/cuda_emulation/emulator/fiber.cpp: see fiber.hpp.
#include "emulator/fiber.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <new>

#include "emulator/sanitizer.hpp"


#if defined(MEGACPP_EMULATION_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace megacpp::cuda_emulation {
namespace {

ucontext_t scheduler_context;
// The scheduler's stack, as ASan reported it when a fiber first ran (to switch back to it).
[[maybe_unused]] const void* scheduler_stack = nullptr;
[[maybe_unused]] std::size_t scheduler_stack_bytes = 0;

inline void announce_switch([[maybe_unused]] void** fake_stack_save, [[maybe_unused]] const void* bottom,
                            [[maybe_unused]] std::size_t bytes) {
#if defined(MEGACPP_EMULATION_ASAN)
  __sanitizer_start_switch_fiber(fake_stack_save, bottom, bytes);
#endif
}
inline void switched([[maybe_unused]] void* fake_stack_save, [[maybe_unused]] const void** old_bottom,
                     [[maybe_unused]] std::size_t* old_bytes) {
#if defined(MEGACPP_EMULATION_ASAN)
  __sanitizer_finish_switch_fiber(fake_stack_save, old_bottom, old_bytes);
#endif
}

// makecontext passes int arguments only: the entry function's address travels as two halves.
void trampoline(unsigned low, unsigned high) {
  switched(nullptr, &scheduler_stack, &scheduler_stack_bytes);
  const std::uintptr_t bits = static_cast<std::uintptr_t>(low) | (static_cast<std::uintptr_t>(high) << 16 << 16);
  reinterpret_cast<void (*)()>(bits)();
  std::abort();  // the entry ends with Fiber::finish()
}

}  // namespace

Fiber::Fiber(std::size_t stack_bytes) {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  stack_bytes_ = (stack_bytes + page - 1) / page * page;
  mapping_bytes_ = stack_bytes_ + page;
  mapping_ = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping_ == MAP_FAILED) throw std::bad_alloc();
  // A stack overflow (stacks grow down) hits this page and faults instead of corrupting memory.
  mprotect(mapping_, page, PROT_NONE);
  stack_ = static_cast<char*>(mapping_) + page;
}

Fiber::~Fiber() { munmap(mapping_, mapping_bytes_); }

void Fiber::start(void (*entry)()) {
#if defined(MEGACPP_EMULATION_ASAN)
  // Frames of an earlier run on this stack may have left redzones poisoned.
  ASAN_UNPOISON_MEMORY_REGION(stack_, stack_bytes_);
#endif
  getcontext(&context_);
  context_.uc_stack.ss_sp = stack_;
  context_.uc_stack.ss_size = stack_bytes_;
  context_.uc_link = nullptr;
  const auto bits = reinterpret_cast<std::uintptr_t>(entry);
  makecontext(&context_, reinterpret_cast<void (*)()>(trampoline), 2, static_cast<unsigned>(bits),
              static_cast<unsigned>(bits >> 16 >> 16));
  fake_stack_ = nullptr;
}

void Fiber::resume() {
  void* fake = nullptr;
  announce_switch(&fake, stack_, stack_bytes_);
  swapcontext(&scheduler_context, &context_);
  switched(fake, nullptr, nullptr);
}

void Fiber::suspend() {
  announce_switch(&fake_stack_, scheduler_stack, scheduler_stack_bytes);
  swapcontext(&context_, &scheduler_context);
  switched(fake_stack_, &scheduler_stack, &scheduler_stack_bytes);
}

void Fiber::finish() {
  announce_switch(nullptr, scheduler_stack, scheduler_stack_bytes);  // null: this fiber's stack is done
  setcontext(&scheduler_context);
  std::abort();
}

}  // namespace megacpp::cuda_emulation
