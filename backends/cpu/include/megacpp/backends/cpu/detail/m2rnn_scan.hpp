// CPU backend: the M2RNN training recurrence and its backward (contract and formulas:
// megacpp/core/kernels/m2rnn_scan.hpp).
//
// Threads own whole (row, head) pairs (parallel_for over batch * heads), tokens in order. The
// forward's inner loops run over a state row's columns innermost so that the compiler vectorizes
// them (bench/m2rnn); each element still takes the contract's operations in its order
// (kernels::m2rnn_state_element; the compiler may fuse its multiply-adds differently in vector
// code, an ulp apart from the CUDA kernel's and the decode step's). dW is summed per (row, head),
// then over rows in row order: bitwise the same on every thread count.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "megacpp/backends/cpu/detail/parallel.hpp"
#include "megacpp/core/kernels/m2rnn_scan.hpp"

namespace megacpp::cpu::m2rnn {

// One token for one head: state (K, V) advances in place, y (V) = H_t^T q. `row` is V of scratch.
template <class T>
void recurrence_step(index_t K, index_t V, T* state, const T* q, const T* k, const T* v, T f, const T* W, T* y, T* row) {
  for (index_t i = 0; i < K; ++i) {
    T* h = state + i * V;  // row i of H_{t-1}: row i of A needs only this row
    for (index_t b = 0; b < V; ++b) row[b] = k[i] * v[b];
    for (index_t a = 0; a < V; ++a) {
      const T ha = h[a];
      const T* wa = W + a * V;
      for (index_t b = 0; b < V; ++b) row[b] += ha * wa[b];
    }
    for (index_t b = 0; b < V; ++b) h[b] = f * h[b] + (T(1) - f) * std::tanh(row[b]);
  }
  if (y == nullptr) return;
  for (index_t b = 0; b < V; ++b) y[b] = T(0);
  for (index_t i = 0; i < K; ++i) {
    const T qi = q[i];
    const T* h = state + i * V;
    for (index_t b = 0; b < V; ++b) y[b] += qi * h[b];
  }
}

template <class T>
void scan_forward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids, const kernels::M2RNNScanOperands<T>& in,
                  T* y, T* checkpoints) {
  const index_t H = p.heads, K = p.k_dim, V = p.v_dim;
  parallel_for(p.batch * H, p.seq * 2 * K * V * V, [&](index_t item) {
    const index_t b = item / H, h = item % H;
    std::vector<T> state(static_cast<std::size_t>(K * V)), row(static_cast<std::size_t>(V));
    for (index_t t = 0; t < p.seq; ++t) {
      if (checkpoints && t % p.checkpoint_every == 0)
        std::copy(state.begin(), state.end(), checkpoints + (item * p.chunks() + t / p.checkpoint_every) * K * V);
      if (kernels::starts_document(doc_ids + b * p.seq, t)) std::fill(state.begin(), state.end(), T(0));
      const index_t bth = (b * p.seq + t) * H + h;
      recurrence_step<T>(K, V, state.data(), in.q + bth * K, in.k + bth * K, in.v + bth * V, in.f[bth],
                         in.W + h * V * V, y + bth * V, row.data());
    }
  });
}

