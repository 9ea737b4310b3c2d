// CPU SSM scan, part 3 of 3: the backward, which walks each row's chunks in reverse carrying the
// state gradient dS and recomputes the intra-chunk matrices (see common.hpp for the equations).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "megacpp/backends/cpu/detail/ssm/common.hpp"

namespace megacpp::cpu::ssm {

// Backward working set of one thread for one chunk; rows are (token, rank) pairs, Lr = length * R.
//
// The buffers are shared by the heads a thread owns; the gradient dS of each head's state is
// passed in. Intra-chunk matrices are (Lr, Lr) and block lower triangular: they are formed as
// full products and masked by W, whose upper triangle is zero (Eigen's triangular kernels
// measured no faster at these sizes). Every buffer region a call reads is written earlier in the
// same call (or is a never-written zero), so a head's results do not depend on which heads shared
// the buffers before it.
template <class T>
struct ChunkScanner {
  const ScanParams& sh;
  index_t R, N, P, Lmax;
  RowMatrix<T> Q, K, V, dY, dQ, dK, dV, tmpN, tmpP;  // (Lmax R, N or P)
  RowMatrix<T> G, M, dO, Wrows;                      // (Lmax R, Lmax R); Wrows: W per row (R > 1)
  RowMatrix<T> dS_in;                                // (N, P)
  RowMatrix<T> Wd;   // (Lmax, Lmax): exp(Lam_i - Lam_j) for j < i, zero on and above the diagonal
  RowMatrix<T> W;    // (Lmax, Lmax): Wd_ij scale_j for j < i, gamma_i on the diagonal, zero above
  RowMatrix<T> X;    // (Lmax, Lmax): backward scratch, dW o Wd
  Vector<T> la, gam, sig, scale, lam, decay_in, cw, dlam, dscale, dgam;

  explicit ChunkScanner(const ScanParams& s)
      : sh(s), R(s.rank), N(s.d_state), P(s.head_dim), Lmax(s.chunk_size) {
    const index_t rows = Lmax * R;
    for (RowMatrix<T>* m : {&Q, &K, &dQ, &dK, &tmpN}) m->resize(rows, N);
    for (RowMatrix<T>* m : {&V, &dY, &dV, &tmpP}) m->resize(rows, P);
    for (RowMatrix<T>* m : {&G, &M, &dO, &Wrows}) m->setZero(rows, rows);
    dS_in.resize(N, P);
    for (RowMatrix<T>* m : {&Wd, &W, &X}) m->setZero(Lmax, Lmax);
    for (Vector<T>* v : {&la, &gam, &sig, &scale, &lam, &decay_in, &cw, &dlam, &dscale, &dgam}) v->resize(Lmax);
  }

  index_t token(index_t b, index_t t) const { return b * sh.seq + t; }

  // Copies the chunk's q, k, v (and optionally dy) rows and per-token scalars into the buffers,
  // and forms Lam, scale, the decay matrix Wd and the weights W.
  void load(const ScanChunk& c, index_t b, index_t h, const kernels::ScanOperands<T>& in, const T* dy) {
    const T *q = in.q, *k = in.k, *v = in.v, *log_alpha = in.log_alpha, *gamma = in.gamma, *shift = in.shift;
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

  // Backward of one chunk of head h. dS ((N, P), the head's) holds d(loss)/d(state leaving the
  // chunk) on entry and d(loss)/d(state entering it) on exit. Gradients are added into the
  // (nullable) outputs.
  void backward(const ScanChunk& c, index_t b, index_t h, const kernels::ScanOperands<T>& in, const T* dy,
                const T* saved_state, RowMatrix<T>& dS, const kernels::ScanGradients<T>& grads, T& dD) {
    const T* D = in.D;
    T *dq = grads.q, *dk = grads.k, *dv = grads.v, *dlog_alpha = grads.log_alpha, *dgamma = grads.gamma,
      *dshift = grads.shift;
    load(c, b, h, in, dy);
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

// grads.q, grads.k: per head (batch, seq, heads, R, N) (the group layout when groups == heads).
// dD_rows: (batch, heads) scratch for the per-row sums of dD (summed over rows in order after).
template <class T>
void chunked_scan_backward(const ScanParams& sh, const std::int32_t* doc_ids, const kernels::ScanOperands<T>& in,
                           const T* dy, const T* chunk_states, const kernels::ScanGradients<T>& grads) {
  const index_t state_size = sh.d_state * sh.head_dim;
  std::vector<T> dD_rows(static_cast<std::size_t>(sh.batch * sh.heads), T(0));
  for_each_head_block(sh, doc_ids, [&](index_t b, index_t h0, index_t h1, const std::vector<ScanChunk>& chunks) {
    ChunkScanner<T> scanner(sh);
    std::vector<RowMatrix<T>> dS(static_cast<std::size_t>(h1 - h0), RowMatrix<T>::Zero(sh.d_state, sh.head_dim));
    for (std::size_t ci = chunks.size(); ci-- > 0;)
      for (index_t h = h0; h < h1; ++h) {
        const T* saved = chunk_states + ((b * sh.heads + h) * sh.max_chunks + static_cast<index_t>(ci)) * state_size;
        scanner.backward(chunks[ci], b, h, in, dy, saved, dS[static_cast<std::size_t>(h - h0)], grads,
                         dD_rows[b * sh.heads + h]);
      }
  });
  if (grads.D && in.D)  // no skip connection: nothing added to dD
    for (index_t h = 0; h < sh.heads; ++h)
      for (index_t b = 0; b < sh.batch; ++b) grads.D[h] += dD_rows[b * sh.heads + h];
}

}  // namespace megacpp::cpu::ssm
