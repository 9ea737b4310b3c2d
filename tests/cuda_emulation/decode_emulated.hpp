// tests/cuda_emulation/decode_emulated.hpp: the CUDA decode steps run on the emulator, with host
// vectors as device memory: the attention (DecodeAttention<Cuda>, detail/attention_decode.cuh),
// the Mamba recurrence (SsmStep<Cuda>, detail/ssm/step.cuh) and M2RNN's (M2RNNStep<Cuda>,
// detail/m2rnn_step.cuh).
#pragma once

#include "megacpp/core/kernels/attention_decode.hpp"
#include "megacpp/core/kernels/m2rnn_step.hpp"
#include "megacpp/core/kernels/ssm_step.hpp"

namespace megacpp::cuda_emulation {

/// One DecodeAttention<Cuda>::step, launch for launch (kernels/attention_decode.cuh), on host memory.
void emulated_decode_step(const kernels::AttentionDecodeParams& p, const kernels::AttentionDecodeArgs<float>& a);
/// Same, in double.
void emulated_decode_step(const kernels::AttentionDecodeParams& p, const kernels::AttentionDecodeArgs<double>& a);

/// One SsmStep<Cuda>::step, as kernels/ssm_step.cuh launches it, on host memory.
void emulated_ssm_step(const kernels::SsmStepParams& p, const kernels::SsmStepArgs<float>& a);
/// Same, in double.
void emulated_ssm_step(const kernels::SsmStepParams& p, const kernels::SsmStepArgs<double>& a);

/// One M2RNNStep<Cuda>::step, as kernels/m2rnn_step.cuh launches it, on host memory.
void emulated_m2rnn_step(const kernels::M2RNNStepParams& p, const kernels::M2RNNStepArgs<float>& a);
/// Same, in double.
void emulated_m2rnn_step(const kernels::M2RNNStepParams& p, const kernels::M2RNNStepArgs<double>& a);

}  // namespace megacpp::cuda_emulation
