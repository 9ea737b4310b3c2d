// tests/cuda_emulation/rotary_emulated.hpp: Mamba-3's rotary kernels on CUDA (SsmRotary<Cuda>:
// detail/ssm/rotary.cuh) run on the emulator, with host pointers as device memory.
#pragma once

#include <cstdint>

#include "megacpp/core/kernels/ssm_rotary.hpp"

namespace megacpp::cuda_emulation {

/// cuda::rotary_angles_forward (detail/ssm/rotary_launch.cuh), launched as it launches: cossin
/// from angle and dt; doc_ids (batch, seq).
template <class T>
void emulated_rotary_angles_forward(const kernels::RotaryAnglesParams& p, const std::int32_t* doc_ids,
                                    const kernels::RotaryAnglesArgs<T>& a);

/// cuda::rotary_angles_backward: adds into g.angle and g.dt (each may be null).
template <class T>
void emulated_rotary_angles_backward(const kernels::RotaryAnglesParams& p, const std::int32_t* doc_ids,
                                     const kernels::RotaryAnglesArgs<T>& a, const kernels::RotaryAnglesGrads<T>& g);

/// cuda::rotary_qk_forward: y = rotate(x + bias_h, cossin).
template <class T>
void emulated_rotary_qk_forward(const kernels::RotaryQKParams& p, const kernels::RotaryQKArgs<T>& a);

/// cuda::rotary_qk_backward: adds into g.x, g.bias, g.cossin (each may be null).
template <class T>
void emulated_rotary_qk_backward(const kernels::RotaryQKParams& p, const kernels::RotaryQKArgs<T>& a,
                                 const kernels::RotaryQKGrads<T>& g);

}  // namespace megacpp::cuda_emulation
