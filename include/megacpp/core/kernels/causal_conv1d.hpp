/// \file
/// megacpp/core/kernels/causal_conv1d.hpp: the CausalConv1d kernel contract (Mamba-2's
/// document-aware depthwise short convolution) and its tap rule.
///
/// Mamba-2's short convolution (Dao & Gu, arXiv 2405.21060; Dao-AILab/causal-conv1d), kernel
/// width K (4 in Mamba-2), one filter per channel, causal:
///
///   y[b, t, c] = bias[c] + sum_{j < K} w[c, j] * x[b, t - (K - 1) + j, c]
///
/// with causal-conv1d's `seq_idx` rule (docs/systems/masking.md): tap j of token t contributes
/// only when token t - (K - 1) + j exists and is in t's document (tap_reads_document; a padding
/// token's, in its own run of padding). A skipped tap adds nothing at all (not w * 0), and taps
/// are summed bias first then in j order, so a document's outputs are bitwise the same wherever it
/// sits in a packed row.
///
/// x, y: (batch, seq, channels) channel-last; w: (channels, K), as causal-conv1d stores the
/// depthwise weight; bias: (channels) or null. K <= kMaxConv1dWidth. The backward adds into every
/// gradient that is not null.
#pragma once

#include <cstdint>

#include "megacpp/core/config.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/kernel.hpp"

namespace megacpp {

/// Largest conv1d kernel width the kernels accept (Mamba-2 uses 4).
inline constexpr index_t kMaxConv1dWidth = 16;

namespace kernels {

/// The first tap (of `width`) of token t that reads t's own document: taps j >= first read tokens
/// t - (width - 1) + j of it, those below read nothing. The source tokens walked back from t stop
/// at a document start (starts_document, the rule the scans cut runs by), the row's start or the
/// filter's reach. For a document this is "has t's doc id"; padding tokens all have id -1, and a
/// padding token must not read the padding on the far side of a document, so the run between them
/// is what is asked, not the ids at its ends (on ids that are each one run, as every document's
/// is, the two agree).
MEGACPP_HD index_t first_tap_in_document(const std::int32_t* row_doc_ids, index_t t, index_t width) {
  const index_t reach = t - (width - 1);  // tap 0's source
  index_t src = t;
  while (src > 0 && src > reach && !starts_document(row_doc_ids, src)) --src;
  return src - reach;
}

/// True when tap j (of `width`) of token t reads a token of t's own document.
MEGACPP_HD bool tap_reads_document(const std::int32_t* row_doc_ids, index_t t, index_t j, index_t width) {
  return j >= first_tap_in_document(row_doc_ids, t, width);
}

/// The last output whose taps read token s (of a row of `seq` tokens): outputs t in [s, last] read
/// s (through tap j = s - t + width - 1), later ones do not. The tokens after s stop at a document
/// start, the row's end or the filter's reach: the backward's form of first_tap_in_document.
MEGACPP_HD index_t last_output_reading(const std::int32_t* row_doc_ids, index_t s, index_t width, index_t seq) {
  const index_t reach = s + (width - 1);  // the output whose tap 0 reads s
  index_t t = s;
  while (t + 1 < seq && t < reach && !starts_document(row_doc_ids, t + 1)) ++t;
  return t;
}

/// Sizes of one conv1d call.
struct Conv1dParams {
  index_t batch = 0;     ///< rows
  index_t seq = 0;       ///< tokens per row
  index_t channels = 0;  ///< depthwise channels
  index_t width = 0;     ///< K, at most kMaxConv1dWidth
};

/// Data of a forward call (backend memory).
template <class T>
struct Conv1dArgs {
  const T* x = nullptr;       ///< (batch, seq, channels)
  const T* weight = nullptr;  ///< (channels, width)
  const T* bias = nullptr;    ///< (channels) or null
  T* y = nullptr;             ///< forward: written; (batch, seq, channels)
};

/// Gradients of a backward call: from dy, added into x, weight, bias (each may be null).
template <class T>
struct Conv1dGrads {
  const T* dy = nullptr;  ///< dL/dy
  T* x = nullptr;         ///< += dL/dx
  T* weight = nullptr;    ///< += dL/dw
  T* bias = nullptr;      ///< += dL/dbias
};

/// The document-aware causal conv1d of backend B (contract: this file); CPU:
/// megacpp/backends/cpu/ssm/conv1d.hpp.
template <class B>
struct CausalConv1d {
  static constexpr bool available = false;  ///< B has no conv1d kernel
  /// y from x, weight, bias; no tap crosses a document of `docs`.
  template <class T>
  static void forward(const Conv1dParams&, const DocumentLayout<B>&, const Conv1dArgs<T>&) {
    require<CausalConv1d>();
  }
  /// Backward of forward (`args.y` unused).
  template <class T>
  static void backward(const Conv1dParams&, const DocumentLayout<B>&, const Conv1dArgs<T>&, const Conv1dGrads<T>&) {
    require<CausalConv1d>();
  }
};

}  // namespace kernels
}  // namespace megacpp
