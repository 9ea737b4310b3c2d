// megacpp/backends/cpu/ssm_scan.hpp: the chunked parallel SSM scan (forward and backward), CPU.
//
// One kernel serves Mamba-3 (trapezoidal, SISO or MIMO rank R) and Mamba-2 (SSD: shift = 0).
// Per (batch row b, head h), with U_t = sum_r v_{t,r} k_{t,r}^T (the rank-R input, (P, N)):
//
//   H_t = alpha_t (H_{t-1} + shift_t U_{t-1}) + gamma_t U_t,    alpha_t = exp(log_alpha_t)
//   y_{t,r} = H_t q_{t,r} + D_h v_{t,r}
//   H = 0 and U_{t-1} = 0 at the first token of every document   (seed 001)
//
// This is Mamba-3's trapezoidal update H_t = alpha H_{t-1} + beta U_{t-1} + gamma U_t with
// beta = (1 - lambda) dt alpha, i.e. shift = (1 - lambda) dt, gamma = lambda dt (arXiv 2603.15569;
// `mamba3_siso_step_ref` in state-spaces/mamba tests/ops/triton/test_mamba3_siso.py); Mamba-2's
// SSD is shift = 0, gamma = dt (`ssd_minimal_discrete` in mamba_ssm/modules/ssd_minimal.py).
//
// Chunked form (the "shifted gamma" trick of `mamba3_siso_fwd_ref`): with sigma_s = shift_{s+1}
// when s + 1 is in s's document (else 0) and scale_s = gamma_s + sigma_s, the contribution of U_s
// to H_t (t > s) is exp(Lam_t - Lam_s) scale_s, and to H_s itself gamma_s. Documents are cut into
// chunks of `chunk_size` tokens starting at each document's first token. Inside a chunk, with
// Lam_i the cumulative log_alpha (the first token of a document contributes nothing: its alpha
// multiplies a zero state), W_ij = exp(Lam_i - Lam_j) scale_j (j < i), W_ii = gamma_i, and the
// state S entering the chunk (S = H_{e'} + sigma_{e'} U_{e'} of the previous chunk's last token e'):
//
//   y_i   = sum_{j <= i} W_ij (q_i . k_j) v_j + exp(Lam_i) S q_i + D v_i      (intra + inter + skip)
//   S_out = exp(Lam_e) S + sum_j exp(Lam_e - Lam_j) scale_j k_j^T v_j           (e = last token)
//
// Rows of a chunk are (token, rank) pairs, so MIMO is the same algebra on len * R rows. Each
// (b, h) is owned by one thread (threads own blocks of heads of a row), which walks the row's
// chunks in order, carrying S per head: O(T) time, and the only saved activations are the states
// entering each chunk, (N, P) per chunk and head. The backward walks the chunks in reverse
// carrying dS, recomputing the intra-chunk matrices. A chunk's arithmetic depends only on its own
// tokens and the state carried from its own document's earlier chunks, always in buffers of the
// same shapes and 64-byte alignment (the rows are gathered into them first), so a document's
// results are bitwise the same wherever it sits in a packed row, and at any thread count.
//
// Layouts (row-major): q, k (batch, seq, groups, R, N), head h reads group h / (heads / groups);
// v, y (batch, seq, heads, R, P); log_alpha, gamma, shift (batch, seq, heads); D (heads);
// chunk states (batch, heads, max_chunks, N, P). The naive reference is the literal recurrence in
// megacpp/nn/mamba/sequential_scan.hpp; tests compare the two to 1e-10 in double.
#pragma once

#include "megacpp/backends/cpu.hpp"  // first: brings Eigen in behind the backend's GCC 12 guard

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "megacpp/backends/cpu/conv1d.hpp"      // the other ssm_* kernels: one availability flag covers all
#include "megacpp/backends/cpu/ssm_rotary.hpp"  // document_start

