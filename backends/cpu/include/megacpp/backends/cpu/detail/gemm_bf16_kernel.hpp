// CPU backend: the bf16 x bf16 -> fp32 GEMM on AVX512-BF16's VDPBF16PS, on one thread.
//
//   C = alpha op(A) op(B) + beta C, A and B bf16, C and every sum fp32 (gemm_bf16.hpp threads it)
//
// VDPBF16PS (_mm512_dpbf16_ps; Intel SDM vol. 2, "VDPBF16PS") takes 16 fp32 accumulators and
// two vectors of 32 bf16, and adds to accumulator i the two products of its bf16 pair:
//   acc[i] += a[2i] b[2i] + a[2i+1] b[2i+1]
// (each bf16 product is exact in fp32; the adds round to nearest even; denormal inputs and
// outputs are flushed to zero). So both operands are packed as "k-pairs" (oneDNN's VNNI layout):
// the 32-bit word (lo, hi) holds the values at depth 2q and 2q + 1, and a vector of B holds one
// word per column. Per pair of depth steps the 6 x 64 tile then does what the fp32 tile
// (gemm_kernel.hpp) does per step: 4 vector loads of B, 6 broadcasts of A (one 32-bit word per
// row), 24 VDPBF16PS into 24 accumulators; twice the multiply-adds per instruction.
//
// Loops are the fp32 kernel's (GotoBLAS/BLIS, see gemm_kernel.hpp; blocks: Tiling), except that A is
// always packed: its k-pairs are words, so an odd depth needs a zero high half that reading A in
// place cannot give, and packing a row-major A is a copy of 32-bit words.
//
// Packed layouts (words of two bf16, lo = the even depth):
//   A micro-panel (MR rows): word [q MR + r]      = (op(A)(r, 2q), op(A)(r, 2q + 1))
//   B micro-panel (NR cols): word [q NR + c]      = (op(B)(2q, c), op(B)(2q + 1, c))
// with zeros past row m, column n and depth kc.
//
// Determinism (the fp32 kernel's property, kept): an element of C sums its depth in blocks of
// kKc (fixed and even, so the k-pairs are the same whatever the block), each block one chain of
// VDPBF16PS from zero over its pairs in order, added to C in block order; padded rows and columns
// change no other element. A row of C therefore depends only on its row of op(A) and on op(B):
// not on m, on the rows beside it or on the thread split. It does differ from the fp32 fallback
// (gemm_bf16.hpp), whose sums run one product at a time: the path is chosen once per process.
//
// Where the kernel is compiled: every function that uses the instruction carries
// MEGACPP_TARGET_AVX512BF16 (GCC/clang's target attribute), so the library builds for any
// x86-64 target (no -march needed) and the CPU is asked at run time whether the kernel may run
// (gemm_bf16.hpp). When -march already enables AVX512-BF16 the attribute changes
// nothing. Elsewhere (not x86-64, or not GCC/clang) MEGACPP_HAS_AVX512_BF16_KERNEL is 0 and
// only the fp32 fallback exists. AMX (AMX-BF16 tiles) is not implemented: no CPU this was
// developed on has it, and a kernel that has never run is not shipped.
#pragma once
#include "megacpp/backends/cpu/detail/guard.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "megacpp/core/backend.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/error.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MEGACPP_HAS_AVX512_BF16_KERNEL 1
#if defined(__clang__) && __clang_major__ >= 18
// clang 18 split 512-bit vectors into their own feature (evex512) for AVX10.
#define MEGACPP_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,evex512")))
#else
#define MEGACPP_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
#endif
#else
#define MEGACPP_HAS_AVX512_BF16_KERNEL 0
#endif

