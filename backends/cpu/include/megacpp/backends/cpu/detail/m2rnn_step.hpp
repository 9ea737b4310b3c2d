// CPU backend: one decode step of the M2RNN recurrence (contract and formulas:
// megacpp/core/kernels/m2rnn_step.hpp).
//
// Threads own whole (row, head) pairs (parallel_for over batch * heads). Row i of the new state
// is computed into a scratch row from row i of the old one (kernels::m2rnn_state_element), then
// copied over it; y from the new state (kernels::m2rnn_readout). One thread computes each output
// in a fixed order, so the results are bitwise the same on every thread count, and the same
// operations as the CUDA kernel's per element.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <vector>

#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/kernels/m2rnn_step.hpp"

namespace megacpp::cpu::m2rnn {

template <class T>
void decode_step(const kernels::M2RNNStepParams& p, const kernels::M2RNNStepArgs<T>& a) {
  const index_t H = p.heads, K = p.k_dim, V = p.v_dim;
  parallel_for(p.batch * H, 2 * K * V * V, [&](index_t bh) {
    const index_t h = bh % H;
    const T *q = a.q + bh * K, *k = a.k + bh * K, *v = a.v + bh * V, *W = a.W + h * V * V;
    const T f = a.f[bh];
    T* state = a.state + bh * K * V;
    std::vector<T> row(static_cast<std::size_t>(V));
    for (index_t i = 0; i < K; ++i) {
      T* h_row = state + i * V;
      for (index_t c = 0; c < V; ++c)
        row[static_cast<std::size_t>(c)] = kernels::m2rnn_state_element<T>(V, h_row, W, k[i], v, f, c);
      std::copy(row.begin(), row.end(), h_row);
    }
    for (index_t c = 0; c < V; ++c) a.y[bh * V + c] = kernels::m2rnn_readout<T>(K, V, state, q, c);
  });
}

}  // namespace megacpp::cpu::m2rnn
