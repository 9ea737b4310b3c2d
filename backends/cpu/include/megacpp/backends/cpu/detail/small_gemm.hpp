// CPU backend: the small unpacked GEMM of the SSM scan's forward.
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
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>

#include "megacpp/backends/cpu/detail/eigen.hpp"
#include "megacpp/core/config.hpp"

namespace megacpp::cpu {

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

}  // namespace megacpp::cpu
