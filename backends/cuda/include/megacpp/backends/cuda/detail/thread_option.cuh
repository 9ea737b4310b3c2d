// CUDA backend: an opt-in option of one host thread (TF32 GEMMs, bf16 attention, the one-launch
// grouped products), set for a scope and restored after it, as PyTorch's allow_tf32 switches are
// set around code.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <optional>

namespace megacpp::cuda {

/// While alive, the option named by Tag is `enabled` on this host thread; the previous setting
/// comes back when it ends (scopes nest). Outside every scope the option is unset: off for
/// enabled(), and choice() lets the caller fall back on its own default.
template <class Tag>
class ThreadOption {
 public:
  explicit ThreadOption(bool enabled) : previous_(setting()) { setting() = enabled; }
  ~ThreadOption() { setting() = previous_; }
  ThreadOption(const ThreadOption&) = delete;
  ThreadOption& operator=(const ThreadOption&) = delete;
  /// The setting on this thread now (off outside every scope).
  static bool enabled() { return setting().value_or(false); }
  /// The innermost scope's setting on this thread, or nothing outside every scope.
  static std::optional<bool> choice() { return setting(); }

 private:
  static std::optional<bool>& setting() {
    thread_local std::optional<bool> value;
    return value;
  }
  std::optional<bool> previous_;
};

}  // namespace megacpp::cuda
