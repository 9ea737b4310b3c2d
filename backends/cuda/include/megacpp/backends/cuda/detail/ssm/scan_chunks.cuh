// CUDA backend: the SSM scan, part 2 of 4: carrying the state (forward) and its gradient
// (backward) across chunks, so that every chunk's tokens can run in parallel (design: scan.cuh).
//
// Forward. Inside chunk c (tokens t_0 .. t_{L-1}) the state is affine in E_c, the state entering
// it, with the scalar decays alone multiplying E_c (the shift and gamma terms read only U):
//
//   H_{t_{L-1}} = A_c E_c + L_c,   A_c = prod_i alpha_{t_i},   L_c = H_{t_{L-1}} from E_c = 0
//   E_{c+1}     = H_{t_{L-1}} + shift_{t_L} U_{t_{L-1}}   if chunk c + 1 continues the document, else 0
//
// (a document's first token multiplies a zero state: its alpha is left out of A_c, and never read,
// as the CPU kernel never reads it).
//
// Backward. With X_c = dL/dpre_{t_L} = alpha_{t_L} G_{t_L}, t_L the first token of chunk c + 1 (the
// gradient flowing back into chunk c's last state through the recurrence: scan_backward.cuh's
// A_t at c's last token; 0 when chunk c ends its document),
//
//   G_t = A_t + sum_r q_{t,r} dy_{t,r}^T,   A_{t-1} = alpha_t G_t   (0 at a document start)
//
// is affine in X_c with the same decays: the gradient flowing out of chunk c's first token is
//
//   X_{c-1} = A_c X_c + M_c,   M_c = that flow from X_c = 0
//
// The shift term dU_t += shift_{t+1} A_t that links chunk c's last token to c + 1's first is a
// per-token term of chunk c's last token: its block adds it once X_c is known (pass 3), as it
// adds every other gradient of its own tokens.
//
// Launches: passes 1 (per-chunk locals) are one block per (b, h, chunk), threads over (n, p), each
// element's chain on one thread (no barriers); passes 2 are one thread per (b, h, n, p) walking
// the row's chunks, in place in the (batch, heads, max_chunks, N, P) buffer that held the locals.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include "megacpp/backends/cuda/detail/ssm/scan.cuh"

