// CUDA backend: the M2RNN training recurrence and its backward (contract, formulas and the order
// of every sum: megacpp/core/kernels/m2rnn_scan.hpp; CPU kernel: cpu/detail/m2rnn_scan.hpp).
//
// The recurrence is sequential in time, so each (row, head) is one block, tokens in order, as the
// CPU gives each one thread; the block's threads split the work of one token:
//   - forward: one thread per state element (i, c) computes H_t[i, c] from row i of H_{t-1}
//     (kernels::m2rnn_state_element), then one thread per column reads out y_c;
//   - backward: per element, the state gradient G, Z and dA; per row i, dq_i, dk_i and the row's
//     part of df; per column, dv_c; per element of W, dW[a, c] over the rows in order; per element,
//     G_{t-1}. Each output is one thread's sum in the CPU's order: the emulation
//     (tests/cuda_emulation) is within an ulp or so of the CPU kernel (the host compiler fuses
//     multiply-adds differently in the CPU's vector loops), the same bits run to run.
// Checkpoints and the recomputed states of a chunk are in global memory; the state (double
// buffered), W, G, G_{t-1}, dA and Z in the block's shared memory when they fit in the 48 KiB a
// launch gets without opting in, else in global scratch, one slice per block (same code, another
// pointer). The rows' dW are summed by sum_rows_kernel in row order. No `<<<>>>` here: launches
// are in m2rnn_scan_launch.cuh, which the emulation mirrors.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>
#include <cstdint>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/m2rnn_scan.hpp"

namespace megacpp::cuda::m2rnn {

inline constexpr int kScanThreads = 256;                  // threads per (row, head): K V = 1024 by default
inline constexpr std::size_t kSharedLimit = 48 * 1024;    // dynamic shared memory without opting in

// Where a block's working arrays sit, in elements from the start of its scratch (shared or global).
struct ScanScratch {
  index_t state = 0, next = 0;                 // forward: H_{t-1} and H_t (K V each)
  index_t G = 0, G_prev = 0, dA = 0, Z = 0;    // backward (K V each)
  index_t W = 0;                               // the head's W (V V)
  index_t zero_row = 0;                        // V zeros: row i of H_{t-1} at a document start
  index_t row_df = 0;                          // backward: each row's part of df (K)
  index_t size = 0;                            // elements in all
  // Not in the scratch above: the states the backward recomputes for one chunk, a global slice
  // per block of min(checkpoint_every, seq) K V elements.
  index_t chunk_states = 0;

