// CUDA backend: the fused attention in bf16 on the tensor cores, the device code (the launches:
// detail/attention_mma_launch.cuh; on request only, inside a CudaBf16Attention scope).
//
// The same algorithm as detail/attention.cuh (FlashAttention-2, Dao 2023, arXiv 2307.08691,
// Algorithms 1 and 2, the two-pass backward of section 3.2), with every product on the tensor
// cores through WMMA (CUDA C++ Programming Guide, "Warp Matrix Functions"): bf16 16x16x16
// fragments, fp32 accumulation. What is rounded to bf16, and where (round to nearest even):
//
//   q, k, v, dO   when a tile of them is staged in shared memory (global memory stays fp32);
//   P             before O += P V (forward) and dV += P^T dO (backward);
//   dS            before dK += dS^T q and dQ += dS K.
//
// Everything else is fp32: the products' sums, S and its scale, the softcap's tanh, the online
// softmax's m and l, LSE, D = rowsum(dO o O) (of the bf16 dO, as dP), P and dP when
// dS = P (dP - D)(1 - tanh^2) is formed, and the final O / l, scale dK, scale dQ. l sums the fp32
// P, as FlashAttention-2's kernels do, so the rounding of P is an error of the numerator only.
//
// Work is planned exactly as in the fp32 kernel: per document, the same tiling functions
// (attention_tiling.hpp), a block per (document tile, head), only the visible tiles visited and
// each trimmed to computed_keys; GQA by index; padding tokens are never visited. Tiles are 64
// rows (query tiles; key tiles in the dK/dV pass), split into 4 warp strips of 16 rows: warp w
// owns rows [16w, 16w + 16) of every product it computes and of the elementwise work between
// them, so inside a tile step a warp only waits for itself (__syncwarp); __syncthreads guards
// the staging of shared tiles only.
//
// Products: one helper, strip_product (attention_mma_tiles.cuh), with the transposes as fragment
// layouts; the dK/dV pass computes the transposed scores (keys are the block's rows), so P^T and
// dS^T are a warp's own strips. WMMA does not specify which lane holds which fragment element, so
// every per-row operation goes through shared memory: S is stored, masked and exponentiated there,
// and the forward's O accumulator lives there (rescaled by exp(m - m') row by row, then loaded into
// fragments for each P V). dK, dV and dQ are never rescaled: they stay in registers for the whole
// block and pass through shared memory once, at the end.
//
// Head dimensions: the kernels are instantiated for a padded width D of 64 and 128; head_dim
// 1..128 runs, zero padded to the next of those (the zero columns add nothing to any product and
// are never written back). Larger heads take the fp32 kernel (see attention_mma_launch.cuh).
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <type_traits>

#include "megacpp/backends/cuda/detail/attention.cuh"
#include "megacpp/backends/cuda/detail/attention_mma_tiles.cuh"

