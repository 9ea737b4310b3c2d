// CUDA backend: an opt-in precision option of one host thread (TF32 GEMMs, bf16 attention), set
// for a scope and restored after it, as PyTorch's allow_tf32 switches are set around code.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

namespace megacpp::cuda {

/// While alive, the option named by Tag is `enabled` on this host thread; the previous setting
/// comes back when it ends (scopes nest). Off unless a scope turns it on.
template <class Tag>
class ThreadOption {
 public:
  explicit ThreadOption(bool enabled) : previous_(flag()) { flag() = enabled; }
  ~ThreadOption() { flag() = previous_; }
  ThreadOption(const ThreadOption&) = delete;
  ThreadOption& operator=(const ThreadOption&) = delete;
  /// The setting on this thread now.
  static bool enabled() { return flag(); }

 private:
  static bool& flag() {
    thread_local bool on = false;
    return on;
  }
  bool previous_;
};

}  // namespace megacpp::cuda
