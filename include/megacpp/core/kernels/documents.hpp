/// \file
/// megacpp/core/kernels/documents.hpp: where documents start and end in a packed batch: the one
/// layout every document-aware kernel reads, and the document-start rule shared by training
/// kernels and decoding.
///
/// Document masking (Dao et al., FlashAttention-2's varlen `cu_seqlens`; docs/systems/masking.md):
/// every document starts with BOS and
///   doc_ids = cumsum(input_ids == BOS)   per row,
/// computed once per batch from input_ids and handed to every layer that carries state across
/// positions (attention, SSM state, conv taps): none may mix two documents. Tokens before a row's
/// first BOS (a row that starts mid-document) form document 0 of that row. Positions count from 0
/// at each document start (RoPE restarts per document) unless absolute positions are asked for.
///
/// The layout holds the same structure three ways, each for the kernels that read it that way:
///   doc_ids     (batch, seq) per token, on the backend: scans and convolutions compare neighbours
///               (starts_document below);
///   spans       per row, [start, start + length) on the host: CPU kernels plan their tiles;
///   span_table  (n_spans, 3) = (row, start, length) on the backend with row_span_offsets
///               (batch + 1) on the host, the cu_seqlens of FlashAttention's varlen API generalised
///               to rows and padding: row b's documents are span_table rows
///               [row_span_offsets[b], row_span_offsets[b + 1]).
/// Tokens covered by no span are padding (from_spans only): doc id -1, position 0. No document's
/// token sees them and they see none: the attention gives them o = 0 and sees nothing from them;
/// the kernels that walk tokens (scans, rotary angles, conv taps) treat each run of padding as a
/// document of its own, so state and taps never leave a run (two runs on either side of a
/// document share the id -1 but not a run). Build a layout with the factories; check_spans()
/// refuses one whose `spans` were edited afterwards (the table, and the plans backends derived
/// from the layout, would no longer say the same).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/derived_plans.hpp"
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

namespace kernels {

/// True when token t of a row starts a document: t == 0 or its doc id differs from token t - 1's.
/// The one rule every kernel that walks tokens uses (scan chunks, rotary angles, conv taps,
/// decoding's cache resets).
MEGACPP_HD bool starts_document(const std::int32_t* row_doc_ids, index_t t) {
  return t == 0 || row_doc_ids[t] != row_doc_ids[t - 1];
}

}  // namespace kernels

/// Document structure of a packed (batch, seq) block of tokens, on the host and on backend B.
template <Backend B>
struct DocumentLayout {
  index_t batch = 0;  ///< rows
  index_t seq = 0;    ///< tokens per row
  Tensor<std::int32_t, B> doc_ids;    ///< (batch, seq): cumsum(input_ids == BOS) per row; -1 for padding
  Tensor<std::int32_t, B> positions;  ///< (batch, seq): RoPE positions
  std::vector<std::int32_t> doc_ids_host;          ///< the same ids on the host, row-major
  std::vector<std::vector<DocumentSpan>> spans;    ///< per row, the documents in order
  Tensor<std::int32_t, B> span_table;              ///< (n_spans, 3): (row, start, length), rows in order
  std::vector<index_t> row_span_offsets;           ///< (batch + 1): row b's spans are table rows [o[b], o[b + 1])
  /// What backends derive from this layout (device work lists, chunk tables), built on the first
  /// call that needs it and shared by copies (derived_plans.hpp).
  std::shared_ptr<kernels::DerivedPlans> plans = std::make_shared<kernels::DerivedPlans>();

  /// Derives the layout from token ids (batch, seq) given the BOS id.
  static DocumentLayout from_tokens(const std::vector<std::int32_t>& input_ids, index_t batch, index_t seq,
                                    std::int32_t bos_id, Positions mode = Positions::per_document) {
    check(batch > 0 && seq > 0, "DocumentLayout", "batch and seq must be positive, got (", batch, ", ", seq, ")");
    check(static_cast<index_t>(input_ids.size()) == batch * seq, "DocumentLayout", "input_ids holds ",
          input_ids.size(), " tokens, layout (", batch, ", ", seq, ") needs ", batch * seq);
    std::vector<std::vector<DocumentSpan>> spans(static_cast<std::size_t>(batch));
    std::vector<std::int32_t> ids(input_ids.size());
    for (index_t b = 0; b < batch; ++b) {
      std::int32_t doc = 0;
      auto& row_spans = spans[static_cast<std::size_t>(b)];
      for (index_t t = 0; t < seq; ++t) {
        const bool bos = input_ids[static_cast<std::size_t>(b * seq + t)] == bos_id;
        if (bos) ++doc;  // cumsum(input_ids == BOS)
        if (t == 0 || bos) row_spans.push_back({t, 0});
        ++row_spans.back().length;
        ids[static_cast<std::size_t>(b * seq + t)] = doc;
      }
    }
    return build(batch, seq, std::move(spans), std::move(ids), mode);
  }

