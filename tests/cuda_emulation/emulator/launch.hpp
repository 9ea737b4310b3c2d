// tests/cuda_emulation/emulator/launch.hpp: kernel<<<grid, block, shared>>>(args...) on the host.
//
// Blocks run one after another (CUDA promises no order between blocks, and these kernels never
// communicate between blocks within a launch), each thread a fiber. Before each block the dynamic
// shared memory is filled with 0xFF bytes (NaN as float and as bf16: shared memory is not
// initialized on the GPU, and a read of a value nobody wrote should show), and the bytes past the
// launch's request are checked unchanged after it. A launch is synchronous, as on the default
// stream followed by a synchronize.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emulator/device.hpp"

namespace megacpp::cuda_emulation {

/// The largest dynamic shared memory a block may request: the H100's per-block opt-in limit
/// (cudaDevAttrMaxSharedMemoryPerBlockOptin, 227 KB), which the launch code checks against.
inline constexpr std::size_t kMaxDynamicShared = 227 * 1024;

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes = 0;
};

/// Runs body(context) as every thread of every block of the grid.
void run_grid(const LaunchConfig& config, void (*body)(void*), void* context);

/// The emulated kernel<<<config.grid, config.block, config.shared_bytes>>>(args...): arguments are
/// converted to the parameter types once, and every thread calls the kernel with copies of them
/// (kernel parameters are per-thread values on the GPU too).
template <class... P, class... A>
void launch(void (*kernel)(P...), const LaunchConfig& config, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "launch: the kernel takes a different number of arguments");
  struct Call {
    void (*kernel)(P...);
    std::tuple<std::decay_t<P>...> params;
  } call{kernel, std::tuple<std::decay_t<P>...>(static_cast<P>(std::forward<A>(args))...)};
  run_grid(config, [](void* c) {
    const Call& call = *static_cast<const Call*>(c);
    std::apply(call.kernel, call.params);
  }, &call);
}

}  // namespace megacpp::cuda_emulation
