// Three training steps of the tiny "AAM" model (attention, Mamba-3, MLP, fused head, Hybrid
// Muon/AdamW): the losses and a parameter checksum as exact hex floats. Compiled twice, once
// with OpenMP (run on one thread) and once without (no_openmp_step.cpp), the text must be equal.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "megacpp/backends/cpu.hpp"
#include "megacpp/megacpp.hpp"

namespace megacpp::testing {

inline std::string three_training_steps() {
  using Model = TinyLM<float, Cpu>;
  Model model(7);
  optim::Hybrid<float, Cpu> opt(model);
  const index_t batch = 2, seq = 48;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(batch * (seq + 1)));
  Rng rng(11);
  for (std::size_t i = 0; i < ids.size(); ++i)
    ids[i] = i % 17 == 0 ? 256 : static_cast<std::int32_t>(rng.below(256));  // BOS every 17 tokens
  std::vector<std::int32_t> input, target;
  for (index_t b = 0; b < batch; ++b)
    for (index_t t = 0; t < seq; ++t) {
      input.push_back(ids[static_cast<std::size_t>(b * (seq + 1) + t)]);
      target.push_back(ids[static_cast<std::size_t>(b * (seq + 1) + t + 1)]);
    }
  const auto x = Tensor<std::int32_t, Cpu>::from_host(Shape{batch, seq}, input);
  const auto y = Tensor<std::int32_t, Cpu>::from_host(Shape{batch, seq}, target);
  const auto mask = Tensor<float, Cpu>::from_host(Shape{batch, seq}, std::vector<float>(input.size(), 1.0f));
  const auto docs = Model::documents(input, batch, seq, 256);
  std::string out;
  char line[64];
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    auto loss = model.loss(x, y, mask, docs);
    backward(loss);
    opt.step();
    std::snprintf(line, sizeof line, "loss %a\n", static_cast<double>(loss.value().to_host()[0]));
    out += line;
  }
  double checksum = 0;
  model.for_each_param([&](const std::string&, Param<float, Cpu>& p) {
    for (const float v : p.var.value().to_host()) checksum += v;
  });
  std::snprintf(line, sizeof line, "params %a\n", checksum);
  return out + line;
}

}  // namespace megacpp::testing
