// Shared helpers of the plasticity tests: matrices from host values, bitwise comparison, and a
// thread per rank of an in-process world.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "megacpp/megacpp.hpp"
#include "megacpp/dist/in_process.hpp"
#include "megacpp/plasticity.hpp"

namespace megacpp::testing {

// A (rows, cols) tensor of normal(0, std) values.
template <class T>
Tensor<T, Cpu> random_matrix(index_t rows, index_t cols, std::uint64_t seed, double std = 1.0) {
  Rng rng(seed);
  return randn<T, Cpu>(Shape{rows, cols}, rng, std);
}

// True when both hold the same bytes.
template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Rows [begin, end) of a row-major (rows, cols) host matrix.
template <class T>
std::vector<T> host_rows(const std::vector<T>& m, index_t cols, index_t begin, index_t end) {
  return std::vector<T>(m.begin() + begin * cols, m.begin() + end * cols);
}

// Runs body(comm) on `world` threads, one per rank of an in-process group; rethrows a failure.
inline void run_ranks(int world, const std::function<void(dist::InProcessComm&)>& body) {
  dist::InProcessGroup group(world);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      dist::InProcessComm comm = group.comm(r);
      try {
        body(comm);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const std::string& e : errors) REQUIRE(e.empty());
}

// max |(M^T M or M M^T) / s^2 - I| for a row-major (rows, cols) M: the smaller side's Gram.
inline double orthogonality_error(const std::vector<float>& m, index_t rows, index_t cols, double s) {
  const bool tall = rows >= cols;
  const index_t k = tall ? cols : rows, l = tall ? rows : cols;
  double worst = 0;
  for (index_t i = 0; i < k; ++i)
    for (index_t j = 0; j < k; ++j) {
      double acc = 0;
      for (index_t t = 0; t < l; ++t) {
        const double a = tall ? m[static_cast<std::size_t>(t * cols + i)] : m[static_cast<std::size_t>(i * cols + t)];
        const double b = tall ? m[static_cast<std::size_t>(t * cols + j)] : m[static_cast<std::size_t>(j * cols + t)];
        acc += a * b;
      }
      worst = std::max(worst, std::abs(acc / (s * s) - (i == j ? 1.0 : 0.0)));
    }
  return worst;
}

}  // namespace megacpp::testing
