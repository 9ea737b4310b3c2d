// megacpp/nn/documents.hpp: where documents start and end in a packed batch.
//
// Seed 001 (document masking, non-negotiable): every document starts with BOS and
//   doc_ids = cumsum(input_ids == BOS)   per row,
// computed once per batch from input_ids and handed to every layer that carries state across
// positions (attention, SSM state, conv taps): none may mix two documents. Tokens before a row's
// first BOS (a row that starts mid-document) form document 0 of that row.
// Positions count from 0 at each document start (RoPE restarts per document) unless absolute
// positions are asked for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "megacpp/core/tensor.hpp"

namespace megacpp {

/// Position numbering for RoPE under packing.
enum class Positions {
  per_document,  ///< 0 at every document start (default: a document sees the same positions packed or alone)
  absolute,      ///< 0 at the start of the row
};

/// A contiguous run of one document inside one row: tokens [start, start + length).
struct DocumentSpan {
  index_t start = 0;   ///< first token of the document in its row
  index_t length = 0;  ///< tokens in the document
};

/// Document structure of a packed (batch, seq) block of tokens, on the host and on backend B.
template <Backend B>
struct DocumentLayout {
  index_t batch = 0;  ///< rows
  index_t seq = 0;    ///< tokens per row
  Tensor<std::int32_t, B> doc_ids;    ///< (batch, seq): cumsum(input_ids == BOS) per row
  Tensor<std::int32_t, B> positions;  ///< (batch, seq): RoPE positions
  std::vector<std::int32_t> doc_ids_host;          ///< the same ids on the host, row-major
  std::vector<std::vector<DocumentSpan>> spans;    ///< per row, the documents in order

  /// Derives the layout from token ids (batch, seq) given the BOS id.
  static DocumentLayout from_tokens(const std::vector<std::int32_t>& input_ids, index_t batch, index_t seq,
                                    std::int32_t bos_id, Positions mode = Positions::per_document) {
    check(batch > 0 && seq > 0, "DocumentLayout", "batch and seq must be positive, got (", batch, ", ", seq, ")");
    check(static_cast<index_t>(input_ids.size()) == batch * seq, "DocumentLayout", "input_ids holds ",
          input_ids.size(), " tokens, layout (", batch, ", ", seq, ") needs ", batch * seq);
    DocumentLayout layout;
    layout.batch = batch;
    layout.seq = seq;
    layout.doc_ids_host.resize(input_ids.size());
    std::vector<std::int32_t> pos(input_ids.size());
    layout.spans.resize(static_cast<std::size_t>(batch));
    for (index_t b = 0; b < batch; ++b) {
      std::int32_t doc = 0;
      std::int32_t p = 0;
      auto& row_spans = layout.spans[static_cast<std::size_t>(b)];
      for (index_t t = 0; t < seq; ++t) {
        const index_t i = b * seq + t;
        if (input_ids[i] == bos_id) {
          ++doc;  // cumsum(input_ids == BOS)
          p = 0;
        }
        if (t == 0 || input_ids[i] == bos_id) row_spans.push_back({t, 0});
        ++row_spans.back().length;
        layout.doc_ids_host[i] = doc;
        pos[i] = mode == Positions::absolute ? static_cast<std::int32_t>(t) : p;
        ++p;
      }
    }
    layout.doc_ids = Tensor<std::int32_t, B>::from_host(Shape{batch, seq}, layout.doc_ids_host);
    layout.positions = Tensor<std::int32_t, B>::from_host(Shape{batch, seq}, pos);
    return layout;
  }

  /// One document per row spanning the whole row (no packing): plain causal behaviour.
  static DocumentLayout single_document(index_t batch, index_t seq) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * seq), 1);
    return from_tokens(ids, batch, seq, /*bos_id=*/-1, Positions::absolute);
  }

  /// Throws megacpp::Error naming `op` unless this layout describes exactly (batch, seq) tokens:
  /// documents derived from one batch must not be applied to another.
  void check_matches(const std::string& op, index_t input_batch, index_t input_seq) const {
    check(batch == input_batch && seq == input_seq, op, "document layout is for (batch, seq) = (", batch, ", ", seq,
          ") but the input has (", input_batch, ", ", input_seq, "): derive the layout from this batch's input_ids");
  }

  /// True when tokens (b, t1) and (b, t2) belong to the same document.
  bool same_document(index_t b, index_t t1, index_t t2) const {
    return doc_ids_host[b * seq + t1] == doc_ids_host[b * seq + t2];
  }
};

}  // namespace megacpp
