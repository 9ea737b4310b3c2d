// CUDA backend: the SSM scan, part 4 of 4: the backward (equations and design: scan.cuh; passes
// 1 and 2, the gradients flowing between chunks: scan_chunks.cuh).
//
// Reverse-mode through the recurrence, per (b, h) and token t, with G_t = dL/dH_t and
// A_t = alpha_{t+1} G_{t+1} (0 after a document's last token):
//
//   G_t        = A_t + sum_r q_{t,r} dy_{t,r}^T                      (N, P)
//   dU_t       = gamma_t G_t + shift_{t+1} A_t                         (shift_{t+1}: 0 after the document)
//   dq_{t,r,n} = sum_p H_t[n, p] dy_{t,r,p}       dk_{t,r,n} = sum_p dU_t[n, p] v_{t,r,p}
//   dv_{t,r,p} = sum_n dU_t[n, p] k_{t,r,n} + D_h dy_{t,r,p}
//   dgamma_t   = <G_t, U_t>;  and where t does not start a document:
//   dlog_alpha_t = alpha_t <G_t, pre_t>,  dshift_t = alpha_t <G_t, U_{t-1}>,  A_{t-1} = alpha_t G_t
//   dD_h       = sum_{b,t,r,p} dy_{t,r,p} v_{t,r,p}
//
// Passes 1 and 2 (scan_chunks.cuh) give X_c, the A_t at every chunk's last token. Pass 3, per
// (b, h, chunk) block, starting from A = X_c:
//   phase 0 (thread per state element): H_t of the chunk's tokens recomputed from E_c, the saved
//            state entering it, by the forward's own functions (entering_state, next_state), into
//            scratch
//   then per token, last to first:
//   phase 1 (thread per state element e = (n, p)): G_t, dU_t (to scratch), A_{t-1} (in place) and
//            the thread's partial sums of the three per-token scalars; barrier; block_sum of each
//   phase 2 (work item per run of terms, SumSplit of scan.cuh): the runs' parts of dq, dk (sums
//            over p) and dv (over n), each run in order; barrier
//   phase 3 (thread per (r, n) and per (r, p)): dq, dk, dv from the parts in run order (with one
//            run: the whole sum in order); thread 0 adds the scalars; barrier
// Every gradient of a token is added by its chunk's block alone: the terms that reach across a
// chunk boundary (shift_{t+1} A_t at the last token; pre_t = E_c and U_{t-1} in dlog_alpha and
// dshift at the first) only read the neighbour's inputs or the carried X_c and E_c.
// dD: each block's dy . v over its chunk, block_sum'd into (batch, heads, max_chunks) scratch, then
// one thread per head adds them in (b, chunk) order.
//
// Scratch (values; N P = 8192, chunk 64, 16 heads, one row of T = 64K tokens: 1024 chunks):
//   flows   (batch, heads, max_chunks, N, P): M_c, then X_c: 128 M values, 512 MB in float
//   decay, dD parts (batch, heads, max_chunks)
//   per block (min(chunk items, kBackwardChunkBlocks), L + 2, N, P) = the chunk's states, A and
//           dU, L = min(chunk_size, seq): at most 264 (L + 2) N P = 143 M values, 571 MB in float
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include "megacpp/backends/cuda/detail/block_reduce.cuh"
#include "megacpp/backends/cuda/detail/ssm/scan.cuh"
#include "megacpp/backends/cuda/detail/ssm/scan_chunks.cuh"

