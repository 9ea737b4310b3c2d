// CUDA backend: the MoE experts' grouped product on bf16 operands in one launch per product
// (contract: megacpp/core/kernels/grouped_gemm.hpp), over the contiguous group layout without
// padding (DeepGEMM's "m-grouped contiguous" layout, deepseek-ai/DeepGEMM). Launched by
// grouped_gemm_launch.cuh.
//
//   forward  Y_g  = X_g W_g^T     a tile of 64 rows of group g x 64 columns of N, summed over K
//   dx       dX_g += dY_g W_g      a tile of 64 rows of group g x 64 columns of K, summed over N
//   dw       dW_g += dY_g^T X_g    a tile of 64 x 64 of (N, K), summed over the rows of group g
//
// One block per output tile, every group's tiles in one grid: block b finds its slot in the
// host-built prefix of tiles per slot, the groups in slots by rows, most first (GroupTiles, passed
// by value: no copy to the device), so a group of 3 rows costs one block, not one cuBLAS launch.
// Each block is 4 warps in 2 x 2, each warp 32 x 32 of the tile as 2 x 4 mma.sync m16n8k16
// products (bf16 in, fp32 sums; fragment layouts: ptx.cuh), over steps of 32 of the summed
// dimension, the next step's operand tiles fetched by cp.async while this step's products run
// (two stages, as NVIDIA/cutlass's sm80 multistage mainloop, MmaMultistage, with two stages).
// An operand tile is stored in shared memory as it lies in memory, 8-element (16-byte) chunks
// copied whole: rows where the summed dimension is contiguous (X and W in the forward, dY in dx),
// and ldmatrix reads their fragments directly; rows of the summed dimension otherwise (W in dx,
// dY and X in dw), and ldmatrix.trans reads them transposed. So no operand is ever transposed in
// memory. Rows past a group's end and columns past N or K are zeros in shared memory, never read
// from global memory, and never stored.
//
// Every output element is a fixed-order sum (steps of 32, within a step the mma's 16 + 16), so a
// second run gives the same bits; and each row of Y and dX depends only on its own row of X (dY)
// and on W_g: the document-masking invariant holds as for the per-group products.
//
// Shapes taken (grouped_product_fits): K and N multiples of 8 (whole 16-byte chunks), at most
// kMaxGroups groups, 2^31 - 1 rows and 2^31 - 1 tiles per product, bf16 operands 16-byte aligned,
// fp32 outputs 8-byte aligned; GroupedGemm<Cuda> falls back to one cuBLAS product per group
// otherwise. The results are not gemm_bf16's bits: the same exact products, summed in fp32 in the
// tiles' order. This header holds the host planning (tiles, grid order, shape test) with the
// kernel because the host emulation runs both and cannot include the launch header.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/ptx.cuh"
#include "megacpp/core/config.hpp"
#include "megacpp/core/dtypes.hpp"
#include "megacpp/core/kernels/grouped_gemm.hpp"

