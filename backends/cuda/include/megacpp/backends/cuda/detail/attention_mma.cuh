// CUDA backend: the fused attention in bf16 on the tensor cores, the device code (the launches:
// detail/attention_mma_launch.cuh; on request only, inside a CudaBf16Attention scope).
//
// The same algorithm as detail/attention.cuh (FlashAttention-2, Dao 2023, arXiv 2307.08691,
// Algorithms 1 and 2, the two-pass backward of section 3.2), with every product on the tensor
// cores (mma.sync m16n8k16: bf16 operands, fp32 accumulation). What is rounded to bf16, and where
// (round to nearest even):
//
//   q, k, v, dO   once per call, into the bf16 copies the kernels read (to_bf16_rows_kernel;
//                 dO's with D in grad_output_rows_kernel; both in attention_mma_copies.cuh);
//   P             before O += P V (forward) and dV += P^T dO (backward);
//   dS            before dK += dS^T q and dQ += dS K.
//
// Everything else is fp32: the products' sums, S and its scale, the softcap's tanh, the online
// softmax's m and l, LSE, D = rowsum(dO o O) (of the bf16 dO, as dP), P and dP when
// dS = P (dP - D)(1 - tanh^2) is formed, and the final O / l, scale dK, scale dQ. l sums the fp32
// P, as FlashAttention-2's kernels do, so the rounding of P is an error of the numerator only.
//
// Work is planned as in the fp32 kernel: per document, the same tiling functions
// (attention_tiling.hpp), a block per (document tile, head), only the visible tiles visited and
// each trimmed to computed_keys; GQA by index; padding tokens are never visited. Here the blocks
// start heaviest first (TileOrder; BlockPlace in attention_mma_tiles.cuh). Tiles are 64 rows
// (query tiles; key tiles in the dK/dV pass), split into 4 warp strips of 16 rows: warp w owns
// rows [16w, 16w + 16) of every product it computes and of the elementwise work between
// them, in its own registers, so inside a tile step no warp waits for another. Shared memory
// holds the bf16 operand tiles only. In the backward the ones that change every step come twice,
// the next step's fetched by cp.async while this step's products run, and one __syncthreads per
// step orders both; the forward keeps one K and one V tile and refills each while the other is
// read (two barriers a step), for a third block per SM.
//
// Products: mma.sync m16n8k16 (detail/ptx.cuh) through the strip products of
// attention_mma_tiles.cuh, the transposes as which operand a shared tile holds; the dK/dV pass
// computes the transposed scores (keys are the block's rows), so P^T and dS^T are a warp's own
// strips. The fragments' layouts are specified, so S, P, dP, dS and the forward's O accumulator
// stay in registers: thread (g, t) of a warp holds rows g and g + 8 of its strip, columns 2t and
// 2t + 1 of each 8-column tile, and a row's max and sum are combined over the 4 threads that hold
// it by two xor shuffles (the same bits in all four). P and dS go from the accumulators to the
// next product's A operand without leaving registers (FlashAttention-2's layout of the same
// instruction). dK, dV and dQ are never rescaled: they stay in registers for the whole block and
// are added to global memory at its end through shared memory (add_tile), one writer per element.
//
// Head dimensions: the kernels are instantiated for a padded width D of 64 and 128; head_dim
// 1..128 runs, zero padded to the next of those (the zero columns add nothing to any product and
// are never written back). Larger heads take the fp32 kernel (see attention_mma_launch.cuh).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <type_traits>

#include "megacpp/backends/cuda/detail/attention.cuh"
#include "megacpp/backends/cuda/detail/attention_mma_copies.cuh"
#include "megacpp/backends/cuda/detail/attention_mma_tiles.cuh"
#include "megacpp/backends/cuda/detail/packet.cuh"

