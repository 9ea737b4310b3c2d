// The layers under nvcc: every nn header, the recipe's whole model types and the fused LM head
// compile for the CUDA backend, with no CPU backend (and so no Eigen) in the translation unit.
// That CUDA implements every kernel contract is a compile-time fact checked here; a backend
// lacking one fails to compile a layer that calls it with megacpp_backend_lacks_kernel
// (tests/cuda_layers/negative/), never a silent fallback. At run time, with a GPU, the LM head (linear + softcap + cross-entropy,
// through SoftcapCrossEntropy<Cuda>) runs; without one the program says so and CTest skips it.
#include <cstdio>
#include <type_traits>

#include "megacpp/backends/cuda.cuh"
#include "megacpp/nn.hpp"

using namespace megacpp;

#if defined(EIGEN_WORLD_VERSION)
#error "an nn header brought Eigen into a CUDA translation unit: layers must not include a backend"
#endif

// The CUDA backend implements every kernel contract (docs/architecture.md, "Kernel contracts").
static_assert(kernels::AllKernels::all_implemented_by<Cuda>(),
              "a kernel contract lacks its CUDA implementation: add it under backends/cuda/kernels/");

// Every block type and the recipe's model types are complete types for Cuda: their declarations,
// concepts and compile-time size checks instantiate under nvcc.
static_assert(Mixer<GQA<float, Cuda>> && Mixer<Mamba3<float, Cuda>> && Mixer<Mamba3<float, Cuda, MIMO<4>>> &&
              Mixer<Mamba2<float, Cuda>> && Mixer<M2RNN<float, Cuda>> && FeedForward<MLP<float, Cuda>>);
static_assert(std::is_same_v<TinyLM<float, Cuda>::block_type<2>, Block<Mamba3<float, Cuda>>>);
static_assert(sizeof(TinyLM<float, Cuda>) > 0 && sizeof(Generator400M<float, Cuda>) > 0);
static_assert(sizeof(TinyMtpLM<float, Cuda>) > sizeof(TinyLM<float, Cuda>) && TinyMtpLM<float, Cuda>::has_mtp);
static_assert(sizeof(Block<GQA<float, Cuda>>) > 0 && sizeof(Block<Mamba2<float, Cuda>>) > 0 &&
              sizeof(Block<M2RNN<float, Cuda>>) > 0);

// The MLP's fused bf16 ops (autograd/ops/relu2_linear.hpp), which MLP::forward and the MoE experts
// take under bf16 products, instantiate for Cuda.
template Var<float, Cuda> megacpp::relu2_linear_bf16<Cuda>(const Var<float, Cuda>&, const Var<float, Cuda>&);
template Var<float, Cuda> megacpp::relu2_mlp_bf16<Cuda>(const Var<float, Cuda>&, const Var<float, Cuda>&,
                                                       const Var<float, Cuda>&);
template Var<float, Cuda> megacpp::relu2_grouped_mlp_bf16<Cuda>(const Var<float, Cuda>&, const Var<float, Cuda>&,
                                                               const Var<float, Cuda>&, std::vector<index_t>);

int main() {
  if (!Cuda::device_available()) {
    std::printf("no CUDA device: the CUDA layer checks compiled; the run is skipped\n");
    return 0;
  }
  // The fused head on the GPU: loss of a (16, 32) x (32, 50) head against a CPU-free reference
  // computed with the separate ops on the same backend.
  Rng rng(3);
  const auto h = Var<float, Cuda>::parameter(randn<float, Cuda>({16, 32}, rng, 0.5));
  const auto w = Var<float, Cuda>::parameter(randn<float, Cuda>({50, 32}, rng, 0.5));
  std::vector<std::int32_t> t(16);
  for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<std::int32_t>(i * 3 % 50);
  const auto targets = Tensor<std::int32_t, Cuda>::from_host({16}, t);
  const float fused = linear_cross_entropy(h, w, targets, Tensor<float, Cuda>(), {.softcap = 30.0, .chunk_rows = 5}).item();
  const float separate = cross_entropy(softcap(matmul(h, w, false, true), 30.0), targets).item();
  const bool ok = std::abs(fused - separate) <= 1e-5f * std::abs(separate);
  std::printf("fused head on CUDA: %.7f, separate ops: %.7f (%s)\n", fused, separate, ok ? "agree" : "DIFFER");
  return ok ? 0 : 1;
}
