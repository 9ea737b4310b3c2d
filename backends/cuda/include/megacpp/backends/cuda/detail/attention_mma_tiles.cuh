// CUDA backend: the building blocks of the bf16 tensor-core attention (kernels in
// detail/attention_mma.cuh): its tile sizes, the shared-memory matrices and each kernel's plan of
// them, the staging of fp32 rows as bf16 tiles, and the one product helper every product uses.
//
// Products. strip_product: a warp's C (16 x N, accumulator fragments in registers) += op(A)
// (16 x K, bf16, shared) op(B) (K x N, bf16, shared), WMMA bf16 16x16x16 fragments with fp32
// accumulation; the fragment layouts (row_major, col_major) read a transposed operand in place.
// Every product of the attention is one call:
//   forward   S = Q K^T (A row, B col)          O += P V (A row, B row)
//   dK/dV     S^T = K Q^T, dP^T = V dO^T (A row, B col);  dV += P^T dO, dK += dS^T Q (A row, B row)
//   dQ        S = Q K^T, dP = dO V^T (A row, B col);      dQ += dS K (A row, B row)
//
// WMMA's rules (CUDA C++ Programming Guide, "Warp Matrix Functions", wmma::load_matrix_sync): a
// fragment's pointer 256-bit aligned, ldm a multiple of 8 elements for bf16 and 4 for float. Every
// shared matrix here has 16k rows, columns a multiple of 16 and rows padded by 8 bf16 or 4 floats
// (16 bytes): fragment pointers land on 32-byte boundaries, and consecutive rows start 4 banks
// apart (no bank conflicts for the 8 rows of 16 bytes a fragment load reads at once). Regions are
// multiples of 256 bytes, carved from a 128-byte aligned base (the kernels' extern __shared__).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cuda_bf16.h>
#include <mma.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "megacpp/backends/cuda/detail/attention.cuh"

