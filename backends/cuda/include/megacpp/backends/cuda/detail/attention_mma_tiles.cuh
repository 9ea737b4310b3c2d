// CUDA backend: the building blocks of the bf16 tensor-core attention (kernels in
// detail/attention_mma.cuh): its tile sizes, the shared-memory tiles and each kernel's plan of
// them, the staging of fp32 rows as bf16 tiles, and the warp products every kernel is made of.
//
// Products (mma.sync m16n8k16, bf16 in, fp32 accumulation: detail/ptx.cuh). A warp owns a
// 16-row strip of every product it computes: C (16 x N, accumulators in registers, N / 8 tiles of
// 4 floats) += A (16 x K) B (K x N). A comes from a row-major shared tile (ldmatrix) or from
// registers (P and dS, re-packed from the accumulators of S: the C fragment of two adjacent 8-column
// tiles is the A fragment of their 16 columns); B from a row-major shared tile that holds either B
// itself (rows are k: ldmatrix .trans) or B's transpose (rows are n). Every product of the attention:
//   forward   S = Q K^T (K holds B^T)                  O += P V (V holds B)
//   dK/dV     S^T = K Q^T, dP^T = V dO^T (B^T)          dV += P^T dO, dK += dS^T Q (B)
//   dQ        S = Q K^T, dP = dO V^T (B^T)              dQ += dS K (B)
//
// Shared tiles are row-major bf16 with rows padded by 8 elements (16 bytes): every ldmatrix row
// address is 16-byte aligned, and the 8 rows one 8 x 8 matrix reads start 4 banks apart (row
// strides of 144 or 272 bytes), so they meet no bank conflict. Regions are multiples of 256 bytes,
// carved from a 128-byte aligned base (the kernels' extern __shared__).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "megacpp/backends/cuda/detail/attention.cuh"
#include "megacpp/backends/cuda/detail/ptx.cuh"

namespace megacpp::cuda::flash::tensor_core {

using nv_bf16 = __nv_bfloat16;  // CUDA's bf16 (megacpp::bf16 is the host storage type of the same bits)

inline constexpr int kWarps = 4;
inline constexpr int kBlockThreads = kWarps * 32;
inline constexpr int kStripRows = 16;                 // a warp's rows of every product (mma m16)
inline constexpr int kTileRows = kWarps * kStripRows;  // 64: a query tile (forward, dQ) or a key tile (dK/dV)
inline constexpr int kKeyStep = 64;                    // keys staged per step (forward, dQ)
inline constexpr int kQueryStep = 32;                  // queries staged per step (dK/dV)

// Host side, shared by the launches (attention_mma_launch.cuh) and the host emulation of the
// kernels (tests/cuda_emulation). Calls f.template operator()<D>() with the padded width D >= head_dim.
template <class F>
void with_padded_dim(index_t dim, F&& f) {
  if (dim <= 64) f.template operator()<64>();
  else f.template operator()<128>();
}

// The grid of every kernel (attention_mma.cuh): one-dimensional, tiles x heads blocks numbered
// tile-major with the heads fastest. The blocks then start in the work list's order (heaviest
// first: TileOrder, attention.cuh) across all heads, and the heads of a tile, which read the same
// K and V under GQA, start together. block_grid (host: the launches and the emulation) checks the
// count against the grid's limit; BlockPlace is a block's tile and head.
inline dim3 block_grid(const char* name, index_t tiles, index_t heads) {
  const index_t blocks = tiles * heads;
  check(blocks <= std::numeric_limits<int>::max(), "FusedAttention<Cuda> bf16", name, ": ", tiles, " tiles x ", heads,
        " heads = ", blocks, " blocks exceed the grid's 2^31 - 1");
  return dim3(static_cast<unsigned>(blocks));
}
// How many blocks share a kv head's query heads in the dK/dV pass (a divisor of group; see
// key_value_grad_kernel): the fewest that give the `resident` blocks the device holds at once
// work to do. A pass of few key tiles and kv heads otherwise leaves SMs idle: the dense training
// bench's 64 key tiles x 2 kv heads were 128 blocks for an H100's 132 SMs x 3, each walking 4
// query heads. Each extra split costs zeroing and summing one more partial dK and dV.
inline index_t key_value_splits(index_t blocks, index_t group, index_t resident) {
  index_t splits = 1;
  while (blocks * splits < resident && splits < group) {
    do ++splits;
    while (group % splits != 0);
  }
  return splits;
}

struct BlockPlace {
  index_t item, head;
  __device__ explicit BlockPlace(index_t heads)
      : item(static_cast<index_t>(blockIdx.x) / heads), head(static_cast<index_t>(blockIdx.x) % heads) {}
};

// A (Rows, Cols) row-major bf16 tile in shared memory, rows padded by 16 bytes (see the top).
template <int Rows, int Cols>
struct Bf16Tile {
  static_assert(Rows % kStripRows == 0 && Cols % kStripRows == 0, "megacpp_mma_tile: tiles are whole 16 x 16 blocks");
  static constexpr int kLd = Cols + 8;
  static constexpr std::size_t kBytes = sizeof(nv_bf16) * Rows * kLd;
};

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
  // A region laid over the start of the plan, for once every region taken so far is dead (the
  // accumulator tile at a block's end); the plan grows to hold it if it is the larger.
  template <class E>
  __host__ __device__ E* overlay(std::size_t bytes) {
    const std::size_t rounded = (bytes + 255) / 256 * 256;
    used = used > rounded ? used : rounded;
    return reinterpret_cast<E*>(base);
  }
};