namespace megacpp::cuda::ssm {

// A_c: the product of chunk c's alphas in token order, leaving out a document's first token.
template <class T>
MEGACPP_HD T chunk_decay(const ScanView<T>& s, index_t b, index_t h, const ScanChunk& c) {
  using std::exp;  // block scope: hides megacpp::exp (the autograd op) from the call below
  const index_t bt0 = b * s.sh.seq + c.start;
  T decay = T(1);
  for (index_t i = c.first_in_doc ? 1 : 0; i < c.length; ++i) decay *= exp(s.in.log_alpha[s.scalar(bt0 + i, h)]);
  return decay;
}

// Forward pass 1 for thread `tid` of `threads`, chunk item `item`: L_c (the chunk's last state
// from E_c = 0) into states[item] ((N, P)), A_c into decay[item] (thread 0).
template <class T>
MEGACPP_HD void forward_local_phase(const ScanView<T>& s, index_t item, T* states, T* decay, index_t tid,
                                    index_t threads) {
  const index_t b = item / (s.sh.heads * s.sh.max_chunks), h = item / s.sh.max_chunks % s.sh.heads;
  const ScanChunk c = s.chunk(b, item % s.sh.max_chunks);
  if (c.length == 0) return;  // past the row's last chunk
  const index_t P = s.sh.head_dim, NP = s.state_size(), bt0 = b * s.sh.seq + c.start;
  for (index_t e = tid; e < NP; e += threads) {
    const index_t n = e / P, p = e % P;
    T state = T(0);
    for (index_t i = 0; i < c.length; ++i) state = chunk_token_state(s, bt0, h, c, i, state, T(0), n, p);
    states[item * NP + e] = state;
  }
  if (tid == 0) decay[item] = chunk_decay(s, b, h, c);
}

// Forward pass 2 for element `index` = ((b * heads + h) * N P + e): replaces each chunk's L_c in
// states by E_c, the state entering it (0 at a document's first chunk), chunks in order.
template <class T>
MEGACPP_HD void forward_carry_element(const ScanView<T>& s, index_t index, T* states, const T* decay) {
  const index_t NP = s.state_size(), P = s.sh.head_dim, e = index % NP, bh = index / NP;
  const index_t b = bh / s.sh.heads, h = bh % s.sh.heads, n = e / P, p = e % P;
  T carry = T(0);  // E of the next chunk
  for (index_t ci = 0; ci < s.sh.max_chunks; ++ci) {
    const ScanChunk c = s.chunk(b, ci);
    if (c.length == 0) break;  // past the row's last chunk
    const index_t item = bh * s.sh.max_chunks + ci;
    const T local = states[item * NP + e];
    const T entering = c.first_in_doc ? T(0) : carry;
    states[item * NP + e] = entering;
    // E_{c+1} = A_c E_c + L_c + shift U at c's last token (entering_state reads the token before
    // its first argument); not read when chunk c ends the document.
    if (!c.last_in_doc)
      carry = entering_state(s, b * s.sh.seq + c.start + c.length, h, decay[item] * entering + local, n, p);
  }
}

// Backward pass 1 for chunk item `item`: M_c, the gradient flowing out of the chunk's first token
// from X_c = 0, into flows[item] ((N, P)); A_c into decay[item] (thread 0). dy: (batch, seq,
// heads, R, P).
template <class T>
MEGACPP_HD void backward_local_phase(const ScanView<T>& s, const T* dy, index_t item, T* flows, T* decay, index_t tid,
                                     index_t threads) {
  using std::exp;  // block scope: hides megacpp::exp (the autograd op) from the call below
  const index_t b = item / (s.sh.heads * s.sh.max_chunks), h = item / s.sh.max_chunks % s.sh.heads;
  const ScanChunk c = s.chunk(b, item % s.sh.max_chunks);
  if (c.length == 0) return;  // past the row's last chunk
  const index_t N = s.sh.d_state, P = s.sh.head_dim, NP = s.state_size(), bt0 = b * s.sh.seq + c.start;
  for (index_t e = tid; e < NP; e += threads) {
    const index_t n = e / P, p = e % P;
    T flow = T(0);  // A_t: alpha_{t+1} G_{t+1}
    for (index_t i = c.length - 1; i >= 0; --i) {
      const index_t bt = bt0 + i;
      const T* q = s.in.q + s.qk_row(bt, h);
      const T* g = dy + s.vy_row(bt, h);
      T G = flow;
      for (index_t r = 0; r < s.sh.rank; ++r) G += q[r * N + n] * g[r * P + p];
      flow = i == 0 && c.first_in_doc ? T(0) : exp(s.in.log_alpha[s.scalar(bt, h)]) * G;
    }
    flows[item * NP + e] = flow;
  }
  if (tid == 0) decay[item] = chunk_decay(s, b, h, c);
}

// Backward pass 2 for element `index` = ((b * heads + h) * N P + e): replaces each chunk's M_c in
// flows by X_c, the gradient flowing into its last token from the next chunk (0 at a document's
// last chunk), chunks in reverse.
template <class T>
MEGACPP_HD void backward_carry_element(const ScanView<T>& s, index_t index, T* flows, const T* decay) {
  const index_t NP = s.state_size(), e = index % NP, bh = index / NP, b = bh / s.sh.heads;
  T carry = T(0);  // X of the previous chunk
  for (index_t ci = s.sh.max_chunks - 1; ci >= 0; --ci) {
    const ScanChunk c = s.chunk(b, ci);
    if (c.length == 0) continue;  // past the row's last chunk
    const index_t item = bh * s.sh.max_chunks + ci;
    const T local = flows[item * NP + e];
    const T incoming = c.last_in_doc ? T(0) : carry;
    flows[item * NP + e] = incoming;
    carry = decay[item] * incoming + local;  // not read when chunk c starts the document
  }
}

// Passes 1 and 2 as kernels: one block per chunk item (passes 1), one thread per element (passes 2).
template <class T>
__global__ void scan_forward_local_kernel(ScanView<T> s, T* states, T* decay) {
  for (index_t item = blockIdx.x; item < s.chunk_items(); item += gridDim.x)
    forward_local_phase(s, item, states, decay, threadIdx.x, blockDim.x);
}
template <class T>
__global__ void scan_forward_carry_kernel(ScanView<T> s, T* states, const T* decay) {
  for (index_t i = global_thread(); i < s.sh.batch * s.sh.heads * s.state_size(); i += grid_stride())
    forward_carry_element(s, i, states, decay);
}
template <class T>
__global__ void scan_backward_local_kernel(ScanView<T> s, const T* dy, T* flows, T* decay) {
  for (index_t item = blockIdx.x; item < s.chunk_items(); item += gridDim.x)
    backward_local_phase(s, dy, item, flows, decay, threadIdx.x, blockDim.x);
}
template <class T>
__global__ void scan_backward_carry_kernel(ScanView<T> s, T* flows, const T* decay) {
  for (index_t i = global_thread(); i < s.sh.batch * s.sh.heads * s.state_size(); i += grid_stride())
    backward_carry_element(s, i, flows, decay);
}

}  // namespace megacpp::cuda::ssm