namespace megacpp::cuda::flash::tensor_core {

// The query tile a forward or dQ block owns: its document tile and head, queries [qs, qe), and
// the calling warp (rows [16 warp, 16 warp + 16) of the tile).
struct QueryTile {
  BlockPlace place;
  WorkTile w;
  index_t h, kvh, qs, qe;
  int warp;
  __device__ QueryTile(const Geometry<float>& g, const WorkTile* work)
      : place(g.heads), w(work[place.item]), h(place.head), kvh(h / g.group), qs(static_cast<index_t>(w.tile) * kTileRows),
        qe(qs + kTileRows < w.len ? qs + kTileRows : w.len), warp(static_cast<int>(threadIdx.x / 32)) {}
};

// The max or the sum of a row's values over the 4 threads of a quad that hold it.
__device__ inline float quad_max(float x) {
  float y = __shfl_xor_sync(0xFFFFFFFFu, x, 1);
  x = y > x ? y : x;
  y = __shfl_xor_sync(0xFFFFFFFFu, x, 2);
  return y > x ? y : x;
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(0xFFFFFFFFu, x, 1);
  return x + __shfl_xor_sync(0xFFFFFFFFu, x, 2);
}

// exp on the SFU (ex2.approx of x log2 e, __expf): P is rounded to bf16 (8 bits) before any
// product, and l and LSE take the same values forward and backward, so the last bits of expf
// would buy nothing, for several instructions per score.
__device__ inline float fast_exp(float x) { return __expf(x); }

// Whether a step needs no mask: queries [qs, qe) and keys [ks, ke) fill the step's tile
// (query_rows x key_rows: a short tile at a document's end takes the masked path, rare enough)
// and every pair is visible (attention_tiling.hpp, tile_is_full). The forward and dQ steps are
// (kTileRows queries, kKeyStep keys), the dK/dV steps (kQueryStep queries, kTileRows keys).
__device__ inline bool whole_step(index_t qs, index_t qe, int query_rows, index_t ks, index_t ke, int key_rows,
                                  index_t window) {
  return qe - qs == query_rows && ke - ks == key_rows && attention::tile_is_full(qs, qe, ks, ke, window);
}

// Starts copying key step s of a dQ block into copy s % 2 of the K and V tiles of the kernel's
// shared plan `sh`, and commits the group. Every thread of the block calls it.
template <int D, class Shared>
__device__ void stage_key_step(const Shared& sh, const Geometry<float>& g, const WorkTile& w, index_t kvh,
                               const nv_bf16* k, const nv_bf16* v, index_t width, const KeySteps& steps, index_t s) {
  using KTile = Bf16Tile<kKeyStep, D>;
  const attention::TileRange keys = steps.keys(s);
  const int n = static_cast<int>(keys.last - keys.first);
  stage_rows<kKeyStep, D>(sh.k[s], KTile::kLd, k, w.b, w.start, keys.first, n, g.seq, g.kv_heads, kvh, width);
  stage_rows<kKeyStep, D>(sh.v[s], KTile::kLd, v, w.b, w.start, keys.first, n, g.seq, g.kv_heads, kvh, width);
  ptx::cp_async_commit();
}

// The start of every step of a block: this thread's copies have landed (wait), then every
// thread's have, and every warp is done with the previous step's tiles (the barrier), so the
// copy of the next step may go into them.
__device__ inline void wait_for_step() {
  ptx::cp_async_wait<0>();
  __syncthreads();
}

// The start of key step s of a dQ block: waits for its K and V, starts
// copying step s + 1's, and returns step s's keys.
template <int D, class Shared>
__device__ attention::TileRange begin_key_step(const Shared& sh, const Geometry<float>& g, const WorkTile& w, index_t kvh,
                                               const nv_bf16* k, const nv_bf16* v, index_t width, const KeySteps& steps,
                                               index_t s) {
  wait_for_step();
  if (s + 1 < steps.size()) stage_key_step<D>(sh, g, w, kvh, k, v, width, steps, s + 1);
  return steps.keys(s);
}


// Blocks per SM the forward is compiled for (__launch_bounds__): its shared plan (one Q, K and V
// tile: 28 / 52 KB at head_dim 64 / 128) leaves the registers as the limit, 128 per thread for four
// blocks at 64 and 168 for three at 128, what nvcc gives it unbounded (128 / 166).
template <int D>
inline constexpr int kForwardBlocksPerSm = D == 64 ? 4 : 3;

// ---- forward: one block per (document query tile, query head) -----------------------------------
// Warp w: queries [16w, 16w + 16) of the tile, its strips of S (then P) and of the O accumulator.
// q, k, v: the bf16 copies (rows of `width`).
template <int D>
__global__ void __launch_bounds__(kBlockThreads, kForwardBlocksPerSm<D>)
    forward_kernel(Geometry<float> g, const WorkTile* work, index_t width, const nv_bf16* q, const nv_bf16* k,
                   const nv_bf16* v, float* o, float* lse) {
  using QTile = Bf16Tile<kTileRows, D>;
  using KTile = Bf16Tile<kKeyStep, D>;
  extern __shared__ __align__(128) unsigned char tile_memory[];
  const ForwardShared<D> sh(tile_memory);
  const QueryTile tile(g, work);
  const WorkTile w = tile.w;
  const index_t h = tile.h, kvh = tile.kvh, qs = tile.qs, qe = tile.qe;
  const int warp = tile.warp;
  const FragmentPlace at;
  const KeySteps steps(qs, qe, w.len, g.window);
  // One K and one V tile, each refilled while the other is read (FlashAttention-2's forward): V_s
  // is copied while S = Q K_s^T runs, K_{s+1} while the softmax and O += P V_s run; two barriers a
  // step. Single copies keep the plan at 3 tiles, so 3 blocks of 4 warps fit an SM at head_dim 128
  // (kForwardBlocksPerSm), where two copies of each held it to 2.
  auto stage = [&](nv_bf16* tile, const nv_bf16* src, index_t s) {
    const attention::TileRange keys = steps.keys(s);
    stage_rows<kKeyStep, D>(tile, KTile::kLd, src, w.b, w.start, keys.first, static_cast<int>(keys.last - keys.first),
                            g.seq, g.kv_heads, kvh, width);
    ptx::cp_async_commit();
  };
  stage_rows<kTileRows, D>(sh.q, QTile::kLd, q, w.b, w.start, qs, static_cast<int>(qe - qs), g.seq, g.heads, h, width);
  if (steps.size() > 0) stage(sh.k, k, 0);  // in one group with Q
  Strip<D> acc;
  zero<D>(acc);
  // This thread's rows g and g + 8 of the warp's strip: the online softmax's m and (this thread's
  // part of) l for each. A row that has seen no key yet keeps m = -inf, P = 0, alpha = 1.
  float m[2] = {minus_infinity<float>(), minus_infinity<float>()}, l[2] = {0.0f, 0.0f};
  for (index_t step = 0; step < steps.size(); ++step) {
    wait_for_step();  // K_s (and Q) landed; every warp is done with V_{s-1}
    stage(sh.v, v, step);
    const attention::TileRange keys = steps.keys(step);
    const index_t first_key = keys.first;
    const int n = static_cast<int>(keys.last - first_key);
    Strip<kKeyStep> s;
    zero<kKeyStep>(s);
    strip_product<kKeyStep, D, BTile::rows_are_n>(s, sh.q + warp * kStripRows * QTile::kLd, QTile::kLd, sh.k,
                                                  KTile::kLd);
    wait_for_step();  // V_s landed; every warp is done with K_s
    if (step + 1 < steps.size()) stage(sh.k, k, step + 1);
    // Online softmax of each row over this step's keys: scale, softcap, mask, then
    // m' = max(m, rowmax S), P = exp(S - m'), l = exp(m - m') l + rowsum P, O = exp(m - m') O.
    // A whole step (a full tile of queries that all see all kKeyStep keys) needs no mask.
    auto softmax = [&]<bool Masked>() {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const index_t i = qs + warp * kStripRows + at.g + 8 * half;
        float step_max = minus_infinity<float>();
#pragma unroll
        for (int nt = 0; nt < kKeyStep / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * nt + 2 * at.t + e;
            float t;
            float& x = s[nt][2 * half + e];
            x = capped(g.scale * x, g.cap, t);
            if (Masked && !(i < qe && col < n && attention::visible(i, first_key + col, g.window)))
              x = minus_infinity<float>();
            step_max = x > step_max ? x : step_max;
          }
        step_max = quad_max(step_max);
        const float m_new = m[half] > step_max ? m[half] : step_max;
        const float alpha = m_new == minus_infinity<float>() ? 1.0f : fast_exp(m[half] - m_new);
        float row_sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kKeyStep / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            float& x = s[nt][2 * half + e];
            x = Masked && x == minus_infinity<float>() ? 0.0f : fast_exp(x - m_new);
            row_sum += x;
          }
        l[half] = alpha * l[half] + row_sum;
        m[half] = m_new;
#pragma unroll
        for (int nt = 0; nt < D / 8; ++nt) {
          acc[nt][2 * half] *= alpha;
          acc[nt][2 * half + 1] *= alpha;
        }
      }
    };
    if (whole_step(qs, qe, kTileRows, keys.first, keys.last, kKeyStep, g.window)) softmax.template operator()<false>();
    else softmax.template operator()<true>();
    OperandStrip<kKeyStep> p;
    to_operand<kKeyStep>(p, s);
    strip_product<D, kKeyStep, BTile::rows_are_k>(acc, p, sh.v, KTile::kLd);
  }
  // O = acc / l and LSE = m + log l for the tile's rows; l summed over the row's quad first.
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float row_l = quad_sum(l[half]);  // >= 1: every query sees itself, and the row max gives exp(0)
    const index_t i = qs + warp * kStripRows + at.g + 8 * half;
    if (i >= qe) continue;
    const float inv_l = 1.0f / row_l;
    float* out = o + ((w.b * g.seq + w.start + i) * g.heads + h) * g.dim;