// The backward of one (row, head) `item`: adds into the gradients of q, k, v, f that are not null;
// dW_item (V, V; zeroed), when not null, receives the item's dW.
template <class T>
void scan_backward_item(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids,
                        const kernels::M2RNNScanOperands<T>& in, const T* checkpoints, const T* dy,
                        const kernels::M2RNNScanGradients<T>& grads, index_t item, T* dW_item) {
  const index_t H = p.heads, K = p.k_dim, V = p.v_dim, C = p.checkpoint_every;
  const index_t b = item / H, h = item % H;
  const std::int32_t* row_ids = doc_ids + b * p.seq;
  const T* W = in.W + h * V * V;
  const T clip = static_cast<T>(p.gradient_clipping);
  const auto n = [](index_t e) { return static_cast<std::size_t>(e); };
  std::vector<T> G(n(K * V), T(0)), G_prev(G.size()), dA(G.size()), zero(G.size(), T(0)), Z(n(V)), dv(n(V)),
      chunk_states(n(std::min(C, p.seq) * K * V));  // H_t for the chunk's tokens
  for (index_t t = p.seq - 1; t >= 0; --t) {
    const index_t t0 = t - t % C;
    const T* entering = checkpoints + (item * p.chunks() + t0 / C) * K * V;  // H_{t0 - 1}
    if (t == p.seq - 1 || t % C == C - 1) {
      // recompute the chunk's states from its checkpoint, with the forward's resets
      std::copy(entering, entering + K * V, chunk_states.begin());
      for (index_t s = t0; s <= t; ++s) {
        T* Hs = chunk_states.data() + (s - t0) * K * V;
        if (s > t0) std::copy(Hs - K * V, Hs, Hs);
        if (kernels::starts_document(row_ids, s)) std::fill(Hs, Hs + K * V, T(0));
        const index_t bsh = (b * p.seq + s) * H + h;
        recurrence_step<T>(K, V, Hs, in.q + bsh * K, in.k + bsh * K, in.v + bsh * V, in.f[bsh], W, nullptr, Z.data());
      }
    }
    const bool first = kernels::starts_document(row_ids, t);
    const index_t bth = (b * p.seq + t) * H + h;
    const T* Ht = chunk_states.data() + (t - t0) * K * V;
    const T* Hp = first ? zero.data() : (t == t0 ? entering : Ht - K * V);  // H_{t-1}
    const T* dyt = dy + bth * V;
    const T *qt = in.q + bth * K, *kt = in.k + bth * K, *vt = in.v + bth * V;
    const T ft = in.f[bth];
    T dft = 0;
    for (index_t i = 0; i < K; ++i) {
      const T* hi = Ht + i * V;
      T* Gi = G.data() + i * V;
      T dqi = 0;
      for (index_t c = 0; c < V; ++c) {
        dqi += hi[c] * dyt[c];
        Gi[c] += qt[i] * dyt[c];
        if (clip > T(0)) Gi[c] = std::clamp(Gi[c], -clip, clip);
      }
      if (grads.q) grads.q[bth * K + i] += dqi;
      // Z row i from H_{t-1} row i, then dA row i
      const T* hp = Hp + i * V;
      for (index_t c = 0; c < V; ++c) Z[n(c)] = kt[i] * vt[c];
      for (index_t a = 0; a < V; ++a) {
        const T ha = hp[a];
        const T* wa = W + a * V;
        for (index_t c = 0; c < V; ++c) Z[n(c)] += ha * wa[c];
      }
      T* dAi = dA.data() + i * V;
      T df_row = 0;
      for (index_t c = 0; c < V; ++c) {
        const T z = std::tanh(Z[n(c)]);
        df_row += Gi[c] * (hp[c] - z);
        dAi[c] = (T(1) - ft) * Gi[c] * (T(1) - z * z);
      }
      dft += df_row;
    }
    if (grads.f) grads.f[bth] += dft;
    // dk = dA v, dv = dA^T k, dW += H_{t-1}^T dA, G_{t-1} = f G + dA W^T
    std::fill(dv.begin(), dv.end(), T(0));
    for (index_t i = 0; i < K; ++i) {
      const T* dAi = dA.data() + i * V;
      const T* hp = Hp + i * V;
      T dki = 0;
      for (index_t c = 0; c < V; ++c) {
        dki += dAi[c] * vt[c];
        dv[n(c)] += dAi[c] * kt[i];
      }
      if (grads.k) grads.k[bth * K + i] += dki;
      if (!first && dW_item)
        for (index_t a = 0; a < V; ++a) {
          const T ha = hp[a];
          T* dWa = dW_item + a * V;
          for (index_t c = 0; c < V; ++c) dWa[c] += ha * dAi[c];
        }
      T* Gp = G_prev.data() + i * V;
      const T* Gi = G.data() + i * V;
      for (index_t a = 0; a < V; ++a) {
        const T* wa = W + a * V;
        T acc = ft * Gi[a];
        for (index_t c = 0; c < V; ++c) acc += dAi[c] * wa[c];
        Gp[a] = acc;
      }
    }
    if (grads.v)
      for (index_t c = 0; c < V; ++c) grads.v[bth * V + c] += dv[n(c)];
    if (first) std::fill(G.begin(), G.end(), T(0));  // nothing flows into the previous document
    else G.swap(G_prev);
  }
}

template <class T>
void scan_backward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids,
                   const kernels::M2RNNScanOperands<T>& in, const T* dy, const T* checkpoints,
                   const kernels::M2RNNScanGradients<T>& grads) {
  const index_t H = p.heads, V = p.v_dim, items = p.batch * H;
  std::vector<T> dW_items(grads.W ? static_cast<std::size_t>(items * V * V) : 0, T(0));
  parallel_for(items, p.seq * 6 * p.k_dim * V * V, [&](index_t item) {
    scan_backward_item<T>(p, doc_ids, in, checkpoints, dy, grads, item,
                          grads.W ? dW_items.data() + item * V * V : nullptr);
  });
  if (!grads.W) return;
  // dW[h, e] += (((0 + row 0's) + row 1's) + ...): the rows' sum first, as the CUDA kernel adds it
  for (index_t h = 0; h < H; ++h)
    for (index_t e = 0; e < V * V; ++e) {
      T sum = 0;
      for (index_t b = 0; b < p.batch; ++b) sum += dW_items[static_cast<std::size_t>((b * H + h) * V * V + e)];
      grads.W[h * V * V + e] += sum;
    }
}

}  // namespace megacpp::cpu::m2rnn
