// megacpp-train --device cuda --precision fp32 (entry_points.hpp): the training loop of every model
// of the registry with its model and optimizer on the GPU, compiled by nvcc. The host side (data,
// checkpoints, metrics, the CPU backend's reductions of host numbers) is the CPU runs' own code.
#include "megacpp/backends/cuda.cuh"
#include "backend_runs.hpp"

namespace megacpp::examples {
template int train_on_cuda<Fp32>(const TrainOptions&, dist::SingleProcess&);
}  // namespace megacpp::examples