  /// One document per row spanning the whole row (no packing): plain causal behaviour.
  static DocumentLayout single_document(index_t batch, index_t seq) {
    std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * seq), 1);
    return from_tokens(ids, batch, seq, /*bos_id=*/-1, Positions::absolute);
  }

  /// Rows of whole documents given their lengths, e.g. {{3, 1, 4}, {5, 3}}: every row must hold
  /// the same number of tokens (seq), and each listed document starts with its first token.
  static DocumentLayout from_lengths(const std::vector<std::vector<index_t>>& rows,
                                     Positions mode = Positions::per_document) {
    check(!rows.empty(), "DocumentLayout::from_lengths", "needs at least one row");
    std::vector<std::vector<DocumentSpan>> spans;
    index_t seq = -1;
    for (std::size_t b = 0; b < rows.size(); ++b) {
      std::vector<DocumentSpan> row;
      index_t at = 0;
      for (const index_t len : rows[b]) {
        check(len > 0, "DocumentLayout::from_lengths", "row ", b, ": document lengths must be positive, got ", len);
        row.push_back({at, len});
        at += len;
      }
      check(seq < 0 || at == seq, "DocumentLayout::from_lengths", "row ", b, " holds ", at,
            " tokens but row 0 holds ", seq, ": every row must have the same length");
      seq = at;
      spans.push_back(std::move(row));
    }
    return from_spans(static_cast<index_t>(rows.size()), seq, std::move(spans), mode);
  }

  /// A layout from explicit spans per row. Tokens in no span are padding (doc id -1, position
  /// 0; what sees them: the file comment). Throws unless each row's spans are non-empty,
  /// sorted, non-overlapping and inside [0, seq).
  static DocumentLayout from_spans(index_t batch, index_t seq, std::vector<std::vector<DocumentSpan>> spans,
                                   Positions mode = Positions::per_document) {
    const char* op = "DocumentLayout::from_spans";
    check(batch > 0 && seq > 0, op, "batch and seq must be positive, got (", batch, ", ", seq, ")");
    check(static_cast<index_t>(spans.size()) == batch, op, "spans given for ", spans.size(), " rows, batch is ", batch);
    check_row_spans(op, spans, seq);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * seq), -1);
    for (index_t b = 0; b < batch; ++b) {
      std::int32_t doc = 0;
      for (const DocumentSpan& s : spans[static_cast<std::size_t>(b)]) {
        ++doc;
        for (index_t t = s.start; t < s.start + s.length; ++t) ids[static_cast<std::size_t>(b * seq + t)] = doc;
      }
    }
    return build(batch, seq, std::move(spans), std::move(ids), mode);
  }

  /// Throws megacpp::Error naming `op` unless this layout describes exactly (batch, seq) tokens:
  /// documents derived from one batch must not be applied to another.
  void check_matches(const std::string& op, index_t input_batch, index_t input_seq) const {
    check(batch == input_batch && seq == input_seq, op, "document layout is for (batch, seq) = (", batch, ", ", seq,
          ") but the input has (", input_batch, ", ", input_seq, "): derive the layout from this batch's input_ids");
  }

  /// Throws unless every row's spans are sorted, non-empty, non-overlapping and inside [0, seq),
  /// and still say what span_table says (a layout's spans are not edited after it is built).
  void check_spans(const std::string& op) const {
    check(static_cast<index_t>(spans.size()) == batch && static_cast<index_t>(row_span_offsets.size()) == batch + 1,
          op, "documents hold spans for ", spans.size(), " rows, layout has batch ", batch);
    check_row_spans(op, spans, seq);
    for (index_t b = 0; b < batch; ++b) {
      const std::vector<DocumentSpan>& row = spans[static_cast<std::size_t>(b)];
      const index_t first = row_span_offsets[static_cast<std::size_t>(b)];
      bool same = static_cast<index_t>(row.size()) == row_span_offsets[static_cast<std::size_t>(b + 1)] - first &&
                  first + static_cast<index_t>(row.size()) <= static_cast<index_t>(built_spans_.size());
      for (std::size_t i = 0; same && i < row.size(); ++i) {
        const DocumentSpan& built = built_spans_[static_cast<std::size_t>(first) + i];
        same = row[i].start == built.start && row[i].length == built.length;
      }
      check(same, op, "row ", b, "'s spans were edited after the layout was built (span_table disagrees): build "
            "the layout with DocumentLayout::from_spans instead");
    }
  }

  /// True when tokens (b, t1) and (b, t2) belong to the same document; two padding tokens when
  /// they are in one run of padding (each run is a document of its own; the file comment).
  bool same_document(index_t b, index_t t1, index_t t2) const {
    const std::int32_t* row = doc_ids_host.data() + b * seq;
    if (row[t1] != row[t2]) return false;
    if (row[t1] >= 0) return true;  // a document's id is its own in its row
    for (index_t t = std::min(t1, t2) + 1; t <= std::max(t1, t2); ++t)
      if (kernels::starts_document(row, t)) return false;
    return true;
  }

  /// Number of documents (spans) over all rows.
  index_t span_count() const { return row_span_offsets.empty() ? 0 : row_span_offsets.back(); }

 private:
  // The spans as built, all rows in order (span_table's on the host): check_spans compares `spans`
  // with them, so an edit that keeps a row's count (a shortened document) is refused too.
  std::vector<DocumentSpan> built_spans_;

  template <class Spans>
  static void check_row_spans(const std::string& op, const Spans& spans, index_t seq) {
    for (std::size_t b = 0; b < spans.size(); ++b) {
      index_t end = 0;
      for (const DocumentSpan& s : spans[b]) {
        check(s.length > 0 && s.start >= end && s.start + s.length <= seq, op, "row ", b, ": document span [",
              s.start, ", ", s.start + s.length, ") is empty, overlaps the previous one (ending at ", end,
              ") or leaves [0, ", seq, ")");
        end = s.start + s.length;
      }
    }
  }

  // Fills positions, the span table and the backend copies from spans and doc ids.
  static DocumentLayout build(index_t batch, index_t seq, std::vector<std::vector<DocumentSpan>> spans,
                              std::vector<std::int32_t> ids, Positions mode) {
    DocumentLayout layout;
    layout.batch = batch;
    layout.seq = seq;
    std::vector<std::int32_t> pos(ids.size(), 0), table;
    layout.row_span_offsets.assign(1, 0);
    for (index_t b = 0; b < batch; ++b) {
      for (const DocumentSpan& s : spans[static_cast<std::size_t>(b)]) {
        for (index_t t = s.start; t < s.start + s.length; ++t)
          pos[static_cast<std::size_t>(b * seq + t)] =
              static_cast<std::int32_t>(mode == Positions::absolute ? t : t - s.start);
        table.insert(table.end(), {static_cast<std::int32_t>(b), static_cast<std::int32_t>(s.start),
                                   static_cast<std::int32_t>(s.length)});
        layout.built_spans_.push_back(s);
      }
      layout.row_span_offsets.push_back(layout.row_span_offsets.back() +
                                        static_cast<index_t>(spans[static_cast<std::size_t>(b)].size()));
    }
    layout.doc_ids = Tensor<std::int32_t, B>::from_host(Shape{batch, seq}, ids);
    layout.positions = Tensor<std::int32_t, B>::from_host(Shape{batch, seq}, pos);
    layout.span_table = table.empty() ? Tensor<std::int32_t, B>(Shape{0, 3})
                                      : Tensor<std::int32_t, B>::from_host(Shape{layout.row_span_offsets.back(), 3}, table);
    layout.doc_ids_host = std::move(ids);
    layout.spans = std::move(spans);
    return layout;
  }
};

}  // namespace megacpp
