// megacpp/autograd/grad_mode.hpp: the `no_grad` scope.
#pragma once

namespace megacpp {

namespace detail {
inline bool& grad_enabled_flag() {
  thread_local bool enabled = true;
  return enabled;
}
}  // namespace detail

inline bool grad_enabled() { return detail::grad_enabled_flag(); }

// While a NoGrad object lives, ops on this thread record nothing: results are constants and no
// intermediate is kept for a backward (evaluation, optimizer updates, decoding).
class NoGrad {
 public:
  NoGrad() : previous_(detail::grad_enabled_flag()) { detail::grad_enabled_flag() = false; }
  ~NoGrad() { detail::grad_enabled_flag() = previous_; }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  bool previous_;
};

}  // namespace megacpp
