// megacpp-train --device cuda --precision bf16 (entry_points.hpp): the training loop of every model
// of the registry with its model and optimizer on the GPU and its products on the tensor cores
// (Bf16Mixed: bf16 operands, fp32 sums and master weights), compiled by nvcc.
#include "megacpp/backends/cuda.cuh"
#include "backend_runs.hpp"

namespace megacpp::examples {
template int train_on_cuda<Bf16Mixed>(const TrainOptions&, dist::SingleProcess&);
}  // namespace megacpp::examples