// ---- the warp products ----------------------------------------------------------------------------

// A warp's accumulators of a 16 x N strip: tile n holds columns [8n, 8n + 8) (ptx.cuh's C layout).
template <int N>
using Strip = float[N / 8][4];
// A 16 x K strip of bf16 as A fragments: fragment f holds columns [16f, 16f + 16).
template <int K>
using OperandStrip = std::uint32_t[K / 16][4];

// This thread's place in a warp's C fragments: rows g and g + 8 of the strip, columns 2t, 2t + 1 of each tile.
struct FragmentPlace {
  int g, t;
  __device__ FragmentPlace() : g(static_cast<int>(threadIdx.x % 32 / 4)), t(static_cast<int>(threadIdx.x % 4)) {}
};

template <int N>
__device__ inline void zero(Strip<N>& c) {
#pragma unroll
  for (int n = 0; n < N / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) c[n][e] = 0.0f;
}

__device__ inline std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low 16 bits
  return *reinterpret_cast<const std::uint32_t*>(&pair);
}

// The A fragments of a C strip rounded to bf16 (P from S, dS from dP): columns [16f, 16f + 16) are
// tiles 2f and 2f + 1, rows g and g + 8 (the layouts of ptx.cuh line up).
template <int K>
__device__ inline void to_operand(OperandStrip<K>& a, const Strip<K>& c) {
#pragma unroll
  for (int f = 0; f < K / 16; ++f) {
    a[f][0] = pack_bf16(c[2 * f][0], c[2 * f][1]);
    a[f][1] = pack_bf16(c[2 * f][2], c[2 * f][3]);
    a[f][2] = pack_bf16(c[2 * f + 1][0], c[2 * f + 1][1]);
    a[f][3] = pack_bf16(c[2 * f + 1][2], c[2 * f + 1][3]);
  }
}

// Which shared tile holds B: B itself (its rows are k, read transposed) or B's transpose (rows are n).
enum class BTile { rows_are_k, rows_are_n };

// The B fragments of columns [n0, n0 + 16) and rows [k0, k0 + 16) of B: b[0..1] for tile n0 / 8,
// b[2..3] for the next (ldmatrix.x4; lanes 8i..8i+7 address matrix i's rows, ptx.cuh).
template <BTile Kind>
__device__ inline void load_b(std::uint32_t (&b)[4], const nv_bf16* tile, int ld, int k0, int n0) {
  const int lane = static_cast<int>(threadIdx.x % 32), row = lane % 8, matrix = lane / 8;
  if constexpr (Kind == BTile::rows_are_k)  // matrices (k, n): (0-7, 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15)
    ptx::ldmatrix_x4_trans(b, tile + (k0 + row + 8 * (matrix % 2)) * ld + n0 + 8 * (matrix / 2));
  else  // matrices (n, k): (0-7, 0-7), (0-7, 8-15), (8-15, 0-7), (8-15, 8-15)
    ptx::ldmatrix_x4(b, tile + (n0 + row + 8 * (matrix / 2)) * ld + k0 + 8 * (matrix % 2));
}

// The A fragment of rows [0, 16) and columns [k0, k0 + 16) of a strip of a row-major tile.
__device__ inline void load_a(std::uint32_t (&a)[4], const nv_bf16* strip, int ld, int k0) {
  const int lane = static_cast<int>(threadIdx.x % 32), row = lane % 8, matrix = lane / 8;
  // matrices (row, column): (0-7, 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15): a[0..3]
  ptx::ldmatrix_x4(a, strip + (row + 8 * (matrix % 2)) * ld + k0 + 8 * (matrix / 2));
}

