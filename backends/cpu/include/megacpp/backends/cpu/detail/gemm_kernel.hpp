// CPU backend: a blocked, register-tiled GEMM (the GotoBLAS/BLIS scheme) on Eigen's SIMD packets.
//
//   C = alpha op(A) op(B) + beta C, row-major, on one thread (gemm.hpp splits C across threads)
//
// Loops, outermost first (Goto & van de Geijn, "Anatomy of high-performance matrix
// multiplication", ACM TOMS 2008; BLIS's five loops around the micro-kernel):
//   jc over columns in blocks of kNc      op(B) block (kKc x kNc) packed into micro-panels
//   pc over depth in blocks of kKc        op(A) block (kMc x kKc): A^T packed, A read in place
//   ic over rows in blocks of kMc
//   jr over the B block's micro-panels     one micro-panel (kKc x NR)
//   ir over the A block's row tiles        micro-kernel: an MR x NR tile of C in registers
//
// op(A) = A is not packed: its rows are already contiguous in depth, and the micro-kernel's
// broadcasts read them in place (packing them cost 11-17% of a Linear layer's products, whose
// n of 128-2048 columns amortises little).
//
// Why not Eigen's GEBP: on the dev box's AVX-512 it reaches ~55-65% of the FMA peak per thread
// (bench/gemm prints both); its 48 x 4 tile does 3 vector loads and 4 broadcasts for 12 FMAs,
// this 6 x 64 tile 4 loads and 6 broadcasts for 24. This kernel measures 65-80% there, about
// where OpenBLAS 0.3.21 and oneDNN 2.6 sgemm land on the same VM (measured side by side).
//
// Every element of C gets the same arithmetic wherever it is and whatever the matrix around it:
// its dot product runs over k in blocks of kKc (fixed, not derived from m or n), each block one
// chain of FMAs from zero, added to C in block order; partial tiles (row or column tails) run
// the full tile on zero-padded (or, for rows read in place, repeated) operands and the same
// packet update on a copy of C. So a row of C depends only on its row of op(A) and on op(B):
// independent of the row count m, of the rows beside it and of the thread split. That is what
// lets a whole layer give a document the same bits packed or alone (docs/recipe.md, "Document
// masking"), and a product the same bits on any thread count.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "megacpp/backends/cpu/detail/packet_math.hpp"
#include "megacpp/core/backend.hpp"

