/// \file
/// megacpp/core/kernels/ssm_scan.hpp: the SsmScan kernel contract (the chunked SSM scan of
/// Mamba-3 and Mamba-2) and the chunk plan training kernels and the layer share.
///
/// Per (batch row b, head h), with U_t = sum_r v_{t,r} k_{t,r}^T (the rank-R input, (P, N)):
///
///   H_t = alpha_t (H_{t-1} + shift_t U_{t-1}) + gamma_t U_t,    alpha_t = exp(log_alpha_t)
///   y_{t,r} = H_t q_{t,r} + D_h v_{t,r}
///   H = 0 and U_{t-1} = 0 at the first token of every document   (docs/systems/masking.md)
///
/// Mamba-3's trapezoidal update is shift = (1 - lambda) dt, gamma = lambda dt (Lahoti et al.,
/// arXiv 2603.15569; `mamba3_siso_step_ref` in state-spaces/mamba); Mamba-2's SSD is shift = 0,
/// gamma = dt (Dao & Gu, arXiv 2405.21060, `ssd_minimal_discrete`).
///
/// Layouts (row-major): q, k (batch, seq, groups, R, N), head h reads group h / (heads / groups);
/// v, y (batch, seq, heads, R, P); log_alpha, gamma, shift (batch, seq, heads); D (heads); chunk
/// states (batch, heads, max_chunks, N, P): the state entering each chunk, saved by the forward
/// for the backward. Documents are cut into chunks of chunk_size tokens starting at each
/// document's first token (plan_row_chunks), so a document's chunks do not depend on where it
/// sits. The backward adds into every gradient that is not null; dq and dk are per head,
/// (batch, seq, heads, R, N) (the caller sums a group's heads). The naive reference is the literal
/// recurrence, megacpp/nn/mamba/sequential_scan.hpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "megacpp/core/config.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/kernel.hpp"

namespace megacpp::kernels {

/// Sizes of one scan call.
struct ScanParams {
  index_t batch = 0;       ///< rows
  index_t seq = 0;         ///< tokens per row
  index_t heads = 0;       ///< SSM heads
  index_t groups = 0;      ///< q/k groups (divide heads)
  index_t rank = 0;        ///< R: inputs per head and token (1: SISO)
  index_t d_state = 0;     ///< N
  index_t head_dim = 0;    ///< P
  index_t chunk_size = 0;  ///< tokens per chunk
  index_t max_chunks = 0;  ///< chunks of the longest row (max_chunks_per_row)
};

/// The scan's operands (backend memory); shift and D may be null.
template <class T>
struct ScanOperands {
  const T* q = nullptr;          ///< (batch, seq, groups, R, N): C in SSM notation
  const T* k = nullptr;          ///< (batch, seq, groups, R, N): B in SSM notation
  const T* v = nullptr;          ///< (batch, seq, heads, R, P): x
  const T* log_alpha = nullptr;  ///< (batch, seq, heads): A dt
  const T* gamma = nullptr;      ///< (batch, seq, heads)
  const T* shift = nullptr;      ///< (batch, seq, heads) or null: the trapezoid's previous-token weight
  const T* D = nullptr;          ///< (heads) or null: skip connection
};

/// The gradients a backward adds into (backend memory); each may be null (not needed).
template <class T>
struct ScanGradients {
  T* q = nullptr;          ///< (batch, seq, heads, R, N): per head
  T* k = nullptr;          ///< (batch, seq, heads, R, N): per head
  T* v = nullptr;          ///< like v
  T* log_alpha = nullptr;  ///< like log_alpha
  T* gamma = nullptr;      ///< like gamma
  T* shift = nullptr;      ///< like shift
  T* D = nullptr;          ///< (heads); nothing is added when the operands have no D
};

/// The chunked scan kernel of backend B (contract: this file); CPU: megacpp/backends/cpu/ssm/.
template <class B>
struct SsmScan {
  static constexpr bool available = false;  ///< B has no scan kernel
  /// Writes y (batch, seq, heads, R, P) and, when chunk_states is not null, the state entering
  /// each chunk (batch, heads, max_chunks, N, P).
  template <class T>
  static void forward(const ScanParams&, const DocumentLayout<B>&, const ScanOperands<T>&, T* /*y*/,
                      T* /*chunk_states*/) {
    require<SsmScan>();
  }
  /// Adds the gradients of every operand given dy and the forward's chunk states.
  template <class T>
  static void backward(const ScanParams&, const DocumentLayout<B>&, const ScanOperands<T>&, const T* /*dy*/,
                       const T* /*chunk_states*/, const ScanGradients<T>&) {
    require<SsmScan>();
  }
};

/// Tokens [start, start + length) of one row, all in one document.
struct ScanChunk {
  index_t start = 0;          ///< first token
  index_t length = 0;         ///< tokens
  bool first_in_doc = false;  ///< the document's first chunk: no state comes in
  bool last_in_doc = false;   ///< the document's last chunk: no state goes out
};

/// Cuts one row (its doc ids, host memory) into chunks: every document into pieces of
/// `chunk_size` tokens from its first token.
inline void plan_row_chunks(const std::int32_t* row_doc_ids, index_t seq, index_t chunk_size,
                            std::vector<ScanChunk>& out) {
  out.clear();
  for (index_t begin = 0; begin < seq;) {
    index_t end = begin + 1;
    while (end < seq && !starts_document(row_doc_ids, end)) ++end;
    for (index_t c = begin; c < end; c += chunk_size)
      out.push_back({c, std::min(chunk_size, end - c), c == begin, c + chunk_size >= end});
    begin = end;
  }
}

/// Chunks of the row with the most chunks under plan_row_chunks: the size of the saved states.
inline index_t max_chunks_per_row(const std::vector<std::int32_t>& doc_ids_host, index_t batch, index_t seq,
                                  index_t chunk_size) {
  std::vector<ScanChunk> chunks;
  std::size_t most = 0;
  for (index_t b = 0; b < batch; ++b) {
    plan_row_chunks(doc_ids_host.data() + b * seq, seq, chunk_size, chunks);
    most = std::max(most, chunks.size());
  }
  return static_cast<index_t>(most);
}

}  // namespace megacpp::kernels