// One 16-deep slice of the product: c += A(:, k0..k0+16) B(k0..k0+16, :), A given as a fragment.
template <int N, BTile Kind>
__device__ inline void product_slice(Strip<N>& c, const std::uint32_t (&a)[4], const nv_bf16* b, int ldb, int k0) {
  static_assert(N % 16 == 0, "megacpp_mma_strip: N is a multiple of 16");
#pragma unroll
  for (int n0 = 0; n0 < N; n0 += 16) {
    std::uint32_t f[4];
    load_b<Kind>(f, b, ldb, k0, n0);
    const std::uint32_t lo[2] = {f[0], f[1]}, hi[2] = {f[2], f[3]};
    ptx::mma_bf16_16x8x16(c[n0 / 8], a, lo);
    ptx::mma_bf16_16x8x16(c[n0 / 8 + 1], a, hi);
  }
}

// The calling warp's C (16 x N) += A (16 x K, the strip of a row-major shared tile at `a`) B (K x N).
template <int N, int K, BTile Kind>
__device__ inline void strip_product(Strip<N>& c, const nv_bf16* a, int lda, const nv_bf16* b, int ldb) {
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 16) {
    std::uint32_t f[4];
    load_a(f, a, lda, k0);
    product_slice<N, Kind>(c, f, b, ldb, k0);
  }
}

// The same with A in registers (P or dS).
template <int N, int K, BTile Kind>
__device__ inline void strip_product(Strip<N>& c, const OperandStrip<K>& a, const nv_bf16* b, int ldb) {
#pragma unroll
  for (int k0 = 0; k0 < K; k0 += 16) product_slice<N, Kind>(c, a[k0 / 16], b, ldb, k0);
}

// ---- staging ------------------------------------------------------------------------------------

// The kernels read bf16 copies of q, k, v and dO (round to nearest even, made by
// to_bf16_rows_kernel before the launch): a (batch, seq, n_heads, width) tensor, width = head_dim
// rounded up to 8 with zero columns, so every row is whole 16-byte pieces that cp.async copies.
inline constexpr index_t kRowAlign = 8;
__host__ __device__ constexpr index_t bf16_row_width(index_t dim) { return (dim + kRowAlign - 1) / kRowAlign * kRowAlign; }
// The threads of to_bf16_rows_kernel (attention_mma.cuh): one per 8 elements of the copy.
__host__ __device__ constexpr index_t bf16_row_pieces(index_t rows, index_t width) { return rows * width / kRowAlign; }

// Starts copying rows [first, first + count) of head `head` of a (batch, seq, n_heads, width)
// bf16 tensor (document row b, positions from `start`) into a (Rows, D) shared tile of leading
// dimension ld (cp.async: the caller commits, waits and syncs). Rows count.. and columns width..
// are zeroed by plain stores: they enter the products and must add nothing (and shared memory may
// hold NaN bits).
template <int Rows, int D>
__device__ inline void stage_rows(nv_bf16* tile, int ld, const nv_bf16* src, index_t b, index_t start, index_t first,
                                  int count, index_t seq, index_t n_heads, index_t head, index_t width) {
  for (int idx = static_cast<int>(threadIdx.x); idx < Rows * D / 8; idx += kBlockThreads) {
    const int r = idx / (D / 8), e = idx % (D / 8) * 8;
    nv_bf16* to = tile + r * ld + e;
    if (r < count && e < width)
      ptx::cp_async_16(to, src + ((b * seq + start + first + r) * n_heads + head) * width + e);
    else
      *reinterpret_cast<uint4*>(to) = uint4{0u, 0u, 0u, 0u};
  }
}

// Starts copying the per-(token, head) values of rows [first, first + count) (lse or D) into
// row_values; 0 beyond count (those rows are masked).
template <int Rows>
__device__ inline void stage_row_values(float* row_values, const float* src, index_t b, index_t start, index_t first,
                                        int count, index_t seq, index_t n_heads, index_t head) {
  for (int r = static_cast<int>(threadIdx.x); r < Rows; r += kBlockThreads) {
    if (r < count) ptx::cp_async_4(row_values + r, src + (b * seq + start + first + r) * n_heads + head);
    else row_values[r] = 0.0f;
  }
}

