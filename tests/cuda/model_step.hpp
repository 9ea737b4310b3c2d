// tests/cuda/model_step.hpp: a whole model's training step (forward, loss, backward), written
// once for any backend, so that the CPU translation unit (cpu_reference.cpp) and the CUDA one
// (test_cuda_backend.cu) run the same step on the same weights and batch and compare the loss
// and every parameter's gradient (the CUDA issue's "whole train step, backend against backend").
//
// The model is a one-block LM of the recipe's letters (tests/support/masking_batch.hpp): its
// weights come from the seeded generator on the host, so both backends start bitwise equal. The
// batch is the packed one of the masking tests: 8 documents in 2 rows of 96, one row starting
// mid-document, a document longer than a scan chunk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/backend_harness.hpp"
#include "support/masking_batch.hpp"

#include "megacpp/io/checkpoint.hpp"
#include "megacpp/nn/model/sampling.hpp"

namespace megacpp::backend_test {

// The patterns compared (one block each): attention, Mamba-3, MoE (4 experts, top-2: the expert
// routing, the grouped products and the gated combine; randomise_matrices makes the experts'
// zero-initialised down projections live, so their products reach the loss).
inline const std::vector<std::string>& model_step_patterns() {
  static const std::vector<std::string> patterns{"A", "M", "E"};
  return patterns;
}
inline constexpr std::size_t kMoEPattern = 2;  // model_step_patterns()[kMoEPattern] == "E"

inline constexpr MoESizes kOneBlockMoE{.experts = 4, .top_k = 2, .expert_hidden = 24};
template <class T, Backend B, FixedString P>
struct StepModel {
  using type = testing::OneBlockLMOn<T, B, P>;
};
template <class T, Backend B>
struct StepModel<T, B, "E"> {
  using type = RecipeMoELM<T, B, testing::kOneBlockDims, "E", testing::kOneBlockAttention, testing::kOneBlockMamba,
                           kOneBlockMoE>;
};

// Loss, then the gradient of every parameter in for_each_param order; under bf16 products
// (MatmulPrecision::bf16, float only) when `bf16_products` is set.
template <class T, Backend B, FixedString P>
testing::Outputs model_step_outputs(bool bf16_products = false) {
  using Model = typename StepModel<T, B, P>::type;
  Model model(11);
  testing::randomise_matrices(model, 12);
  using Batch = testing::MaskingBatch;
  const Batch data(static_cast<std::int32_t>(Model::dims.vocab));
  const auto docs = DocumentLayout<B>::from_tokens(data.ids, Batch::batch, Batch::seq, Batch::bos);
  const auto ids = Tensor<std::int32_t, B>::from_host(Shape{Batch::batch, Batch::seq}, data.ids);
  const auto targets = Tensor<std::int32_t, B>::from_host(Shape{Batch::batch, Batch::seq}, data.targets);
  Var<T, B> loss;
  {
    const MatmulPrecisionScope products(bf16_products ? MatmulPrecision::bf16 : MatmulPrecision::fp32);
    loss = model.loss(ids, targets, Tensor<T, B>(), docs);
  }
  backward(loss);  // each op keeps the precision it was created under
  testing::Outputs out{testing::Harness<T, B>::doubles(loss.value())};
  model.for_each_param([&](const std::string&, Param<T, B>& p) {
    const Tensor<T, B>& g = p.var.grad();
    out.push_back(g.defined() ? testing::Harness<T, B>::doubles(g)
                              : std::vector<double>(static_cast<std::size_t>(p.var.numel()), 0.0));
  });
  return out;
}

// Calls f.template operator()<P>() with pattern model_step_patterns()[index].
template <class F>
void with_model_step_pattern(std::size_t index, F&& f) {
  if (index == 0) f.template operator()<"A">();
  else if (index == 1) f.template operator()<"M">();
  else f.template operator()<"E">();
}

// model_step_outputs for pattern model_step_patterns()[index].
template <class T, Backend B>
testing::Outputs model_step_outputs(std::size_t index, bool bf16_products = false) {
  testing::Outputs out;
  with_model_step_pattern(index, [&]<FixedString P>() { out = model_step_outputs<T, B, P>(bf16_products); });
  return out;
}

// The tiny "AAM" model's greedy continuation of `prompt` (n_new tokens) after loading its weights
// from a checkpoint written by the other backend: the CPU translation unit answers
// cpu_generate_from_checkpoint with it, and the CUDA test compares with its own.
template <Backend B>
std::vector<std::int32_t> generate_from_checkpoint(const std::string& path, const std::vector<std::int32_t>& prompt,
                                                   index_t n_new) {
  TinyLM<float, B> model(99);  // another seed: every weight must come from the file
  io::load_model(path, model, "megacpp.tests.cuda.tiny");
  Rng rng(0);
  return generate(model, prompt, n_new, SamplingOptions{.temperature = 0.0}, rng, /*bos_id=*/0);
}

}  // namespace megacpp::backend_test
