// megacpp/eval/pass_at_k.hpp: the unbiased pass@k estimator of execution-based code evaluation.
//
// Chen et al. 2021, "Evaluating Large Language Models Trained on Code" (arXiv:2107.03374), sec. 2.1:
// with n samples of a problem of which c pass its tests, the probability that at least one of k
// samples drawn without replacement passes is
//
//   pass@k = 1 - C(n - c, k) / C(n, k)
//
// The binomials overflow for the n of real runs, so, as the paper's numpy snippet does, the ratio
// is computed as the product
//
//   C(n - c, k) / C(n, k) = prod_{i = n - c + 1}^{n} (1 - k / i)
//
// which is exact in real arithmetic and stays in [0, 1] term by term. When n - c < k every draw of
// k samples contains a passing one, so pass@k = 1. The benchmark score is the mean over problems.
#pragma once

#include <cstdint>
#include <vector>

#include "megacpp/core/error.hpp"

namespace megacpp::eval {

/// pass@k of one problem with `n` samples of which `c` passed (Chen et al. 2021, eq. 1, as the
/// stable product above). Throws unless 0 <= c <= n and 1 <= k <= n.
inline double pass_at_k(std::int64_t n, std::int64_t c, std::int64_t k) {
  check(n >= 1, "pass_at_k", "needs at least one sample, got n = ", n);
  check(c >= 0 && c <= n, "pass_at_k", "passing samples c = ", c, " is outside [0, n = ", n, "]");
  check(k >= 1 && k <= n, "pass_at_k", "k = ", k, " is outside [1, n = ", n, "]: pass@k needs n >= k samples");
  if (n - c < k) return 1.0;
  double none_pass = 1.0;  // C(n - c, k) / C(n, k)
  for (std::int64_t i = n - c + 1; i <= n; ++i) none_pass *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - none_pass;
}

/// The reference pass@k straight from the binomials, C(n - c, k) / C(n, k) as a product of
/// ratios of falling factorials; for tests of pass_at_k (same preconditions).
inline double pass_at_k_binomial(std::int64_t n, std::int64_t c, std::int64_t k) {
  check(n >= 1 && c >= 0 && c <= n && k >= 1 && k <= n, "pass_at_k_binomial", "needs 0 <= c <= n and 1 <= k <= n, got n = ",
        n, ", c = ", c, ", k = ", k);
  if (n - c < k) return 1.0;
  // C(n - c, k) / C(n, k) = [(n - c)! / (n - c - k)!] / [n! / (n - k)!]
  double ratio = 1.0;
  for (std::int64_t j = 0; j < k; ++j) ratio *= static_cast<double>(n - c - j) / static_cast<double>(n - j);
  return 1.0 - ratio;
}

/// The k a benchmark can report: every k of {1, 2, 5, 10, 20, 50, 100} not above the smallest
/// sample count of any problem (human-eval reports pass@k only where every problem has n >= k).
inline std::vector<std::int64_t> reportable_ks(std::int64_t min_samples) {
  std::vector<std::int64_t> ks;
  for (const std::int64_t k : {1, 2, 5, 10, 20, 50, 100})
    if (k <= min_samples) ks.push_back(k);
  return ks;
}

}  // namespace megacpp::eval