  static ScanScratch forward(const kernels::M2RNNScanParams& p) {
    const index_t KV = p.k_dim * p.v_dim;
    ScanScratch s;
    s.state = 0;
    s.next = KV;
    s.W = 2 * KV;
    s.size = 2 * KV + p.v_dim * p.v_dim;
    return s;
  }
  static ScanScratch backward(const kernels::M2RNNScanParams& p) {
    const index_t KV = p.k_dim * p.v_dim;
    ScanScratch s;
    s.G = 0;
    s.G_prev = KV;
    s.dA = 2 * KV;
    s.Z = 3 * KV;
    s.W = 4 * KV;
    s.zero_row = s.W + p.v_dim * p.v_dim;
    s.row_df = s.zero_row + p.v_dim;
    s.size = s.row_df + p.k_dim;
    s.chunk_states = (p.checkpoint_every < p.seq ? p.checkpoint_every : p.seq) * KV;
    return s;
  }
  template <class T>
  std::size_t bytes() const {
    return static_cast<std::size_t>(size) * sizeof(T);
  }
  template <class T>
  bool in_shared() const {
    return bytes<T>() <= kSharedLimit;
  }
};

// The block's scratch: dynamic shared memory, or its slice of `global` (null when in shared).
template <class T>
__device__ T* block_scratch(const ScanScratch& s, T* global) {
  extern __shared__ __align__(16) unsigned char m2rnn_scan_shared[];
  return global ? global + static_cast<index_t>(blockIdx.x) * s.size : reinterpret_cast<T*>(m2rnn_scan_shared);
}

// std::clamp's comparisons, on the device too.
template <class T>
MEGACPP_HD T clamp_gradient(T g, T bound) {
  return g < -bound ? -bound : (bound < g ? bound : g);
}

// y and, when `checkpoints` is not null, the state entering every chunk (before a reset there).
template <class T>
__global__ void __launch_bounds__(kScanThreads)
    scan_forward_kernel(kernels::M2RNNScanParams p, ScanScratch s, const std::int32_t* doc_ids,
                        kernels::M2RNNScanOperands<T> in, T* y, T* checkpoints, T* global_scratch) {
  T* scratch = block_scratch<T>(s, global_scratch);
  const index_t H = p.heads, K = p.k_dim, V = p.v_dim, KV = K * V, C = p.checkpoint_every;
  for (index_t item = blockIdx.x; item < p.batch * H; item += gridDim.x) {
    const index_t b = item / H, h = item % H;
    const std::int32_t* row_ids = doc_ids + b * p.seq;
    T* state = scratch + s.state;
    T* next = scratch + s.next;
    T* W = scratch + s.W;
    __syncthreads();  // the previous item is done with the scratch
    for (index_t e = threadIdx.x; e < V * V; e += blockDim.x) W[e] = in.W[h * V * V + e];
    for (index_t e = threadIdx.x; e < KV; e += blockDim.x) state[e] = T(0);
    for (index_t t = 0; t < p.seq; ++t) {
      __syncthreads();  // the state is whole; the last token's readout is done with it
      if (checkpoints && t % C == 0)
        for (index_t e = threadIdx.x; e < KV; e += blockDim.x)
          checkpoints[(item * p.chunks() + t / C) * KV + e] = state[e];
      if (kernels::starts_document(row_ids, t)) {  // the same for every thread of the block
        for (index_t e = threadIdx.x; e < KV; e += blockDim.x) state[e] = T(0);
        __syncthreads();
      }
      const index_t bth = (b * p.seq + t) * H + h;
      const T *k = in.k + bth * K, *v = in.v + bth * V;
      const T f = in.f[bth];
      for (index_t e = threadIdx.x; e < KV; e += blockDim.x) {
        const index_t i = e / V, c = e % V;
        next[e] = kernels::m2rnn_state_element<T>(V, state + i * V, W, k[i], v, f, c);
      }
      __syncthreads();  // H_t whole
      T* swap = state;
      state = next;
      next = swap;
      for (index_t c = threadIdx.x; c < V; c += blockDim.x)
        y[bth * V + c] = kernels::m2rnn_readout<T>(K, V, state, in.q + bth * K, c);
    }
  }
}

// Recomputes the states H_s of tokens [t0, t] (chunk_states, (t - t0 + 1) K V) from the state
// entering the chunk, with the forward's resets. Ends with the block synchronized.
template <class T>
__device__ void recompute_chunk(const kernels::M2RNNScanParams& p, const std::int32_t* row_ids,
                                const kernels::M2RNNScanOperands<T>& in, index_t b, index_t h, index_t t0, index_t t,
                                const T* entering, const T* W, const T* zero_row, T* chunk_states) {
  const index_t H = p.heads, K = p.k_dim, V = p.v_dim, KV = K * V;
  for (index_t s = t0; s <= t; ++s) {
    T* Hs = chunk_states + (s - t0) * KV;
    const T* prev = s == t0 ? entering : Hs - KV;
    const bool reset = kernels::starts_document(row_ids, s);
    const index_t bsh = (b * p.seq + s) * H + h;
    const T *k = in.k + bsh * K, *v = in.v + bsh * V;
    const T f = in.f[bsh];
    for (index_t e = threadIdx.x; e < KV; e += blockDim.x) {
      const index_t i = e / V, c = e % V;
      Hs[e] = kernels::m2rnn_state_element<T>(V, reset ? zero_row : prev + i * V, W, k[i], v, f, c);
    }
    __syncthreads();  // H_s whole before H_{s+1} reads it (global memory: visible within the block)
  }
}

// Adds dq, dk, dv, df where not null; dW_items (batch * heads, V, V), when not null, receives each
// (row, head)'s dW. chunk_states: ScanScratch::chunk_states elements per block.
template <class T>
__global__ void __launch_bounds__(kScanThreads)
    scan_backward_kernel(kernels::M2RNNScanParams p, ScanScratch s, const std::int32_t* doc_ids,
                         kernels::M2RNNScanOperands<T> in, const T* dy, const T* checkpoints,
                         kernels::M2RNNScanGradients<T> grads, T* dW_items, T* all_chunk_states, T* global_scratch) {
  T* scratch = block_scratch<T>(s, global_scratch);
  const index_t H = p.heads, K = p.k_dim, V = p.v_dim, KV = K * V, C = p.checkpoint_every;
  T* chunk_states = all_chunk_states + static_cast<index_t>(blockIdx.x) * s.chunk_states;
  const T clip = static_cast<T>(p.gradient_clipping);
  T* W = scratch + s.W;
  T* zero_row = scratch + s.zero_row;
  T* dA = scratch + s.dA;
  T* Z = scratch + s.Z;
  T* row_df = scratch + s.row_df;
  for (index_t item = blockIdx.x; item < p.batch * H; item += gridDim.x) {
    const index_t b = item / H, h = item % H;
    const std::int32_t* row_ids = doc_ids + b * p.seq;
    T* G = scratch + s.G;
    T* G_prev = scratch + s.G_prev;
    T* dW = dW_items ? dW_items + item * V * V : nullptr;
    __syncthreads();  // the previous item is done with the scratch
    for (index_t e = threadIdx.x; e < V * V; e += blockDim.x) {
      W[e] = in.W[h * V * V + e];
      if (dW) dW[e] = T(0);
    }
    for (index_t e = threadIdx.x; e < KV; e += blockDim.x) G[e] = T(0);
    for (index_t c = threadIdx.x; c < V; c += blockDim.x) zero_row[c] = T(0);
    __syncthreads();
    for (index_t t = p.seq - 1; t >= 0; --t) {
      const index_t t0 = t - t % C;
      const T* entering = checkpoints + (item * p.chunks() + t0 / C) * KV;  // H_{t0 - 1}
      if (t == p.seq - 1 || t % C == C - 1)
        recompute_chunk<T>(p, row_ids, in, b, h, t0, t, entering, W, zero_row, chunk_states);
      const bool first = kernels::starts_document(row_ids, t);
      const index_t bth = (b * p.seq + t) * H + h;
      const T* Ht = chunk_states + (t - t0) * KV;
      const T* Hp = first ? nullptr : (t == t0 ? entering : Ht - KV);  // H_{t-1}; zeros at a document start
      const T *q = in.q + bth * K, *k = in.k + bth * K, *v = in.v + bth * V, *dyt = dy + bth * V;
      const T f = in.f[bth];
      // per element: G += q dy^T (clamped), Z, dA
      for (index_t e = threadIdx.x; e < KV; e += blockDim.x) {
        const index_t i = e / V, c = e % V;
        T g = G[e];
        g += q[i] * dyt[c];
        if (clip > T(0)) g = clamp_gradient(g, clip);
        G[e] = g;
        using std::tanh;
        const T z = tanh(kernels::m2rnn_preactivation<T>(V, Hp ? Hp + i * V : zero_row, W, k[i], v, c));
        Z[e] = z;
        dA[e] = (T(1) - f) * g * (T(1) - z * z);
      }
      __syncthreads();  // G, Z, dA whole
      // per row: dq, dk and the row's part of df
      for (index_t i = threadIdx.x; i < K; i += blockDim.x) {
        const T* hi = Ht + i * V;
        const T* hp = Hp ? Hp + i * V : zero_row;
        T dqi = 0, df_row = 0, dki = 0;
        for (index_t c = 0; c < V; ++c) {
          dqi += hi[c] * dyt[c];
          df_row += G[i * V + c] * (hp[c] - Z[i * V + c]);
          dki += dA[i * V + c] * v[c];
        }
        if (grads.q) grads.q[bth * K + i] += dqi;
        if (grads.k) grads.k[bth * K + i] += dki;
        row_df[i] = df_row;
      }
      // per column: dv
      if (grads.v)
        for (index_t c = threadIdx.x; c < V; c += blockDim.x) {
          T dvc = 0;
          for (index_t i = 0; i < K; ++i) dvc += dA[i * V + c] * k[i];
          grads.v[bth * V + c] += dvc;
        }
      // per element of W: dW[a, c] += sum_i H_{t-1}[i, a] dA[i, c] (nothing at a document start)
      if (dW && Hp)
        for (index_t e = threadIdx.x; e < V * V; e += blockDim.x) {
          const index_t a = e / V, c = e % V;
          T w = dW[e];
          for (index_t i = 0; i < K; ++i) w += Hp[i * V + a] * dA[i * V + c];
          dW[e] = w;
        }
      // per element: G_{t-1}[i, a] = f G[i, a] + sum_c dA[i, c] W[a, c]
      if (!first)
        for (index_t e = threadIdx.x; e < KV; e += blockDim.x) {
          const index_t i = e / V, a = e % V;
          T acc = f * G[e];
          for (index_t c = 0; c < V; ++c) acc += dA[i * V + c] * W[a * V + c];
          G_prev[e] = acc;
        }
      __syncthreads();  // every row's df part, G_{t-1} whole; G, Z, dA free
      if (threadIdx.x == 0 && grads.f) {
        T df = 0;
        for (index_t i = 0; i < K; ++i) df += row_df[i];
        grads.f[bth] += df;
      }
      if (first) {  // nothing flows into the previous document
        for (index_t e = threadIdx.x; e < KV; e += blockDim.x) G[e] = T(0);
      } else {
        T* swap = G;
        G = G_prev;
        G_prev = swap;
      }
      // The next token's first writes (recompute_chunk's states, G, Z, dA) come after reads of
      // this token's that the barrier above ordered; row_df is next written after the next
      // token's first barrier, which thread 0 reaches after its sum.
    }
  }
}

// dW[h, e] += sum over rows b, in row order, of dW_items[b, h, e].
template <class T>
__global__ void sum_rows_kernel(index_t batch, index_t heads, index_t VV, const T* dW_items, T* dW) {
  for (index_t n = global_thread(); n < heads * VV; n += grid_stride()) {
    const index_t h = n / VV, e = n % VV;
    T sum = 0;
    for (index_t b = 0; b < batch; ++b) sum += dW_items[(b * heads + h) * VV + e];
    dW[n] += sum;
  }
}

}  // namespace megacpp::cuda::m2rnn