#if MEGACPP_HAS_AVX512_BF16_KERNEL
namespace megacpp::cpu::bf16_gemm {

// Tile and block sizes. The tile is the fp32 kernel's (6 x 64, 24 accumulators + 4 B vectors + 1
// broadcast = 29 of 32 registers): measured on the Zen 5 dev VM (one thread, thread CPU time,
// m n k = 1024 2048 2048) against 8 x 48 (-1%), 12 x 32 (-8%) and 14 x 32 (-6%). kKc counts depth
// elements (kKc / 2 pairs) and must be even. Against the fp32 kernel's blocks (kKc 256 -> 512
// here, as bf16 halves the bytes; kMc 96) kKc 1024 with kMc 48 was 5-8% faster on the square
// product and level on the model's shapes (kKc 256/768/2048, kMc 24/96/192, kNc 1024 measured
// no better): C is re-read once per depth block, and half as many blocks halve that traffic.
// The B micro-panel is then 128 KB (L2), the A block 96 KB, the packed B block 4 MB (L3).
struct Tiling {
  static constexpr int MR = 6;
  static constexpr int NP = 4;                // vectors per tile row
  static constexpr int NR = NP * 16;          // tile columns (16 fp32 lanes per vector)
  static constexpr index_t kKc = 1024;        // depth block (fixed and even: see the file comment)
  static constexpr index_t kMc = MR * 8;      // rows per A block
  // Rows of a transposed A packed at once. op(A)'s rows are then columns of A, so a block of kMc
  // reads 96 bytes of each of kKc rows of A, and between two blocks the kernel's pass over B
  // evicts those lines: packing ran at ~0.7 ns per element and took 25% of a transposed-A
  // product (m n k = 2048 512 4096, the dW of a Linear: 683 GFLOP/s against 920 untransposed).
  // Packing kMc x 10 rows reads ~1 KB runs of each row instead (the packed block, 960 KB, stays
  // in L2 while its kMc-row slices run).
  static constexpr index_t kMcTransposed = kMc * 10;
  static constexpr index_t kNc = NR * 32;     // columns per packed B block
};

inline std::uint16_t bits_at(const bf16* p) { return p->bits; }
inline std::uint32_t pair_word(std::uint16_t lo, std::uint16_t hi) {
  return static_cast<std::uint32_t>(lo) | (static_cast<std::uint32_t>(hi) << 16);
}

// Word c of the interleave of two rows lo and hi of 32 bf16: 16-bit lanes (lo[c], hi[c]) for
// c < 16 from the first index vector, c in [16, 32) from the second (_mm512_permutex2var_epi16:
// index bit 5 picks the second source). Packing a B^T-free B and a transposed A both use it.
alignas(64) inline constexpr std::uint16_t kInterleaveLow[32] = {0, 32, 1, 33, 2, 34, 3, 35, 4, 36, 5, 37, 6, 38, 7, 39,
                                                                 8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
alignas(64) inline constexpr std::uint16_t kInterleaveHigh[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                                  24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};

// The permutation that turns 6 rows of 16 words (row r: pairs q0 .. q0 + 15) into the MR = 6
// micro-panel order (word 6 q + r): output vector v, lane l holds word w = 16 v + l, i.e. pair
// q = w / 6 of row r = w % 6. _mm512_permutex2var_epi32 reads two rows at a time (index bit 4
// picks the second), so `index` names the pair q (+16 for an odd row) and `take[v][s]` the lanes
// whose row is 2s or 2s + 1; three masked permutes OR'ed give one output vector.
struct PanelOrder6 {
  std::uint32_t index[6][16];
  std::uint16_t take[6][3];
};
inline constexpr PanelOrder6 kPanelOrder6 = [] {
  PanelOrder6 t{};
  for (int v = 0; v < 6; ++v)
    for (int l = 0; l < 16; ++l) {
      const int w = 16 * v + l, q = w / 6, r = w % 6;
      t.index[v][l] = static_cast<std::uint32_t>(q + 16 * (r % 2));
      t.take[v][r / 2] = static_cast<std::uint16_t>(t.take[v][r / 2] | (1u << l));
    }
  return t;
}();

// Packs rows [i0, i0 + m) x depth [p0, p0 + kc) of op(A) into micro-panels of MR rows (layout
// in the file comment); op(A)(i, p) is A[i lda + p], or A[p lda + i] when trans. Both layouts
// are vectorised for the kernel's 6-row tile (packing was ~12% of a bf16 training step as
// scalar word copies, measured with perf on the dense bench model).
template <class Tile = Tiling>
MEGACPP_TARGET_AVX512BF16 void pack_a(const bf16* A, index_t lda, bool trans, index_t i0, index_t m, index_t p0,
                                      index_t kc, std::uint32_t* out) {
  constexpr int MR = Tile::MR;
  static_assert(MR == 6, "megacpp_bf16_pack_a_is_written_for_the_6_row_tile: kPanelOrder6 permutes 6 rows");
  const index_t pairs = (kc + 1) / 2;
  if (!trans) {
    // Row r's pairs are adjacent words: load 16 pairs of each of the 6 rows (masked loads read
    // nothing past depth kc and leave the odd tail's high half and absent rows zero), then
    // permute them into 96 consecutive panel words (kPanelOrder6).
    __m512i index[6];
    for (int v = 0; v < 6; ++v) index[v] = _mm512_loadu_si512(kPanelOrder6.index[v]);
    for (index_t r0 = 0; r0 < m; r0 += MR, out += MR * pairs) {
      const index_t rows = std::min<index_t>(MR, m - r0);
      for (index_t q0 = 0; q0 < pairs; q0 += 16) {
        const index_t elems = std::min<index_t>(32, kc - 2 * q0);
        const __mmask32 load = elems == 32 ? ~__mmask32{0} : static_cast<__mmask32>((std::uint64_t{1} << elems) - 1);
        __m512i row[6];
        for (int r = 0; r < 6; ++r)
          row[r] = r < rows ? _mm512_maskz_loadu_epi16(load, A + (i0 + r0 + r) * lda + p0 + 2 * q0) : _mm512_setzero_si512();
        const index_t words = std::min<index_t>(16, pairs - q0) * MR;  // this block's panel words
        std::uint32_t* dst = out + q0 * MR;
        for (int v = 0; v < 6 && 16 * v < words; ++v) {
          __m512i o = _mm512_maskz_permutex2var_epi32(kPanelOrder6.take[v][0], row[0], index[v], row[1]);
          o = _mm512_or_si512(o, _mm512_maskz_permutex2var_epi32(kPanelOrder6.take[v][1], row[2], index[v], row[3]));
          o = _mm512_or_si512(o, _mm512_maskz_permutex2var_epi32(kPanelOrder6.take[v][2], row[4], index[v], row[5]));
          const index_t left = words - 16 * v;
          const __mmask16 store = left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
          _mm512_mask_storeu_epi32(dst + 16 * v, store, o);
        }
      }
    }
  } else {
    // op(A)(i, p) = A[p lda + i]: the words of pair q interleave rows 2q and 2q + 1 of A, which
    // are contiguous over i. Each row pair is read in runs of 32 values and interleaved
    // (kInterleaveLow/High) into a staging block of kStagePairs pairs x all m rows; then each
    // micro-panel takes its 6 words per pair from there, a contiguous run of its own. Writing
    // the panels straight from the rows put every pair's 6-word pieces 12 KB apart (MR x 512
    // pairs x 4 bytes), one L1 set for all of them, and packing ran 4x slower.
    constexpr index_t kStagePairs = 8, kStageRows = (Tile::kMcTransposed + 31) / 32 * 32;  // 16 KB on the stack
    check(m <= kStageRows, "bf16 gemm pack_a", "a transposed A block of ", m, " rows exceeds ", kStageRows);
    const __m512i low = _mm512_load_si512(kInterleaveLow), high = _mm512_load_si512(kInterleaveHigh);
    alignas(64) std::uint32_t stage[kStagePairs][kStageRows];
    const index_t panels = (m + MR - 1) / MR, width = (panels * MR + 31) / 32 * 32;  // zeros past row m
    for (index_t q0 = 0; q0 < pairs; q0 += kStagePairs) {
      const index_t staged = std::min(kStagePairs, pairs - q0);
      for (index_t dq = 0; dq < staged; ++dq) {
        const bf16* lo = A + (p0 + 2 * (q0 + dq)) * lda + i0;
        const bf16* hi = 2 * (q0 + dq) + 1 < kc ? lo + lda : nullptr;
        for (index_t c = 0; c < width; c += 32) {
          const index_t valid = std::clamp<index_t>(m - c, 0, 32);
          const __mmask32 mask = valid == 32 ? ~__mmask32{0} : static_cast<__mmask32>((std::uint64_t{1} << valid) - 1);
          const __m512i x = _mm512_maskz_loadu_epi16(mask, lo + c);
          const __m512i y = hi ? _mm512_maskz_loadu_epi16(mask, hi + c) : _mm512_setzero_si512();
          _mm512_store_si512(&stage[dq][c], _mm512_permutex2var_epi16(x, low, y));
          _mm512_store_si512(&stage[dq][c + 16], _mm512_permutex2var_epi16(x, high, y));
        }
      }
      for (index_t panel = 0; panel < panels; ++panel) {
        std::uint32_t* dst = out + panel * MR * pairs + q0 * MR;
        for (index_t dq = 0; dq < staged; ++dq) std::memcpy(dst + dq * MR, &stage[dq][panel * MR], MR * sizeof(std::uint32_t));
      }
    }
  }
}

// Transposes 16 x 16 32-bit words in registers: on return r[i] holds what was column i. Two
// rounds of unpacks transpose 4 x 4 blocks inside each 128-bit lane, two rounds of lane
// shuffles move the blocks (the usual AVX-512 pattern, e.g. Eigen's ptranspose of Packet16f).
MEGACPP_TARGET_AVX512BF16 inline void transpose_16x16_words(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // s[4g + j], lane L: column 4L + j of rows 4g .. 4g + 3
  for (int g = 0; g < 4; ++g) {
    r[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i u0 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0x88), u1 = _mm512_shuffle_i32x4(r[j], r[4 + j], 0xDD);
    const __m512i u2 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0x88), u3 = _mm512_shuffle_i32x4(r[8 + j], r[12 + j], 0xDD);
    t[j] = _mm512_shuffle_i32x4(u0, u2, 0x88);
    t[8 + j] = _mm512_shuffle_i32x4(u0, u2, 0xDD);
    t[4 + j] = _mm512_shuffle_i32x4(u1, u3, 0x88);
    t[12 + j] = _mm512_shuffle_i32x4(u1, u3, 0xDD);
  }
  for (int i = 0; i < 16; ++i) r[i] = t[i];
}

// Packs depth [p0, p0 + kc) x columns [j0, j0 + n) of op(B) into micro-panels of NR columns
// (layout in the file comment); op(B)(p, j) is B[p ldb + j], or B[j ldb + p] when trans.
template <class Tile = Tiling>
MEGACPP_TARGET_AVX512BF16 void pack_b(const bf16* B, index_t ldb, bool trans, index_t p0, index_t kc, index_t j0, index_t n,
                   std::uint32_t* out) {
  constexpr int NR = Tile::NR;
  const index_t pairs = (kc + 1) / 2, whole = kc / 2;
  const __m512i low = _mm512_load_si512(kInterleaveLow), high = _mm512_load_si512(kInterleaveHigh);
  const index_t padded_n = (n + NR - 1) / NR * NR;  // the last panel's columns past n are zeros
  if (!trans) {
    // Each depth step is a contiguous run of columns: interleave two rows of B, 32 columns at a
    // time, and walk each row across every panel (one sequential read of the row; panel by panel
    // the rows' lines came ldb apart, and packing took ~15% of a 2048^3 product, measured).
    for (index_t q = 0; q < pairs; ++q) {
      const bf16* lo = B + (p0 + 2 * q) * ldb + j0;
      const bf16* hi = 2 * q + 1 < kc ? lo + ldb : nullptr;
      for (index_t c = 0; c < padded_n; c += 32) {
        // masked loads read nothing past column n (a masked-off lane never faults)
        const index_t valid = std::clamp<index_t>(n - c, 0, 32);
        const __mmask32 mask = valid == 32 ? ~__mmask32{0} : static_cast<__mmask32>((std::uint64_t{1} << valid) - 1);
        const __m512i x = _mm512_maskz_loadu_epi16(mask, lo + c);
        const __m512i y = hi ? _mm512_maskz_loadu_epi16(mask, hi + c) : _mm512_setzero_si512();
        std::uint32_t* dst = out + (c / NR) * NR * pairs + q * NR + c % NR;
        _mm512_store_si512(dst, _mm512_permutex2var_epi16(x, low, y));
        _mm512_store_si512(dst + 16, _mm512_permutex2var_epi16(x, high, y));
      }
    }
    return;
  }
  // op(B) = B^T (the Linear layer's x W^T): column j's pairs are adjacent words of row j of B, so
  // 16 pairs of 16 columns are a 16 x 16 transpose of words (gathers measured 4x slower).
  for (index_t c0 = 0; c0 < padded_n; c0 += NR, out += NR * pairs) {
    const index_t cols = std::clamp<index_t>(n - c0, 0, NR);
    const bf16* panel = B + (j0 + c0) * ldb + p0;
    index_t q0 = 0;
    for (; q0 + 16 <= whole; q0 += 16)
      for (index_t c = 0; c < NR; c += 16) {
        __m512i r[16];
        for (int i = 0; i < 16; ++i)
          r[i] = c + i < cols ? _mm512_loadu_si512(panel + (c + i) * ldb + 2 * q0) : _mm512_setzero_si512();
        transpose_16x16_words(r);
        for (int i = 0; i < 16; ++i) _mm512_store_si512(out + (q0 + i) * NR + c, r[i]);
      }
    for (index_t q = q0; q < pairs; ++q) {
      std::uint32_t* dst = out + q * NR;
      const bf16* src = panel + 2 * q;
      if (q < whole)
        for (index_t c = 0; c < cols; ++c) std::memcpy(&dst[c], src + c * ldb, 4);
      else
        for (index_t c = 0; c < cols; ++c) dst[c] = pair_word(bits_at(src + c * ldb), 0);
      for (index_t c = cols; c < NR; ++c) dst[c] = 0;
    }
  }
}

// How a depth block's sums reach C: the first block applies beta (0: C is not read, so NaN or
// uninitialised memory there is harmless), later blocks add.
struct TileUpdate {
  float alpha = 1;
  float beta = 0;
  bool first = true;
};

// C tile (MR x NR at c, row stride ldc) = update(C, alpha * sum over `pairs` k-pairs of a b),
// a and b packed micro-panels. Rows >= m and columns >= n of the tile are neither read nor
// written (masked stores); the arithmetic of every written element is the full tile's.
template <class Tile = Tiling>
MEGACPP_TARGET_AVX512BF16 void micro_kernel(index_t pairs, const std::uint32_t* a, const std::uint32_t* b, float* c, index_t ldc, index_t m,
                         index_t n, TileUpdate u) {
  constexpr int MR = Tile::MR, NP = Tile::NP, NR = Tile::NR;
  for (index_t r = 0; r < m; ++r)
    for (index_t j = 0; j < n; j += 16) __builtin_prefetch(c + r * ldc + j, 1, 3);
  __m512 acc[MR][NP];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) acc[r][j] = _mm512_setzero_ps();
#pragma GCC unroll 4
  for (index_t q = 0; q < pairs; ++q, a += MR, b += NR) {
    __m512bh bq[NP];
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) bq[j] = (__m512bh)_mm512_load_si512(b + j * 16);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512bh ar = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
#pragma GCC unroll 4
      for (int j = 0; j < NP; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], ar, bq[j]);
    }
  }
  const __m512 alpha = _mm512_set1_ps(u.alpha), beta = _mm512_set1_ps(u.beta);
  __mmask16 masks[NP];
  for (int j = 0; j < NP; ++j) {
    const index_t valid = std::clamp<index_t>(n - 16 * j, 0, 16);
    masks[j] = valid == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << valid) - 1);
  }
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (r >= m) break;
#pragma GCC unroll 4
    for (int j = 0; j < NP; ++j) {
      float* out = c + r * ldc + j * 16;
      __m512 base;
      if (!u.first || u.beta == 1.0f) base = _mm512_maskz_loadu_ps(masks[j], out);
      else if (u.beta == 0.0f) base = _mm512_setzero_ps();
      else base = _mm512_mul_ps(beta, _mm512_maskz_loadu_ps(masks[j], out));
      _mm512_mask_storeu_ps(out, masks[j], _mm512_fmadd_ps(alpha, acc[r][j], base));
    }
  }
}

