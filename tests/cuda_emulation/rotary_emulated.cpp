// tests/cuda_emulation/rotary_emulated.cpp: the launches of detail/ssm/rotary_launch.cuh on the
// emulator. Those launch with <<<>>>, which a host compiler does not take, so this file includes
// the kernel header alone and mirrors the launches call for call: the same kernels, grids, block
// sizes and scratch (NaN-filled, as cudaMalloc leaves it uninitialized).
#include "rotary_emulated.hpp"

#include <vector>

#include "token_runs_emulated.hpp"

#define MEGACPP_CUDA_BACKEND_INTERNAL  // as kernels/ssm_rotary.cuh does around its detail headers
#include "megacpp/backends/cuda/detail/ssm/rotary.cuh"
#undef MEGACPP_CUDA_BACKEND_INTERNAL

namespace megacpp::cuda_emulation {

template <class T>
void emulated_rotary_angles_forward(const kernels::RotaryAnglesParams& p, const std::int32_t* doc_ids,
                                    const kernels::RotaryAnglesArgs<T>& a) {
  const index_t walks = p.batch * p.heads * p.n_angles;
  if (walks == 0 || p.seq == 0) return;
  const cuda::TokenRuns runs = cuda::token_runs(p.seq);
  const index_t items = runs.count * walks;
  if (runs.count == 1) {
    launch(cuda::rotary_angles_kernel<T>, grid_stride_launch(items), p, runs, doc_ids, a, nullptr);
    return;
  }
  std::vector<T> entering = uninitialized_device<T>(items);
  std::vector<std::uint8_t> restarts(static_cast<std::size_t>(items), 0xAB);  // uninitialized: neither 0 nor 1
  launch(cuda::rotary_angle_runs_kernel<T>, grid_stride_launch(items), p, runs, doc_ids, a, entering.data(),
         restarts.data());
  launch(cuda::rotary_angle_carry_kernel<T>, grid_stride_launch(walks), p, runs, entering.data(), restarts.data());
  launch(cuda::rotary_angles_kernel<T>, grid_stride_launch(items), p, runs, doc_ids, a, entering.data());
}

template <class T>
void emulated_rotary_angles_backward(const kernels::RotaryAnglesParams& p, const std::int32_t* doc_ids,
                                     const kernels::RotaryAnglesArgs<T>& a, const kernels::RotaryAnglesGrads<T>& g) {
  const index_t tokens = p.batch * p.seq;
  if ((!g.angle && !g.dt) || tokens == 0) return;
  std::vector<T> G = uninitialized_device<T>(tokens * p.heads * p.n_angles);
  const index_t walks = p.batch * p.heads * p.n_angles;
  if (walks > 0) {
    const cuda::TokenRuns runs = cuda::token_runs(p.seq);
    const index_t items = runs.count * walks;
    if (runs.count == 1) {
      launch(cuda::rotary_theta_grad_kernel<T>, grid_stride_launch(items), p, runs, doc_ids, g.cossin, g.dcossin,
             nullptr, G.data());
    } else {
      std::vector<T> entering = uninitialized_device<T>(items);
      std::vector<std::uint8_t> restarts(static_cast<std::size_t>(items), 0xAB);
      launch(cuda::rotary_theta_grad_runs_kernel<T>, grid_stride_launch(items), p, runs, doc_ids, g.cossin, g.dcossin,
             entering.data(), restarts.data());
      launch(cuda::rotary_theta_grad_carry_kernel<T>, grid_stride_launch(walks), p, runs, entering.data(),
             restarts.data());
      launch(cuda::rotary_theta_grad_kernel<T>, grid_stride_launch(items), p, runs, doc_ids, g.cossin, g.dcossin,
             entering.data(), G.data());
    }
  }
  if (g.dt && p.heads > 0)
    launch(cuda::rotary_dt_grad_kernel<T>, grid_stride_launch(tokens * p.heads), p, a.angle, G.data(), g.dt);
  if (g.angle && p.n_angles > 0)
    launch(cuda::rotary_angle_grad_kernel<T>, grid_stride_launch(tokens * p.n_angles), p, a.angle, a.dt, G.data(),
           g.angle);
}

template <class T>
void emulated_rotary_qk_forward(const kernels::RotaryQKParams& p, const kernels::RotaryQKArgs<T>& a) {
  const index_t n = p.batch * p.seq * p.heads * p.rank * p.d_state;
  if (n == 0) return;
  launch(cuda::rotary_qk_forward_kernel<T>, grid_stride_launch(n), p, a);
}

template <class T>
void emulated_rotary_qk_backward(const kernels::RotaryQKParams& p, const kernels::RotaryQKArgs<T>& a,
                                 const kernels::RotaryQKGrads<T>& g) {
  const index_t dx_n = p.batch * p.seq * p.rank * p.d_state;
  if (g.x && dx_n > 0) launch(cuda::rotary_qk_input_grad_kernel<T>, grid_stride_launch(dx_n), p, a.cossin, g.dy, g.x);
  if (g.bias)
    emulated_add_token_sums<T>(p.batch * p.seq, p.heads * p.rank * p.d_state,
                               cuda::RotaryBiasGradTerm<T>{p, a.cossin, g.dy}, cuda::ColumnsAt<T>{g.bias});
  const index_t dcs_n = p.batch * p.seq * p.heads * p.n_angles * 2;
  if (g.cossin && dcs_n > 0)
    launch(cuda::rotary_qk_cossin_grad_kernel<T>, grid_stride_launch(dcs_n), p, a, g.dy, g.cossin);
}

#define MEGACPP_EMULATED_ROTARY(T)                                                                                 \
  template void emulated_rotary_angles_forward<T>(const kernels::RotaryAnglesParams&, const std::int32_t*,         \
                                                  const kernels::RotaryAnglesArgs<T>&);                            \
  template void emulated_rotary_angles_backward<T>(const kernels::RotaryAnglesParams&, const std::int32_t*,        \
                                                   const kernels::RotaryAnglesArgs<T>&,                            \
                                                   const kernels::RotaryAnglesGrads<T>&);                          \
  template void emulated_rotary_qk_forward<T>(const kernels::RotaryQKParams&, const kernels::RotaryQKArgs<T>&);    \
  template void emulated_rotary_qk_backward<T>(const kernels::RotaryQKParams&, const kernels::RotaryQKArgs<T>&,    \
                                               const kernels::RotaryQKGrads<T>&);
MEGACPP_EMULATED_ROTARY(float)
MEGACPP_EMULATED_ROTARY(double)
#undef MEGACPP_EMULATED_ROTARY

}  // namespace megacpp::cuda_emulation