namespace megacpp {

namespace cpu::ssm {

template <class T>
using RowMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <class T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// Tokens [start, start + length) of one row, all in one document.
struct ScanChunk {
  index_t start = 0, length = 0;
  bool first_in_doc = false;  // the document's first chunk: no state comes in
  bool last_in_doc = false;   // the document's last chunk: no state goes out
};

/// Cuts a row into chunks: every document into pieces of `chunk_size` from its first token.
inline void plan_row_chunks(const std::int32_t* row_ids, index_t seq, index_t chunk_size, std::vector<ScanChunk>& out) {
  out.clear();
  for (index_t begin = 0; begin < seq;) {
    index_t end = begin + 1;
    while (end < seq && !document_start(row_ids, end)) ++end;
    for (index_t c = begin; c < end; c += chunk_size)
      out.push_back({c, std::min(chunk_size, end - c), c == begin, c + chunk_size >= end});
    begin = end;
  }
}

/// Sizes of one scan call.
struct ScanShape {
  index_t batch = 0, seq = 0, heads = 0, groups = 0, rank = 0, d_state = 0, head_dim = 0, chunk_size = 0,
          max_chunks = 0;
};

// |Lam_i - Lam_j| below which exp(Lam_i - Lam_j) is formed as exp(Lam_i - Lam_0) * exp(Lam_0 - Lam_j)
// (2 L exps per chunk instead of L^2 / 2) without overflow: e^40 ~ 2e17 in float, e^300 in double.
template <class T>
constexpr T factorised_decay_limit() { return sizeof(T) == 4 ? T(40) : T(300); }

// Per-thread working set for one chunk; rows are (token, rank) pairs, Lr = length * R.
//
// The buffers are shared by the heads a thread owns; the state S (forward) or its gradient dS
// (backward) of each head is passed in. Intra-chunk matrices are (Lr, Lr) and block lower
// triangular: they are formed as full products and masked by W, whose upper triangle is zero
// (Eigen's triangular kernels measured no faster at these sizes). Every buffer region a call reads
// is written earlier in the same call (or is a never-written zero), so a head's results do not
// depend on which heads shared the buffers before it.
template <class T>
struct ChunkScanner {
  const ScanShape& sh;
  index_t R, N, P, Lmax;
  RowMatrix<T> Q, K, V, Y, dY, dQ, dK, dV, tmpN, tmpP;  // (Lmax R, N or P)
  RowMatrix<T> G, M, dO, Wrows;                         // (Lmax R, Lmax R); Wrows: W per row (R > 1)
  RowMatrix<T> dS_in;                                   // (N, P)
  RowMatrix<T> Wd;   // (Lmax, Lmax): exp(Lam_i - Lam_j) for j < i, zero on and above the diagonal
  RowMatrix<T> W;    // (Lmax, Lmax): Wd_ij scale_j for j < i, gamma_i on the diagonal, zero above
  RowMatrix<T> X;    // (Lmax, Lmax): backward scratch, dW o Wd
  Vector<T> la, gam, sig, scale, lam, decay_in, cw, dlam, dscale, dgam;

  explicit ChunkScanner(const ScanShape& s)
      : sh(s), R(s.rank), N(s.d_state), P(s.head_dim), Lmax(s.chunk_size) {
    const index_t rows = Lmax * R;
    for (RowMatrix<T>* m : {&Q, &K, &dQ, &dK, &tmpN}) m->resize(rows, N);
    for (RowMatrix<T>* m : {&V, &Y, &dY, &dV, &tmpP}) m->resize(rows, P);
    for (RowMatrix<T>* m : {&G, &M, &dO, &Wrows}) m->setZero(rows, rows);
    dS_in.resize(N, P);
    for (RowMatrix<T>* m : {&Wd, &W, &X}) m->setZero(Lmax, Lmax);
    for (Vector<T>* v : {&la, &gam, &sig, &scale, &lam, &decay_in, &cw, &dlam, &dscale, &dgam}) v->resize(Lmax);
  }

  index_t token(index_t b, index_t t) const { return b * sh.seq + t; }

