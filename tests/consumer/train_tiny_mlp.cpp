// train_tiny_mlp: the consumer test's program. It sees megacpp only through the package it was
// built against (find_package, add_subdirectory, FetchContent, conan or the vcpkg port), trains a
// 2-layer MLP for a few steps and exits 0 only if the loss fell by a clear margin.
//
// Task: 4 Gaussian blobs at the corners of a square, labelled XOR-style (opposite corners share a
// class), so a linear model cannot separate them and the hidden layer has to learn.
#include <cstdio>
#include <cstdint>
#include <vector>

#include <megacpp/megacpp.hpp>

using namespace megacpp;
using V = Var<float, Cpu>;

int main() {
  constexpr index_t kPerBlob = 32, kHidden = 16;
  constexpr int kSteps = 60;
  constexpr float kLr = 0.2f;

  Rng rng(7);
  std::vector<float> xs;
  std::vector<std::int32_t> labels;
  for (int blob = 0; blob < 4; ++blob)
    for (index_t i = 0; i < kPerBlob; ++i) {
      const double cx = blob & 1 ? 1.0 : -1.0, cy = blob & 2 ? 1.0 : -1.0;
      xs.push_back(static_cast<float>(cx + 0.3 * rng.normal()));
      xs.push_back(static_cast<float>(cy + 0.3 * rng.normal()));
      labels.push_back((blob & 1) ^ ((blob >> 1) & 1));
    }
  const index_t n = static_cast<index_t>(labels.size());
  const V x(CpuTensor<float>::from_host({n, 2}, xs));
  const auto targets = CpuTensor<std::int32_t>::from_host({n}, labels);

  // x (n, 2) -> tanh(x W1 + b1) (n, 16) -> logits (n, 2)
  std::vector<V> params{V::parameter(randn<float, Cpu>({2, kHidden}, rng, 1.0)),
                        V::parameter(CpuTensor<float>::zeros({kHidden})),
                        V::parameter(randn<float, Cpu>({kHidden, 2}, rng, 0.5)),
                        V::parameter(CpuTensor<float>::zeros({2}))};

  float first = 0, last = 0;
  for (int step = 0; step <= kSteps; ++step) {
    const V hidden = tanh(matmul(x, params[0]) + params[1]);
    const V loss = cross_entropy(matmul(hidden, params[2]) + params[3], targets);
    last = loss.item();
    if (step == 0) first = last;
    if (step == kSteps) break;
    for (auto& p : params) p.zero_grad();
    backward(loss);
    NoGrad no_grad;
    for (auto& p : params) {  // plain SGD, written out: the optimizers are not what this tests
      float* w = p.mutable_value().data();
      const float* g = p.grad().data();
      for (index_t j = 0; j < p.numel(); ++j) w[j] -= kLr * g[j];
    }
  }
  const bool learned = last < 0.5f * first;
  std::printf("train_tiny_mlp: %lld points, %d steps: loss %.4f -> %.4f (%s)\n", static_cast<long long>(n),
              kSteps, first, last, learned ? "learned" : "did NOT learn");
  return learned ? 0 : 1;
}
