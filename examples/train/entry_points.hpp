// examples/train/entry_points.hpp: megacpp-train's runs, one translation unit each.
//
// Every model of the registry (models.hpp) is a distinct type, and each run instantiates the
// whole training loop for each of them; the fp32 runs, the bf16 runs and GSPO are compiled in
// separate files (train_fp32.cpp, train_bf16.cpp, train_gspo.cpp) so a build compiles them in
// parallel. --device cuda runs are compiled by nvcc in train_cuda_fp32.cu and train_cuda_bf16.cu.
// main.cpp parses the flags and calls one of these.
#pragma once

#include "megacpp/autograd/precision.hpp"
#include "megacpp/dist/comm.hpp"
#include "options.hpp"

namespace megacpp::examples {

/// Pretraining or SFT (trainer.hpp) of o.model with the Precision policy's products (Fp32 or
/// Bf16Mixed), on every rank of `comm`; defined in backend_runs.hpp, instantiated in train_fp32.cpp
/// and train_bf16.cpp.
template <class Precision, class Comm>
int train_in_precision(const TrainOptions& o, Comm& comm);

/// The same run with the model and optimizer on the GPU (--device cuda), in one process: defined
/// in backend_runs.hpp, instantiated in train_cuda_fp32.cu and train_cuda_bf16.cu (nvcc), which are built
/// when the CUDA backend is (MEGACPP_TRAIN_CUDA).
template <class Precision>
int train_on_cuda(const TrainOptions& o, dist::SingleProcess& comm);

/// GSPO (gspo_run.hpp) of o.model in o.precision, in one process.
template <class Comm>
int train_gspo_run(const TrainOptions& o, Comm& comm);

}  // namespace megacpp::examples