  // Copies the chunk's q, k, v (and optionally dy) rows and per-token scalars into the buffers,
  // and forms Lam, scale, the decay matrix Wd and the weights W.
  void load(const ScanChunk& c, index_t b, index_t h, const T* q, const T* k, const T* v, const T* log_alpha,
            const T* gamma, const T* shift, const T* dy) {
    const index_t g = h / (sh.heads / sh.groups), len = c.length;
    for (index_t i = 0; i < len; ++i) {
      const index_t bt = token(b, c.start + i);
      const T* qs = q + (bt * sh.groups + g) * R * N;
      const T* ks = k + (bt * sh.groups + g) * R * N;
      const T* vs = v + (bt * sh.heads + h) * R * P;
      std::copy(qs, qs + R * N, Q.data() + i * R * N);
      std::copy(ks, ks + R * N, K.data() + i * R * N);
      std::copy(vs, vs + R * P, V.data() + i * R * P);
      if (dy) std::copy(dy + (bt * sh.heads + h) * R * P, dy + (bt * sh.heads + h + 1) * R * P, dY.data() + i * R * P);
      la[i] = log_alpha[bt * sh.heads + h];
      gam[i] = gamma[bt * sh.heads + h];
    }
    // sigma_i = shift of the next token of the same document (0 after the document's last token)
    for (index_t i = 0; i < len; ++i) {
      const bool has_next = i + 1 < len || !c.last_in_doc;
      sig[i] = shift && has_next ? shift[token(b, c.start + i + 1) * sh.heads + h] : T(0);
      scale[i] = gam[i] + sig[i];
    }
    // Lam_i = sum of log_alpha over the chunk up to i; a document's first alpha multiplies zero.
    lam[0] = c.first_in_doc ? T(0) : la[0];
    for (index_t i = 1; i < len; ++i) lam[i] = lam[i - 1] + la[i];
    T lo = lam[0], hi = lam[0];
    for (index_t i = 0; i < len; ++i) {
      lo = std::min(lo, lam[i]);
      hi = std::max(hi, lam[i]);
      decay_in[i] = std::exp(lam[i]);
    }
    if (hi - lo <= factorised_decay_limit<T>()) {
      for (index_t i = 0; i < len; ++i) {
        cw[i] = std::exp(lam[0] - lam[i]);  // scratch: exp(Lam_0 - Lam_j)
        dlam[i] = std::exp(lam[i] - lam[0]);  // scratch: exp(Lam_i - Lam_0)
      }
      for (index_t i = 0; i < len; ++i)
        for (index_t j = 0; j < i; ++j) Wd(i, j) = dlam[i] * cw[j];
    } else {
      for (index_t i = 0; i < len; ++i)
        for (index_t j = 0; j < i; ++j) Wd(i, j) = std::exp(lam[i] - lam[j]);
    }
    for (index_t i = 0; i < len; ++i) {
      for (index_t j = 0; j < i; ++j) W(i, j) = Wd(i, j) * scale[j];
      W(i, i) = gam[i];
    }
    if (R > 1) {
      for (index_t ir = 0; ir < len * R; ++ir)
        for (index_t jc = 0; jc < len * R; ++jc) Wrows(ir, jc) = W(ir / R, jc / R);
    }
  }

  // The (Lr, Lr) weights in row layout.
  auto weights(index_t Lr) { return R == 1 ? W.topLeftCorner(Lr, Lr) : Wrows.topLeftCorner(Lr, Lr); }

