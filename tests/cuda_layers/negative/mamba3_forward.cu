// Must not compile: Mamba-3's forward needs the SsmScan and SsmRotary kernel contracts, and this
// backend (the CUDA backend's memory and ops under another type, so none of Cuda's kernel
// specialisations apply to it) implements none. Expected diagnostic: megacpp_backend_lacks_kernel,
// with the instantiation naming the first contract reached for BackendWithoutKernels.
#include "megacpp/backends/cuda.cuh"
#include "megacpp/nn/mamba.hpp"

struct BackendWithoutKernels : megacpp::Cuda {
  static constexpr std::string_view name = "cuda-without-kernels";
};
static_assert(megacpp::Backend<BackendWithoutKernels>);

int main() {
  using B = BackendWithoutKernels;
  megacpp::Rng rng(0);
  megacpp::Mamba3Config config;
  config.d_model = 64;
  const megacpp::Mamba3<float, B> mixer(config, rng);
  const auto docs = megacpp::DocumentLayout<B>::single_document(1, 8);
  const megacpp::Var<float, B> x(megacpp::Tensor<float, B>::zeros({1, 8, 64}));
  return static_cast<int>(mixer.forward(x, docs).numel());
}
