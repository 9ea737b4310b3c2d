// CPU SSM scan, part 2 of 3: the forward (see common.hpp for the equations).
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "megacpp/backends/cpu/detail/small_gemm.hpp"
#include "megacpp/backends/cpu/detail/ssm/common.hpp"

namespace megacpp::cpu::ssm {

// The forward walks every chunk in pieces of at most this many tokens, each piece one step of
// the chunked algorithm (its own intra-piece products, the state passed on to the next piece);
// the chunk size still fixes which states are saved for the backward. Per token and head, pieces
// of L tokens cost 2 L (N + P) multiply-adds in the intra-piece products (half of them on the
// masked-out upper triangle) and 4 N P in the state products, whatever L: at N = 128, P = 64,
// pieces of 32 instead of 64 do a fifth less work, and measured 20% faster; pieces of 16 measured
// no faster than 32 (more, smaller products).
inline constexpr index_t kForwardPiece = 32;

// Forward working set of one thread for one block of heads [h0, h1) of a row; rows are
// (token, rank) pairs, Lr = length * R.
//
// The thread walks the row's pieces in order and, inside each, its heads in order, carrying each
// head's state S. With R = 1 the piece's q, k, v and y rows are evenly spaced in the operands and
// are read and written in place; with R > 1 (MIMO) they are not, and are gathered into per-slot
// buffers before the piece's heads (for each token, the block's rows are one contiguous run) and
// scattered after. A head's arithmetic does not depend on where its rows live or which heads
// share its block: the products do not (Eigen's GEMM packs its operands first; small_gemm is
// address-independent); the elementwise steps, whose vectorised loops peel differently at
// different alignments, run on the block's own 64-byte-aligned buffers (the one that reads v in
// place, diag(c) V, is one product per element: exact either way); and every buffer region a
// piece reads is written earlier in the same piece (or is a never-written zero).
template <class T>
struct ForwardBlock {
  const ScanParams& sh;
  index_t R, N, P, Lmax, h0, h1, g0, g1;
  bool gathered;                   // R > 1: the piece's rows go through the slots below
  std::vector<RowMatrix<T>> Q, K;  // per group slot: (Lmax R, N)
  std::vector<RowMatrix<T>> V, Y;  // per head slot: (Lmax R, P)
  std::vector<RowMatrix<T>> S;     // per head slot: (N, P), the state leaving the last piece
  RowMatrix<T> G;                  // (Lmax R, Lmax R): Q K^T of the group g_formed
  RowMatrix<T> M;                  // (Lmax R, Lmax R): G o W + D I; block upper triangle never written (zero)
  RowMatrix<T> Vc;                 // (Lmax R, P): diag(c) V, the rows of V weighted into the state
  Vector<T> lam, scale, gam;       // (Lmax): per token
  Vector<T> decay, a, bw, c;       // (Lmax R): per row; see head_forward
  index_t g_formed = -1;           // the group whose scores G holds for the current piece

  ForwardBlock(const ScanParams& s, index_t piece_max, index_t first_head, index_t end_head)
      : sh(s), R(s.rank), N(s.d_state), P(s.head_dim), Lmax(piece_max), h0(first_head), h1(end_head),
        g0(first_head / (s.heads / s.groups)), g1((end_head - 1) / (s.heads / s.groups) + 1), gathered(R > 1) {
    const index_t rows = Lmax * R;
    if (gathered) {
      Q.assign(static_cast<std::size_t>(g1 - g0), RowMatrix<T>(rows, N));
      K.assign(static_cast<std::size_t>(g1 - g0), RowMatrix<T>(rows, N));
      V.assign(static_cast<std::size_t>(h1 - h0), RowMatrix<T>(rows, P));
      Y.assign(static_cast<std::size_t>(h1 - h0), RowMatrix<T>(rows, P));
    }
    S.assign(static_cast<std::size_t>(h1 - h0), RowMatrix<T>(N, P));
    G.resize(rows, rows);
    M.setZero(rows, rows);
    Vc.resize(rows, P);
    for (Vector<T>* v : {&lam, &scale, &gam}) v->resize(Lmax);
    for (Vector<T>* v : {&decay, &a, &bw, &c}) v->resize(rows);
  }

  index_t token(index_t b, index_t t) const { return b * sh.seq + t; }

