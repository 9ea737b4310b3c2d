/// \file
/// megacpp/core/kernels/attention_tiling.hpp: which (query tile, key tile) pairs a
/// document-masked attention kernel computes; part of the FusedAttention contract.
//
// Masking rule (docs/systems/masking.md): query i sees key j iff both lie in the same document,
// j <= i (causal) and, with a sliding window of W tokens, i - j < W.
//
// Tiles are per document (varlen, as FlashAttention's cu_seqlens): inside a document of `len`
// tokens, query tile q covers tokens [q * tile_q, min((q + 1) * tile_q, len)) and key tile k covers
// [k * tile_k, min((k + 1) * tile_k, len)), positions counted from the document's first token. So
// a document is cut into the same tiles wherever it sits in a packed row, and its result does not
// depend on its neighbours. A tile pair is computed iff it holds at least one visible (i, j); its
// key range is trimmed to the keys some query of the tile sees (computed_keys); it is `full` when
// every pair in it is visible (no element mask needed). Cost is then the sum over documents of
// ~len^2 / 2 (or len * W with a window) plus a tile_q-wide band along the diagonal, never seq^2.
//
// Pure integer logic shared by every backend's kernel, the dense reference, decoding and the tests
// (tests/attention check the property "every visible pair is computed exactly once, no computed
// tile is fully masked", and that the kernel computes exactly the planned score elements).
// MEGACPP_HD: a CUDA kernel plans its tiles with the same functions (no std::min/max, which are
// host-only without nvcc's --expt-relaxed-constexpr).
#pragma once

#include "megacpp/core/config.hpp"

namespace megacpp::attention {

/// True when query position i sees key position j (both relative to one document's start):
/// causal, and inside the sliding window when `window` > 0.
MEGACPP_HD constexpr bool visible(index_t i, index_t j, index_t window) {
  return j <= i && (window <= 0 || i - j < window);
}

/// A half-open range [first, last) of tile indices.
struct TileRange {
  index_t first = 0;  ///< first tile index
  index_t last = 0;   ///< one past the last tile index
};

/// Number of tiles of `tile` tokens covering a document of `len` tokens.
MEGACPP_HD constexpr index_t tile_count(index_t len, index_t tile) { return (len + tile - 1) / tile; }

/// Key tiles (of `tile_k` keys) holding a key visible from some query of [qs, qe).
///   causal: j <= qe - 1;  window: j >= qs - W + 1.
MEGACPP_HD constexpr TileRange key_tiles_for_queries(index_t qs, index_t qe, index_t tile_k, index_t window) {
  const index_t lowest_key = window > 0 && qs - window + 1 > 0 ? qs - window + 1 : 0;
  return {lowest_key / tile_k, (qe - 1) / tile_k + 1};
}

/// Query tiles (of `tile_q` queries, document of `len` tokens) holding a query that sees some key
/// of [ks, ke).  causal: i >= ks;  window: i <= ke - 2 + W.
MEGACPP_HD constexpr TileRange query_tiles_for_keys(index_t ks, index_t ke, index_t len, index_t tile_q, index_t window) {
  const index_t highest_query = window > 0 && ke - 2 + window < len - 1 ? ke - 2 + window : len - 1;
  return {ks / tile_q, highest_query / tile_q + 1};
}

/// The keys of key tile [ks, ke) a kernel must compute for query tile [qs, qe): the tile trimmed to
/// [max(ks, qs - W + 1), min(ke, qe)), dropping columns no query of the tile sees. The diagonal
/// tile then wastes only the triangle above the diagonal, whatever the key tile size.
MEGACPP_HD constexpr TileRange computed_keys(index_t qs, index_t qe, index_t ks, index_t ke, index_t window) {
  return {window > 0 && qs - window + 1 > ks ? qs - window + 1 : ks, ke < qe ? ke : qe};
}

/// True when every (i, j) with i in [qs, qe), j in [ks, ke) is visible: the tile needs no mask.
MEGACPP_HD constexpr bool tile_is_full(index_t qs, index_t qe, index_t ks, index_t ke, index_t window) {
  return ke - 1 <= qs && (window <= 0 || (qe - 1) - ks < window);
}

}  // namespace megacpp::attention
