/// \file
/// megacpp/core/kernels/attention.hpp: the FusedAttention kernel contract.
///
/// Shapes (row-major, contiguous):
///   q (batch, seq, heads, head_dim)      k, v (batch, seq, kv_heads, head_dim)
///   o (batch, seq, heads, head_dim)      lse (batch, seq, heads): log-sum-exp of each query's scores
/// GQA: query head h reads kv head h / (heads / kv_heads) (Ainslie et al., "GQA", 2023).
/// Scores: s = scale * q.k; s = softcap * tanh(s / softcap) when softcap > 0 (Gemma 2); then the
/// document / causal / window mask (attention_tiling.hpp); then softmax over visible keys.
/// Tokens covered by no DocumentSpan of their row are padding: they see nothing and nobody sees
/// them; their output is 0 (a fully masked row gives 0, never NaN) and their gradients are 0.
/// forward overwrites o and lse; backward adds into grad_q, grad_k, grad_v (each may be null: not
/// needed). Neither may materialise a (seq, seq) matrix. The naive reference is
/// dense_attention (megacpp/nn/attention/dense_reference.hpp).
#pragma once

#include <cmath>
#include <memory>
#include <string>

#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/attention_tiling.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/kernel.hpp"
#include "megacpp/core/matmul_precision.hpp"
#include "megacpp/core/shape.hpp"