  // Before the piece's heads: gathers its q, k rows (groups g0..g1) and v rows (heads h0..h1).
  void begin_piece(const ScanChunk& piece, index_t b, const kernels::ScanOperands<T>& in) {
    g_formed = -1;
    if (!gathered) return;
    const index_t qn = R * N, vn = R * P;
    for (index_t i = 0; i < piece.length; ++i) {
      const index_t bt = token(b, piece.start + i);
      const T* qs = in.q + (bt * sh.groups + g0) * qn;
      const T* ks = in.k + (bt * sh.groups + g0) * qn;
      for (index_t gi = 0; gi < g1 - g0; ++gi) {
        std::copy(qs + gi * qn, qs + (gi + 1) * qn, Q[static_cast<std::size_t>(gi)].data() + i * qn);
        std::copy(ks + gi * qn, ks + (gi + 1) * qn, K[static_cast<std::size_t>(gi)].data() + i * qn);
      }
      const T* vs = in.v + (bt * sh.heads + h0) * vn;
      for (index_t hi = 0; hi < h1 - h0; ++hi)
        std::copy(vs + hi * vn, vs + (hi + 1) * vn, V[static_cast<std::size_t>(hi)].data() + i * vn);
    }
  }

  // After the piece's heads: scatters their y rows.
  void end_piece(const ScanChunk& piece, index_t b, T* y) const {
    if (!gathered) return;
    const index_t vn = R * P;
    for (index_t i = 0; i < piece.length; ++i) {
      T* dst = y + (token(b, piece.start + i) * sh.heads + h0) * vn;
      for (index_t hi = 0; hi < h1 - h0; ++hi) {
        const T* src = Y[static_cast<std::size_t>(hi)].data() + i * vn;
        std::copy(src, src + vn, dst + hi * vn);
      }
    }
  }

  // Repeats each of the first `len` entries of a per-token vector R times, in place: (len) -> (len R).
  void rows_from_tokens(Vector<T>& x, index_t len) const {
    if (R == 1) return;
    for (index_t i = len - 1; i >= 0; --i) {
      const T value = x[i];
      for (index_t r = R - 1; r >= 0; --r) x[i * R + r] = value;
    }
  }