  // Forward of one chunk of head h: y rows for its tokens; S ((N, P), the head's state) becomes
  // the state leaving the chunk.
  void forward(const ScanChunk& c, index_t b, index_t h, const T* q, const T* k, const T* v, const T* log_alpha,
               const T* gamma, const T* shift, const T* D, RowMatrix<T>& S, T* y, T* saved_state) {
    load(c, b, h, q, k, v, log_alpha, gamma, shift, nullptr);
    const index_t Lr = c.length * R;
    auto Qb = Q.topRows(Lr);
    auto Kb = K.topRows(Lr);
    auto Vb = V.topRows(Lr);
    auto Yb = Y.topRows(Lr);
    auto Gb = G.topLeftCorner(Lr, Lr);
    auto Mb = M.topLeftCorner(Lr, Lr);
    if (!c.first_in_doc && saved_state) std::copy(S.data(), S.data() + N * P, saved_state);
    // intra-chunk: y = (Q K^T o W) V
    Gb.noalias() = Qb * Kb.transpose();
    Mb = Gb.cwiseProduct(weights(Lr));
    Yb.noalias() = Mb * Vb;
    // inter-chunk: y_i += exp(Lam_i) S^T q_i   (S stored (N, P), so Q S is (Lr, P))
    if (!c.first_in_doc) {
      auto QS = tmpP.topRows(Lr);
      QS.noalias() = Qb * S;
      for (index_t ir = 0; ir < Lr; ++ir) Yb.row(ir) += decay_in[ir / R] * QS.row(ir);
    }
    // skip connection
    if (D) Yb += D[h] * Vb;
    for (index_t i = 0; i < c.length; ++i) {
      T* dst = y + (token(b, c.start + i) * sh.heads + h) * R * P;
      std::copy(Y.data() + i * R * P, Y.data() + (i + 1) * R * P, dst);
    }
    // state leaving the chunk (not needed after the document's last chunk)
    if (!c.last_in_doc) {
      const index_t e = c.length - 1;
      auto Kc = tmpN.topRows(Lr);
      for (index_t jr = 0; jr < Lr; ++jr) {
        const index_t j = jr / R;
        Kc.row(jr) = ((j < e ? Wd(e, j) : T(1)) * scale[j]) * Kb.row(jr);
      }
      if (c.first_in_doc) {
        S.noalias() = Kc.transpose() * Vb;
      } else {
        S *= decay_in[e];
        S.noalias() += Kc.transpose() * Vb;
      }
    }
  }