namespace megacpp::cuda::flash::tensor_core {

namespace wmma = nvcuda::wmma;
using nv_bf16 = __nv_bfloat16;  // CUDA's bf16 (megacpp::bf16 is the host storage type of the same bits)

inline constexpr int kWarps = 4;
inline constexpr int kBlockThreads = kWarps * 32;
inline constexpr int kFragment = 16;                 // WMMA bf16 m16n16k16
inline constexpr int kTileRows = kWarps * kFragment;  // 64: a query tile (forward, dQ) or a key tile (dK/dV)
inline constexpr int kKeyStep = 64;                   // keys staged per step (forward, dQ)
inline constexpr int kQueryStep = 32;                 // queries staged per step (dK/dV)

// Host side, shared by the launches (attention_mma_launch.cuh) and the host emulation of the
// kernels (tests/cuda_emulation). Calls f.template operator()<D>() with the padded width D >= head_dim.
template <class F>
void with_padded_dim(index_t dim, F&& f) {
  if (dim <= 64) f.template operator()<64>();
  else f.template operator()<128>();
}

// float4 loads need every row 16-byte aligned: dim % 4 == 0 and 16-byte aligned tensors.
inline bool can_load_float4(index_t dim, std::initializer_list<const float*> tensors) {
  if (dim % 4 != 0) return false;
  for (const float* t : tensors)
    if (reinterpret_cast<std::uintptr_t>(t) % 16 != 0) return false;
  return true;
}

using Accumulator = wmma::fragment<wmma::accumulator, kFragment, kFragment, kFragment, float>;
template <class Layout>
using OperandA = wmma::fragment<wmma::matrix_a, kFragment, kFragment, kFragment, nv_bf16, Layout>;
template <class Layout>
using OperandB = wmma::fragment<wmma::matrix_b, kFragment, kFragment, kFragment, nv_bf16, Layout>;

// A (Rows, Cols) row-major matrix of E in shared memory, rows padded by 16 bytes (see the top).
template <class E, int Rows, int Cols>
struct SharedMatrix {
  static_assert(Rows % kFragment == 0 && Cols % kFragment == 0, "megacpp_mma_tile: fragments are 16 x 16");
  static constexpr int kLd = Cols + 16 / static_cast<int>(sizeof(E));  // +8 bf16 or +4 float
  static constexpr std::size_t kBytes = sizeof(E) * Rows * kLd;
  static_assert(kBytes % 256 == 0, "megacpp_mma_tile_alignment: regions must keep fragment pointers 32-byte aligned");
};
template <int Rows, int Cols>
using Bf16Tile = SharedMatrix<nv_bf16, Rows, Cols>;
template <int Rows, int Cols>
using FloatTile = SharedMatrix<float, Rows, Cols>;

// Hands out consecutive 256-byte aligned regions of a block's shared memory. The host builds the
// same plan from a null base for its size (integer arithmetic, the pointers never dereferenced).
struct SharedCarver {
  std::uintptr_t base;
  std::size_t used = 0;
  template <class E>
  __host__ __device__ E* take(std::size_t bytes) {
    E* region = reinterpret_cast<E*>(base + used);
    used += (bytes + 255) / 256 * 256;
    return region;
  }
};

// ---- the one product helper ---------------------------------------------------------------------

// The calling warp's C (16 x N) += op(A) (16 x K) op(B) (K x N). A row_major: A(i, k) = a[i * lda + k];
// col_major: A(i, k) = a[i + k * lda]; B row_major: B(k, j) = b[k * ldb + j]; col_major: b[k + j * ldb].
// c holds C's N / 16 fragments in registers; every lane of the warp calls it with the same arguments.
template <int N, int K, class LayoutA, class LayoutB>
__device__ inline void strip_product(Accumulator (&c)[N / kFragment], const nv_bf16* a, int lda, const nv_bf16* b,
                                     int ldb) {
  static_assert(N % kFragment == 0 && K % kFragment == 0, "megacpp_mma_strip: N and K are multiples of 16");
  constexpr bool a_rows = std::is_same_v<LayoutA, wmma::row_major>, b_rows = std::is_same_v<LayoutB, wmma::row_major>;
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += kFragment) {
    OperandA<LayoutA> fa;
    wmma::load_matrix_sync(fa, a + (a_rows ? k0 : k0 * lda), lda);
#pragma unroll
    for (int n = 0; n < N / kFragment; ++n) {
      OperandB<LayoutB> fb;
      wmma::load_matrix_sync(fb, b + (b_rows ? k0 * ldb + n * kFragment : k0 + n * kFragment * ldb), ldb);
      wmma::mma_sync(c[n], fa, fb, c[n]);
    }
  }
}

template <int N>
__device__ inline void zero_strip(Accumulator (&c)[N / kFragment]) {
#pragma unroll
  for (int n = 0; n < N / kFragment; ++n) wmma::fill_fragment(c[n], 0.0f);
}
// A warp's 16 x N fp32 strip to/from shared memory (row-major, leading dimension ld).
template <int N>
__device__ inline void store_strip(float* dst, int ld, const Accumulator (&c)[N / kFragment]) {
#pragma unroll
  for (int n = 0; n < N / kFragment; ++n) wmma::store_matrix_sync(dst + n * kFragment, c[n], ld, wmma::mem_row_major);
}
template <int N>
__device__ inline void load_strip(Accumulator (&c)[N / kFragment], const float* src, int ld) {
#pragma unroll
  for (int n = 0; n < N / kFragment; ++n) wmma::load_matrix_sync(c[n], src + n * kFragment, ld, wmma::mem_row_major);
}

// ---- staging ------------------------------------------------------------------------------------