  // Forward of one piece of head h: its y rows, and its state S becomes the state leaving the
  // piece (saved_state, if given, receives the entering one). The equations of the file header,
  // with the skip connection folded into the intra-chunk weights (M = G o W + D I) and
  //   W_ij = a_i bw_j (j < i),  a_i = exp(Lam_i - Lam_0),  bw_j = exp(Lam_0 - Lam_j) scale_j,
  // 3 L exps per piece (vectorised) and one pass over G, where the spread of Lam keeps the
  // factors finite (factorised_decay_limit); else one exp per element.
  void head_forward(const ScanChunk& piece, index_t b, index_t h, const kernels::ScanOperands<T>& in, T* y,
                    T* saved_state) {
    const T *q = in.q, *k = in.k, *v = in.v, *log_alpha = in.log_alpha, *gamma = in.gamma, *shift = in.shift, *D = in.D;
    const index_t hi = h - h0, gi = h / (sh.heads / sh.groups) - g0, len = piece.length, Lr = len * R, e = len - 1;
    // the piece's rows (Lr of them) and their spacing: in place (R = 1) or in the slots
    const index_t bt0 = token(b, piece.start), qk_ld = gathered ? N : sh.groups * N, vy_ld = gathered ? P : sh.heads * P;
    const T* q_rows = gathered ? Q[static_cast<std::size_t>(gi)].data() : q + (bt0 * sh.groups + g0 + gi) * N;
    const T* k_rows = gathered ? K[static_cast<std::size_t>(gi)].data() : k + (bt0 * sh.groups + g0 + gi) * N;
    const T* v_rows = gathered ? V[static_cast<std::size_t>(hi)].data() : v + (bt0 * sh.heads + h) * P;
    T* y_rows = gathered ? Y[static_cast<std::size_t>(hi)].data() : y + (bt0 * sh.heads + h) * P;
    const ConstRowsMap<T> Qb(q_rows, Lr, N, Eigen::OuterStride<>(qk_ld));
    const ConstRowsMap<T> Kb(k_rows, Lr, N, Eigen::OuterStride<>(qk_ld));
    const ConstRowsMap<T> Vb(v_rows, Lr, P, Eigen::OuterStride<>(vy_ld));
    RowMatrix<T>& Sh = S[static_cast<std::size_t>(hi)];
    if (!piece.first_in_doc && saved_state) std::copy(Sh.data(), Sh.data() + N * P, saved_state);

    // per-token scalars; sigma_i = shift of the next token of the same document (0 after its last)
    for (index_t i = 0; i < len; ++i) {
      const index_t bt = token(b, piece.start + i);
      const bool has_next = i + 1 < len || !piece.last_in_doc;
      gam[i] = gamma[bt * sh.heads + h];
      scale[i] = gam[i] + (shift && has_next ? shift[(bt + 1) * sh.heads + h] : T(0));
      // Lam_i = sum of log_alpha over the piece up to i; a document's first alpha multiplies zero
      const T la = i == 0 && piece.first_in_doc ? T(0) : log_alpha[bt * sh.heads + h];
      lam[i] = i == 0 ? la : lam[i - 1] + la;
    }
    const auto lam_t = lam.head(len).array();
    const bool factorised = lam_t.maxCoeff() - lam_t.minCoeff() <= factorised_decay_limit<T>();
    decay.head(len) = lam_t.exp();
    a.head(len) = (lam_t - lam[0]).exp();
    bw.head(len) = (lam[0] - lam_t).exp() * scale.head(len).array();
    rows_from_tokens(decay, len);
    rows_from_tokens(a, len);
    rows_from_tokens(bw, len);

    // intra-chunk: y = (Q K^T o W + D I) V, the scores formed once per group and piece
    auto Gb = G.topLeftCorner(Lr, Lr);
    if (g_formed != gi) {
      Gb.noalias() = Qb * Kb.transpose();
      g_formed = gi;
    }
    auto Mb = M.topLeftCorner(Lr, Lr);
    for (index_t ir = 0; ir < Lr; ++ir) {
      const index_t i = ir / R, below = i * R;  // columns of tokens j < i, then the diagonal (rank) block
      if (factorised) {
        Mb.row(ir).head(below) = a[ir] * Gb.row(ir).head(below).cwiseProduct(bw.head(below).transpose());
      } else {
        for (index_t jr = 0; jr < below; ++jr) Mb(ir, jr) = Gb(ir, jr) * (std::exp(lam[i] - lam[jr / R]) * scale[jr / R]);
      }
      Mb.row(ir).segment(below, R) = gam[i] * Gb.row(ir).segment(below, R);
      if (D) Mb(ir, ir) += D[h];
    }
    small_gemm<T>({.m = Lr, .n = P, .k = Lr, .a = Mb.data(), .a_row = M.cols(), .a_col = 1, .b = v_rows, .ldb = vy_ld,
                   .c = y_rows, .ldc = vy_ld});
    // inter-chunk: y_i += exp(Lam_i) S^T q_i   (S stored (N, P): row i of Q S, scaled)
    if (!piece.first_in_doc)
      small_gemm<T>({.m = Lr, .n = P, .k = N, .a = q_rows, .a_row = qk_ld, .a_col = 1, .b = Sh.data(), .ldb = P,
                     .c = y_rows, .ldc = vy_ld, .r = decay.data(), .accumulate = true});
    // state leaving the piece (not needed after the document's last one):
    //   S_out = exp(Lam_e) S + K^T diag(c) V,  c_j = exp(Lam_e - Lam_j) scale_j (c_e = scale_e)
    if (!piece.last_in_doc) {
      if (factorised) {
        c.head(Lr) = a[e * R] * bw.head(Lr);
      } else {
        for (index_t jr = 0; jr < Lr; ++jr) c[jr] = std::exp(lam[e] - lam[jr / R]) * scale[jr / R];
      }
      c.segment(e * R, R).setConstant(scale[e]);
      auto Vcb = Vc.topRows(Lr);
      Vcb = c.head(Lr).asDiagonal() * Vb;
      small_gemm<T>({.m = N, .n = P, .k = Lr, .a = k_rows, .a_row = 1, .a_col = qk_ld, .b = Vcb.data(), .ldb = P,
                     .c = Sh.data(), .ldc = P, .accumulate = !piece.first_in_doc, .beta = decay[e * R]});
    }
  }
};

// y and the states entering each chunk (chunk_states may be null): every (row, block of heads) of
// for_each_head_block walks its pieces (kForwardPiece) in order, and inside each, its heads.
template <class T>
void chunked_scan_forward(const ScanParams& sh, const std::int32_t* doc_ids, const kernels::ScanOperands<T>& in, T* y,
                          T* chunk_states) {
  const index_t state_size = sh.d_state * sh.head_dim, piece_max = std::min(sh.chunk_size, kForwardPiece);
  for_each_head_block(sh, doc_ids, [&](index_t b, index_t h0, index_t h1, const std::vector<ScanChunk>& chunks) {
    ForwardBlock<T> block(sh, piece_max, h0, h1);
    for (std::size_t ci = 0; ci < chunks.size(); ++ci) {
      const ScanChunk& c = chunks[ci];
      for (index_t at = 0; at < c.length; at += piece_max) {
        const index_t len = std::min(piece_max, c.length - at);
        const ScanChunk piece{c.start + at, len, c.first_in_doc && at == 0, c.last_in_doc && at + len == c.length};
        block.begin_piece(piece, b, in);
        for (index_t h = h0; h < h1; ++h) {
          // the state entering the chunk, saved for the backward
          T* saved = chunk_states && at == 0
                         ? chunk_states + ((b * sh.heads + h) * sh.max_chunks + static_cast<index_t>(ci)) * state_size
                         : nullptr;
          block.head_forward(piece, b, h, in, y, saved);
        }
        block.end_piece(piece, b, y);
      }
    }
  });
}

}  // namespace megacpp::cpu::ssm
