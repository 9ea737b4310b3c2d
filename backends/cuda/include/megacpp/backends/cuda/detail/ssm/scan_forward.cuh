// CUDA backend: the SSM scan, part 3 of 4: the forward (equations and design: scan.cuh; passes
// 1 and 2, the states entering the chunks: scan_chunks.cuh).
//
// Pass 3, per (b, h, chunk) block, from E_c, the state entering the chunk, for each token t:
//   phase 1 (thread per state element e = (n, p)): pre_t = E_c at the chunk's first token (0 at a
//            document start), H_{t-1} + shift_t U_{t-1} after it; H_t = alpha_t pre_t + gamma_t U_t
//   barrier
//   phase 2 (thread per output (r, p)): y_{t,r,p} = D_h v_{t,r,p} + sum_n H_t[n, p] q_{t,r,n}, n in
//            order (the order of ssm_reference::recurrence_step)
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

// Phase 2: y rows of token i of chunk c from the block's H_t (state).
template <class T>
MEGACPP_HD void forward_output_phase(const ScanView<T>& s, index_t b, index_t h, const ScanChunk& c, index_t i,
                                     const T* state, T* y, index_t tid, index_t threads) {
  const index_t N = s.sh.d_state, P = s.sh.head_dim, bt = b * s.sh.seq + c.start + i;
  const T* q = s.in.q + s.qk_row(bt, h);
  const T* v = s.in.v + s.vy_row(bt, h);
  const T D = s.in.D ? s.in.D[h] : T(0);
  for (index_t j = tid; j < s.sh.rank * P; j += threads) {
    const index_t r = j / P, p = j % P;
    T acc = D * v[j];
    for (index_t n = 0; n < N; ++n) acc += q[r * N + n] * state[n * P + p];
    y[s.vy_row(bt, h) + j] = acc;
  }
}

// Pass 3: one block per chunk item; entering: (batch, heads, max_chunks, N, P), E_c; scratch:
// (gridDim.x, N, P), the state of each block.
template <class T>
__global__ void scan_forward_kernel(ScanView<T> s, const T* entering, T* y, T* scratch) {
  const index_t tid = threadIdx.x, threads = blockDim.x, NP = s.state_size();
  T* state = scratch + static_cast<index_t>(blockIdx.x) * NP;
  for (index_t item = blockIdx.x; item < s.chunk_items(); item += gridDim.x) {
    const index_t b = item / (s.sh.heads * s.sh.max_chunks), h = item / s.sh.max_chunks % s.sh.heads;
    const ScanChunk c = s.chunk(b, item % s.sh.max_chunks);  // block-uniform: length 0 skips the loop
    for (index_t i = 0; i < c.length; ++i) {
      forward_state_phase(s, b, h, c, i, entering + item * NP, state, tid, threads);
      __syncthreads();
      forward_output_phase(s, b, h, c, i, state, y, tid, threads);
      __syncthreads();
    }
  }
}

}  // namespace megacpp::cuda::ssm
