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
// entering each chunk, (N, P) per chunk and head. The forward takes each chunk in pieces of at
// most kForwardPiece tokens (the same equations, S passed between pieces), which costs less
// arithmetic than whole chunks; the backward walks the chunks in reverse carrying dS,
// recomputing the intra-chunk matrices. A chunk's arithmetic depends only on its own tokens and
// the state carried from its own document's earlier chunks, computed the same way at any address
// (products whose results do not depend on where their operands live, elementwise steps in
// buffers of the same shapes and 64-byte alignment), so a document's results are bitwise the same
// wherever it sits in a packed row, and at any thread count.
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
template <class T>
using ConstRowsMap = Eigen::Map<const RowMatrix<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

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
  const ScanShape& sh;
  index_t R, N, P, Lmax;
  RowMatrix<T> Q, K, V, dY, dQ, dK, dV, tmpN, tmpP;  // (Lmax R, N or P)
  RowMatrix<T> G, M, dO, Wrows;                      // (Lmax R, Lmax R); Wrows: W per row (R > 1)
  RowMatrix<T> dS_in;                                // (N, P)
  RowMatrix<T> Wd;   // (Lmax, Lmax): exp(Lam_i - Lam_j) for j < i, zero on and above the diagonal
  RowMatrix<T> W;    // (Lmax, Lmax): Wd_ij scale_j for j < i, gamma_i on the diagonal, zero above
  RowMatrix<T> X;    // (Lmax, Lmax): backward scratch, dW o Wd
  Vector<T> la, gam, sig, scale, lam, decay_in, cw, dlam, dscale, dgam;

  explicit ChunkScanner(const ScanShape& s)
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

// ---- the forward's small products -----------------------------------------------------------
//
// C = beta C + diag(r) A B for the forward's state and intra-chunk products: (Lr, N) x (N, P),
// (N, Lr) x (Lr, P) and (Lr, Lr) x (Lr, P) at Lr = 32. At these sizes Eigen's GEMM spends about
// a quarter of its time packing both operands afresh on every call. Here, with B and C row-major,
// C is formed MR rows at a time straight from the operands: per inner index p, NP packets of B's
// row p and a broadcast of A(i, p) per row feed MR x NP accumulators held in registers (the
// "broadcast A, stream B" micro-kernel of BLIS-style GEMMs, minus the packing; the k x NP packets
// of B stay in L1 across the row tiles). Measured at N = 128, P = 64 on AVX-512, one core: 1.2x
// (S += K^T V) to 1.6x (Q S) Eigen's speed on the same products. Every element of C is one chain
// of multiply-adds over p in order, whatever the addresses, strides or thread: results depend on
// the shapes alone. Its reference is Eigen's product; the tests compare chunked_scan, which runs
// on it, with the literal recurrence.
template <class T>
struct SmallGemm {
  index_t m = 0, n = 0, k = 0;
  const T* a = nullptr;  // A(i, p) = a[i a_row + p a_col]: any strides, so A may be a transposed view
  index_t a_row = 0, a_col = 0;
  const T* b = nullptr;  // B(p, j) = b[p ldb + j]
  index_t ldb = 0;
  T* c = nullptr;        // C(i, j) = c[i ldc + j]
  index_t ldc = 0;
  const T* r = nullptr;      // (m) or null: row i of A B scaled by r_i
  bool accumulate = false;  // C = beta C + diag(r) A B; else C = diag(r) A B, C not read
  T beta = T(1);
};

// One MR x (NP packets) tile of C at (i0, j0).
template <class T, int MR, int NP>
void small_gemm_tile(const SmallGemm<T>& g, index_t i0, index_t j0) {
  using namespace Eigen::internal;
  using Packet = typename packet_traits<T>::type;
  constexpr int lanes = packet_traits<T>::size;
  Packet acc[MR][NP];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NP; ++j) acc[i][j] = pset1<Packet>(T(0));
  const T* a = g.a + i0 * g.a_row;
  const T* b = g.b + j0;
  for (index_t p = 0; p < g.k; ++p, b += g.ldb) {
    Packet bp[NP];
    for (int j = 0; j < NP; ++j) bp[j] = ploadu<Packet>(b + j * lanes);
    for (int i = 0; i < MR; ++i) {
      const Packet ai = pset1<Packet>(a[i * g.a_row + p * g.a_col]);
      for (int j = 0; j < NP; ++j) acc[i][j] = pmadd(ai, bp[j], acc[i][j]);
    }
  }
  for (int i = 0; i < MR; ++i) {
    T* c = g.c + (i0 + i) * g.ldc + j0;
    for (int j = 0; j < NP; ++j) {
      Packet out = g.r ? pmul(acc[i][j], pset1<Packet>(g.r[i0 + i])) : acc[i][j];
      if (g.accumulate) out = pmadd(pset1<Packet>(g.beta), ploadu<Packet>(c + j * lanes), out);
      pstoreu(c + j * lanes, out);
    }
  }
}

