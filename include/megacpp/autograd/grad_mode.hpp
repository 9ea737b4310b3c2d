/// \file
/// megacpp/autograd/grad_mode.hpp: the `no_grad` scope.
#pragma once

namespace megacpp {

namespace detail {
inline bool& grad_enabled_flag() {
  thread_local bool enabled = true;
  return enabled;
}
}  // namespace detail

/// True unless a NoGrad scope is active on this thread: whether ops record graph nodes.
inline bool grad_enabled() { return detail::grad_enabled_flag(); }

/// While a NoGrad object lives, ops on this thread record nothing: results are constants and no
/// intermediate is kept for a backward (evaluation, optimizer updates, decoding).
class NoGrad {
 public:
  /// Disables recording on this thread until destruction.
  NoGrad() : previous_(detail::grad_enabled_flag()) { detail::grad_enabled_flag() = false; }
  /// Restores the previous mode (NoGrad scopes nest).
  ~NoGrad() { detail::grad_enabled_flag() = previous_; }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

}  // namespace megacpp