namespace megacpp::cuda::flash::tensor_core {

// The query tile a forward or dQ block owns (its document tile and head, queries [qs, qe)) and
// this thread's place in it: warp `warp`, tile row r = t / 2 (query i, inactive past the tile's
// end), column parity `half`. The kernels copy the members into named locals, not a structured
// binding: their lambdas capture them, and capturing a structured binding (C++20) is beyond Clang
// before 16, which builds the host emulation of this code (tests/cuda_emulation).
struct QueryTileThread {
  WorkTile w;
  index_t h, kvh, qs, qe, i;
  int warp, r, half;
  bool active;
  __device__ QueryTileThread(const Geometry<float>& g, const WorkTile* work)
      : w(work[blockIdx.x]), h(blockIdx.y), kvh(h / g.group), qs(static_cast<index_t>(w.tile) * kTileRows),
        qe(qs + kTileRows < w.len ? qs + kTileRows : w.len), i(qs + static_cast<index_t>(threadIdx.x / 2)),
        warp(static_cast<int>(threadIdx.x / 32)), r(static_cast<int>(threadIdx.x / 2)),
        half(static_cast<int>(threadIdx.x % 2)), active(i < qe) {}
};

// One key step of a query-tile block (forward, dQ): stages keys [first_key, first_key + n) of k
// and v (kv head kvh) as bf16, then computes this warp's strip of S = Q K^T into the shared S tile
// (`sh`: the kernel's shared plan, with q, k, v and s). Every thread of the block calls it.
template <int D, class Shared>
__device__ void stage_keys_and_score(const Shared& sh, const Geometry<float>& g, const WorkTile& w, index_t kvh, int warp,
                                     const float* k, const float* v, index_t first_key, int n, bool vector_loads) {
  using QTile = Bf16Tile<kTileRows, D>;
  using KTile = Bf16Tile<kKeyStep, D>;
  using STile = FloatTile<kTileRows, kKeyStep>;
  __syncthreads();  // the previous step's K and V readers are done
  stage_bf16<kKeyStep, D>(sh.k, KTile::kLd, k, w.b, w.start, first_key, n, g.seq, g.kv_heads, kvh, g.dim, vector_loads);
  stage_bf16<kKeyStep, D>(sh.v, KTile::kLd, v, w.b, w.start, first_key, n, g.seq, g.kv_heads, kvh, g.dim, vector_loads);
  __syncthreads();
  Accumulator s[kKeyStep / kFragment];
  zero_strip<kKeyStep>(s);
  strip_product<kKeyStep, D, wmma::row_major, wmma::col_major>(s, sh.q + warp * kFragment * QTile::kLd, QTile::kLd, sh.k,
                                                               KTile::kLd);
  store_strip<kKeyStep>(sh.s + warp * kFragment * STile::kLd, STile::kLd, s);
}

// ---- forward: one block per (document query tile, query head) -----------------------------------
// Thread t works on tile row t / 2 (warp w: rows [16w, 16w + 16), its own strip), on the columns
// of S, P and O congruent to t mod 2 (interleaved: the 32 lanes then meet at most 2 to a bank);
// the row's two threads combine their max and sum by one xor shuffle (the same bits in both).
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    forward_kernel(Geometry<float> g, const WorkTile* work, const float* q, const float* k, const float* v, float* o,
                   float* lse, bool vector_loads) {
  using QTile = Bf16Tile<kTileRows, D>;
  using KTile = Bf16Tile<kKeyStep, D>;
  using STile = FloatTile<kTileRows, kKeyStep>;
  using PTile = Bf16Tile<kTileRows, kKeyStep>;
  using OTile = FloatTile<kTileRows, D>;
  extern __shared__ __align__(128) unsigned char tile_memory[];
  const ForwardShared<D> sh(tile_memory);
  const QueryTileThread place(g, work);
  const WorkTile w = place.w;
  const index_t h = place.h, kvh = place.kvh, qs = place.qs, qe = place.qe, i = place.i;
  const int warp = place.warp, r = place.r, half = place.half;
  const bool active = place.active;
  stage_bf16<kTileRows, D>(sh.q, QTile::kLd, q, w.b, w.start, qs, static_cast<int>(qe - qs), g.seq, g.heads, h, g.dim,
                           vector_loads);
  for (int idx = threadIdx.x; idx < kTileRows * OTile::kLd; idx += kBlockThreads) sh.o[idx] = 0.0f;
  float m = minus_infinity<float>(), l = 0.0f;
  for_each_key_step(qs, qe, w.len, g.window, [&](index_t first_key, int n) {
    stage_keys_and_score<D>(sh, g, w, kvh, warp, k, v, first_key, n, vector_loads);
    __syncwarp();
    // Online softmax of row r over this step's keys: scale, softcap, mask, then
    // m' = max(m, rowmax S), P = exp(S - m'), l = exp(m - m') l + rowsum P, O = exp(m - m') O.
    float* s_row = sh.s + r * STile::kLd;
    float step_max = minus_infinity<float>();
    for (int col = half; col < kKeyStep; col += 2) {
      float t;
      const float score = capped(g.scale * s_row[col], g.cap, t);
      s_row[col] = active && col < n && attention::visible(i, first_key + col, g.window) ? score : minus_infinity<float>();
      step_max = s_row[col] > step_max ? s_row[col] : step_max;
    }
    const float other_max = __shfl_xor_sync(0xFFFFFFFFu, step_max, 1);
    step_max = other_max > step_max ? other_max : step_max;
    const float m_new = m > step_max ? m : step_max;
    // A row that has seen no key yet keeps m = -inf, P = 0 and alpha = 1 (never exp(-inf + inf)).
    const float alpha = m_new == minus_infinity<float>() ? 1.0f : exp_of(m - m_new);
    nv_bf16* p_row = sh.p + r * PTile::kLd;
    float row_sum = 0.0f;
    for (int col = half; col < kKeyStep; col += 2) {
      const float p = s_row[col] == minus_infinity<float>() ? 0.0f : exp_of(s_row[col] - m_new);
      row_sum += p;
      p_row[col] = __float2bfloat16_rn(p);
    }
    row_sum += __shfl_xor_sync(0xFFFFFFFFu, row_sum, 1);
    l = alpha * l + row_sum;
    m = m_new;
    float* o_row = sh.o + r * OTile::kLd;
    for (int e = half; e < D; e += 2) o_row[e] *= alpha;
    __syncwarp();
    Accumulator acc[D / kFragment];
    load_strip<D>(acc, sh.o + warp * kFragment * OTile::kLd, OTile::kLd);
    strip_product<D, kKeyStep, wmma::row_major, wmma::row_major>(acc, sh.p + warp * kFragment * PTile::kLd, PTile::kLd,
                                                                 sh.v, KTile::kLd);
    store_strip<D>(sh.o + warp * kFragment * OTile::kLd, OTile::kLd, acc);
  });
  if (active && half == 0) {
    sh.inv_l[r] = 1.0f / l;  // l >= 1: every query sees itself, and the row max contributes exp(0)
    lse[(w.b * g.seq + w.start + i) * g.heads + h] = m + log_of(l);
  }
  __syncthreads();  // every warp's O strip and 1 / l are in shared memory
  const index_t rows = qe - qs;
  for (index_t idx = threadIdx.x; idx < rows * g.dim; idx += kBlockThreads) {
    const int rr = static_cast<int>(idx / g.dim), e = static_cast<int>(idx % g.dim);
    o[((w.b * g.seq + w.start + qs + rr) * g.heads + h) * g.dim + e] = sh.o[rr * OTile::kLd + e] * sh.inv_l[rr];
  }
}

// ---- backward, step 0: D = rowsum(bf16(dO) o O) per (token, head), summed in fp32 -----------------
// dP = dO V^T is formed from the bf16 dO the tiles hold, so D takes the same dO: then
// sum_j P_ij (dP_ij - D_i) = 0 holds for the rounded problem as in exact arithmetic (with the fp32
// dO, D would be off by ~2^-9 |dO| |O| and every dS by P times that).
template <class T>
__global__ void rounded_output_dot_kernel(index_t rows, index_t dim, const T* o, const T* grad_o, T* drow) {
  static_assert(std::is_same_v<T, float>, "megacpp_mma_float_only: the tensor-core attention takes float tensors");
  for (index_t r = global_thread(); r < rows; r += grid_stride()) {
    float sum = 0.0f;
    for (index_t e = 0; e < dim; ++e) sum += __bfloat162float(__float2bfloat16_rn(grad_o[r * dim + e])) * o[r * dim + e];
    drow[r] = sum;
  }
}

// ---- backward, pass 1: dK, dV; one block per (document key tile, kv head) --------------------------
// Warp w owns keys [16w, 16w + 16) of the tile: its strips of S^T = K Q^T and dP^T = V dO^T, of
// P^T and dS^T, and of the dK, dV accumulators (registers, the whole block). The block walks the
// group's query heads in order and, for each, the queries that see its keys in steps of
// kQueryStep, in order: each dK, dV row has one writer and a fixed summation order.
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    key_value_grad_kernel(Geometry<float> g, const WorkTile* work, const float* q, const float* k, const float* v,
                          const float* grad_o, const float* lse, const float* drow, float* grad_k, float* grad_v,
                          bool vector_loads) {
  using KTile = Bf16Tile<kTileRows, D>;
  using QTile = Bf16Tile<kQueryStep, D>;
  using STile = FloatTile<kTileRows, kQueryStep>;
  using PTile = Bf16Tile<kTileRows, kQueryStep>;
  extern __shared__ __align__(128) unsigned char tile_memory[];
  const KeyValueShared<D> sh(tile_memory);
  const WorkTile w = work[blockIdx.x];
  const index_t kvh = blockIdx.y;
  const int warp = threadIdx.x / 32, r = threadIdx.x / 2, half = threadIdx.x % 2;
  const index_t ks = static_cast<index_t>(w.tile) * kTileRows, ke = ks + kTileRows < w.len ? ks + kTileRows : w.len;
  const index_t j = ks + r;  // this thread's key in the elementwise step
  stage_bf16<kTileRows, D>(sh.k, KTile::kLd, k, w.b, w.start, ks, static_cast<int>(ke - ks), g.seq, g.kv_heads, kvh,
                           g.dim, vector_loads);
  stage_bf16<kTileRows, D>(sh.v, KTile::kLd, v, w.b, w.start, ks, static_cast<int>(ke - ks), g.seq, g.kv_heads, kvh,
                           g.dim, vector_loads);
  Accumulator dk[D / kFragment], dv[D / kFragment];
  zero_strip<D>(dk);
  zero_strip<D>(dv);
  // Queries that see some key of [ks, ke): [ks, min(len - 1, ke - 2 + W)] (query_tiles_for_keys).
  const index_t q_last = g.window > 0 && ke - 2 + g.window < w.len - 1 ? ke - 2 + g.window : w.len - 1;
  for (index_t hg = 0; hg < g.group; ++hg) {
    const index_t h = kvh * g.group + hg;
    for (index_t c0 = ks; c0 <= q_last; c0 += kQueryStep) {
      const int n = static_cast<int>(q_last - c0 + 1 < kQueryStep ? q_last - c0 + 1 : kQueryStep);
      __syncthreads();  // the previous step's readers are done
      stage_bf16<kQueryStep, D>(sh.q, QTile::kLd, q, w.b, w.start, c0, n, g.seq, g.heads, h, g.dim, vector_loads);
      stage_bf16<kQueryStep, D>(sh.grad_o, QTile::kLd, grad_o, w.b, w.start, c0, n, g.seq, g.heads, h, g.dim, vector_loads);
      stage_row_values<kQueryStep>(sh.lse, lse, w.b, w.start, c0, n, g.seq, g.heads, h);
      stage_row_values<kQueryStep>(sh.drow, drow, w.b, w.start, c0, n, g.seq, g.heads, h);
      __syncthreads();
      Accumulator st[kQueryStep / kFragment];
      zero_strip<kQueryStep>(st);
      strip_product<kQueryStep, D, wmma::row_major, wmma::col_major>(st, sh.k + warp * kFragment * KTile::kLd, KTile::kLd,
                                                                     sh.q, QTile::kLd);
      store_strip<kQueryStep>(sh.st + warp * kFragment * STile::kLd, STile::kLd, st);
      zero_strip<kQueryStep>(st);
      strip_product<kQueryStep, D, wmma::row_major, wmma::col_major>(st, sh.v + warp * kFragment * KTile::kLd, KTile::kLd,
                                                                     sh.grad_o, QTile::kLd);
      store_strip<kQueryStep>(sh.dpt + warp * kFragment * STile::kLd, STile::kLd, st);
      __syncwarp();
      // P^T(j, i) = exp(S - LSE_i), dS^T(j, i) = P (dP - D_i)(1 - tanh^2) for key j, query c0 + col.
      for (int col = half; col < kQueryStep; col += 2) {
        float t;
        const float score = capped(g.scale * sh.st[r * STile::kLd + col], g.cap, t);
        const bool seen = j < ke && col < n && attention::visible(c0 + col, j, g.window);
        const float p = seen ? exp_of(score - sh.lse[col]) : 0.0f;
        const float ds = p * (sh.dpt[r * STile::kLd + col] - sh.drow[col]) * (g.cap > 0.0f ? 1.0f - t * t : 1.0f);
        sh.pt[r * PTile::kLd + col] = __float2bfloat16_rn(p);
        sh.dst[r * PTile::kLd + col] = __float2bfloat16_rn(ds);
      }
      __syncwarp();
      strip_product<D, kQueryStep, wmma::row_major, wmma::row_major>(dv, sh.pt + warp * kFragment * PTile::kLd,
                                                                     PTile::kLd, sh.grad_o, QTile::kLd);
      strip_product<D, kQueryStep, wmma::row_major, wmma::row_major>(dk, sh.dst + warp * kFragment * PTile::kLd,
                                                                     PTile::kLd, sh.q, QTile::kLd);
    }
  }
  static_assert(kGradientStripsBytes<D> <= 2 * KTile::kBytes, "megacpp_mma_scratch: the gradient strips reuse K and V");
  using Strip = FloatTile<kFragment, D>;
  __syncthreads();  // every warp is done with the tiles: their memory holds the gradient strips now
  float* strip = reinterpret_cast<float*>(tile_memory) + warp * kFragment * Strip::kLd;
  const index_t first = ks + warp * kFragment;
  const int count = static_cast<int>(ke - first);  // rows of this strip inside the tile (may be <= 0)
  if (grad_k) {
    store_strip<D>(strip, Strip::kLd, dk);
    __syncwarp();
    add_strip(grad_k, strip, Strip::kLd, w.b, w.start, first, count, g.seq, g.kv_heads, kvh, g.dim, g.scale);
    __syncwarp();
  }
  if (grad_v) {
    store_strip<D>(strip, Strip::kLd, dv);
    __syncwarp();
    add_strip(grad_v, strip, Strip::kLd, w.b, w.start, first, count, g.seq, g.kv_heads, kvh, g.dim, 1.0f);
  }
}

// ---- backward, pass 2: dQ; one block per (document query tile, query head) ------------------------
// Warp w owns queries [16w, 16w + 16): its strips of S = Q K^T, dP = dO V^T, dS and the dQ
// accumulator (registers, the whole block); thread t forms dS on row t / 2 as the forward does.
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    query_grad_kernel(Geometry<float> g, const WorkTile* work, const float* q, const float* k, const float* v,
                      const float* grad_o, const float* lse, const float* drow, float* grad_q, bool vector_loads) {
  using QTile = Bf16Tile<kTileRows, D>;
  using KTile = Bf16Tile<kKeyStep, D>;
  using STile = FloatTile<kTileRows, kKeyStep>;
  using DsTile = Bf16Tile<kTileRows, kKeyStep>;
  extern __shared__ __align__(128) unsigned char tile_memory[];
  const QueryShared<D> sh(tile_memory);
  const QueryTileThread place(g, work);
  const WorkTile w = place.w;
  const index_t h = place.h, kvh = place.kvh, qs = place.qs, qe = place.qe, i = place.i;
  const int warp = place.warp, r = place.r, half = place.half;
  const bool active = place.active;
  const int rows = static_cast<int>(qe - qs);
  stage_bf16<kTileRows, D>(sh.q, QTile::kLd, q, w.b, w.start, qs, rows, g.seq, g.heads, h, g.dim, vector_loads);
  stage_bf16<kTileRows, D>(sh.grad_o, QTile::kLd, grad_o, w.b, w.start, qs, rows, g.seq, g.heads, h, g.dim, vector_loads);
  stage_row_values<kTileRows>(sh.lse, lse, w.b, w.start, qs, rows, g.seq, g.heads, h);
  stage_row_values<kTileRows>(sh.drow, drow, w.b, w.start, qs, rows, g.seq, g.heads, h);
  Accumulator dq[D / kFragment];
  zero_strip<D>(dq);
  for_each_key_step(qs, qe, w.len, g.window, [&](index_t first_key, int n) {
    stage_keys_and_score<D>(sh, g, w, kvh, warp, k, v, first_key, n, vector_loads);
    Accumulator s[kKeyStep / kFragment];
    zero_strip<kKeyStep>(s);
    strip_product<kKeyStep, D, wmma::row_major, wmma::col_major>(s, sh.grad_o + warp * kFragment * QTile::kLd,
                                                                 QTile::kLd, sh.v, KTile::kLd);
    store_strip<kKeyStep>(sh.dp + warp * kFragment * STile::kLd, STile::kLd, s);
    __syncwarp();
    for (int col = half; col < kKeyStep; col += 2) {
      float t;
      const float score = capped(g.scale * sh.s[r * STile::kLd + col], g.cap, t);
      const bool seen = active && col < n && attention::visible(i, first_key + col, g.window);
      const float p = seen ? exp_of(score - sh.lse[r]) : 0.0f;
      const float ds = p * (sh.dp[r * STile::kLd + col] - sh.drow[r]) * (g.cap > 0.0f ? 1.0f - t * t : 1.0f);
      sh.ds[r * DsTile::kLd + col] = __float2bfloat16_rn(ds);
    }
    __syncwarp();
    strip_product<D, kKeyStep, wmma::row_major, wmma::row_major>(dq, sh.ds + warp * kFragment * DsTile::kLd, DsTile::kLd,
                                                                 sh.k, KTile::kLd);
  });
  static_assert(kGradientStripsBytes<D> <= 2 * QTile::kBytes, "megacpp_mma_scratch: the dQ strips reuse Q and dO");
  using Strip = FloatTile<kFragment, D>;
  __syncthreads();  // every warp is done with the tiles
  float* strip = reinterpret_cast<float*>(tile_memory) + warp * kFragment * Strip::kLd;
  store_strip<D>(strip, Strip::kLd, dq);
  __syncwarp();
  add_strip(grad_q, strip, Strip::kLd, w.b, w.start, qs + warp * kFragment, rows - warp * kFragment, g.seq, g.heads, h,
            g.dim, g.scale);
}

}  // namespace megacpp::cuda::flash::tensor_core