#pragma unroll
    for (int nt = 0; nt < D / 8; ++nt) {
      const int col = 8 * nt + 2 * at.t;
      if (col < g.dim) out[col] = acc[nt][2 * half] * inv_l;
      if (col + 1 < g.dim) out[col + 1] = acc[nt][2 * half + 1] * inv_l;
    }
    if (at.t == 0) lse[(w.b * g.seq + w.start + i) * g.heads + h] = m[half] + log_of(row_l);
  }
}


// P and dS of one (row, column) of a score tile, from S and dP as the products left them:
// P = exp(scale-and-cap(S) - LSE) where the pair is seen (else 0), dS = P (dP - D)(1 - tanh^2).
__device__ inline void probability_and_grad(float& s, float& dp, bool seen, const Geometry<float>& g, float row_lse,
                                            float row_d) {
  float t;
  const float score = capped(g.scale * s, g.cap, t);
  const float p = seen ? fast_exp(score - row_lse) : 0.0f;
  dp = p * (dp - row_d) * (g.cap > 0.0f ? 1.0f - t * t : 1.0f);
  s = p;
}

// The query steps of a dK/dV block: per query head of its share of the kv head's group (`heads`
// of them from `first_head`), in order, the queries [ks, q_last] that see its keys in steps of
// kQueryStep. Step s: query head first_head + s / per_head, queries from c0(s), count(s) of them.
struct QuerySteps {
  index_t ks, q_last, per_head, heads, first_head;
  __device__ index_t size() const { return per_head * heads; }
  __device__ index_t head(index_t s) const { return first_head + s / per_head; }
  __device__ index_t c0(index_t s) const { return ks + s % per_head * kQueryStep; }
  __device__ int count(index_t s) const {
    const index_t left = q_last - c0(s) + 1;
    return static_cast<int>(left < kQueryStep ? left : kQueryStep);
  }
};

