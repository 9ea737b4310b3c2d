// examples/train/backend_runs.hpp: the entry points of entry_points.hpp, defined over the
// training loop of trainer.hpp: the registry's model (models.hpp) on a backend, in a precision.
// train_fp32.cpp and train_bf16.cpp instantiate the CPU runs; train_cuda_fp32.cu and
// train_cuda_bf16.cu, compiled by nvcc with the CUDA backend in the translation unit, the GPU's.
#pragma once

#include <type_traits>

#include "entry_points.hpp"
#include "trainer.hpp"

namespace megacpp::examples {

/// Pretraining or SFT of o.model with the Precision policy's products, its model and optimizer on
/// backend B. (A class rather than a generic lambda: one fewer thing for nvcc's front end.)
template <class Precision, class B, class Comm>
struct TrainOnBackend {
  const TrainOptions& o;  ///< the run's options
  Comm& comm;             ///< its ranks
  /// Trains the registry's model on B with Precision's products.
  template <class Model>
  int operator()(std::type_identity<Model>, const ModelDefaults& d) const {
    return train<typename Model::template with_precision<Precision>>(o, d, comm);
  }
};

template <class Precision, class B, class Comm>
int train_on_backend(const TrainOptions& o, Comm& comm) {
  return with_model<B>(o.model, TrainOnBackend<Precision, B, Comm>{o, comm});
}

template <class Precision, class Comm>
int train_in_precision(const TrainOptions& o, Comm& comm) {
  return train_on_backend<Precision, Cpu>(o, comm);
}

#ifdef __CUDACC__  // train_cuda_*.cu: the CUDA backend is in the translation unit
template <class Precision>
int train_on_cuda(const TrainOptions& o, dist::SingleProcess& comm) {
  check_flag(Cuda::device_available(), kTrainTool, "device", "cuda: no CUDA device is usable here (no GPU, or no "
             "driver: nvidia-smi lists what the driver sees); train on the CPU with --device cpu");
  return train_on_backend<Precision, Cuda>(o, comm);
}
#endif

}  // namespace megacpp::examples