// Rounds rows [first, first + count) of head `head` of a (batch, seq, n_heads, dim) fp32 tensor
// (document row b, positions from `start`) to bf16 into a (Rows, D) shared tile of leading
// dimension ld. Rows count.. and columns dim.. are zero: they enter the products and must add
// nothing (and shared memory may hold NaN bits). vector_loads: dim % 4 == 0 and the tensor 16-byte
// aligned, so a row's 4 floats at e (a multiple of 4) are one float4.
template <int Rows, int D>
__device__ inline void stage_bf16(nv_bf16* tile, int ld, const float* src, index_t b, index_t start, index_t first,
                                  int count, index_t seq, index_t n_heads, index_t head, index_t dim, bool vector_loads) {
  for (int idx = threadIdx.x; idx < Rows * D / 4; idx += kBlockThreads) {
    const int r = idx / (D / 4), e = idx % (D / 4) * 4;
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (r < count) {
      const float* row = src + ((b * seq + start + first + r) * n_heads + head) * dim;
      if (vector_loads && e < dim) {
        const float4 f = *reinterpret_cast<const float4*>(row + e);
        x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
      } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) x[c] = e + c < dim ? row[e + c] : 0.0f;
      }
    }
    *reinterpret_cast<__nv_bfloat162*>(tile + r * ld + e) = __floats2bfloat162_rn(x[0], x[1]);
    *reinterpret_cast<__nv_bfloat162*>(tile + r * ld + e + 2) = __floats2bfloat162_rn(x[2], x[3]);
  }
}

// Copies the per-(token, head) values of rows [first, first + count) (lse or D) into row_values,
// 0 beyond count (those rows are masked).
template <int Rows>
__device__ inline void stage_row_values(float* row_values, const float* src, index_t b, index_t start, index_t first,
                                        int count, index_t seq, index_t n_heads, index_t head) {
  for (int r = threadIdx.x; r < Rows; r += kBlockThreads)
    row_values[r] = r < count ? src[(b * seq + start + first + r) * n_heads + head] : 0.0f;
}

// Adds factor * (a warp's 16 x dim strip, fp32 in shared memory) into rows [first, first + count)
// of head `head` of a (batch, seq, n_heads, dim) tensor; rows at or beyond `count` are skipped.
__device__ inline void add_strip(float* dst, const float* strip, int ld, index_t b, index_t start, index_t first, int count,
                                 index_t seq, index_t n_heads, index_t head, index_t dim, float factor) {
  const int lane = threadIdx.x % 32;
  for (index_t idx = lane; idx < kFragment * dim; idx += 32) {
    const int r = static_cast<int>(idx / dim), e = static_cast<int>(idx % dim);
    if (r < count) dst[((b * seq + start + first + r) * n_heads + head) * dim + e] += factor * strip[r * ld + e];
  }
}

// ---- the shared-memory plans of the three kernels (host and device) ----------------------------

// Forward: Q (64, D), K and V (64 keys, D) bf16; S (64, 64) fp32; P (64, 64) bf16; O (64, D) fp32;
// 1 / l per row.
template <int D>
struct ForwardShared {
  nv_bf16 *q, *k, *v, *p;
  float *s, *o, *inv_l;
  std::size_t bytes;
  __host__ __device__ explicit ForwardShared(unsigned char* base) {
    SharedCarver c{reinterpret_cast<std::uintptr_t>(base)};
    q = c.take<nv_bf16>(Bf16Tile<kTileRows, D>::kBytes);
    k = c.take<nv_bf16>(Bf16Tile<kKeyStep, D>::kBytes);
    v = c.take<nv_bf16>(Bf16Tile<kKeyStep, D>::kBytes);
    s = c.take<float>(FloatTile<kTileRows, kKeyStep>::kBytes);
    p = c.take<nv_bf16>(Bf16Tile<kTileRows, kKeyStep>::kBytes);
    o = c.take<float>(FloatTile<kTileRows, D>::kBytes);
    inv_l = c.take<float>(kTileRows * sizeof(float));
    bytes = c.used;
  }
};