namespace megacpp::cuda::ssm {

// What the backward reads and writes besides the forward's view.
template <class T>
struct ScanBackwardArgs {
  const T* dy = nullptr;            // (batch, seq, heads, R, P)
  const T* chunk_states = nullptr;  // (batch, heads, max_chunks, N, P): the forward's
  kernels::ScanGradients<T> grads;  // each may be null
  const T* carried = nullptr;       // (batch, heads, max_chunks, N, P): X_c, from scan_chunks.cuh
  T* dD_parts = nullptr;            // (batch, heads, max_chunks) scratch: each chunk's dD, when grads.D is set
};

// Per-token sums over the state's (n, p): one thread's partial sums, then the block's totals.
template <class T>
struct TokenSums {
  T dlog_alpha = T(0);  // <G_t, pre_t>, before the factor alpha_t
  T dgamma = T(0);      // <G_t, U_t>
  T dshift = T(0);      // <G_t, U_{t-1}>, before the factor alpha_t
};

// Phase 0: Hc[i] = H_t for the chunk's tokens (Hc: (L, N, P)) from S, the saved state entering
// chunk c (not read at a document's first chunk); A = X, the gradient carried into the chunk's
// last token (0 after a document's last chunk).
template <class T>
MEGACPP_HD void backward_recompute_phase(const ScanView<T>& s, index_t b, index_t h, const ScanChunk& c, const T* S,
                                         const T* X, T* Hc, T* A, index_t tid, index_t threads) {
  const index_t P = s.sh.head_dim, NP = s.state_size(), bt0 = b * s.sh.seq + c.start;
  for (index_t e = tid; e < NP; e += threads) {
    const index_t n = e / P, p = e % P;
    const T entering = c.first_in_doc ? T(0) : S[e];  // S is not read at a document's first chunk
    T state = T(0);
    for (index_t i = 0; i < c.length; ++i) {
      state = chunk_token_state(s, bt0, h, c, i, state, entering, n, p);
      Hc[i * NP + e] = state;
    }
    A[e] = X[e];
  }
}

// Phase 1 for token i of chunk c: G_t from A (which becomes A_{t-1}), dU_t into dU, and this
// thread's partial TokenSums.
template <class T>
MEGACPP_HD TokenSums<T> backward_state_phase(const ScanView<T>& s, const ScanBackwardArgs<T>& a, index_t b, index_t h,
                                             const ScanChunk& c, index_t i, const T* S, const T* Hc, T* A, T* dU,
                                             index_t tid, index_t threads) {
  using std::exp;
  const index_t N = s.sh.d_state, P = s.sh.head_dim, NP = s.state_size(), bt = b * s.sh.seq + c.start + i;
  const bool doc_start = i == 0 && c.first_in_doc, has_next = i + 1 < c.length || !c.last_in_doc;
  const T* q = s.in.q + s.qk_row(bt, h);
  const T* dy = a.dy + s.vy_row(bt, h);
  const T gamma = s.in.gamma[s.scalar(bt, h)];
  const T shift_next = has_next && s.in.shift ? s.in.shift[s.scalar(bt + 1, h)] : T(0);
  const T alpha = doc_start ? T(0) : exp(s.in.log_alpha[s.scalar(bt, h)]);
  TokenSums<T> part;
  for (index_t e = tid; e < NP; e += threads) {
    const index_t n = e / P, p = e % P;
    const T carried = A[e];
    T G = carried;
    for (index_t r = 0; r < s.sh.rank; ++r) G += q[r * N + n] * dy[r * P + p];
    dU[e] = gamma * G + shift_next * carried;
    part.dgamma += G * rank_input(s, bt, h, n, p);
    if (!doc_start) {
      const T pre = i == 0 ? S[e] : entering_state(s, bt, h, Hc[(i - 1) * NP + e], n, p);
      part.dlog_alpha += G * pre;
      if (a.grads.shift) part.dshift += G * rank_input(s, bt - 1, h, n, p);
    }
    A[e] = doc_start ? T(0) : alpha * G;  // nothing flows into the previous document
  }
  return part;
}

// The splits of a token's dq and dk sums (R N outputs of P terms each) and dv sums (R P outputs of
// N terms): SumSplit of scan.cuh. Their runs' parts sit at partials[0, kThreads) (dq),
// [kThreads, 2 kThreads) (dk) and [2 kThreads, 3 kThreads) (dv).
struct BackwardSplits {
  SumSplit qk, v;
};

template <class T>
MEGACPP_HD BackwardSplits backward_output_splits(const ScanView<T>& s, index_t threads) {
  const index_t N = s.sh.d_state, P = s.sh.head_dim, R = s.sh.rank;
  return {split_sums(R * N, P, threads), split_sums(R * P, N, threads)};
}

// The row of token i of chunk c and its operands as the output phases read them.
template <class T>
struct TokenRows {
  index_t bt;
  const T *k, *v, *dy, *H;
};

template <class T>
MEGACPP_HD TokenRows<T> token_rows(const ScanView<T>& s, const ScanBackwardArgs<T>& a, index_t b, index_t h,
                                   const ScanChunk& c, index_t i, const T* Hc) {
  const index_t bt = b * s.sh.seq + c.start + i;
  return {bt, s.in.k + s.qk_row(bt, h), s.in.v + s.vy_row(bt, h), a.dy + s.vy_row(bt, h), Hc + i * s.state_size()};
}

// Phase 2 for token i of chunk c: the runs' parts of dq (sum_p H dy), dk (sum_p dU v) and dv
// (sum_n dU k) into partials, for the gradients asked for (nothing for a sum of one run).
template <class T>
MEGACPP_HD void backward_partials_phase(const ScanView<T>& s, const ScanBackwardArgs<T>& a, index_t b, index_t h,
                                        const ScanChunk& c, index_t i, const T* Hc, const T* dU, T* partials,
                                        index_t tid, index_t threads) {
  const index_t N = s.sh.d_state, P = s.sh.head_dim;
  const BackwardSplits split = backward_output_splits(s, threads);
  const TokenRows<T> t = token_rows(s, a, b, h, c, i, Hc);
  const index_t nq = a.grads.q ? split.qk.items() : 0, nk = a.grads.k ? split.qk.items() : 0;
  const index_t nv = a.grads.v ? split.v.items() : 0;
  for (index_t w = tid; w < nq + nk + nv; w += threads) {
    if (w < nq + nk) {  // dq or dk: output j = (r, n), a run of p
      const bool is_q = w < nq;
      const index_t item = is_q ? w : w - nq, j = item % split.qk.outputs, run = item / split.qk.outputs;
      const index_t r = j / N, n = j % N, p0 = split.qk.begin(run), p1 = split.qk.end(run);
      partials[(is_q ? 0 : kThreads) + item] =
          is_q ? state_row_dot(t.H, P, n, t.dy + r * P, p0, p1, T(0)) : state_row_dot(dU, P, n, t.v + r * P, p0, p1, T(0));
    } else {  // dv: output j = (r, p), a run of n
      const index_t item = w - nq - nk, j = item % split.v.outputs, run = item / split.v.outputs;
      partials[2 * kThreads + item] =
          state_column_dot(dU, P, j % P, t.k + j / P * N, split.v.begin(run), split.v.end(run), T(0));
    }
  }
}

// Phase 3 for token i of chunk c: dq, dk, dv rows (from the runs' parts, or with one run the whole
// sum in order), dD's partial (this thread's (r, p) columns), and, on thread 0, the per-token
// scalars from the block's totals.
template <class T>
MEGACPP_HD void backward_output_phase(const ScanView<T>& s, const ScanBackwardArgs<T>& a, index_t b, index_t h,
                                      const ScanChunk& c, index_t i, const T* Hc, const T* dU, const T* partials,
                                      const TokenSums<T>& total, T& dD_partial, index_t tid, index_t threads) {
  using std::exp;
  const index_t N = s.sh.d_state, P = s.sh.head_dim;
  const kernels::ScanGradients<T>& g = a.grads;
  const BackwardSplits split = backward_output_splits(s, threads);
  const TokenRows<T> t = token_rows(s, a, b, h, c, i, Hc);
  if (g.q || g.k)
    for (index_t j = tid; j < split.qk.outputs; j += threads) {
      const index_t r = j / N, n = j % N, at = s.dqk_row(t.bt, h) + j;
      const bool whole = split.qk.slices == 1;
      if (g.q) g.q[at] += whole ? state_row_dot(t.H, P, n, t.dy + r * P, 0, P, T(0)) : add_runs(split.qk, partials, j, T(0));
      if (g.k)
        g.k[at] += whole ? state_row_dot(dU, P, n, t.v + r * P, 0, P, T(0)) : add_runs(split.qk, partials + kThreads, j, T(0));
    }
  const T D = s.in.D ? s.in.D[h] : T(0);
  for (index_t j = tid; j < split.v.outputs; j += threads) {
    if (g.v) {
      const T acc = D * t.dy[j];
      g.v[s.vy_row(t.bt, h) + j] += split.v.slices == 1 ? state_column_dot(dU, P, j % P, t.k + j / P * N, 0, N, acc)
                                                        : add_runs(split.v, partials + 2 * kThreads, j, acc);
    }
    if (g.D) dD_partial += t.dy[j] * t.v[j];
  }
  if (tid == 0) {
    const index_t at = s.scalar(t.bt, h);
    if (g.gamma) g.gamma[at] += total.dgamma;
    if (!(i == 0 && c.first_in_doc)) {  // a document's first log_alpha and shift multiply zero
      const T alpha = exp(s.in.log_alpha[at]);
      if (g.log_alpha) g.log_alpha[at] += alpha * total.dlog_alpha;
      if (g.shift) g.shift[at] += alpha * total.dshift;
    }
  }
}

// Pass 3: one block per chunk item; scratch per block: (chunk_rows + 2, N, P) = Hc, A, dU.
template <class T>
__global__ void scan_backward_kernel(ScanView<T> s, ScanBackwardArgs<T> a, T* scratch, index_t chunk_rows) {
  __shared__ T partials[3 * kThreads];  // the runs of dq's, dk's and dv's sums (BackwardSplits)
  const index_t tid = threadIdx.x, threads = blockDim.x, NP = s.state_size();
  T* Hc = scratch + static_cast<index_t>(blockIdx.x) * (chunk_rows + 2) * NP;
  T* A = Hc + chunk_rows * NP;
  T* dU = A + NP;
  for (index_t item = blockIdx.x; item < s.chunk_items(); item += gridDim.x) {
    const index_t b = item / (s.sh.heads * s.sh.max_chunks), h = item / s.sh.max_chunks % s.sh.heads;
    const ScanChunk c = s.chunk(b, item % s.sh.max_chunks);  // block-uniform: length 0 skips the work
    T dD_partial = T(0);
    if (c.length > 0) {
      backward_recompute_phase(s, b, h, c, a.chunk_states + item * NP, a.carried + item * NP, Hc, A, tid, threads);
      __syncthreads();
    }
    for (index_t i = c.length - 1; i >= 0; --i) {
      const TokenSums<T> part =
          backward_state_phase(s, a, b, h, c, i, a.chunk_states + item * NP, Hc, A, dU, tid, threads);
      __syncthreads();
      // Block-uniform conditions: every thread reaches the same block_sum calls.
      TokenSums<T> total;
      if (a.grads.gamma) total.dgamma = block_sum(part.dgamma);
      if (!(i == 0 && c.first_in_doc)) {
        if (a.grads.log_alpha) total.dlog_alpha = block_sum(part.dlog_alpha);
        if (a.grads.shift) total.dshift = block_sum(part.dshift);
      }
      backward_partials_phase(s, a, b, h, c, i, Hc, dU, partials, tid, threads);
      __syncthreads();
      backward_output_phase(s, a, b, h, c, i, Hc, dU, partials, total, dD_partial, tid, threads);
      __syncthreads();  // the next token's phase 1 overwrites dU
    }
    if (a.grads.D) {
      const T dD = block_sum(dD_partial);  // 0 for a chunk past the row's last
      if (tid == 0) a.dD_parts[item] = dD;
    }
  }
}

// dD[h] += sum_{b, ci} dD_parts[b, h, ci], b then ci in order: one thread per head.
template <class T>
__global__ void scan_dD_kernel(index_t batch, index_t heads, index_t max_chunks, const T* dD_parts, T* dD) {
  for (index_t h = global_thread(); h < heads; h += grid_stride()) {
    T acc = dD[h];
    for (index_t b = 0; b < batch; ++b)
      for (index_t ci = 0; ci < max_chunks; ++ci) acc += dD_parts[(b * heads + h) * max_chunks + ci];
    dD[h] = acc;
  }
}

}  // namespace megacpp::cuda::ssm