// A thread's packing buffers (words), allocated once per thread and kept for its lifetime (OpenMP
// reuses its threads). Not counted in memory_stats(): (kMcTransposed + kNc) x kKc bf16 (5.2 MB) per
// thread.
template <class Tile = Tiling>
struct Workspace {
  struct Free {
    void operator()(std::uint32_t* p) const { std::free(p); }
  };
  std::unique_ptr<std::uint32_t, Free> a, b;
  Workspace() {
    constexpr index_t rows = std::max(Tile::kMc, Tile::kMcTransposed);
    a.reset(static_cast<std::uint32_t*>(std::aligned_alloc(64, sizeof(std::uint32_t) * rows * Tile::kKc / 2)));
    b.reset(static_cast<std::uint32_t*>(std::aligned_alloc(64, sizeof(std::uint32_t) * Tile::kNc * Tile::kKc / 2)));
    if (!a || !b) throw std::bad_alloc();
  }
  static Workspace& of_this_thread() {
    static thread_local Workspace ws;
    return ws;
  }
};

// C (m x n, row stride ldc) = alpha op(A) op(B) + beta C on the calling thread. The caller checks
// that the CPU has AVX512-BF16 (gemm_bf16.hpp).
template <class Tile = Tiling>
MEGACPP_TARGET_AVX512BF16 void gemm(const GemmArgs& g, float alpha, const bf16* A, const bf16* B, float beta, float* C) {
  static_assert(Tile::kKc % 2 == 0, "megacpp_bf16_gemm_depth_block_must_be_even: the k-pairs must not straddle blocks");
  const index_t m = g.m, n = g.n, k = g.k;
  if (m == 0 || n == 0) return;
  if (k == 0) {  // empty inner product: C = beta C
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) C[i * g.ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * g.ldc + j];
    return;
  }
  static_assert(Tile::kMcTransposed % Tile::kMc == 0 && Tile::kMc % Tile::MR == 0, "megacpp_bf16_gemm_blocks_must_nest");
  Workspace<Tile>& ws = Workspace<Tile>::of_this_thread();
  const index_t packed_rows = g.trans_a ? Tile::kMcTransposed : Tile::kMc;
  for (index_t jc = 0; jc < n; jc += Tile::kNc) {
    const index_t nc = std::min(Tile::kNc, n - jc);
    for (index_t pc = 0; pc < k; pc += Tile::kKc) {
      const index_t kc = std::min(Tile::kKc, k - pc), pairs = (kc + 1) / 2;
      pack_b<Tile>(B, g.ldb, g.trans_b, pc, kc, jc, nc, ws.b.get());
      const TileUpdate update{alpha, beta, pc == 0};
      for (index_t ia = 0; ia < m; ia += packed_rows) {  // pack packed_rows of op(A), then run them kMc at a time
        const index_t ma = std::min(packed_rows, m - ia);
        pack_a<Tile>(A, g.lda, g.trans_a, ia, ma, pc, kc, ws.a.get());
        for (index_t ic = ia; ic < ia + ma; ic += Tile::kMc) {
          const index_t mc = std::min(Tile::kMc, ia + ma - ic);
          const std::uint32_t* a_block = ws.a.get() + (ic - ia) * pairs;  // its first micro-panel ((ic - ia) / MR)
          for (index_t jr = 0; jr < nc; jr += Tile::NR) {
            const std::uint32_t* b_panel = ws.b.get() + jr * pairs;
            for (index_t ir = 0; ir < mc; ir += Tile::MR) {
              const index_t mr = std::min<index_t>(Tile::MR, mc - ir), nr = std::min<index_t>(Tile::NR, nc - jr);
              micro_kernel<Tile>(pairs, a_block + ir * pairs, b_panel, C + (ic + ir) * g.ldc + jc + jr, g.ldc, mr, nr, update);
            }
          }
        }
      }
    }
  }
}

}  // namespace megacpp::cpu::bf16_gemm
#endif  // MEGACPP_HAS_AVX512_BF16_KERNEL
