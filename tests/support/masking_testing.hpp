// Shared block-level document-masking test (STYLE.md habit 6: one helper, not a copy per test
// file): every block type is built into a one-block LM and run through the library's
// whole-model checker, check_document_masking (nn/model/masking_check.hpp), on one packed batch.
// The same model run blind to the documents must then fail the check at its block, which proves
// the block really mixes positions and that the check would see a leak in it.
#pragma once

#include "support/op_testing.hpp"
#include "support/masking_batch.hpp"

#include <string>

#include "megacpp/nn/model.hpp"

namespace megacpp::testing {

// The one-block model of masking_batch.hpp on the CPU backend.
template <class T, FixedString P>
using OneBlockLM = OneBlockLMOn<T, Cpu, P>;

// check_document_masking on `model` (one block, live weights) must pass for every document of the
// batch with packed-vs-alone agreement within `packed_tolerance`; the same model blind to the
// documents must fail at the block (layer 1; layer 0, the embedding, is per token) at the first
// token of row 0's second document, the first place the leak can show.
template <class Model>
void check_block_document_masking(Model& model, double packed_tolerance) {
  static_assert(Model::n_layers == 1, "check_block_document_masking expects a one-block model (Dims::n_layers = 1)");
  const MaskingBatch data(static_cast<std::int32_t>(Model::dims.vocab));
  MaskingCheckOptions opt;
  opt.bos_id = MaskingBatch::bos;
  opt.vocab = static_cast<std::int32_t>(Model::dims.vocab);
  opt.packed_tolerance = packed_tolerance;

  const MaskingCheckResult r = check_document_masking(model, data.ids, data.targets, data.batch, data.seq, opt);
  INFO("violation: " << r.violation);
  INFO("packed vs alone, worst relative difference over both layers: " << r.max_packed_vs_alone);
  CHECK(r.ok);
  CHECK(r.violation.empty());
  CHECK(r.documents_checked == static_cast<std::size_t>(MaskingBatch::documents));

  // The blind model's first document is computed with other tiles (its attention sees the whole
  // row as one document), so packed vs alone differs there by rounding: a loose tolerance keeps
  // the report on the leak itself.
  DocumentBlind<Model> blind{model};
  opt.packed_tolerance = 1e-5;
  const MaskingCheckResult leak = check_document_masking(blind, data.ids, data.targets, data.batch, data.seq, opt);
  INFO("blind model: " << leak.violation);
  CHECK_FALSE(leak.ok);
  CHECK_THAT(leak.violation,
             Catch::Matchers::Contains("changing another document changed this one: layer 1 (0 = embedding), row 0, position 5,"));
}

}  // namespace megacpp::testing
