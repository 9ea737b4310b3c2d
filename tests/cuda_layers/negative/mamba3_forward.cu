// Must not compile: Mamba-3's forward needs the SsmScan and SsmRotary kernel contracts, which the
// CUDA backend does not implement yet. Expected diagnostic: megacpp_backend_lacks_kernel, with the
// instantiation naming megacpp::kernels::SsmRotary<megacpp::Cuda> (the first one reached).
#include "megacpp/backends/cuda.cuh"
#include "megacpp/nn/mamba.hpp"

int main() {
  megacpp::Rng rng(0);
  megacpp::Mamba3Config config;
  config.d_model = 64;
  const megacpp::Mamba3<float, megacpp::Cuda> mixer(config, rng);
  const auto docs = megacpp::DocumentLayout<megacpp::Cuda>::single_document(1, 8);
  const megacpp::Var<float, megacpp::Cuda> x(megacpp::Tensor<float, megacpp::Cuda>::zeros({1, 8, 64}));
  return static_cast<int>(mixer.forward(x, docs).numel());
}
