// train_tiny_lm: the consumer test's second program, on the installed package and
// <megacpp/megacpp.hpp> alone: builds the tiny "AAM" hybrid (attention + Mamba-3), trains a few
// steps with the Role-routed Hybrid optimizer (Muon for matrices, AdamW for the rest) on packed
// documents, saves model and optimizer checkpoints, loads them into a fresh model and checks the
// weights came back bit for bit. Exits 0 only if all of that held and the loss fell.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include <megacpp/megacpp.hpp>

using namespace megacpp;
using Model = TinyLM<float, Cpu>;

int main() {
  constexpr index_t kBatch = 2, kSeq = 64;
  constexpr std::int32_t kBos = 256;
  // Two rows of packed "documents": BOS then a repeating byte pattern the model can learn.
  std::vector<std::int32_t> ids, targets;
  for (index_t b = 0; b < kBatch; ++b)
    for (index_t t = 0; t < kSeq; ++t) ids.push_back(t % 16 == 0 ? kBos : static_cast<std::int32_t>('a' + (t + b) % 7));
  for (index_t b = 0; b < kBatch; ++b)
    for (index_t t = 0; t < kSeq; ++t) targets.push_back(ids[static_cast<std::size_t>(b * kSeq + (t + 1) % kSeq)]);
  const auto input = CpuTensor<std::int32_t>::from_host({kBatch, kSeq}, ids);
  const auto target = CpuTensor<std::int32_t>::from_host({kBatch, kSeq}, targets);
  const auto docs = Model::documents(ids, kBatch, kSeq, kBos);

  Model model(/*seed=*/1);
  optim::Hybrid<float, Cpu> opt(model);
  float first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    opt.zero_grad();
    const Var<float, Cpu> loss = model.loss(input, target, CpuTensor<float>(), docs);
    backward(loss);
    opt.step();
    last = loss.item();
    if (step == 0) first = last;
  }

  const auto dir = std::filesystem::temp_directory_path() / ("megacpp_consumer_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  io::save_model(dir / "model.safetensors", model, Model::type_id());
  io::save_optimizer(dir / "optimizer.safetensors", opt);
  Model reloaded(/*seed=*/2);
  io::load_model(dir / "model.safetensors", reloaded, Model::type_id());
  std::vector<std::vector<float>> a, b;
  model.for_each_param([&](const std::string&, Param<float, Cpu>& p) { a.push_back(p.value().to_host()); });
  reloaded.for_each_param([&](const std::string&, Param<float, Cpu>& p) { b.push_back(p.value().to_host()); });
  std::filesystem::remove_all(dir);

  const bool same = a == b, learned = last < first;
  std::printf("train_tiny_lm: %s, 8 Hybrid steps: loss %.4f -> %.4f (%s); checkpoint reload %s\n",
              Model::type_id().c_str(), first, last, learned ? "fell" : "did NOT fall", same ? "bitwise equal" : "DIFFERS");
  return same && learned ? 0 : 1;
}