  // Backward of one chunk of head h. dS ((N, P), the head's) holds d(loss)/d(state leaving the
  // chunk) on entry and d(loss)/d(state entering it) on exit. Gradients are added into the
  // (nullable) outputs.
  void backward(const ScanChunk& c, index_t b, index_t h, const T* q, const T* k, const T* v, const T* log_alpha,
                const T* gamma, const T* shift, const T* D, const T* dy, const T* saved_state, RowMatrix<T>& dS, T* dq,
                T* dk, T* dv, T* dlog_alpha, T* dgamma, T* dshift, T& dD) {
    load(c, b, h, q, k, v, log_alpha, gamma, shift, dy);
    const index_t len = c.length, Lr = len * R, e = len - 1;
    auto Qb = Q.topRows(Lr);
    auto Kb = K.topRows(Lr);
    auto Vb = V.topRows(Lr);
    auto dYb = dY.topRows(Lr);
    auto dQb = dQ.topRows(Lr);
    auto dKb = dK.topRows(Lr);
    auto dVb = dV.topRows(Lr);
    auto Gb = G.topLeftCorner(Lr, Lr);
    auto Mb = M.topLeftCorner(Lr, Lr);
    auto dOb = dO.topLeftCorner(Lr, Lr);
    if (c.last_in_doc) dS.setZero();
    for (index_t i = 0; i < len; ++i) dlam[i] = dgam[i] = T(0);

    // skip connection: y += D v
    if (D) {
      dD += (dYb.array() * Vb.array()).sum();
      dVb = D[h] * dYb;
    } else {
      dVb.setZero();
    }
    // intra-chunk: y = M V, M = G o W, G = Q K^T; dO = dY V^T, dM = dO o W, dW = G o dO
    auto dWtok = X.topLeftCorner(len, len);  // token-level dW, then dW o Wd
    Gb.noalias() = Qb * Kb.transpose();
    Mb = Gb.cwiseProduct(weights(Lr));
    dOb.noalias() = dYb * Vb.transpose();
    if (R == 1) {
      dWtok = Gb.cwiseProduct(dOb);  // the upper triangle is cleared by Wd below
    } else {
      for (index_t i = 0; i < len; ++i)  // sum G o dO over each (rank, rank) block
        for (index_t j = 0; j < len; ++j)
          dWtok(i, j) = j <= i ? (Gb.block(i * R, j * R, R, R).cwiseProduct(dOb.block(i * R, j * R, R, R))).sum() : T(0);
    }
    dVb.noalias() += Mb.transpose() * dYb;
    dOb = dOb.cwiseProduct(weights(Lr));  // dM
    dQb.noalias() = dOb * Kb;
    dKb.noalias() = dOb.transpose() * Qb;
    // W_ii = gamma_i; W_ij = exp(Lam_i - Lam_j) scale_j (j < i). With Xw = dW o Wd (strictly lower):
    //   dscale_j = sum_i Xw_ij,  dLam_i += sum_j Xw_ij scale_j,  dLam_j -= scale_j dscale_j
    dgam.head(len) = dWtok.diagonal();
    dWtok = dWtok.cwiseProduct(Wd.topLeftCorner(len, len));
    dscale.head(len) = dWtok.colwise().sum().transpose();
    dlam.head(len) = dWtok * scale.head(len) - scale.head(len).cwiseProduct(dscale.head(len));
    // inter-chunk: y_i += exp(Lam_i) S_in^T q_i
    if (!c.first_in_doc) {
      const Eigen::Map<const RowMatrix<T>> S_in(saved_state, N, P);
      auto dQi = tmpN.topRows(Lr);
      dQi.noalias() = dYb * S_in.transpose();
      for (index_t ir = 0; ir < Lr; ++ir) {
        const index_t i = ir / R;
        dQi.row(ir) *= decay_in[i];
        dlam[i] += Qb.row(ir).dot(dQi.row(ir));
        tmpP.row(ir) = decay_in[i] * dYb.row(ir);  // exp(Lam_i) dy_i
      }
      dQb += dQi;
      dS_in.noalias() = Qb.transpose() * tmpP.topRows(Lr);
    }
    // state leaving the chunk: S_out = exp(Lam_e) S_in + sum_j cw_j k_j^T v_j
    if (!c.last_in_doc) {
      for (index_t j = 0; j < len; ++j) cw[j] = (j < e ? Wd(e, j) : T(1)) * scale[j];
      auto dKs = tmpN.topRows(Lr);
      dKs.noalias() = Vb * dS.transpose();  // (Lr, N): sum_p v_jp dS_np
      auto KdS = tmpP.topRows(Lr);
      KdS.noalias() = Kb * dS;  // (Lr, P)
      for (index_t j = 0; j < len; ++j) {
        T dc = 0;
        for (index_t r = 0; r < R; ++r) {
          const index_t jr = j * R + r;
          dVb.row(jr) += cw[j] * KdS.row(jr);
          dc += Kb.row(jr).dot(dKs.row(jr));
          dKb.row(jr) += cw[j] * dKs.row(jr);
        }
        if (j < e) {
          dscale[j] += dc * Wd(e, j);
          const T t = dc * cw[j];
          dlam[e] += t;
          dlam[j] -= t;
        } else {
          dscale[j] += dc;  // exp(Lam_e - Lam_e) = 1: no Lam dependence
        }
      }
      if (!c.first_in_doc) {
        const Eigen::Map<const RowMatrix<T>> S_in(saved_state, N, P);
        dlam[e] += decay_in[e] * (dS.array() * S_in.array()).sum();
        dS_in += decay_in[e] * dS;
      }
    }
    if (!c.first_in_doc) dS = dS_in;

    // scatter: Lam_i = sum_{u <= i} log_alpha_u (u >= 1 in a document's first chunk),
    // scale_j = gamma_j + shift_{j+1}
    T suffix = 0;
    for (index_t i = len - 1; i >= 0; --i) {
      suffix += dlam[i];
      const index_t bt = token(b, c.start + i);
      if (dlog_alpha && (i > 0 || !c.first_in_doc)) dlog_alpha[bt * sh.heads + h] += suffix;
      if (dgamma) dgamma[bt * sh.heads + h] += dgam[i] + dscale[i];
      const bool has_next = i + 1 < len || !c.last_in_doc;
      if (dshift && has_next) dshift[(bt + 1) * sh.heads + h] += dscale[i];
      const index_t qrow = (bt * sh.heads + h) * R * N;  // dq, dk per head: (batch, seq, heads, R, N)
      if (dq) for (index_t n = 0; n < R * N; ++n) dq[qrow + n] += dQ.data()[i * R * N + n];
      if (dk) for (index_t n = 0; n < R * N; ++n) dk[qrow + n] += dK.data()[i * R * N + n];
      if (dv) {
        T* dst = dv + (bt * sh.heads + h) * R * P;
        for (index_t n = 0; n < R * P; ++n) dst[n] += dV.data()[i * R * P + n];
      }
    }
  }
};

// Runs body(b, h0, h1, chunks) over (row, block of heads) items with a static schedule, one item
// per OpenMP iteration. A thread walks its heads chunk by chunk, so the rows it gathers for a
// chunk (tokens x its heads) are contiguous runs rather than one row per 4 KiB page. Which thread
// owns a head, and which heads share a block, changes nothing in that head's arithmetic: results
// do not depend on the thread count. Always inside a parallel region, so the Eigen products in
// the body never fork.
template <class Body>
void for_each_head_block(const ScanShape& sh, const std::int32_t* doc_ids, Body&& body) {
  const index_t threads = std::max(1, omp_get_max_threads());
  const index_t per_thread = (sh.batch * sh.heads + threads - 1) / threads;
  const index_t block = std::clamp<index_t>(per_thread, 1, sh.heads);
  const index_t blocks_per_row = (sh.heads + block - 1) / block;
  const index_t items = sh.batch * blocks_per_row;
#pragma omp parallel
  {
    std::vector<ScanChunk> chunks;
    index_t planned_row = -1;
#pragma omp for schedule(static)
    for (index_t item = 0; item < items; ++item) {
      const index_t b = item / blocks_per_row, h0 = (item % blocks_per_row) * block;
      if (b != planned_row) {
        plan_row_chunks(doc_ids + b * sh.seq, sh.seq, sh.chunk_size, chunks);
        planned_row = b;
      }
      body(b, h0, std::min(sh.heads, h0 + block), chunks);
    }
  }
}

template <class T>
void chunked_scan_forward(const ScanShape& sh, const std::int32_t* doc_ids, const T* q, const T* k, const T* v,
                          const T* log_alpha, const T* gamma, const T* shift, const T* D, T* y, T* chunk_states) {
  const index_t state_size = sh.d_state * sh.head_dim;
  for_each_head_block(sh, doc_ids, [&](index_t b, index_t h0, index_t h1, const std::vector<ScanChunk>& chunks) {
    ChunkScanner<T> scanner(sh);
    std::vector<RowMatrix<T>> S(static_cast<std::size_t>(h1 - h0), RowMatrix<T>(sh.d_state, sh.head_dim));
    for (std::size_t ci = 0; ci < chunks.size(); ++ci)
      for (index_t h = h0; h < h1; ++h) {
        T* saved = chunk_states ? chunk_states + ((b * sh.heads + h) * sh.max_chunks + static_cast<index_t>(ci)) * state_size
                                : nullptr;
        scanner.forward(chunks[ci], b, h, q, k, v, log_alpha, gamma, shift, D, S[static_cast<std::size_t>(h - h0)], y, saved);
      }
  });
}

// dq, dk: per head (batch, seq, heads, R, N) (the group layout when groups == heads).
// dD_rows: (batch, heads) scratch for the per-row sums of dD (summed over rows in order after).
template <class T>
void chunked_scan_backward(const ScanShape& sh, const std::int32_t* doc_ids, const T* q, const T* k, const T* v,
                           const T* log_alpha, const T* gamma, const T* shift, const T* D, const T* dy,
                           const T* chunk_states, T* dq, T* dk, T* dv, T* dlog_alpha, T* dgamma, T* dshift, T* dD) {
  const index_t state_size = sh.d_state * sh.head_dim;
  std::vector<T> dD_rows(static_cast<std::size_t>(sh.batch * sh.heads), T(0));
  for_each_head_block(sh, doc_ids, [&](index_t b, index_t h0, index_t h1, const std::vector<ScanChunk>& chunks) {
    ChunkScanner<T> scanner(sh);
    std::vector<RowMatrix<T>> dS(static_cast<std::size_t>(h1 - h0), RowMatrix<T>::Zero(sh.d_state, sh.head_dim));
    for (std::size_t ci = chunks.size(); ci-- > 0;)
      for (index_t h = h0; h < h1; ++h) {
        const T* saved = chunk_states + ((b * sh.heads + h) * sh.max_chunks + static_cast<index_t>(ci)) * state_size;
        scanner.backward(chunks[ci], b, h, q, k, v, log_alpha, gamma, shift, D, dy, saved,
                         dS[static_cast<std::size_t>(h - h0)], dq, dk, dv, dlog_alpha, dgamma, dshift,
                         dD_rows[b * sh.heads + h]);
      }
  });
  if (dD)
    for (index_t h = 0; h < sh.heads; ++h)
      for (index_t b = 0; b < sh.batch; ++b) dD[h] += dD_rows[b * sh.heads + h];
}

}  // namespace cpu::ssm

// ---- the Cpu overloads the layer code dispatches to (see megacpp/nn/mamba/kernels.hpp) ----------

/// Declares that the CPU backend implements the ssm_* kernels (megacpp/nn/mamba/kernels.hpp).
constexpr bool ssm_kernels_available(Cpu) { return true; }

/// Chunked scan forward: y and the states entering each chunk (chunk_states may be null when no
/// backward follows). Sizes: see megacpp/nn/mamba/chunked_scan.hpp.
template <class T>
void ssm_chunked_scan_forward(Cpu, index_t batch, index_t seq, index_t heads, index_t groups, index_t rank,
                              index_t d_state, index_t head_dim, index_t chunk_size, index_t max_chunks,
                              const std::int32_t* doc_ids, const T* q, const T* k, const T* v, const T* log_alpha,
                              const T* gamma, const T* shift, const T* D, T* y, T* chunk_states) {
  const cpu::ssm::ScanShape sh{batch, seq, heads, groups, rank, d_state, head_dim, chunk_size, max_chunks};
  cpu::ssm::chunked_scan_forward<T>(sh, doc_ids, q, k, v, log_alpha, gamma, shift, D, y, chunk_states);
}

/// Chunked scan backward: adds into dq, dk (per head), dv, dlog_alpha, dgamma, dshift, dD (each may be null).
template <class T>
void ssm_chunked_scan_backward(Cpu, index_t batch, index_t seq, index_t heads, index_t groups, index_t rank,
                               index_t d_state, index_t head_dim, index_t chunk_size, index_t max_chunks,
                               const std::int32_t* doc_ids, const T* q, const T* k, const T* v, const T* log_alpha,
                               const T* gamma, const T* shift, const T* D, const T* dy, const T* chunk_states, T* dq,
                               T* dk, T* dv, T* dlog_alpha, T* dgamma, T* dshift, T* dD) {
  const cpu::ssm::ScanShape sh{batch, seq, heads, groups, rank, d_state, head_dim, chunk_size, max_chunks};
  cpu::ssm::chunked_scan_backward<T>(sh, doc_ids, q, k, v, log_alpha, gamma, shift, D, dy, chunk_states, dq, dk, dv,
                                     dlog_alpha, dgamma, dshift, dD);
}

}  // namespace megacpp
