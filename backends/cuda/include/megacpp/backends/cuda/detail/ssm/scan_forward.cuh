// CUDA backend: the SSM scan, part 2 of 3: the forward (equations and design: scan.cuh).
//
// Per (b, h) block, for each chunk of the row's plan in order and each of its tokens t:
//   phase 1 (thread per state element e = (n, p)): pre_t = H_{t-1} + shift_t U_{t-1}, saved at the
//            chunk's first token (0 at a document start); H_t = alpha_t pre_t + gamma_t U_t
//   barrier
//   phase 2 (thread per output (r, p)): y_{t,r,p} = D_h v_{t,r,p} + sum_n H_t[n, p] q_{t,r,n}, n in
//            order (the order of ssm_reference::recurrence_step)
//   barrier (phase 1 of the next token overwrites H)
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include "megacpp/backends/cuda/detail/ssm/scan.cuh"

namespace megacpp::cuda::ssm {

// Phase 1 for thread `tid` of `threads`: token i of chunk c (index ci) of row b, head h. state:
// (N, P), the block's H; saved: (N, P), the state entering the chunk, or null.
template <class T>
MEGACPP_HD void forward_state_phase(const ScanView<T>& s, index_t b, index_t h, const ScanChunk& c, index_t i,
                                    T* state, T* saved, index_t tid, index_t threads) {
  const index_t P = s.sh.head_dim, bt = b * s.sh.seq + c.start + i;
  const bool doc_start = i == 0 && c.first_in_doc;
  for (index_t e = tid; e < s.state_size(); e += threads) {
    const index_t n = e / P, p = e % P;
    const T pre = doc_start ? T(0) : entering_state(s, bt, h, state[e], n, p);
    if (i == 0 && saved) saved[e] = pre;
    state[e] = next_state(s, bt, h, doc_start, pre, n, p);
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

// One block per (b, h) item; scratch: (gridDim.x, N, P), the state of each block.
template <class T>
__global__ void scan_forward_kernel(ScanView<T> s, T* y, T* chunk_states, T* scratch) {
  const index_t tid = threadIdx.x, threads = blockDim.x;
  T* state = scratch + static_cast<index_t>(blockIdx.x) * s.state_size();
  for (index_t item = blockIdx.x; item < s.sh.batch * s.sh.heads; item += gridDim.x) {
    const index_t b = item / s.sh.heads, h = item % s.sh.heads;
    for (index_t ci = 0; ci < s.sh.max_chunks; ++ci) {
      const ScanChunk c = s.chunk(b, ci);
      if (c.length == 0) break;  // past the row's last chunk
      T* saved = chunk_states ? chunk_states + s.saved_state(b, h, ci) : nullptr;
      for (index_t i = 0; i < c.length; ++i) {
        forward_state_phase(s, b, h, c, i, state, saved, tid, threads);
        __syncthreads();
        forward_output_phase(s, b, h, c, i, state, y, tid, threads);
        __syncthreads();
      }
    }
  }
}

// y (batch, seq, heads, R, P) and, when chunk_states is not null, the state entering each chunk
// (batch, heads, max_chunks, N, P); a document's first chunk gets zeros (no state comes in).
template <class T>
void scan_forward(const ScanParams& sh, const std::vector<std::int32_t>& doc_ids_host, const kernels::ScanOperands<T>& in,
                  T* y, T* chunk_states) {
  const std::vector<ScanChunk> plan = plan_scan("SsmScan<Cuda>::forward", sh, doc_ids_host);
  const index_t items = sh.batch * sh.heads;
  if (items == 0 || sh.seq == 0) return;
  const DeviceChunks chunks(plan);
  const index_t blocks = items < kScanBlocks ? items : kScanBlocks;
  const ScanScratch<T> scratch(static_cast<std::size_t>(blocks * sh.d_state * sh.head_dim));
  const ScanView<T> s{sh, in, chunks.device.get()};
  scan_forward_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, kStream>>>(s, y, chunk_states, scratch.get());
  MEGACPP_CUDA_CHECK_LAUNCH(scan_forward_kernel);
}

}  // namespace megacpp::cuda::ssm