namespace megacpp::cpu::packed_gemm {

// Tile and block sizes for element type T.
//
// Registers: MR x NP accumulators, NP packets of B and one broadcast of A fit the vector
// register file: 6 x 4 + 4 + 1 = 29 of 32 with AVX-512, 6 x 2 + 2 + 1 = 15 of 16 with AVX2.
// Per depth step the tile does MR x NP FMAs for NP loads and MR broadcasts: 24 for 10 (measured
// on the Ice Lake dev box against 14 x 2, 12 x 2, 8 x 3, 7 x 4 and 28 x 1 tiles: the best; 12 x 2
// again 5-12% slower with the unrolled loop and A^T packed). With the depth loop unrolled, it
// runs at ~80% of one thread's FMA peak from L1, 66-72% of both threads' from L2 and 55-61% on
// the model's full-size products (FMA-loop peak 270-346 GFLOP/s on two threads, same minutes).
// Blocks (measured with kKc 96-512, kMc 48-288, kNc 256-4096; the machine's noise, +-10%, hides
// smaller differences): a B micro-panel of kKc x NR = 64 KB streams from L2 past each A tile; the
// A block (kMc x kKc = 96 KB) stays in L2; kNc bounds the packed B block (2 MB) to L2 + L3.
template <class T>
struct Tiling {
  static constexpr int lanes = kPacketLanes<T>;
  static constexpr int registers = EIGEN_ARCH_DEFAULT_NUMBER_OF_REGISTERS;
  static constexpr int NP = registers >= 32 ? 4 : 2;  // packets per tile row
  static constexpr int NR = NP * lanes;               // tile columns
  static constexpr int MR = 6;                        // tile rows
  static constexpr index_t kKc = 256;                 // depth block (fixed: see the file comment)
  static constexpr index_t kMc = MR * 16;             // rows per A block
  static constexpr index_t kNc = NR * 32;             // columns per packed B block
};


// Packs rows [i0, i0 + m) x depth [p0, p0 + kc) of op(A) = A^T (element (i, p) at A[p lda + i])
// into micro-panels of MR rows: panel q holds, for each depth p, its MR rows' values contiguous
// (zero past row m). Each depth step reads one contiguous run of A. (op(A) = A is not packed:
// the micro-kernel reads its rows in place, see micro_kernel.)
template <class T, class Tile = Tiling<T>>
void pack_a_transposed(const T* A, index_t lda, index_t i0, index_t m, index_t p0, index_t kc, T* out) {
  constexpr int MR = Tile::MR;
  const index_t full_panels = m / MR, tail = m - full_panels * MR;
  // Each depth step reads a short run from a different row of A (lda apart, often another page),
  // which the hardware prefetchers do not follow: fetching the run 8 rows ahead took the packing
  // from ~2-3 to ~1.3-1.7 cycles per element (weight-gradient shapes, A from memory; distances 4
  // and 16 measured worse).
  constexpr index_t kAhead = 8, kLineElements = 64 / sizeof(T);
  for (index_t p = 0; p < kc; ++p) {
    const T* src = A + (p0 + p) * lda + i0;
    if (p + kAhead < kc)
      for (index_t i = 0; i < m; i += kLineElements) __builtin_prefetch(src + kAhead * lda + i, 0, 3);
    T* dst = out + p * MR;
    // memcpy of a constant size is inlined (std::copy becomes a memmove call per 24 bytes)
    for (index_t q = 0; q < full_panels; ++q, src += MR, dst += MR * kc) std::memcpy(dst, src, MR * sizeof(T));
    if (tail) {
      std::copy(src, src + tail, dst);
      std::fill(dst + tail, dst + MR, T(0));
    }
  }
}

// lanes x lanes values in packets, for Eigen's ptranspose. (GCC warns that a SIMD type's
// alignment attribute is dropped when it is a template argument; Eigen silences the same warning
// inside its own headers, and the block lives on the stack where alignment is the compiler's.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
#endif
template <class T>
using TransposeBlock = Eigen::internal::PacketBlock<Packet<T>, kPacketLanes<T>>;
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Packs depth [p0, p0 + kc) x columns [j0, j0 + n) of op(B) into micro-panels of NR columns:
// panel q holds, for each depth p, its NR columns' values contiguous (zero past column n).
//
// op(B) = B^T (element (p, j) at B[j ldb + p], the Linear layer's x W^T) is a transpose: done in
// square blocks of packets (Eigen's ptranspose), lanes x lanes values at a time.
template <class T, class Tile = Tiling<T>>
void pack_b(const T* B, index_t ldb, bool trans, index_t p0, index_t kc, index_t j0, index_t n, T* out) {
  namespace ei = Eigen::internal;
  constexpr int NR = Tile::NR, L = Tile::lanes;
  for (index_t c0 = 0; c0 < n; c0 += NR, out += NR * kc) {
    const index_t cols = std::min<index_t>(NR, n - c0);
    if (!trans) {  // op(B)(p, j) = B[p ldb + j]: each depth step reads `cols` contiguous values
      for (index_t p = 0; p < kc; ++p) {
        const T* src = B + (p0 + p) * ldb + j0 + c0;
        T* dst = out + p * NR;
        if (cols == NR) {  // a whole panel row: NP packets (std::copy would call memmove)
          for (int j = 0; j < Tile::NP; ++j) ei::pstore(dst + j * L, ei::ploadu<Packet<T>>(src + j * L));
        } else {
          std::copy(src, src + cols, dst);
          std::fill(dst + cols, dst + NR, T(0));
        }
      }
      continue;
    }
    const index_t whole_cols = cols / L * L, whole_depth = kc / L * L;
    for (index_t c = 0; c < whole_cols; c += L) {
      const T* src = B + (j0 + c0 + c) * ldb + p0;  // column j0 + c0 + c of op(B), contiguous in p
      for (index_t p = 0; p < whole_depth; p += L) {
        TransposeBlock<T> block;
        for (int i = 0; i < L; ++i) block.packet[i] = ei::ploadu<Packet<T>>(src + i * ldb + p);
        ei::ptranspose(block);
        for (int i = 0; i < L; ++i) ei::pstore(out + (p + i) * NR + c, block.packet[i]);
      }
      for (index_t p = whole_depth; p < kc; ++p)
        for (int i = 0; i < L; ++i) out[p * NR + c + i] = src[i * ldb + p];
    }
    for (index_t c = whole_cols; c < NR; ++c) {
      if (c < cols) {
        const T* src = B + (j0 + c0 + c) * ldb + p0;
        for (index_t p = 0; p < kc; ++p) out[p * NR + c] = src[p];
      } else {
        for (index_t p = 0; p < kc; ++p) out[p * NR + c] = T(0);
      }
    }
  }
}

// How a depth block's products reach C: the first block applies beta (0: C is not read, so
// NaN or uninitialised memory there is harmless), later blocks add.
template <class T>
struct TileUpdate {
  T alpha = T(1);
  T beta = T(0);
  bool first = true;
};

// C tile (MR x NR at c, row stride ldc) = update(C, alpha * sum_p a_p b_p^T) over depth p < kc,
// where b is a packed micro-panel (kc x NR) and the tile's rows of op(A) are either a packed
// micro-panel (kPackedA: element (r, p) at a[p MR + r]) or rows of A read in place (element
// (r, p) at a[r lda + p]; rows past m repeat row m - 1, whose results are discarded). Only rows
// < m and columns < n of the tile are written; a partial tile goes through the same packet
// arithmetic on a padded copy.
template <class T, class Tile = Tiling<T>, bool kPackedA = true>
void micro_kernel(index_t kc, const T* a, index_t lda, const T* b, T* c, index_t ldc, index_t m, index_t n, TileUpdate<T> u) {
  namespace ei = Eigen::internal;
  using P = Packet<T>;
  constexpr int MR = Tile::MR, NP = Tile::NP, NR = Tile::NR, L = Tile::lanes;
  // The tile of C is read only after the depth loop: fetching it now hides its latency (C is
  // re-read once per depth block; for large products it lives in L3 or memory).
  constexpr index_t kLineElements = 64 / sizeof(T);
  for (index_t r = 0; r < m; ++r)
    for (index_t j = 0; j < n; j += kLineElements) __builtin_prefetch(c + r * ldc + j, 1, 3);
  P acc[MR][NP];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) acc[r][j] = ei::pset1<P>(T(0));
  // The depth loop unrolled 4x: fewer loop-control instructions, which can take the FMA
  // ports from the 24 FMAs of each step (measured on the dev box: +6-7% over the model's product
  // shapes, median of 16 interleaved rounds; 8x measured the same).
  if constexpr (kPackedA) {
#pragma GCC unroll 4
    for (index_t p = 0; p < kc; ++p, a += MR, b += NR) {
      P bp[NP];
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) bp[j] = ei::pload<P>(b + j * L);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const P ar = ei::pset1<P>(a[r]);
#pragma GCC unroll 4
        for (int j = 0; j < NP; ++j) acc[r][j] = ei::pmadd(ar, bp[j], acc[r][j]);
      }
    }
  } else {
    const T* rows[MR];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) rows[r] = a + std::min<index_t>(r, m - 1) * lda;
