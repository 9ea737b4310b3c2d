// tests/cuda/tiny_model_lifecycle.hpp: the tiny "AAM" model's whole life on the GPU, for
// test_cuda_backend.cu: training (and the host waits a step makes), a checkpoint written from the
// device and read back (by the GPU and by the CPU), and generation; and its MTP variant's step.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "cpu_reference.hpp"
#include "support/masking_batch.hpp"

#include "megacpp/backends/cuda.cuh"
#include "megacpp/io/checkpoint.hpp"
#include "megacpp/nn/model/sampling.hpp"
#include "megacpp/nn/model/specialists.hpp"
#include "megacpp/optim.hpp"

namespace megacpp::backend_test {

// A batch's ids, targets and loss mask checked and summed on the host before their upload, as the
// trainer's loader makes them (PackedBatch::upload).
struct HostMadeInputs {
  BoundedIds<Cuda> ids, targets;
  LossMask<float, Cuda> mask;
};
inline HostMadeInputs host_made_inputs(const testing::MaskingBatch& data, index_t vocab, std::vector<float> mask) {
  const Shape rows{testing::MaskingBatch::batch, testing::MaskingBatch::seq};
  return {BoundedIds<Cuda>::from_host("tiny", rows, data.ids, vocab, "token"),
          BoundedIds<Cuda>::from_host("tiny", rows, data.targets, vocab, "target"),
          LossMask<float, Cuda>::from_host("tiny", rows, std::move(mask))};
}

// One AdamW training step; the loss is read once the whole step is queued, and returned.
template <class Model, class Ids, class Mask>
double train_step(const Model& model, optim::AdamW<float, Cuda>& opt, const Ids& ids, const Ids& targets,
                  const Mask& mask, const DocumentLayout<Cuda>& docs) {
  const auto loss = model.loss(ids, targets, mask, docs);
  backward(loss);
  opt.step();
  opt.zero_grad();
  return loss.item();
}

// The tiny "AAM" model (attention, the SSM scan and rotary, the fused head: every kernel a
// hybrid reaches) on the GPU: 30 AdamW steps on one packed batch lower the loss; a checkpoint
// written from the device and read back into another model gives bitwise the same weights; the
// decode caches generate what the full forward does; and the CPU backend, loading the same file,
// continues the prompt the same way (greedy). The attention work list and the scan's chunk table
// are planned and uploaded once for the batch's layout (DocumentLayout::plans): the first step
// builds them, the 29 others none. The host waits for the GPU (Cuda::host_waits) the same number
// of times in every later step, at most 3; once in a step given host-checked ids, targets and mask;
// and once per generated token.
inline std::string check_tiny_model_lifecycle() {
  using Model = TinyLM<float, Cuda>;
  using Batch = testing::MaskingBatch;
  Model model(5);
  optim::AdamW<float, Cuda> opt{optim::collect_params<float, Cuda>(model), optim::AdamWOptions{.lr = 3e-3}};
  const Batch data(static_cast<std::int32_t>(Model::dims.vocab));
  const auto docs = DocumentLayout<Cuda>::from_tokens(data.ids, Batch::batch, Batch::seq, Batch::bos);
  const auto ids = Tensor<std::int32_t, Cuda>::from_host(Shape{Batch::batch, Batch::seq}, data.ids);
  const auto targets = Tensor<std::int32_t, Cuda>::from_host(Shape{Batch::batch, Batch::seq}, data.targets);
  double first = 0, last = 0;
  std::size_t plans = 0;
  std::vector<std::uint64_t> waits;  // the host's waits for the GPU in each step (Cuda::host_waits)
  for (int step = 0; step < 30; ++step) {
    waits.push_back(Cuda::host_waits_during([&] { last = train_step(model, opt, ids, targets, Tensor<float, Cuda>(), docs); }));
    if (step == 0) first = last;
    if (!std::isfinite(last)) return "the loss is not finite at step " + std::to_string(step);
    if (step == 0) plans = docs.plans->size();
  }
  // From the second step on (the plans are kept), the same waits every step, and at most three:
  // the range checks of the ids and of the targets (given as tensors in device memory here), and
  // the loss read here. The head's backward reads its upstream gradient on the device.
  std::printf("  host waits per train step: %llu (first step %llu)\n", static_cast<unsigned long long>(waits.back()),
              static_cast<unsigned long long>(waits.front()));
  for (std::size_t step = 2; step < waits.size(); ++step)
    if (waits[step] != waits[1])
      return "step " + std::to_string(step) + " waited for the GPU " + std::to_string(waits[step]) + " times, step 1 " +
             std::to_string(waits[1]);
  if (waits[1] > 3) return "a train step waits for the GPU " + std::to_string(waits[1]) + " times (at most 3 expected)";
  // Ids and targets checked on the host and the mask summed there, as the trainer's loader gives
  // them (PackedBatch::upload): the step's only wait is the loss read at its end.
  const HostMadeInputs in = host_made_inputs(data, Model::dims.vocab, std::vector<float>(data.ids.size(), 1.0f));
  const std::uint64_t host_checked_waits =
      Cuda::host_waits_during([&] { last = train_step(model, opt, in.ids, in.targets, in.mask, docs); });
  std::printf("  host waits per train step given host-checked ids, targets and mask: %llu\n",
              static_cast<unsigned long long>(host_checked_waits));
  if (host_checked_waits != 1)
    return "a train step on host-checked ids, targets and mask waits for the GPU " + std::to_string(host_checked_waits) +
           " times (the loss read only expected)";
  if (plans < 2) return "the first step kept " + std::to_string(plans) + " plans with the layout (expected the attention's and the scan's)";
  if (docs.plans->size() != plans)
    return "later steps on the same layout planned again: " + std::to_string(docs.plans->size()) + " plans, " +
           std::to_string(plans) + " after the first step";
  if (!(last < 0.8 * first))
    return "30 AdamW steps on one batch took the loss from " + std::to_string(first) + " to " + std::to_string(last) + " only";

  const std::string type_id = "megacpp.tests.cuda.tiny";
  const std::string path =
      (std::filesystem::temp_directory_path() / ("megacpp_cuda_tiny_" + std::to_string(::getpid()) + ".safetensors")).string();
  io::save_model(path, model, type_id);
  Model reloaded(99);
  io::load_model(path, reloaded, type_id);
  std::vector<std::vector<float>> saved, loaded;
  model.for_each_param([&](const std::string&, Param<float, Cuda>& p) { saved.push_back(p.var.value().to_host()); });
  reloaded.for_each_param([&](const std::string&, Param<float, Cuda>& p) { loaded.push_back(p.var.value().to_host()); });
  if (saved != loaded) return "the checkpoint read back differs from the weights written";

  const std::vector<std::int32_t> prompt{1, 17, 42, 99, 7};
  Rng r1(0), r2(0);
  const SamplingOptions greedy{.temperature = 0.0};
  std::vector<std::int32_t> cached, longer;
  const std::uint64_t waits_12 = Cuda::host_waits_during([&] { cached = generate(model, prompt, 12, greedy, r1, /*bos_id=*/0); });
  Rng r3(0);
  const std::uint64_t waits_24 = Cuda::host_waits_during([&] { longer = generate(model, prompt, 24, greedy, r3, /*bos_id=*/0); });
  // Each token waits once, for its logits: the token ids and RoPE positions go up without a wait.
  std::printf("  host waits: %llu generating 12 tokens, %llu generating 24\n", static_cast<unsigned long long>(waits_12),
              static_cast<unsigned long long>(waits_24));
  if (waits_24 - waits_12 != 12)
    return "12 more tokens waited for the GPU " + std::to_string(waits_24 - waits_12) + " times (once per token expected)";
  if (!std::equal(cached.begin(), cached.end(), longer.begin()))
    return "generating 24 tokens did not begin with the 12 generated alone";
  const auto full = generate_full_forward(model, prompt, 12, greedy, r2, /*bos_id=*/0);
  const auto on_cpu = cpu_generate_from_checkpoint(path, prompt, 12);
  std::filesystem::remove(path);
  auto text = [](const std::vector<std::int32_t>& tokens) {
    std::string out;
    for (std::int32_t t : tokens) out += std::to_string(t) + " ";
    return out;
  };
  if (cached != full) return "decode caches generated [" + text(cached) + "], the full forward [" + text(full) + "]";
  if (on_cpu != cached) return "the GPU generated [" + text(cached) + "], the CPU from the same file [" + text(on_cpu) + "]";
  return "";
}

// The tiny model with MTP (depth 1) on the GPU, given host-checked ids, targets and mask (as the
// trainer's loader makes them): MTP rolls its targets and mask from the host copies these keep,
// checks and sums the rolled ones on the host and uploads them without a wait, so a training step
// waits once, for the loss read. The losses equal those from the same inputs given as tensors in
// device memory (checked, counted and read back to roll them), bit for bit: the same kernels on
// the same values.
inline std::string check_tiny_mtp_step() {
  using Model = TinyMtpLM<float, Cuda>;
  using Batch = testing::MaskingBatch;
  Model model(5);
  if (!(model.mtp.weight() > 0)) return "the MTP weight is 0: the module would not run";
  optim::AdamW<float, Cuda> opt{optim::collect_params<float, Cuda>(model), optim::AdamWOptions{.lr = 1e-3}};
  const Batch data(static_cast<std::int32_t>(Model::dims.vocab));
  const auto docs = DocumentLayout<Cuda>::from_tokens(data.ids, Batch::batch, Batch::seq, Batch::bos);
  const Shape rows{Batch::batch, Batch::seq};
  std::vector<float> mask(data.ids.size(), 1.0f);
  for (std::size_t i = 0; i < mask.size(); i += 7) mask[i] = 0.0f;  // some targets not learned
  const HostMadeInputs in = host_made_inputs(data, Model::dims.vocab, mask);

  const auto by_tensor = model.losses(in.ids.ids(), in.targets.ids(), Tensor<float, Cuda>::from_host(rows, mask), docs);
  const auto by_host = model.losses(in.ids, in.targets, in.mask, docs);
  if (by_tensor.aux.size() != 1 || by_host.aux.size() != 1 || by_host.aux[0].name != "mtp")
    return "expected one auxiliary loss, \"mtp\", from both paths";
  const float mtp_tensor = by_tensor.aux[0].loss.item(), mtp_host = by_host.aux[0].loss.item();
  const float total_tensor = by_tensor.total.item(), total_host = by_host.total.item();
  std::printf("  MTP loss %.9g, total %.9g\n", static_cast<double>(mtp_host), static_cast<double>(total_host));
  if (!std::isfinite(total_host) || !(mtp_host > 0)) return "the loss is not finite or the MTP loss not positive";
  if (mtp_tensor != mtp_host || total_tensor != total_host)
    return "host-made inputs gave MTP " + std::to_string(mtp_host) + ", total " + std::to_string(total_host) +
           "; device tensors MTP " + std::to_string(mtp_tensor) + ", total " + std::to_string(total_tensor);

  double last = 0;
  const auto step = [&] { last = train_step(model, opt, in.ids, in.targets, in.mask, docs); };
  step();  // the first backward and optimizer step (AdamW's state) happen once, outside the count
  const std::uint64_t waits = Cuda::host_waits_during(step);
  std::printf("  host waits per train step of the MTP model given host-made inputs: %llu\n",
              static_cast<unsigned long long>(waits));
  if (!std::isfinite(last)) return "the loss is not finite after a step";
  if (waits != 1)
    return "a train step of the MTP model waits for the GPU " + std::to_string(waits) + " times (the loss read only expected)";
  return "";
}

}  // namespace megacpp::backend_test
