// megacpp-generate --device cuda (generate_run.hpp): the registry's model, its weights and its
// decode caches on the GPU, compiled by nvcc. Tokens are drawn on the host from each step's
// logits, as on the CPU.
#include "megacpp/backends/cuda.cuh"
#include "generate/generate_run.hpp"

namespace megacpp::examples {

int generate_on_cuda(const GenerateOptions& o, const fs::path& dir, const TrainingState& state) {
  check_flag(Cuda::device_available(), kGenerateTool, "device", "cuda: no CUDA device is usable here (no GPU, or no "
             "driver: nvidia-smi lists what the driver sees); generate on the CPU with --device cpu");
  return generate_on_backend<Cuda>(o, dir, state);
}

}  // namespace megacpp::examples