// dK/dV: K and V (64 keys, D) bf16; a step's Q and dO (32 queries, D) bf16; S^T, dP^T (64, 32)
// fp32; P^T, dS^T (64, 32) bf16; the step's LSE and D. At the end, each warp's dK or dV strip
// (16, D) fp32 over the start of the region (the tiles are done by then).
template <int D>
struct KeyValueShared {
  nv_bf16 *k, *v, *q, *grad_o, *pt, *dst;
  float *st, *dpt, *lse, *drow;
  std::size_t bytes;
  __host__ __device__ explicit KeyValueShared(unsigned char* base) {
    SharedCarver c{reinterpret_cast<std::uintptr_t>(base)};
    k = c.take<nv_bf16>(Bf16Tile<kTileRows, D>::kBytes);
    v = c.take<nv_bf16>(Bf16Tile<kTileRows, D>::kBytes);
    q = c.take<nv_bf16>(Bf16Tile<kQueryStep, D>::kBytes);
    grad_o = c.take<nv_bf16>(Bf16Tile<kQueryStep, D>::kBytes);
    st = c.take<float>(FloatTile<kTileRows, kQueryStep>::kBytes);
    dpt = c.take<float>(FloatTile<kTileRows, kQueryStep>::kBytes);
    pt = c.take<nv_bf16>(Bf16Tile<kTileRows, kQueryStep>::kBytes);
    dst = c.take<nv_bf16>(Bf16Tile<kTileRows, kQueryStep>::kBytes);
    lse = c.take<float>(kQueryStep * sizeof(float));
    drow = c.take<float>(kQueryStep * sizeof(float));
    bytes = c.used;
  }
};

// dQ: Q and dO (64, D) bf16; K and V (64 keys, D) bf16; S, dP (64, 64) fp32; dS (64, 64) bf16;
// the tile's LSE and D. At the end, each warp's dQ strip (16, D) fp32 over the start of the region.
template <int D>
struct QueryShared {
  nv_bf16 *q, *grad_o, *k, *v, *ds;
  float *s, *dp, *lse, *drow;
  std::size_t bytes;
  __host__ __device__ explicit QueryShared(unsigned char* base) {
    SharedCarver c{reinterpret_cast<std::uintptr_t>(base)};
    q = c.take<nv_bf16>(Bf16Tile<kTileRows, D>::kBytes);
    grad_o = c.take<nv_bf16>(Bf16Tile<kTileRows, D>::kBytes);
    k = c.take<nv_bf16>(Bf16Tile<kKeyStep, D>::kBytes);
    v = c.take<nv_bf16>(Bf16Tile<kKeyStep, D>::kBytes);
    s = c.take<float>(FloatTile<kTileRows, kKeyStep>::kBytes);
    dp = c.take<float>(FloatTile<kTileRows, kKeyStep>::kBytes);
    ds = c.take<nv_bf16>(Bf16Tile<kTileRows, kKeyStep>::kBytes);
    lse = c.take<float>(kTileRows * sizeof(float));
    drow = c.take<float>(kTileRows * sizeof(float));
    bytes = c.used;
  }
};

// The end-of-block gradient strips (kWarps x (16, D) fp32) fit in the region they reuse.
template <int D>
inline constexpr std::size_t kGradientStripsBytes = kWarps * FloatTile<kFragment, D>::kBytes;

// The key tiles a query tile sees, each trimmed to computed_keys (the fp32 kernel's walk, with
// kKeyStep keys per tile): calls body(first key, key count) for each, in order. Every thread of
// the block calls it (the body stages shared tiles).
template <class Body>
__device__ inline void for_each_key_step(index_t qs, index_t qe, index_t len, index_t window, Body&& body) {
  const attention::TileRange kr = attention::key_tiles_for_queries(qs, qe, kKeyStep, window);
  for (index_t kt = kr.first; kt < kr.last; ++kt) {
    const index_t tile_end = (kt + 1) * kKeyStep < len ? (kt + 1) * kKeyStep : len;
    const attention::TileRange keys = attention::computed_keys(qs, qe, kt * kKeyStep, tile_end, window);
    body(keys.first, static_cast<int>(keys.last - keys.first));
  }
}

}  // namespace megacpp::cuda::flash::tensor_core