// Runs the tile instantiation for mr rows (1..MR) and np packets (1..NP).
template <class T, int MR, int NP>
void small_gemm_tile_of(const SmallGemm<T>& g, index_t i0, index_t j0, index_t mr, index_t np) {
  if constexpr (MR > 1) {
    if (mr < MR) return small_gemm_tile_of<T, MR - 1, NP>(g, i0, j0, mr, np);
  }
  if constexpr (NP > 1) {
    if (np < NP) return small_gemm_tile_of<T, MR, NP - 1>(g, i0, j0, mr, np);
  }
  small_gemm_tile<T, MR, NP>(g, i0, j0);
}

template <class T>
void small_gemm(const SmallGemm<T>& g) {
  constexpr int lanes = Eigen::internal::packet_traits<T>::size;
  // MR x NP accumulators, NP packets of B and one broadcast fit the vector registers (29 of 32
  // with AVX-512 or NEON, 15 of 16 with AVX2)
  constexpr int regs = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS;
  constexpr int NP = regs >= 32 ? 4 : regs >= 16 ? 2 : 1, MR = regs >= 16 ? 6 : 4;
  const index_t n_packed = g.n / lanes * lanes;
  for (index_t j0 = 0; j0 < n_packed; j0 += NP * lanes)
    for (index_t i0 = 0; i0 < g.m; i0 += MR)
      small_gemm_tile_of<T, MR, NP>(g, i0, j0, std::min<index_t>(MR, g.m - i0),
                                    std::min<index_t>(NP, (n_packed - j0) / lanes));
  for (index_t j = n_packed; j < g.n; ++j)  // the columns left over from whole packets
    for (index_t i = 0; i < g.m; ++i) {
      T acc = 0;
      for (index_t p = 0; p < g.k; ++p)
        acc = Eigen::internal::pmadd(g.a[i * g.a_row + p * g.a_col], g.b[p * g.ldb + j], acc);
      T out = g.r ? acc * g.r[i] : acc;
      if (g.accumulate) out = Eigen::internal::pmadd(g.beta, g.c[i * g.ldc + j], out);
      g.c[i * g.ldc + j] = out;
    }
}

// ---- forward ---------------------------------------------------------------------------------

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
  const ScanShape& sh;
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

  ForwardBlock(const ScanShape& s, index_t piece_max, index_t first_head, index_t end_head)
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
  void begin_piece(const ScanChunk& piece, index_t b, const T* q, const T* k, const T* v) {
    g_formed = -1;
    if (!gathered) return;
    const index_t qn = R * N, vn = R * P;
    for (index_t i = 0; i < piece.length; ++i) {
      const index_t bt = token(b, piece.start + i);
      const T* qs = q + (bt * sh.groups + g0) * qn;
      const T* ks = k + (bt * sh.groups + g0) * qn;
      for (index_t gi = 0; gi < g1 - g0; ++gi) {
        std::copy(qs + gi * qn, qs + (gi + 1) * qn, Q[static_cast<std::size_t>(gi)].data() + i * qn);
        std::copy(ks + gi * qn, ks + (gi + 1) * qn, K[static_cast<std::size_t>(gi)].data() + i * qn);
      }
      const T* vs = v + (bt * sh.heads + h0) * vn;
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
  void head_forward(const ScanChunk& piece, index_t b, index_t h, const T* q, const T* k, const T* v,
                    const T* log_alpha, const T* gamma, const T* shift, const T* D, T* y, T* saved_state) {
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

// Runs body(b, h0, h1, chunks) over (row, block of heads) items with a static schedule, one item
// per OpenMP iteration. A thread walks its heads chunk by chunk, so the rows it reads for a
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

// y and the states entering each chunk (chunk_states may be null): every (row, block of heads) of
// for_each_head_block walks its pieces (kForwardPiece) in order, and inside each, its heads.
template <class T>
void chunked_scan_forward(const ScanShape& sh, const std::int32_t* doc_ids, const T* q, const T* k, const T* v,
                          const T* log_alpha, const T* gamma, const T* shift, const T* D, T* y, T* chunk_states) {
  const index_t state_size = sh.d_state * sh.head_dim, piece_max = std::min(sh.chunk_size, kForwardPiece);
  for_each_head_block(sh, doc_ids, [&](index_t b, index_t h0, index_t h1, const std::vector<ScanChunk>& chunks) {
    ForwardBlock<T> block(sh, piece_max, h0, h1);
    for (std::size_t ci = 0; ci < chunks.size(); ++ci) {
      const ScanChunk& c = chunks[ci];
      for (index_t at = 0; at < c.length; at += piece_max) {
        const index_t len = std::min(piece_max, c.length - at);
        const ScanChunk piece{c.start + at, len, c.first_in_doc && at == 0, c.last_in_doc && at + len == c.length};
        block.begin_piece(piece, b, q, k, v);
        for (index_t h = h0; h < h1; ++h) {
          // the state entering the chunk, saved for the backward
          T* saved = chunk_states && at == 0
                         ? chunk_states + ((b * sh.heads + h) * sh.max_chunks + static_cast<index_t>(ci)) * state_size
                         : nullptr;
          block.head_forward(piece, b, h, q, k, v, log_alpha, gamma, shift, D, y, saved);
        }
        block.end_piece(piece, b, y);
      }
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
