// Shared test helper, backend-neutral (no test framework, no backend included): the one-block
// models, the packed batch and the document-blind model of the block-level masking test
// (masking_testing.hpp runs them on the CPU under Catch2; tests/cuda_layers on a GPU).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "megacpp/nn/model.hpp"

namespace megacpp::testing {

// One block, small enough for a quick CPU check and every letter buildable: attention 4 query
// heads over 1 kv head of 8; Mamba d_inner 64 in 4 heads of 16, N = 8. max_seq covers the batch.
inline constexpr Dims kOneBlockDims{.d_model = 32, .n_layers = 1, .vocab = 64, .max_seq = 128};
inline constexpr AttentionSizes kOneBlockAttention{.n_heads = 4, .n_kv_heads = 1};
inline constexpr MambaSizes kOneBlockMamba{.d_state = 8, .headdim = 16, .expand = 2};
// A one-block model of the recipe's letters with the sizes above: pattern "A" or "M".
template <class T, Backend B, FixedString P>
using OneBlockLMOn = RecipeLM<T, B, kOneBlockDims, P, kOneBlockAttention, kOneBlockMamba>;

// Output projections start at zero (each block is the identity at init, docs/recipe.md), so a masking
// check on a fresh model would see no mixer at all: give every hidden matrix random weights.
template <class Model>
void randomise_matrices(Model& model, std::uint64_t seed, double std = 0.2) {
  using T = typename Model::value_type;
  using B = typename Model::backend_type;
  Rng rng(seed);
  model.for_each_param([&](const std::string&, Param<T, B>& p) {
    if (p.role == Role::matrix) p.var.mutable_value().assign(randn<T, B>(p.shape(), rng, std));
  });
}

// The bug the checker exists to catch: a model that drops the batch's documents and runs every
// row as one causal sequence (DocumentLayout::single_document), so later documents see earlier ones.
template <class Model>
struct DocumentBlind {
  using value_type = typename Model::value_type;
  using backend_type = typename Model::backend_type;
  const Model& model;  ///< the model whose documents are ignored

  std::vector<Var<value_type, backend_type>> trace(const Tensor<std::int32_t, backend_type>& input_ids,
                                                   const DocumentLayout<backend_type>& docs) const {
    return model.trace(input_ids, DocumentLayout<backend_type>::single_document(docs.batch, docs.seq));
  }
  Var<value_type, backend_type> per_token_loss_from(const Var<value_type, backend_type>& x,
                                                    const Tensor<std::int32_t, backend_type>& targets) const {
    return model.per_token_loss_from(x, targets);
  }
};

// Two packed rows of 96 tokens (BOS = 1), 8 documents: row 0 starts with a document, holds one of
// length 1 and ends with one of 76 tokens, longer than the default Mamba scan chunk (64, chunks
// start at document starts), so a chunk boundary falls inside it; row 1 starts mid-document.
struct MaskingBatch {
  static constexpr std::int32_t bos = 1;
  static constexpr index_t batch = 2, seq = 96, documents = 8;
  std::vector<std::int32_t> ids, targets;  // (batch, seq) each, row-major

  explicit MaskingBatch(std::int32_t vocab) {
    Rng rng(5);
    const std::vector<std::vector<index_t>> starts{{0, 5, 6, 20}, {9, 40, 70}};
    for (index_t b = 0; b < batch; ++b)
      for (index_t t = 0; t < seq; ++t) {
        const auto& row = starts[static_cast<std::size_t>(b)];
        const bool starts_document = std::find(row.begin(), row.end(), t) != row.end();
        const auto token = [&] { return static_cast<std::int32_t>(2 + rng.below(static_cast<std::uint64_t>(vocab - 2))); };
        ids.push_back(starts_document ? bos : token());
        targets.push_back(token());
      }
  }
};

}  // namespace megacpp::testing
