// CUDA backend: the launches of Mamba-3's rotary kernels (equations and design: rotary.cuh). Apart
// from the kernels, as the SSM scan's are (scan_launch.cuh), so that the CUDA emulation
// (tests/cuda_emulation/rotary_emulated.cpp) compiles the kernels with a host compiler and launches
// them as this file does.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cstddef>
#include <cstdint>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"
#include "megacpp/backends/cuda/detail/ssm/rotary.cuh"
#include "megacpp/backends/cuda/detail/token_runs_launch.cuh"

namespace megacpp::cuda {

// cossin from angle and dt; doc_ids (batch, seq) on the device. A row of one run is walked once
// from 0; longer rows take the three passes (rotary.cuh).
template <class T>
void rotary_angles_forward(const kernels::RotaryAnglesParams& p, const std::int32_t* doc_ids,
                           const kernels::RotaryAnglesArgs<T>& a) {
  const index_t walks = p.batch * p.heads * p.n_angles;
  if (walks == 0 || p.seq == 0) return;
  const TokenRuns runs = token_runs(p.seq);
  const index_t items = runs.count * walks;
  if (runs.count == 1) {
    rotary_angles_kernel<T><<<grid_for(items), kThreads, 0, kStream>>>(p, runs, doc_ids, a, nullptr);
    MEGACPP_CUDA_CHECK_LAUNCH(rotary_angles_kernel);
    return;
  }
  const DeviceBuffer<T> entering(static_cast<std::size_t>(items));  // run ends, then what enters each run
  const DeviceBuffer<std::uint8_t> restarts(static_cast<std::size_t>(items));
  rotary_angle_runs_kernel<T><<<grid_for(items), kThreads, 0, kStream>>>(p, runs, doc_ids, a, entering.get(),
                                                                        restarts.get());
  MEGACPP_CUDA_CHECK_LAUNCH(rotary_angle_runs_kernel);
  rotary_angle_carry_kernel<T><<<grid_for(walks), kThreads, 0, kStream>>>(p, runs, entering.get(), restarts.get());
  MEGACPP_CUDA_CHECK_LAUNCH(rotary_angle_carry_kernel);
  rotary_angles_kernel<T><<<grid_for(items), kThreads, 0, kStream>>>(p, runs, doc_ids, a, entering.get());
  MEGACPP_CUDA_CHECK_LAUNCH(rotary_angles_kernel);
}

// Adds into g.angle and g.dt, each skipped when null; g.cossin is the forward's output.
template <class T>
void rotary_angles_backward(const kernels::RotaryAnglesParams& p, const std::int32_t* doc_ids,
                            const kernels::RotaryAnglesArgs<T>& a, const kernels::RotaryAnglesGrads<T>& g) {
  const index_t tokens = p.batch * p.seq;
  if ((!g.angle && !g.dt) || tokens == 0) return;
  const DeviceBuffer<T> G(static_cast<std::size_t>(tokens * p.heads * p.n_angles));  // (batch, seq, heads, S)
  const index_t walks = p.batch * p.heads * p.n_angles;
  if (walks > 0) {
    const TokenRuns runs = token_runs(p.seq);
    const index_t items = runs.count * walks;
    if (runs.count == 1) {
      rotary_theta_grad_kernel<T><<<grid_for(items), kThreads, 0, kStream>>>(p, runs, doc_ids, g.cossin, g.dcossin,
                                                                            nullptr, G.get());
      MEGACPP_CUDA_CHECK_LAUNCH(rotary_theta_grad_kernel);
    } else {
      const DeviceBuffer<T> entering(static_cast<std::size_t>(items));  // run sums, then what enters each run
      const DeviceBuffer<std::uint8_t> restarts(static_cast<std::size_t>(items));
      rotary_theta_grad_runs_kernel<T><<<grid_for(items), kThreads, 0, kStream>>>(p, runs, doc_ids, g.cossin, g.dcossin,
                                                                                 entering.get(), restarts.get());
      MEGACPP_CUDA_CHECK_LAUNCH(rotary_theta_grad_runs_kernel);
      rotary_theta_grad_carry_kernel<T><<<grid_for(walks), kThreads, 0, kStream>>>(p, runs, entering.get(),
                                                                                  restarts.get());
      MEGACPP_CUDA_CHECK_LAUNCH(rotary_theta_grad_carry_kernel);
      rotary_theta_grad_kernel<T><<<grid_for(items), kThreads, 0, kStream>>>(p, runs, doc_ids, g.cossin, g.dcossin,
                                                                            entering.get(), G.get());
      MEGACPP_CUDA_CHECK_LAUNCH(rotary_theta_grad_kernel);
    }
  }
  if (g.dt && p.heads > 0) {
    rotary_dt_grad_kernel<T><<<grid_for(tokens * p.heads), kThreads, 0, kStream>>>(p, a.angle, G.get(), g.dt);
    MEGACPP_CUDA_CHECK_LAUNCH(rotary_dt_grad_kernel);
  }
  if (g.angle && p.n_angles > 0) {
    rotary_angle_grad_kernel<T><<<grid_for(tokens * p.n_angles), kThreads, 0, kStream>>>(p, a.angle, a.dt, G.get(),
                                                                                          g.angle);
    MEGACPP_CUDA_CHECK_LAUNCH(rotary_angle_grad_kernel);
  }
}

// y = rotate(x + bias_h, cossin).
template <class T>
void rotary_qk_forward(const kernels::RotaryQKParams& p, const kernels::RotaryQKArgs<T>& a) {
  const index_t n = p.batch * p.seq * p.heads * p.rank * p.d_state;
  if (n == 0) return;
  rotary_qk_forward_kernel<T><<<grid_for(n), kThreads, 0, kStream>>>(p, a);
  MEGACPP_CUDA_CHECK_LAUNCH(rotary_qk_forward_kernel);
}

// Adds into g.x, g.bias, g.cossin, each skipped when null.
template <class T>
void rotary_qk_backward(const kernels::RotaryQKParams& p, const kernels::RotaryQKArgs<T>& a,
                        const kernels::RotaryQKGrads<T>& g) {
  const index_t dx_n = p.batch * p.seq * p.rank * p.d_state;
  if (g.x && dx_n > 0) {
    rotary_qk_input_grad_kernel<T><<<grid_for(dx_n), kThreads, 0, kStream>>>(p, a.cossin, g.dy, g.x);
    MEGACPP_CUDA_CHECK_LAUNCH(rotary_qk_input_grad_kernel);
  }
  if (g.bias)
    add_token_sums<T>(p.batch * p.seq, p.heads * p.rank * p.d_state, RotaryBiasGradTerm<T>{p, a.cossin, g.dy},
                      ColumnsAt<T>{g.bias});
  const index_t dcs_n = p.batch * p.seq * p.heads * p.n_angles * 2;
  if (g.cossin && dcs_n > 0) {
    rotary_qk_cossin_grad_kernel<T><<<grid_for(dcs_n), kThreads, 0, kStream>>>(p, a, g.dy, g.cossin);
    MEGACPP_CUDA_CHECK_LAUNCH(rotary_qk_cossin_grad_kernel);
  }
}

}  // namespace megacpp::cuda
