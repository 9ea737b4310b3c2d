// CUDA backend: the SSM scan, part 3 of 4: the forward (equations and design: scan.cuh; passes
// 1 and 2, the states entering the chunks: scan_chunks.cuh).
//
// Pass 3, per (b, h, chunk) block, from E_c, the state entering the chunk, for each token t:
//   phase 1 (thread per state element e = (n, p)): pre_t = E_c at the chunk's first token (0 at a
//            document start), H_{t-1} + shift_t U_{t-1} after it; H_t = alpha_t pre_t + gamma_t U_t
//   barrier
//   phase 2 (work item per run of n of an output (r, p), SumSplit of scan.cuh): the run's part of
//            sum_n H_t[n, p] q_{t,r,n}, n in order, into the block's partials
//   barrier
//   phase 3 (thread per output): y_{t,r,p} = D_h v_{t,r,p} + the runs' parts in run order (with
//            one run: the whole sum, n in order, as ssm_reference::recurrence_step adds it)
//   barrier (phase 1 of the next token overwrites H)
//
// Scratch (values; N P = 8192, chunk 64, 16 heads, one row of T = 64K tokens: 1024 chunks):
//   states  (batch, heads, max_chunks, N, P): the locals L_c, then E_c; only when the caller passes
//           no chunk_states (else they are built in place there): 128 M values, 512 MB in float
//   decay   (batch, heads, max_chunks): A_c
//   block H (min(chunk items, kForwardChunkBlocks), N, P): 3.2 M values, 13 MB in float
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include "megacpp/backends/cuda/detail/ssm/scan.cuh"
#include "megacpp/backends/cuda/detail/ssm/scan_chunks.cuh"

namespace megacpp::cuda::ssm {

// Phase 1 for thread `tid` of `threads`: token i of chunk c of row b, head h. entering: (N, P),
// E_c; state: (N, P), the block's H.
template <class T>
MEGACPP_HD void forward_state_phase(const ScanView<T>& s, index_t b, index_t h, const ScanChunk& c, index_t i,
                                    const T* entering, T* state, index_t tid, index_t threads) {
  const index_t P = s.sh.head_dim, bt0 = b * s.sh.seq + c.start;
  for (index_t e = tid; e < s.state_size(); e += threads) {
    const index_t n = e / P, p = e % P;
    state[e] = chunk_token_state(s, bt0, h, c, i, state[e], i == 0 ? entering[e] : T(0), n, p);
  }
}

// The split of y's sums over n: R P outputs of N terms.
template <class T>
MEGACPP_HD SumSplit forward_output_split(const ScanView<T>& s, index_t threads) {
  return split_sums(s.sh.rank * s.sh.head_dim, s.sh.d_state, threads);
}

// Phase 2: the runs of y's sums for token i of chunk c into partials (nothing with one run).
template <class T>
MEGACPP_HD void forward_partials_phase(const ScanView<T>& s, index_t b, index_t h, const ScanChunk& c, index_t i,
                                       const T* state, T* partials, index_t tid, index_t threads) {
  const SumSplit split = forward_output_split(s, threads);
  const index_t N = s.sh.d_state, P = s.sh.head_dim;
  const T* q = s.in.q + s.qk_row(b * s.sh.seq + c.start + i, h);
  for (index_t w = tid; w < split.items(); w += threads) {
    const index_t j = w % split.outputs, run = w / split.outputs;
    partials[w] = state_column_dot(state, P, j % P, q + j / P * N, split.begin(run), split.end(run), T(0));
  }
}

// Phase 3: y rows of token i of chunk c from the runs' parts (or, with one run, from the block's
// H_t directly).
template <class T>
MEGACPP_HD void forward_output_phase(const ScanView<T>& s, index_t b, index_t h, const ScanChunk& c, index_t i,
                                     const T* state, const T* partials, T* y, index_t tid, index_t threads) {
  const SumSplit split = forward_output_split(s, threads);
  const index_t N = s.sh.d_state, P = s.sh.head_dim, bt = b * s.sh.seq + c.start + i;
  const T* q = s.in.q + s.qk_row(bt, h);
  const T* v = s.in.v + s.vy_row(bt, h);
  const T D = s.in.D ? s.in.D[h] : T(0);
  for (index_t j = tid; j < split.outputs; j += threads) {
    const T acc = D * v[j];
    y[s.vy_row(bt, h) + j] = split.slices == 1 ? state_column_dot(state, P, j % P, q + j / P * N, 0, N, acc)
                                               : add_runs(split, partials, j, acc);
  }
}

// Pass 3: one block per chunk item; entering: (batch, heads, max_chunks, N, P), E_c; scratch:
// (gridDim.x, N, P), the state of each block.
template <class T>
__global__ void scan_forward_kernel(ScanView<T> s, const T* entering, T* y, T* scratch) {
  __shared__ T partials[kThreads];  // the runs of y's sums (SumSplit: at most kThreads work items)
  const index_t tid = threadIdx.x, threads = blockDim.x, NP = s.state_size();
  T* state = scratch + static_cast<index_t>(blockIdx.x) * NP;
  for (index_t item = blockIdx.x; item < s.chunk_items(); item += gridDim.x) {
    const index_t b = item / (s.sh.heads * s.sh.max_chunks), h = item / s.sh.max_chunks % s.sh.heads;
    const ScanChunk c = s.chunk(b, item % s.sh.max_chunks);  // block-uniform: length 0 skips the loop
    for (index_t i = 0; i < c.length; ++i) {
      forward_state_phase(s, b, h, c, i, entering + item * NP, state, tid, threads);
      __syncthreads();
      forward_partials_phase(s, b, h, c, i, state, partials, tid, threads);
      __syncthreads();
      forward_output_phase(s, b, h, c, i, state, partials, y, tid, threads);
      __syncthreads();
    }
  }
}

}  // namespace megacpp::cuda::ssm