// Blocks per SM the backward kernels are compiled for (__launch_bounds__): at head_dim 64, three,
// which caps them at 168 registers (65536 / (3 x 128), in whole 256-register units per warp). Left
// to itself nvcc gives dK/dV and dQ 170-172, a few registers too many for a third block. Capped,
// dK/dV spills 56 bytes (ptxas) and still wins: head_dim-64 forward+backward 2.44-2.50 ms against
// 2.66 ms with dK/dV left at 2 blocks (H100, same run, bench_attention_cuda). At 128 the
// accumulators need ~250 registers: two blocks whatever the bound.
template <int D>
inline constexpr int kBackwardBlocksPerSm = D == 64 ? 3 : 1;

// ---- backward, pass 1: dK, dV; one block per (document key tile, kv head, split) ------------------
// Warp w owns keys [16w, 16w + 16) of the tile: its strips of S^T = K Q^T and dP^T = V dO^T, of
// P^T and dS^T, and of the dK, dV accumulators (registers, the whole block). The block walks its
// split's query heads (group / splits consecutive heads of the kv head's group) in order and, for
// each, the queries that see its keys in steps of kQueryStep, in order. Split 0 adds its dK, dV
// into grad_k, grad_v; split s > 0 adds its share into slice s - 1 of partial_k, partial_v (zeroed,
// each slice laid out as dK, split_stride elements apart), which sum_splits_kernel then adds to
// dK, dV in split order. Either way each element has one writer and a fixed summation order.
template <int D>
__global__ void __launch_bounds__(kBlockThreads, kBackwardBlocksPerSm<D>)
    key_value_grad_kernel(Geometry<float> g, const WorkTile* work, index_t width, const nv_bf16* q, const nv_bf16* k,
                          const nv_bf16* v, const nv_bf16* grad_o, const float* lse, const float* drow, float* grad_k,
                          float* grad_v, float* partial_k, float* partial_v, index_t splits, index_t split_stride) {
  using KTile = Bf16Tile<kTileRows, D>;
  using QTile = Bf16Tile<kQueryStep, D>;
  extern __shared__ __align__(128) unsigned char tile_memory[];
  const KeyValueShared<D> sh(tile_memory);
  const BlockPlace place(g.kv_heads * splits);  // a kv head's splits are neighbours: they share K and V
  const WorkTile w = work[place.item];
  const index_t kvh = place.head / splits, split = place.head % splits, split_heads = g.group / splits;
  const int warp = static_cast<int>(threadIdx.x / 32);
  const FragmentPlace at;
  const index_t ks = static_cast<index_t>(w.tile) * kTileRows, ke = ks + kTileRows < w.len ? ks + kTileRows : w.len;
  // Queries that see some key of [ks, ke): [ks, min(len - 1, ke - 2 + W)] (query_tiles_for_keys).
  const index_t q_last = g.window > 0 && ke - 2 + g.window < w.len - 1 ? ke - 2 + g.window : w.len - 1;
  const QuerySteps steps{ks, q_last, (q_last - ks) / kQueryStep + 1, split_heads, kvh * g.group + split * split_heads};
  // Starts copying step s's queries (Q, dO, LSE, D) into copy s % 2, and commits the group.
  auto stage_query_step = [&](index_t s) {
    const index_t h = steps.head(s), c0 = steps.c0(s);
    const int n = steps.count(s);
    stage_rows<kQueryStep, D>(sh.q[s], QTile::kLd, q, w.b, w.start, c0, n, g.seq, g.heads, h, width);
    stage_rows<kQueryStep, D>(sh.grad_o[s], QTile::kLd, grad_o, w.b, w.start, c0, n, g.seq, g.heads, h, width);
    stage_row_values<kQueryStep>(sh.lse[s], lse, w.b, w.start, c0, n, g.seq, g.heads, h);
    stage_row_values<kQueryStep>(sh.drow[s], drow, w.b, w.start, c0, n, g.seq, g.heads, h);
    ptx::cp_async_commit();
  };
  stage_rows<kTileRows, D>(sh.k, KTile::kLd, k, w.b, w.start, ks, static_cast<int>(ke - ks), g.seq, g.kv_heads, kvh, width);
  stage_rows<kTileRows, D>(sh.v, KTile::kLd, v, w.b, w.start, ks, static_cast<int>(ke - ks), g.seq, g.kv_heads, kvh, width);
  stage_query_step(0);  // in one group with K and V (there is always a step: every key sees its own query)
  Strip<D> dk, dv;
  zero<D>(dk);
  zero<D>(dv);
  const nv_bf16* k_strip = sh.k + warp * kStripRows * KTile::kLd;
  const nv_bf16* v_strip = sh.v + warp * kStripRows * KTile::kLd;
  for (index_t step = 0; step < steps.size(); ++step) {
    wait_for_step();
    if (step + 1 < steps.size()) stage_query_step(step + 1);
    const int n = steps.count(step);
    const index_t c0 = steps.c0(step);
    Strip<kQueryStep> st, dpt;
    zero<kQueryStep>(st);
    zero<kQueryStep>(dpt);
    strip_product<kQueryStep, D, BTile::rows_are_n>(st, k_strip, KTile::kLd, sh.q[step], QTile::kLd);
    strip_product<kQueryStep, D, BTile::rows_are_n>(dpt, v_strip, KTile::kLd, sh.grad_o[step], QTile::kLd);
    // P^T(j, i) and dS^T(j, i) for key j (this thread's rows), query c0 + col; a whole step (a
    // full key tile, kQueryStep queries that all see all its keys) needs no mask.
    auto gradients = [&]<bool Masked>() {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const index_t j = ks + warp * kStripRows + at.g + 8 * half;
#pragma unroll
        for (int nt = 0; nt < kQueryStep / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * nt + 2 * at.t + e;
            const bool seen = !Masked || (j < ke && col < n && attention::visible(c0 + col, j, g.window));
            probability_and_grad(st[nt][2 * half + e], dpt[nt][2 * half + e], seen, g, sh.lse[step][col],
                                 sh.drow[step][col]);
          }
      }
    };
    if (whole_step(c0, c0 + n, kQueryStep, ks, ke, kTileRows, g.window))
      gradients.template operator()<false>();
    else
      gradients.template operator()<true>();
    OperandStrip<kQueryStep> pt, dst;
    to_operand<kQueryStep>(pt, st);
    to_operand<kQueryStep>(dst, dpt);
    strip_product<D, kQueryStep, BTile::rows_are_k>(dv, pt, sh.grad_o[step], QTile::kLd);
    strip_product<D, kQueryStep, BTile::rows_are_k>(dk, dst, sh.q[step], QTile::kLd);
  }
  const int count = static_cast<int>(ke - ks);
  float* into_k = split == 0 || !grad_k ? grad_k : partial_k + (split - 1) * split_stride;  // no offset on null
  float* into_v = split == 0 || !grad_v ? grad_v : partial_v + (split - 1) * split_stride;
  if (grad_k) add_tile<D>(sh.accumulators, into_k, dk, w.b, w.start, ks, count, g.seq, g.kv_heads, kvh, g.dim, g.scale);
  if (grad_v) add_tile<D>(sh.accumulators, into_v, dv, w.b, w.start, ks, count, g.seq, g.kv_heads, kvh, g.dim, 1.0f);
}