namespace megacpp::cuda::moe {

inline constexpr int kGroupedTile = 64;     // output tile: 64 x 64
inline constexpr int kGroupedStep = 32;     // the summed dimension per step
inline constexpr int kGroupedThreads = 128;  // 4 warps, 2 x 2 over the tile
inline constexpr int kMaxGroups = 256;       // GroupTiles: 3 arrays of ~257 int32, 3 KB of the 4 KB of parameters

// Shared memory row strides, padded by 8 elements (16 bytes) so that the 8 row addresses of an
// ldmatrix fall in 8 different 16-byte bank groups (80 and 144 bytes apart).
inline constexpr int kSummedContiguousStride = kGroupedStep + 8;  // a tile of 64 rows x 32 summed
inline constexpr int kSummedRowsStride = kGroupedTile + 8;        // a tile of 32 summed rows x 64
inline constexpr int kOperandTileElements = kGroupedTile * kSummedContiguousStride;  // >= 32 x 72
static_assert(kGroupedStep * kSummedRowsStride <= kOperandTileElements);
// Two operands, two stages.
inline constexpr int kGroupedSharedBytes = 2 * 2 * kOperandTileElements * static_cast<int>(sizeof(bf16));

enum class GroupedProduct { forward, dx, dw };

// The grid of one product (host-built per launch, passed by value): the groups' tiles in slots,
// the group with the most rows first, so that dW's blocks (each a sum over its group's rows) start
// longest first and the small groups fill the tail. The order changes no result: every tile is
// computed alone. Slot s holds group order[s] and owns blocks [first_tile[s], first_tile[s + 1]);
// group g owns rows [offsets[g], offsets[g + 1]). int32: grouped_product_fits bounds the rows and
// the blocks (and group_tiles_of checks the blocks again).
struct GroupTiles {
  std::int32_t groups = 0;
  std::int32_t order[kMaxGroups] = {};
  std::int32_t first_tile[kMaxGroups + 1] = {};
  std::int32_t offsets[kMaxGroups + 1] = {};
};

// The operands (bf16, row-major) and the output (fp32) of one product; n and k as in the contract.
struct GroupedProductArgs {
  index_t n = 0, k = 0;
  const bf16* x = nullptr;   // (M, K)
  const bf16* w = nullptr;   // (E, N, K)
  const bf16* dy = nullptr;  // (M, N)
  float* out = nullptr;      // forward: Y (M, N), written; dx: dX (M, K), added to; dw: dW (E, N, K), added to
};

// Tiles of one group: for Y and dX, row tiles of the group times column tiles of N (K); for dW,
// the tiles of (N, K) when the group has rows (an empty group adds nothing).
inline index_t group_tiles(GroupedProduct product, index_t rows, index_t n, index_t k) {
  const auto tiles = [](index_t extent) { return (extent + kGroupedTile - 1) / kGroupedTile; };
  switch (product) {
    case GroupedProduct::forward: return tiles(rows) * tiles(n);
    case GroupedProduct::dx: return tiles(rows) * tiles(k);
    case GroupedProduct::dw: return rows > 0 ? tiles(n) * tiles(k) : 0;
  }
  return 0;
}

// The grid of one product (host): the slots in order of rows, most first (ties: lower group).
// Throws when the tiles exceed a grid (2^31 - 1 blocks) or the groups GroupTiles' arrays.
inline GroupTiles group_tiles_of(GroupedProduct product, const kernels::GroupedGemmParams& p) {
  check(p.groups <= kMaxGroups, "cuda::moe::group_tiles_of", p.groups, " groups exceed the one-launch products' ",
        kMaxGroups);
  GroupTiles t;
  t.groups = static_cast<std::int32_t>(p.groups);
  const auto rows = [&](index_t g) { return p.offsets[g + 1] - p.offsets[g]; };
  for (index_t g = 0; g <= p.groups; ++g) t.offsets[g] = static_cast<std::int32_t>(p.offsets[g]);
  for (index_t g = 0; g < p.groups; ++g) t.order[g] = static_cast<std::int32_t>(g);
  std::stable_sort(t.order, t.order + p.groups, [&](std::int32_t a, std::int32_t b) { return rows(a) > rows(b); });
  index_t blocks = 0;
  for (index_t s = 0; s < p.groups; ++s) {
    blocks += group_tiles(product, rows(t.order[s]), p.n, p.k);
    check(blocks <= std::numeric_limits<std::int32_t>::max(), "cuda::moe::group_tiles_of", blocks,
          " tiles exceed a grid's blocks");
    t.first_tile[s + 1] = static_cast<std::int32_t>(blocks);
  }
  return t;
}

// Whether the one-launch products take this shape: at most kMaxGroups groups, 2^31 - 1 rows and
// 2^31 - 1 tiles per product (GroupTiles' int32), K and N multiples of 8, the bf16 operands 16-byte
// aligned (cp.async's 16-byte chunks) and the fp32 outputs 8-byte aligned (float2 stores). Null
// pointers (not used) pass. So group_tiles_of never throws on a shape this accepts.
inline bool grouped_product_fits(const kernels::GroupedGemmParams& p, const bf16* x, const bf16* w, const bf16* dy,
                                 const float* out, const float* other_out = nullptr) {
  const auto aligned = [](const void* pointer, std::uintptr_t bytes) {
    return reinterpret_cast<std::uintptr_t>(pointer) % bytes == 0;
  };
  constexpr index_t kMaxInt32 = std::numeric_limits<std::int32_t>::max();
  if (p.groups > kMaxGroups || p.rows() > kMaxInt32 || p.n % 8 != 0 || p.k % 8 != 0 || !aligned(x, 16) ||
      !aligned(w, 16) || !aligned(dy, 16) || !aligned(out, 8) || !aligned(other_out, 8))
    return false;
  const GroupedProduct products[] = {GroupedProduct::forward, GroupedProduct::dx, GroupedProduct::dw};
  for (const GroupedProduct product : products) {
    index_t tiles = 0;
    for (index_t g = 0; g < p.groups; ++g) tiles += group_tiles(product, p.offsets[g + 1] - p.offsets[g], p.n, p.k);
    if (tiles > kMaxInt32) return false;
  }
  return true;
}

// One operand's slice for a step into shared memory: the 64 outer indices (rows of the output
// tile, or its columns) from `outer0` and the 32 summed indices from `summed0`. kSummedContiguous:
// the operand is (outer, summed) in memory with row stride ld, stored 64 rows x 32; else
// (summed, outer), stored 32 rows x 64. Indices at or past outer_end / summed_end are zeros.
// Both contiguous extents are multiples of 8, so a 16-byte chunk is wholly inside or outside.
template <bool kSummedContiguous>
__device__ void load_operand_step(bf16* tile, const bf16* src, index_t ld, index_t outer_end, index_t summed0,
                                  index_t summed_end) {
  constexpr int kChunks = kGroupedTile * kGroupedStep / 8;  // 256 chunks of 8 elements
  for (int c = threadIdx.x; c < kChunks; c += kGroupedThreads) {
    index_t outer, summed;
    bf16* to;
    if constexpr (kSummedContiguous) {
      const int row = c / (kGroupedStep / 8), col = c % (kGroupedStep / 8) * 8;
      outer = row;
      summed = summed0 + col;
      to = tile + row * kSummedContiguousStride + col;
    } else {
      const int row = c / (kGroupedTile / 8), col = c % (kGroupedTile / 8) * 8;
      outer = col;
      summed = summed0 + row;
      to = tile + row * kSummedRowsStride + col;
    }
    if (outer < outer_end && summed < summed_end)
      ptx::cp_async_16(to, kSummedContiguous ? src + outer * ld + summed : src + summed * ld + outer);
    else
      *reinterpret_cast<uint4*>(to) = uint4{0, 0, 0, 0};
  }
}

// This lane's A fragments (rows m0 .. m0 + 15 of the tile, summed k0 .. k0 + 15) from a tile
// stored (m, summed) (ldmatrix) or (summed, m) (ldmatrix.trans). Lane l gives the row address of
// matrix i = l / 8, row l % 8: a[0..3] = A(g, 2t), A(g + 8, 2t), A(g, 2t + 8), A(g + 8, 2t + 8).
template <bool kSummedContiguous>
__device__ void load_a_fragment(std::uint32_t (&a)[4], const bf16* tile, int m0, int k0) {
  const int lane = static_cast<int>(threadIdx.x % 32), i = lane / 8, j = lane % 8;
  if constexpr (kSummedContiguous)
    ptx::ldmatrix_x4(a, tile + (m0 + j + 8 * (i & 1)) * kSummedContiguousStride + k0 + 8 * (i >> 1));
  else
    ptx::ldmatrix_x4_trans(a, tile + (k0 + j + 8 * (i >> 1)) * kSummedRowsStride + m0 + 8 * (i & 1));
}

// The B fragments of the two 8-column tiles n0 and n0 + 8 (summed k0 .. k0 + 15) from a tile
// stored (n, summed) (ldmatrix) or (summed, n) (ldmatrix.trans): b[0..1] of tile n0, b[2..3] of
// tile n0 + 8, each pair B(2t, g), B(2t + 8, g).
template <bool kSummedContiguous>
__device__ void load_b_fragments(std::uint32_t (&b)[4], const bf16* tile, int n0, int k0) {
  const int lane = static_cast<int>(threadIdx.x % 32), i = lane / 8, j = lane % 8;
  if constexpr (kSummedContiguous)
    ptx::ldmatrix_x4(b, tile + (n0 + j + 8 * (i >> 1)) * kSummedContiguousStride + k0 + 8 * (i & 1));
  else
    ptx::ldmatrix_x4_trans(b, tile + (k0 + j + 8 * (i & 1)) * kSummedRowsStride + n0 + 8 * (i >> 1));
}

// One block: the output tile `blockIdx.x` of the product. See the file comment.
template <GroupedProduct kProduct>
__global__ void __launch_bounds__(kGroupedThreads) grouped_product_kernel(GroupedProductArgs args, GroupTiles tiles) {
  extern __shared__ __align__(16) unsigned char grouped_gemm_shared[];
  // A is (m, summed) in memory in the forward and dx, (summed, m) in dw; B is (n, summed) in the
  // forward, (summed, n) in dx and dw.
  constexpr bool kAContiguous = kProduct != GroupedProduct::dw;
  constexpr bool kBContiguous = kProduct == GroupedProduct::forward;
  const auto tile = static_cast<std::int32_t>(blockIdx.x);
  int slot = 0;  // the slot whose tiles hold this block: first_tile[slot] <= tile < first_tile[slot + 1]
  for (int lo = 0, hi = tiles.groups; lo < hi;) {
    const int mid = (lo + hi) / 2;
    if (tiles.first_tile[mid + 1] <= tile) lo = slot = mid + 1;
    else hi = mid;
  }
  const int g = tiles.order[slot];
  const index_t local = tile - tiles.first_tile[slot], row0 = tiles.offsets[g], rows = tiles.offsets[g + 1] - row0;
  const index_t n = args.n, k = args.k;
  const index_t out_cols = kProduct == GroupedProduct::forward ? n : k;  // Y's columns, else dX's and dW's
  const index_t col_tiles = (out_cols + kGroupedTile - 1) / kGroupedTile;
  const index_t m0 = local / col_tiles * kGroupedTile, n0 = local % col_tiles * kGroupedTile;

  // Operand origins at the tile, their row strides and extents (from the tile's origin), and the
  // summed extent.
  const bf16 *a, *b;
  index_t lda, ldb, a_end, b_end, summed_end;
  float* out;
  index_t out_rows, ldo;
  if constexpr (kProduct == GroupedProduct::forward) {  // A = X_g (m, k), B = W_g (n, k)
    const bf16* w_g = args.w + static_cast<index_t>(g) * n * k;
    a = args.x + (row0 + m0) * k, lda = k, a_end = rows - m0;
    b = w_g + n0 * k, ldb = k, b_end = n - n0;
    summed_end = k;
    out = args.out + (row0 + m0) * n + n0, out_rows = rows - m0, ldo = n;
  } else if constexpr (kProduct == GroupedProduct::dx) {  // A = dY_g (m, n), B = W_g (n summed, k)
    const bf16* w_g = args.w + static_cast<index_t>(g) * n * k;
    a = args.dy + (row0 + m0) * n, lda = n, a_end = rows - m0;
    b = w_g + n0, ldb = k, b_end = k - n0;
    summed_end = n;
    out = args.out + (row0 + m0) * k + n0, out_rows = rows - m0, ldo = k;
  } else {  // A = dY_g^T: dY_g (rows summed, n); B = X_g (rows summed, k)
    a = args.dy + row0 * n + m0, lda = n, a_end = n - m0;
    b = args.x + row0 * k + n0, ldb = k, b_end = k - n0;
    summed_end = rows;
    out = args.out + static_cast<index_t>(g) * n * k + m0 * k + n0, out_rows = n - m0, ldo = k;
  }
  const index_t out_cols_left = out_cols - n0;

  // Stage s holds A's tile at [2 s E, (2 s + 1) E) and B's after it (E = kOperandTileElements);
  // offsets, not an array of pointers, which a dynamic index would put in local memory.
  bf16* const tile_memory = reinterpret_cast<bf16*>(grouped_gemm_shared);
  const auto a_tile = [&](int stage) { return tile_memory + 2 * stage * kOperandTileElements; };
  const auto b_tile = [&](int stage) { return tile_memory + (2 * stage + 1) * kOperandTileElements; };
  const auto load_step = [&](int stage, index_t summed0) {
    load_operand_step<kAContiguous>(a_tile(stage), a, lda, a_end, summed0, summed_end);
    load_operand_step<kBContiguous>(b_tile(stage), b, ldb, b_end, summed0, summed_end);
    ptx::cp_async_commit();
  };

  const int warp = static_cast<int>(threadIdx.x / 32), warp_m = warp / 2 * 32, warp_n = warp % 2 * 32;
  float acc[2][4][4] = {};  // [m16 tile][n8 tile][fragment]
  const index_t steps = (summed_end + kGroupedStep - 1) / kGroupedStep;
  if (steps > 0) load_step(0, 0);
  for (index_t s = 0; s < steps; ++s) {
    const int stage = static_cast<int>(s % 2);
    if (s + 1 < steps) {
      load_step(1 - stage, (s + 1) * kGroupedStep);
      ptx::cp_async_wait<1>();  // this step's copies have landed; the next step's are in flight
    } else {
      ptx::cp_async_wait<0>();
    }
    __syncthreads();  // every thread's copies (and zero fills) of this step are visible
#pragma unroll
    for (int k0 = 0; k0 < kGroupedStep; k0 += 16) {
      std::uint32_t fa[2][4], fb[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) load_a_fragment<kAContiguous>(fa[mt], a_tile(stage), warp_m + 16 * mt, k0);
#pragma unroll
      for (int np = 0; np < 2; ++np) load_b_fragments<kBContiguous>(fb[np], b_tile(stage), warp_n + 16 * np, k0);
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const std::uint32_t pair[2] = {fb[nt / 2][nt % 2 * 2], fb[nt / 2][nt % 2 * 2 + 1]};
          ptx::mma_bf16_16x8x16(acc[mt][nt], fa[mt], pair);
        }
    }
    __syncthreads();  // every warp is done with this stage before the next step's load refills it
  }

  // C fragment: c[0..1] = C(g, 2t .. 2t + 1), c[2..3] = C(g + 8, ...), g = lane / 4, t = lane % 4.
  // The column pair is wholly inside or outside (the column extents are multiples of 8).
  const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const index_t row = warp_m + 16 * mt + lane / 4 + 8 * half, col = warp_n + 8 * nt + 2 * (lane % 4);
        if (row >= out_rows || col >= out_cols_left) continue;
        float2* const to = reinterpret_cast<float2*>(out + row * ldo + col);  // 8-byte aligned: col even, ldo % 8 == 0
        const float* c = acc[mt][nt] + 2 * half;
        if constexpr (kProduct == GroupedProduct::forward) {
          *to = float2{c[0], c[1]};
        } else {
          const float2 old = *to;
          *to = float2{old.x + c[0], old.y + c[1]};
        }
      }
}

}  // namespace megacpp::cuda::moe