#pragma GCC unroll 4
    for (index_t p = 0; p < kc; ++p, b += NR) {
      P bp[NP];
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) bp[j] = ei::pload<P>(b + j * L);
#pragma GCC unroll 16
      for (int r = 0; r < MR; ++r) {
        const P ar = ei::pset1<P>(rows[r][p]);
#pragma GCC unroll 4
        for (int j = 0; j < NP; ++j) acc[r][j] = ei::pmadd(ar, bp[j], acc[r][j]);
      }
    }
  }
  const bool full = m == MR && n == NR;
  alignas(64) T padded[MR * NR];
  T* dst = c;
  index_t ld = ldc;
  if (!full) {  // a tail tile: update a zero-padded copy of C, then copy the valid part back
    dst = padded;
    ld = NR;
    std::fill(padded, padded + MR * NR, T(0));
    if (!(u.first && u.beta == T(0)))
      for (index_t r = 0; r < m; ++r) std::copy(c + r * ldc, c + r * ldc + n, padded + r * NR);
  }
  const P alpha = ei::pset1<P>(u.alpha), beta = ei::pset1<P>(u.beta);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      T* out = dst + r * ld + j * L;
      P base;
      if (!u.first || u.beta == T(1)) base = ei::ploadu<P>(out);
      else if (u.beta == T(0)) base = ei::pset1<P>(T(0));
      else base = ei::pmul(beta, ei::ploadu<P>(out));
      ei::pstoreu(out, ei::pmadd(alpha, acc[r][j], base));
    }
  }
  if (!full)
    for (index_t r = 0; r < m; ++r) std::copy(padded + r * NR, padded + r * NR + n, c + r * ldc);
}

