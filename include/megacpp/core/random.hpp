/// \file
/// megacpp/core/random.hpp: deterministic random numbers, identical on every backend.
///
/// Initialisation draws on the host with a counter-free generator (SplitMix64, Steele et al.,
/// "Fast splittable pseudorandom number generators", OOPSLA 2014) and copies to the backend, so a
/// seed gives bitwise the same parameters on CPU and CUDA, at any thread count.
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "megacpp/core/tensor.hpp"

namespace megacpp {

/// SplitMix64 generator: the whole state is one 64-bit word (checkpointable with state()).
class Rng {
 public:
  /// A generator whose stream is determined by `seed`.
  explicit Rng(std::uint64_t seed = 0) : state_(seed) {}

  /// The next 64 random bits.
  std::uint64_t next_u64() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  /// Standard normal by Box-Muller (one value per call; deterministic, simple, adequate for init).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  /// Uniform integer in [0, n).
  std::uint64_t below(std::uint64_t n) { return n ? next_u64() % n : 0; }

  /// The generator's state (save it to resume the stream).
  std::uint64_t state() const { return state_; }
  /// Restores a state returned by state().
  void set_state(std::uint64_t s) { state_ = s; }

 private:
  std::uint64_t state_;
};

/// A tensor of normal(mean, std) values drawn on the host, in row-major order, then copied to B.
template <class T, Backend B>
Tensor<T, B> randn(Shape shape, Rng& rng, double std = 1.0, double mean = 0.0) {
  std::vector<T> v(static_cast<std::size_t>(shape.numel()));
  for (auto& x : v) x = convert_element<T>(mean + std * rng.normal());
  return Tensor<T, B>::from_host(shape, v);
}
/// A tensor of uniform [lo, hi) values drawn on the host, in row-major order, then copied to B.
template <class T, Backend B>
Tensor<T, B> rand_uniform(Shape shape, Rng& rng, double lo, double hi) {
  std::vector<T> v(static_cast<std::size_t>(shape.numel()));
  for (auto& x : v) x = convert_element<T>(rng.uniform(lo, hi));
  return Tensor<T, B>::from_host(shape, v);
}

}  // namespace megacpp