// grad[i] += (partial[0][i] + partial[1][i]) + ... over the `slices` slices (`stride` Vecs
// apart), for dK and dV (either may be null) in one launch: splits 1.. of key_value_grad_kernel
// added to the gradients split 0 has already added to, in split order.
// (A template: a header's non-template __global__ function is defined again in every translation
// unit that includes it.)
template <class T, int N>
__global__ void sum_splits_kernel(index_t vectors, index_t slices, index_t stride, const Vec<T, N>* partial_k,
                                  Vec<T, N>* grad_k, const Vec<T, N>* partial_v, Vec<T, N>* grad_v) {
  auto add_slices = [&](const Vec<T, N>* partial, Vec<T, N>* grad, index_t i) {
    Vec<T, N> sum = partial[i], g = grad[i];
    for (index_t s = 1; s < slices; ++s) {
      const Vec<T, N> more = partial[s * stride + i];
#pragma unroll
      for (int e = 0; e < N; ++e) sum.e[e] += more.e[e];
    }
#pragma unroll
    for (int e = 0; e < N; ++e) g.e[e] += sum.e[e];
    grad[i] = g;
  };
  for (index_t i = global_thread(); i < vectors; i += grid_stride()) {
    if (grad_k) add_slices(partial_k, grad_k, i);
    if (grad_v) add_slices(partial_v, grad_v, i);
  }
}