// A thread's packing buffers, grown on demand and kept for the thread's lifetime (OpenMP reuses
// its threads), so a product allocates nothing after the first. Not counted in memory_stats():
// a fixed (kMc + kNc) x kKc elements per thread that has run a GEMM.
template <class T, class Tile = Tiling<T>>
struct Workspace {
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  std::unique_ptr<T, Free> a, b;
  Workspace() {
    a.reset(static_cast<T*>(std::aligned_alloc(64, sizeof(T) * Tile::kMc * Tile::kKc)));
    b.reset(static_cast<T*>(std::aligned_alloc(64, sizeof(T) * Tile::kNc * Tile::kKc)));
    if (!a || !b) throw std::bad_alloc();
  }
  static Workspace& of_this_thread() {
    static thread_local Workspace ws;
    return ws;
  }
};

// C (m x n, row stride ldc) = alpha op(A) op(B) + beta C on the calling thread.
template <class T, class Tile = Tiling<T>>
void gemm(const GemmArgs& g, T alpha, const T* A, const T* B, T beta, T* C) {
  const index_t m = g.m, n = g.n, k = g.k;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // empty inner product: C = beta C
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) C[i * g.ldc + j] = beta == T(0) ? T(0) : beta * C[i * g.ldc + j];
    return;
  }
  Workspace<T, Tile>& ws = Workspace<T, Tile>::of_this_thread();
  for (index_t jc = 0; jc < n; jc += Tile::kNc) {
    const index_t nc = std::min(Tile::kNc, n - jc);
    for (index_t pc = 0; pc < k; pc += Tile::kKc) {
      const index_t kc = std::min(Tile::kKc, k - pc);
      pack_b<T, Tile>(B, g.ldb, g.trans_b, pc, kc, jc, nc, ws.b.get());
      const TileUpdate<T> update{alpha, beta, pc == 0};
      for (index_t ic = 0; ic < m; ic += Tile::kMc) {
        const index_t mc = std::min(Tile::kMc, m - ic);
        if (g.trans_a) pack_a_transposed<T, Tile>(A, g.lda, ic, mc, pc, kc, ws.a.get());
        for (index_t jr = 0; jr < nc; jr += Tile::NR) {
          const T* b_panel = ws.b.get() + jr * kc;
          for (index_t ir = 0; ir < mc; ir += Tile::MR) {
            T* c_tile = C + (ic + ir) * g.ldc + jc + jr;
            const index_t mr = std::min<index_t>(Tile::MR, mc - ir), nr = std::min<index_t>(Tile::NR, nc - jr);
            if (g.trans_a)
              micro_kernel<T, Tile, true>(kc, ws.a.get() + ir * kc, 0, b_panel, c_tile, g.ldc, mr, nr, update);
            else
              micro_kernel<T, Tile, false>(kc, A + (ic + ir) * g.lda + pc, g.lda, b_panel, c_tile, g.ldc, mr, nr, update);
          }
        }
      }
    }
  }
}

}  // namespace megacpp::cpu::packed_gemm