namespace megacpp {

/// Backward work decomposition of a tiled attention kernel (every choice gives bitwise the same
/// result; FlashAttention-2, Dao 2023, section 3.2 splits dK/dV from dQ).
enum class AttentionBackwardSchedule {
  automatic,    ///< the backend decides (CPU: one pass unless its items leave threads idle)
  single_pass,  ///< items (row, kv head, document) own dQ, dK and dV
  two_pass,     ///< dK/dV by key tile, then dQ by query tile
};

/// Tile sizes a backend's kernel may use; 0 means the backend's default. Hints for tests,
/// benches and tuning: results never depend on them beyond floating-point summation order, and
/// the CPU kernel's results are bitwise independent of the thread count for any of them.
struct AttentionTiles {
  index_t q_rows = 0;  ///< rows (query token x group head) per query tile
  index_t tile_k = 0;  ///< keys per key tile
  AttentionBackwardSchedule backward = AttentionBackwardSchedule::automatic;  ///< backward decomposition
};

/// Score options shared by the fused kernel and the dense reference.
struct AttentionOptions {
  double scale = 0.0;    ///< s = scale * q.k; 0 means 1 / sqrt(head_dim)
  double softcap = 0.0;  ///< s = softcap * tanh(s / softcap) when > 0 (Gemma 2); 0: no soft-capping
  index_t window = 0;    ///< sliding window in tokens: key j visible from query i iff i - j < window; 0: none
  AttentionTiles tiles{};  ///< kernel tiling hints (0: the backend's defaults)
};

/// What one fused attention call computed: the cost measure and the choices the backend made.
struct AttentionStats {
  long long tiles = 0;    ///< (query tile, key tile) pairs computed
  long long scores = 0;   ///< score elements computed (rows x keys over those tiles)
  bool two_pass = false;  ///< backward only: the two-pass schedule ran
  index_t q_rows = 0;     ///< query tile rows used
  index_t tile_k = 0;     ///< key tile length used
  MatmulPrecision products = MatmulPrecision::fp32;  ///< the operands the products ran on (bf16: tensor cores)
};

namespace kernels {

/// Everything a fused attention kernel needs besides the data pointers and the documents.
struct AttentionParams {
  index_t batch = 0;     ///< rows of the packed batch
  index_t seq = 0;       ///< tokens per row
  index_t heads = 0;     ///< query heads
  index_t kv_heads = 0;  ///< key/value heads (divides heads)
  index_t head_dim = 0;  ///< features per head
  double scale = 1.0;    ///< resolved score scale (never 0)
  double softcap = 0.0;  ///< 0: none
  index_t window = 0;    ///< 0: none
  AttentionTiles tiles{};  ///< tiling hints
  /// The operands the products (q k^T, P v and the backward's) may be rounded to, as the op asked
  /// (the thread's MatmulPrecision when it was created: a Bf16Mixed model asks for bf16). bf16 lets
  /// a backend with a bf16 attention kernel round q, k, v, dO, P and dS to bf16 and sum in fp32,
  /// keeping softmax and log-sum-exp in fp32; a backend without one computes in T (the CPU does).
  /// The op keeps these params for its backward, so the backward runs as its forward ran.
  MatmulPrecision products = MatmulPrecision::fp32;
  /// Query heads per kv head.
  index_t group() const { return heads / kv_heads; }
};

/// What a backend's forward leaves for the backward of the same call besides o and lse, held by
/// the op between the two: e.g. the operands the forward rounded (the CUDA tensor-core kernels keep
/// their bf16 copies of q, k and v, so the backward does not make them again). Type-erased so the
/// contract names no backend type: only the backend's own forward writes it, and its backward
/// reads it, or works without it when it is empty. Results never depend on whether it was kept.
struct AttentionSaved {
  std::shared_ptr<const void> state;  ///< the backend's, or null: nothing kept
};

/// The data of a forward call (backend memory).
template <class T>
struct AttentionForwardArgs {
  const T* q = nullptr;  ///< (batch, seq, heads, head_dim)
  const T* k = nullptr;  ///< (batch, seq, kv_heads, head_dim)
  const T* v = nullptr;  ///< (batch, seq, kv_heads, head_dim)
  T* o = nullptr;        ///< (batch, seq, heads, head_dim), written
  T* lse = nullptr;      ///< (batch, seq, heads), written
  AttentionSaved* saved = nullptr;  ///< where the backend may leave state for the backward (null: no backward follows)
};

/// The data of a backward call (backend memory); gradients are added into, and may be null.
template <class T>
struct AttentionBackwardArgs {
  const T* q = nullptr;       ///< (batch, seq, heads, head_dim)
  const T* k = nullptr;       ///< (batch, seq, kv_heads, head_dim)
  const T* v = nullptr;       ///< (batch, seq, kv_heads, head_dim)
  const T* o = nullptr;       ///< the forward's o
  const T* lse = nullptr;     ///< the forward's lse
  const T* grad_o = nullptr;  ///< dL/do, like o
  T* grad_q = nullptr;        ///< += dL/dq (null: not needed)
  T* grad_k = nullptr;        ///< += dL/dk (null: not needed)
  T* grad_v = nullptr;        ///< += dL/dv (null: not needed)
  const AttentionSaved* saved = nullptr;  ///< what the forward left (null or empty: nothing)
};

/// The fused attention kernel of backend B (contract: this file). The primary template is the
/// "not implemented" case; the CPU backend specialises it in megacpp/backends/cpu/kernels.hpp.
template <class B>
struct FusedAttention {
  static constexpr bool available = false;  ///< B has no fused attention kernel
  /// Writes o and lse (FlashAttention-2 forward); returns what was computed.
  template <class T>
  static AttentionStats forward(const AttentionParams&, const DocumentLayout<B>&, const AttentionForwardArgs<T>&) {
    require<FusedAttention>();
    return {};
  }
  /// Adds dq, dk, dv (FlashAttention-2 backward, P recomputed from lse); returns what was computed.
  template <class T>
  static AttentionStats backward(const AttentionParams&, const DocumentLayout<B>&, const AttentionBackwardArgs<T>&) {
    require<FusedAttention>();
    return {};
  }
};

/// The score scale `opt` resolves to for heads of head_dim features: its own, or 1 / sqrt(head_dim)
/// when it leaves it 0 (Vaswani et al., arXiv:1706.03762).
inline double resolved_scale(const AttentionOptions& opt, index_t head_dim) {
  return opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

/// Validates q (B, T, H, D), k and v (B, T, Hkv, D) against each other and the documents, and
/// resolves the options into kernel parameters. Errors name the op and carry the shapes.
template <class B>
AttentionParams attention_params(const std::string& op, const Shape& q, const Shape& k, const Shape& v,
                                 const DocumentLayout<B>& docs, const AttentionOptions& opt) {
  check(q.rank() == 4, op, "q must be (batch, seq, heads, head_dim), got ", q);
  check(k.rank() == 4 && k == v, op, "k and v must both be (batch, seq, kv_heads, head_dim), got k ", k, ", v ", v);
  check(k[0] == q[0] && k[1] == q[1] && k[3] == q[3], op, "k ", k, " does not match q ", q,
        " in batch, seq or head_dim");
  check(q[2] > 0 && k[2] > 0 && q[3] > 0, op, "heads, kv_heads and head_dim must be positive: q ", q, ", k ", k);
  check(q[2] % k[2] == 0, op, "query heads ", q[2], " are not a multiple of kv heads ", k[2],
        " (GQA: query head h reads kv head h / (heads / kv_heads))");
  docs.check_matches(op, q[0], q[1]);
  docs.check_spans(op);
  check(opt.scale >= 0 && std::isfinite(opt.scale), op, "scale must be finite and >= 0 (0: 1/sqrt(head_dim)), got ", opt.scale);
  check(opt.softcap >= 0 && std::isfinite(opt.softcap), op, "softcap must be finite and >= 0 (0: none), got ", opt.softcap);
  check(opt.window >= 0, op, "window must be >= 0 tokens (0: none), got ", opt.window);
  check(opt.tiles.q_rows >= 0 && opt.tiles.tile_k >= 0, op, "tile sizes must be >= 0 (0: the backend's default), got q_rows ",
        opt.tiles.q_rows, ", tile_k ", opt.tiles.tile_k);
  AttentionParams p;
  p.batch = q[0];
  p.seq = q[1];
  p.heads = q[2];
  p.kv_heads = k[2];
  p.head_dim = q[3];
  p.scale = resolved_scale(opt, q[3]);
  p.softcap = opt.softcap;
  p.window = opt.window;
  p.tiles = opt.tiles;
  return p;
}

}  // namespace kernels
}  // namespace megacpp