// ---- backward, pass 2: dQ; one block per (document query tile, query head) ------------------------
// Warp w owns queries [16w, 16w + 16): its strips of S = Q K^T, dP = dO V^T, dS and the dQ
// accumulator (registers, the whole block).
template <int D>
__global__ void __launch_bounds__(kBlockThreads, kBackwardBlocksPerSm<D>)
    query_grad_kernel(Geometry<float> g, const WorkTile* work, index_t width, const nv_bf16* q, const nv_bf16* k,
                      const nv_bf16* v, const nv_bf16* grad_o, const float* lse, const float* drow, float* grad_q) {
  using QTile = Bf16Tile<kTileRows, D>;
  using KTile = Bf16Tile<kKeyStep, D>;
  extern __shared__ __align__(128) unsigned char tile_memory[];
  const QueryShared<D> sh(tile_memory);
  const QueryTile tile(g, work);
  const WorkTile w = tile.w;
  const index_t h = tile.h, kvh = tile.kvh, qs = tile.qs, qe = tile.qe;
  const int warp = tile.warp;
  const FragmentPlace at;
  const int rows = static_cast<int>(qe - qs);
  const KeySteps steps(qs, qe, w.len, g.window);
  stage_rows<kTileRows, D>(sh.q, QTile::kLd, q, w.b, w.start, qs, rows, g.seq, g.heads, h, width);
  stage_rows<kTileRows, D>(sh.grad_o, QTile::kLd, grad_o, w.b, w.start, qs, rows, g.seq, g.heads, h, width);
  stage_row_values<kTileRows>(sh.lse, lse, w.b, w.start, qs, rows, g.seq, g.heads, h);
  stage_row_values<kTileRows>(sh.drow, drow, w.b, w.start, qs, rows, g.seq, g.heads, h);
  if (steps.size() > 0) stage_key_step<D>(sh, g, w, kvh, k, v, width, steps, 0);  // in one group with the above
  Strip<D> dq;
  zero<D>(dq);
  const nv_bf16* q_strip = sh.q + warp * kStripRows * QTile::kLd;
  const nv_bf16* grad_o_strip = sh.grad_o + warp * kStripRows * QTile::kLd;
  for (index_t step = 0; step < steps.size(); ++step) {
    const attention::TileRange keys = begin_key_step<D>(sh, g, w, kvh, k, v, width, steps, step);
    const index_t first_key = keys.first;
    const int n = static_cast<int>(keys.last - first_key);
    Strip<kKeyStep> s, dp;
    zero<kKeyStep>(s);
    zero<kKeyStep>(dp);
    strip_product<kKeyStep, D, BTile::rows_are_n>(s, q_strip, QTile::kLd, sh.k[step], KTile::kLd);
    strip_product<kKeyStep, D, BTile::rows_are_n>(dp, grad_o_strip, QTile::kLd, sh.v[step], KTile::kLd);
    auto gradients = [&]<bool Masked>() {  // a whole step needs no mask
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = warp * kStripRows + at.g + 8 * half;
        const index_t i = qs + row;
#pragma unroll
        for (int nt = 0; nt < kKeyStep / 8; ++nt)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const int col = 8 * nt + 2 * at.t + e;
            const bool seen = !Masked || (i < qe && col < n && attention::visible(i, first_key + col, g.window));
            probability_and_grad(s[nt][2 * half + e], dp[nt][2 * half + e], seen, g, sh.lse[row], sh.drow[row]);
          }
      }
    };
    if (whole_step(qs, qe, kTileRows, keys.first, keys.last, kKeyStep, g.window)) gradients.template operator()<false>();
    else gradients.template operator()<true>();
    OperandStrip<kKeyStep> ds;
    to_operand<kKeyStep>(ds, dp);
    strip_product<D, kKeyStep, BTile::rows_are_k>(dq, ds, sh.k[step], KTile::kLd);
  }
  add_tile<D>(sh.accumulators, grad_q, dq, w.b, w.start, qs, rows, g.seq, g.heads, h, g.dim, g.scale);
}

}  // namespace megacpp::cuda::flash::tensor_core