// ---- writing the accumulators back --------------------------------------------------------------
// dK, dV and dQ leave the registers through shared memory: each warp stores its strip's fragments
// into an fp32 (kTileRows, D) tile, then the whole block adds the tile to global memory row by
// row. Straight from the fragments, a warp's access would touch 8 rows x 32 bytes per instruction
// (half of each sector wasted) and nvcc issues the read-modify-writes one after another (it cannot
// prove that two rows' addresses differ): a long latency per element that left the dK/dV and dQ
// blocks of short documents waiting on memory for most of their time. Coalesced rows, with every
// load of a batch issued before its stores, fix both (the way FlashAttention-2's kernels write O,
// dQ, dK and dV back through shared memory).
//
// The tile overlays the start of the kernel's shared plan, which the block no longer reads once
// its steps are done. Rows are padded by 8 floats: a warp's float2 stores of rows g = 0..7 at
// columns 8n + 2t then start 8 banks apart, two wavefronts per store, the minimum for 256 bytes.
template <int D>
struct AccumulatorTile {
  static constexpr int kLd = D + 8;
  static constexpr std::size_t kBytes = sizeof(float) * kTileRows * kLd;
};

// Loads per batch of the tile's read-modify-write: all of a batch's loads are issued before its
// stores, so their latencies overlap.
inline constexpr int kAddBatch = 8;

// Adds tile rows [0, count), columns [0, dim) into dst_row(r)[0, dim), V floats per access
// (V = 4: float4, for a dim that is a multiple of 4 and a 16-byte aligned dst; else V = 1).
// Addresses are computed again for the stores rather than kept: registers are what decides how
// many blocks fit on an SM.
template <int D, int V, class RowAddress>
__device__ inline void add_staged_tile(const float* tile, int count, index_t dim, RowAddress dst_row) {
  using Vec = std::conditional_t<V == 4, float4, float>;
  constexpr int kPerRow = D / V, kPerThread = kTileRows * kPerRow / kBlockThreads;
  static_assert(kPerThread % kAddBatch == 0, "megacpp_mma_epilogue: whole batches per thread");
  const int row_vectors = static_cast<int>(dim / V);
#pragma unroll
  for (int batch = 0; batch < kPerThread; batch += kAddBatch) {
    Vec old[kAddBatch];
#pragma unroll
    for (int i = 0; i < kAddBatch; ++i) {
      const int idx = static_cast<int>(threadIdx.x) + (batch + i) * kBlockThreads, r = idx / kPerRow, c = idx % kPerRow;
      if (r < count && c < row_vectors) old[i] = reinterpret_cast<const Vec*>(dst_row(r))[c];
    }
#pragma unroll
    for (int i = 0; i < kAddBatch; ++i) {
      const int idx = static_cast<int>(threadIdx.x) + (batch + i) * kBlockThreads, r = idx / kPerRow, c = idx % kPerRow;
      if (r >= count || c >= row_vectors) continue;
      const float* from = tile + r * AccumulatorTile<D>::kLd + c * V;
      if constexpr (V == 4) {
        old[i].x += from[0];
        old[i].y += from[1];
        old[i].z += from[2];
        old[i].w += from[3];
      } else {
        old[i] += from[0];
      }
      reinterpret_cast<Vec*>(dst_row(r))[c] = old[i];
    }
  }
}

// Adds factor * (the block's (kTileRows, D) accumulators, warp w's strip in rows
// [16w, 16w + 16)) into rows [first, first + count) of head `head` of a (batch, seq, n_heads, dim)
// tensor: rows at or beyond `count`, and the padding columns at or beyond dim, are skipped. Each
// element has one writer. Every thread of the block calls it (it holds two barriers); `tile` is
// AccumulatorTile<D>::kBytes of shared memory that no warp reads any more.
template <int D>
__device__ inline void add_tile(float* tile, float* dst, const Strip<D>& c, index_t b, index_t start, index_t first,
                                int count, index_t seq, index_t n_heads, index_t head, index_t dim, float factor) {
  const FragmentPlace at;
  const int strip_row = static_cast<int>(threadIdx.x / 32) * kStripRows + at.g;
  __syncthreads();  // every warp is done with what the tile overlays (the last step's operands, an earlier tile)
#pragma unroll
  for (int half = 0; half < 2; ++half)
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<float2*>(tile + (strip_row + 8 * half) * AccumulatorTile<D>::kLd + 8 * n + 2 * at.t) =
          float2{factor * c[n][2 * half], factor * c[n][2 * half + 1]};
  __syncthreads();
  auto dst_row = [&](int r) { return dst + ((b * seq + start + first + r) * n_heads + head) * dim; };
  if (dim % 4 == 0 && reinterpret_cast<std::uintptr_t>(dst) % 16 == 0) add_staged_tile<D, 4>(tile, count, dim, dst_row);
  else add_staged_tile<D, 1>(tile, count, dim, dst_row);
}

