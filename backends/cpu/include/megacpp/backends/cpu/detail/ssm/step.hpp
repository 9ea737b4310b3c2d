// CPU backend: one decode step of Mamba-3's recurrence (contract and formulas:
// megacpp/core/kernels/ssm_step.hpp).
//
// Threads own whole (row, head) pairs (parallel_for over batch * heads): the angles, the rotated
// k and q, then every column of the state through the contract's ssm_step_column, then k_prev. One
// thread computes each output in a fixed order, so the results are bitwise the same on every
// thread count, and the same operations as the CUDA kernel's per element.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/kernels/ssm_step.hpp"

namespace megacpp::cpu::ssm {

template <class T>
void decode_step(const kernels::SsmStepParams& p, const kernels::SsmStepArgs<T>& a) {
  const index_t H = p.heads, R = p.rank, N = p.d_state, P = p.head_dim, S = p.angles;
  parallel_for(p.batch * H, 2 * R * N * P, [&](index_t bh) {
    const index_t b = bh / H, h = bh % H;
    std::vector<T> cos_theta(static_cast<std::size_t>(S)), sin_theta(cos_theta.size()),
        k(static_cast<std::size_t>(R * N)), q(k.size());
    for (index_t s = 0; s < S; ++s) {
      T& theta = a.theta[bh * S + s];
      theta = kernels::advance_angle(theta, std::tanh(a.angle[b * S + s]), a.dt[bh]);
      cos_theta[static_cast<std::size_t>(s)] = std::cos(theta);
      sin_theta[static_cast<std::size_t>(s)] = std::sin(theta);
    }
    const index_t group = p.group_offset(b, h);
    for (index_t r = 0; r < R; ++r)
      for (index_t n = 0; n < N; ++n) {
        const index_t i = r * N + n;
        k[static_cast<std::size_t>(i)] = kernels::rotated_element(a.b + group + r * N, a.b_bias + (h * R + r) * N, n, S,
                                                                  cos_theta.data(), sin_theta.data());
        q[static_cast<std::size_t>(i)] = kernels::rotated_element(a.c + group + r * N, a.c_bias + (h * R + r) * N, n, S,
                                                                  cos_theta.data(), sin_theta.data());
      }
    const T alpha = std::exp(a.log_alpha[bh]), beta = a.shift[bh] * alpha;
    for (index_t col = 0; col < P; ++col)
      kernels::ssm_step_column<T>(R, N, P, col, a.state + bh * N * P, a.k_prev + bh * R * N, a.v_prev + bh * R * P,
                                  q.data(), k.data(), a.v + bh * R * P, alpha, beta, a.gamma[bh], a.D[h], a.y + bh * R * P);
    std::copy(k.begin(), k.end(), a.k_prev + bh * R * N);
  });
}

}  // namespace megacpp::cpu::ssm
