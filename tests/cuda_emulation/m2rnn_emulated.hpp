// tests/cuda_emulation/m2rnn_emulated.hpp: the CUDA M2RNN training recurrence (M2RNNScan<Cuda>:
// detail/m2rnn_scan.cuh) run on the emulator, forward and backward, with host vectors as device
// memory.
#pragma once

#include <cstdint>

#include "megacpp/core/kernels/m2rnn_scan.hpp"

namespace megacpp::cuda_emulation {

/// M2RNNScan<Cuda>::forward on host memory, launched as detail/m2rnn_scan_launch.cuh launches it
/// (doc_ids: (batch, seq), the layout's ids; checkpoints may be null).
void emulated_m2rnn_forward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids,
                            const kernels::M2RNNScanOperands<float>& in, float* y, float* checkpoints);
/// Same, in double.
void emulated_m2rnn_forward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids,
                            const kernels::M2RNNScanOperands<double>& in, double* y, double* checkpoints);

/// M2RNNScan<Cuda>::backward on host memory: adds into the gradients that are not null.
void emulated_m2rnn_backward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids,
                             const kernels::M2RNNScanOperands<float>& in, const float* dy, const float* checkpoints,
                             const kernels::M2RNNScanGradients<float>& grads);
/// Same, in double.
void emulated_m2rnn_backward(const kernels::M2RNNScanParams& p, const std::int32_t* doc_ids,
                             const kernels::M2RNNScanOperands<double>& in, const double* dy, const double* checkpoints,
                             const kernels::M2RNNScanGradients<double>& grads);

}  // namespace megacpp::cuda_emulation