// ---- the shared-memory plans of the three kernels (host and device) ----------------------------
// Tiles that change every step come twice: step s computes on copy s % 2 while step s + 1's
// tiles are copied into the other. (A pair and a select, not an array indexed by s % 2, which
// nvcc would keep in local memory.)
template <class E>
struct TwoCopies {
  E *first, *second;
  __host__ __device__ E* operator[](index_t copy) const { return copy % 2 ? second : first; }
};

// Forward: Q (64, D); the step's K and V (64 keys, D), one copy each (the forward refills each
// while the other is read); bf16.
template <int D>
struct ForwardShared {
  nv_bf16 *q, *k, *v;
  std::size_t bytes;
  __host__ __device__ explicit ForwardShared(unsigned char* base) {
    SharedCarver c{reinterpret_cast<std::uintptr_t>(base)};
    q = c.take<nv_bf16>(Bf16Tile<kTileRows, D>::kBytes);
    k = c.take<nv_bf16>(Bf16Tile<kKeyStep, D>::kBytes);
    v = c.take<nv_bf16>(Bf16Tile<kKeyStep, D>::kBytes);
    bytes = c.used;
  }
};

// dK/dV: K and V (64 keys, D) bf16; each step's Q and dO (32 queries, D) bf16, its LSE and D.
template <int D>
struct KeyValueShared {
  nv_bf16 *k, *v;
  TwoCopies<nv_bf16> q, grad_o;
  TwoCopies<float> lse, drow;
  float* accumulators;  // AccumulatorTile<D> over the start of the plan, once the steps are done
  std::size_t bytes;
  __host__ __device__ explicit KeyValueShared(unsigned char* base) {
    SharedCarver c{reinterpret_cast<std::uintptr_t>(base)};
    k = c.take<nv_bf16>(Bf16Tile<kTileRows, D>::kBytes);
    v = c.take<nv_bf16>(Bf16Tile<kTileRows, D>::kBytes);
    for (nv_bf16** copy : {&q.first, &q.second, &grad_o.first, &grad_o.second})
      *copy = c.take<nv_bf16>(Bf16Tile<kQueryStep, D>::kBytes);
    for (float** copy : {&lse.first, &lse.second, &drow.first, &drow.second}) *copy = c.take<float>(kQueryStep * sizeof(float));
    accumulators = c.overlay<float>(AccumulatorTile<D>::kBytes);
    bytes = c.used;
  }
};

// dQ: Q and dO (64, D) bf16, the tile's LSE and D; each step's K and V (64 keys, D) bf16.
template <int D>
struct QueryShared {
  nv_bf16 *q, *grad_o;
  TwoCopies<nv_bf16> k, v;
  float *lse, *drow;
  float* accumulators;  // AccumulatorTile<D> over the start of the plan, once the steps are done
  std::size_t bytes;
  __host__ __device__ explicit QueryShared(unsigned char* base) {
    SharedCarver c{reinterpret_cast<std::uintptr_t>(base)};
    q = c.take<nv_bf16>(Bf16Tile<kTileRows, D>::kBytes);
    grad_o = c.take<nv_bf16>(Bf16Tile<kTileRows, D>::kBytes);
    lse = c.take<float>(kTileRows * sizeof(float));
    drow = c.take<float>(kTileRows * sizeof(float));
    for (nv_bf16** copy : {&k.first, &k.second, &v.first, &v.second}) *copy = c.take<nv_bf16>(Bf16Tile<kKeyStep, D>::kBytes);
    accumulators = c.overlay<float>(AccumulatorTile<D>::kBytes);
    bytes = c.used;
  }
};

// The key steps of a query tile [qs, qe) of a document of length len: the key tiles it sees
// (kKeyStep keys each), each trimmed to computed_keys (the fp32 kernel's walk). Step s covers
// keys [first(s), first(s) + count(s)).
struct KeySteps {
  index_t qs, qe, len, window;
  attention::TileRange tiles;
  __device__ KeySteps(index_t q_start, index_t q_end, index_t length, index_t w)
      : qs(q_start), qe(q_end), len(length), window(w),
        tiles(attention::key_tiles_for_queries(q_start, q_end, kKeyStep, w)) {}
  __device__ index_t size() const { return tiles.last - tiles.first; }
  __device__ attention::TileRange keys(index_t s) const {
    const index_t kt = tiles.first + s;
    const index_t tile_end = (kt + 1) * kKeyStep < len ? (kt + 1) * kKeyStep : len;
    return attention::computed_keys(qs, qe, kt * kKeyStep, tile_end, window);
  }
};

}  // namespace megacpp::cuda::flash::tensor_core
