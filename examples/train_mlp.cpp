// train_mlp: a 2-layer MLP learns a synthetic 3-class problem with megacpp's autograd.
//
// The smallest end-to-end use of the library: parameters are leaf Vars, the forward pass is
// composed from ops, backward() fills the gradients, and the update runs under NoGrad.
// SGD with momentum is written out here; the library's optimizers (AdamW, Muon) come from
// megacpp/optim. Usage: train_mlp [steps] [seed]
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "megacpp/megacpp.hpp"

using namespace megacpp;
using V = Var<float, Cpu>;

namespace {
// Three interleaved spirals in 2-D (Karpathy's cs231n toy problem): not linearly separable.
void make_spirals(Rng& rng, index_t per_class, std::vector<float>& xs, std::vector<std::int32_t>& labels) {
  for (std::int32_t c = 0; c < 3; ++c)
    for (index_t i = 0; i < per_class; ++i) {
      const double r = static_cast<double>(i) / static_cast<double>(per_class);
      const double t = 4.0 * c + 4.0 * r + 0.2 * rng.normal();
      xs.push_back(static_cast<float>(r * std::sin(t)));
      xs.push_back(static_cast<float>(r * std::cos(t)));
      labels.push_back(c);
    }
}
}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 600;
  const std::uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  constexpr index_t kPerClass = 200, kHidden = 64, kClasses = 3;
  constexpr float kLr = 0.5f, kMomentum = 0.9f;

  Rng rng(seed);
  std::vector<float> xs;
  std::vector<std::int32_t> labels;
  make_spirals(rng, kPerClass, xs, labels);
  const index_t n = static_cast<index_t>(labels.size());
  const V x(CpuTensor<float>::from_host({n, 2}, xs));
  const auto targets = CpuTensor<std::int32_t>::from_host({n}, labels);

  // x (n, 2) -> relu2(x W1 + b1) (n, 64) -> logits (n, 3)
  std::vector<V> params{V::parameter(randn<float, Cpu>({2, kHidden}, rng, 1.0)),
                        V::parameter(CpuTensor<float>::zeros({kHidden})),
                        V::parameter(randn<float, Cpu>({kHidden, kClasses}, rng, 0.1)),
                        V::parameter(CpuTensor<float>::zeros({kClasses}))};
  std::vector<CpuTensor<float>> velocity;
  for (const auto& p : params) velocity.push_back(CpuTensor<float>::zeros(p.shape()));

  std::printf("train_mlp: %lld points, 3 classes, hidden %lld, %d steps of SGD (lr %.2f, momentum %.2f)\n",
              static_cast<long long>(n), static_cast<long long>(kHidden), steps, kLr, kMomentum);
  float first_loss = 0, loss_value = 0;
  for (int step = 0; step <= steps; ++step) {
    const V hidden = relu2(matmul(x, params[0]) + params[1]);
    const V loss = cross_entropy(matmul(hidden, params[2]) + params[3], targets);
    loss_value = loss.item();
    if (step == 0) first_loss = loss_value;
    if (step % 50 == 0) std::printf("step %4d  loss %.4f\n", step, loss_value);
    if (step == steps) break;
    for (auto& p : params) p.zero_grad();
    backward(loss);
    NoGrad no_grad;
    for (std::size_t i = 0; i < params.size(); ++i) {
      float* w = params[i].mutable_value().data();
      float* v = velocity[i].data();
      const float* g = params[i].grad().data();
      for (index_t j = 0; j < params[i].numel(); ++j) {
        v[j] = kMomentum * v[j] + g[j];
        w[j] -= kLr * v[j];
      }
    }
  }
  std::printf("loss %.4f -> %.4f (%s)\n", first_loss, loss_value, loss_value < 0.5f * first_loss ? "learned" : "did not learn");
  return loss_value < first_loss ? 0 : 1;
}
