// CUDA backend: Mamba-3's data-dependent rotary angles and the rotation of B and C (contract,
// equations and the formulas shared with decoding, advance_angle and rotate_pair:
// megacpp/core/kernels/ssm_rotary.hpp; CPU reference: cpu/detail/ssm/rotary.hpp).
//
//   angles    theta_t = wrap(theta_{t-1} + pi tanh(angle_t) dt_t), 0 before a document's first token
//             cossin[b, t, h, s] = (cos theta_t, sin theta_t)
//   backward  G[b, t, h, s] = sum_{u >= t, same document} (-sin dcos + cos dsin)_u
//             ddt[b, t, h]    += sum_s pi tanh(angle[b, t, s]) G[b, t, h, s]          (s in order)
//             dangle[b, t, s] += pi (1 - tanh^2) sum_h dt[b, t, h] G[b, t, h, s]     (h in order)
//   qk        y = rotate(x + bias_h, cossin) on pairs (2i, 2i+1), i < S; copied after
//   backward  du = R(-theta) dy;  dx += sum_h du (h in order);  dbias += sum_{(b, t)} du (row order);
//             dcos += sum_r dy0 u0 + dy1 u1,  dsin += sum_r -dy0 u1 + dy1 u0 (r in order)
//
// theta is a running sum over time, so one thread owns one (b, h, s) and walks its row's tokens
// in order (forward) or in reverse (backward), restarting at every document start
// (kernels::starts_document), exactly as the CPU's per-(b, h) loop does for each s. Every other
// output element is computed by one thread summing in the CPU kernel's order, starting from the
// gradient's old value where the CPU adds term by term: no atomics, bitwise reproducible. The
// per-element computations are MEGACPP_HD functions, so the same code runs in host loops, where
// it was checked against SsmRotary<Cpu>.
//
// Two loops are serial in the token count: the theta walks (a chunked scan of the angle sums would
// parallelise them) and dbias, one thread per (h, r, n) over all batch * seq tokens (a two-pass
// split over fixed token chunks would, keeping a fixed order); simple and exact first.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/memory.cuh"
#include "megacpp/core/config.hpp"
#include "megacpp/core/kernels/ssm_rotary.hpp"

namespace megacpp::cuda {

// ---- angles -------------------------------------------------------------------------------------

// Writes cossin for item i = (b * heads + h) * S + s: theta over the row's tokens in order.
template <class T>
MEGACPP_HD void rotary_angles_walk(const kernels::RotaryAnglesParams& p, const std::int32_t* doc_ids,
                                   const kernels::RotaryAnglesArgs<T>& a, index_t i) {
  using std::cos, std::sin, std::tanh;  // the element type's overloads (device ones under nvcc)
  const index_t S = p.n_angles, H = p.heads;
  const index_t s = i % S, bh = i / S, h = bh % H, b = bh / H;
  const std::int32_t* row_ids = doc_ids + b * p.seq;
  T theta = 0;
  for (index_t t = 0; t < p.seq; ++t) {
    if (kernels::starts_document(row_ids, t)) theta = T(0);
    const index_t bt = b * p.seq + t;
    theta = kernels::advance_angle<T>(theta, tanh(a.angle[bt * S + s]), a.dt[bt * H + h]);
    T* out = a.cossin + ((bt * H + h) * S + s) * 2;
    out[0] = cos(theta);
    out[1] = sin(theta);
  }
}

// Writes G (batch, seq, heads, S) for item i = (b * heads + h) * S + s: dL/dtheta summed from the
// row's end backwards, the sum cleared after each document's first token.
template <class T>
MEGACPP_HD void rotary_theta_grad_walk(const kernels::RotaryAnglesParams& p, const std::int32_t* doc_ids,
                                       const T* cossin, const T* dcossin, T* G, index_t i) {
  const index_t S = p.n_angles, H = p.heads;
  const index_t s = i % S, bh = i / S, h = bh % H, b = bh / H;
  const std::int32_t* row_ids = doc_ids + b * p.seq;
  T acc = 0;
  for (index_t t = p.seq - 1; t >= 0; --t) {
    const index_t at = ((b * p.seq + t) * H + h) * S + s;
    const T c = cossin[2 * at], sn = cossin[2 * at + 1];
    acc += -sn * dcossin[2 * at] + c * dcossin[2 * at + 1];
    G[at] = acc;
    if (kernels::starts_document(row_ids, t)) acc = T(0);
  }
}

// What ddt[i] gains, i = (b * seq + t) * heads + h: pi tanh(angle) G summed over s in order.
template <class T>
MEGACPP_HD T rotary_dt_grad(const kernels::RotaryAnglesParams& p, const T* angle, const T* G, index_t i) {
  using std::tanh;
  const T pi = static_cast<T>(kernels::kPi);
  const index_t S = p.n_angles, bt = i / p.heads;
  T gdt = 0;
  for (index_t s = 0; s < S; ++s) gdt += pi * tanh(angle[bt * S + s]) * G[i * S + s];
  return gdt;
}

// What dangle[i] gains, i = (b * seq + t) * S + s: pi (1 - tanh^2) times dt G summed over heads.
template <class T>
MEGACPP_HD T rotary_angle_grad(const kernels::RotaryAnglesParams& p, const T* angle, const T* dt, const T* G,
                               index_t i) {
  using std::tanh;
  const T pi = static_cast<T>(kernels::kPi);
  const index_t S = p.n_angles, H = p.heads, s = i % S, bt = i / S;
  T sum = 0;
  for (index_t h = 0; h < H; ++h) sum += dt[bt * H + h] * G[(bt * H + h) * S + s];
  const T th = tanh(angle[i]);
  return pi * (T(1) - th * th) * sum;
}

template <class T>
__global__ void rotary_angles_forward_kernel(kernels::RotaryAnglesParams p, const std::int32_t* doc_ids,
                                             kernels::RotaryAnglesArgs<T> a) {
  const index_t n = p.batch * p.heads * p.n_angles;
  for (index_t i = global_thread(); i < n; i += grid_stride()) rotary_angles_walk(p, doc_ids, a, i);
}

template <class T>
__global__ void rotary_theta_grad_kernel(kernels::RotaryAnglesParams p, const std::int32_t* doc_ids, const T* cossin,
                                         const T* dcossin, T* G) {
  const index_t n = p.batch * p.heads * p.n_angles;
  for (index_t i = global_thread(); i < n; i += grid_stride()) rotary_theta_grad_walk(p, doc_ids, cossin, dcossin, G, i);
}

template <class T>
__global__ void rotary_dt_grad_kernel(kernels::RotaryAnglesParams p, const T* angle, const T* G, T* ddt) {
  const index_t n = p.batch * p.seq * p.heads;
  for (index_t i = global_thread(); i < n; i += grid_stride()) ddt[i] += rotary_dt_grad(p, angle, G, i);
}

template <class T>
__global__ void rotary_angle_grad_kernel(kernels::RotaryAnglesParams p, const T* angle, const T* dt, const T* G,
                                         T* dangle) {
  const index_t n = p.batch * p.seq * p.n_angles;
  for (index_t i = global_thread(); i < n; i += grid_stride()) dangle[i] += rotary_angle_grad(p, angle, dt, G, i);
}

// cossin from angle and dt; doc_ids (batch, seq) on the device.
template <class T>
void rotary_angles_forward(const kernels::RotaryAnglesParams& p, const std::int32_t* doc_ids,
                           const kernels::RotaryAnglesArgs<T>& a) {
  const index_t walks = p.batch * p.heads * p.n_angles;
  if (walks == 0 || p.seq == 0) return;
  rotary_angles_forward_kernel<T><<<grid_for(walks), kThreads, 0, kStream>>>(p, doc_ids, a);
  MEGACPP_CUDA_CHECK_LAUNCH(rotary_angles_forward_kernel);
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
    rotary_theta_grad_kernel<T><<<grid_for(walks), kThreads, 0, kStream>>>(p, doc_ids, g.cossin, g.dcossin, G.get());
    MEGACPP_CUDA_CHECK_LAUNCH(rotary_theta_grad_kernel);
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

// ---- rotation of B and C ------------------------------------------------------------------------

// y[i], i = (((b * seq + t) * heads + h) * R + r) * N + n: u = x + bias_h, its pair turned.
template <class T>
MEGACPP_HD T rotary_qk_output(const kernels::RotaryQKParams& p, const kernels::RotaryQKArgs<T>& a, index_t i) {
  const index_t N = p.d_state, R = p.rank, H = p.heads;
  const index_t n = i % N, bhr = i / N, r = bhr % R, bh = bhr / R, h = bh % H, bt = bh / H;
  const T* xr = a.x + (bt * R + r) * N;
  const T* br = a.bias + (h * R + r) * N;
  const index_t pair = n / 2;
  if (pair >= p.n_angles) return xr[n] + br[n];
  const T* cs = a.cossin + ((bt * H + h) * p.n_angles + pair) * 2;
  T y0, y1;
  kernels::rotate_pair(xr[2 * pair] + br[2 * pair], xr[2 * pair + 1] + br[2 * pair + 1], cs[0], cs[1], y0, y1);
  return n % 2 == 0 ? y0 : y1;
}

// du[b, t, h, r, n] = R(-theta) dy on rotated pairs, dy on the rest; bt = b * seq + t.
template <class T>
MEGACPP_HD T rotary_qk_du(const kernels::RotaryQKParams& p, const T* cossin, const T* dy, index_t bt, index_t h,
                          index_t r, index_t n) {
  const T* g = dy + ((bt * p.heads + h) * p.rank + r) * p.d_state;
  const index_t pair = n / 2;
  if (pair >= p.n_angles) return g[n];
  const T* cs = cossin + ((bt * p.heads + h) * p.n_angles + pair) * 2;
  const T c = cs[0], s = cs[1], g0 = g[2 * pair], g1 = g[2 * pair + 1];
  return n % 2 == 0 ? g0 * c + g1 * s : -g0 * s + g1 * c;
}

// dx[i] after the backward from its old value, i = ((b * seq + t) * R + r) * N + n: du of every
// head added in head order.
template <class T>
MEGACPP_HD T rotary_qk_input_grad(const kernels::RotaryQKParams& p, const T* cossin, const T* dy, T dx_old, index_t i) {
  const index_t N = p.d_state, R = p.rank;
  const index_t n = i % N, btr = i / N, r = btr % R, bt = btr / R;
  T acc = dx_old;
  for (index_t h = 0; h < p.heads; ++h) acc += rotary_qk_du(p, cossin, dy, bt, h, r, n);
  return acc;
}

// dbias[i] after the backward from its old value, i = (h * R + r) * N + n: du of every token added
// in row order.
template <class T>
MEGACPP_HD T rotary_qk_bias_grad(const kernels::RotaryQKParams& p, const T* cossin, const T* dy, T dbias_old,
                                 index_t i) {
  const index_t N = p.d_state, R = p.rank;
  const index_t n = i % N, hr = i / N, r = hr % R, h = hr / R;
  T acc = dbias_old;
  for (index_t bt = 0; bt < p.batch * p.seq; ++bt) acc += rotary_qk_du(p, cossin, dy, bt, h, r, n);
  return acc;
}

// dcossin[i] after the backward from its old value, i = ((b * seq + t) * heads + h) * S + pair) * 2
// + k (k = 0: cos, 1: sin): the ranks' terms added in rank order.
template <class T>
MEGACPP_HD T rotary_qk_cossin_grad(const kernels::RotaryQKParams& p, const kernels::RotaryQKArgs<T>& a, const T* dy,
                                   T dcs_old, index_t i) {
  const index_t N = p.d_state, R = p.rank, H = p.heads, S = p.n_angles;
  const index_t k = i % 2, pair = (i / 2) % S, bh = i / (2 * S), h = bh % H, bt = bh / H;
  T acc = dcs_old;
  for (index_t r = 0; r < R; ++r) {
    const T* xr = a.x + (bt * R + r) * N;
    const T* br = a.bias + (h * R + r) * N;
    const T* g = dy + (bh * R + r) * N;
    const T g0 = g[2 * pair], g1 = g[2 * pair + 1];
    const T u0 = xr[2 * pair] + br[2 * pair], u1 = xr[2 * pair + 1] + br[2 * pair + 1];
    acc += k == 0 ? g0 * u0 + g1 * u1 : -g0 * u1 + g1 * u0;
  }
  return acc;
}

template <class T>
__global__ void rotary_qk_forward_kernel(kernels::RotaryQKParams p, kernels::RotaryQKArgs<T> a) {
  const index_t n = p.batch * p.seq * p.heads * p.rank * p.d_state;
  for (index_t i = global_thread(); i < n; i += grid_stride()) a.y[i] = rotary_qk_output(p, a, i);
}

template <class T>
__global__ void rotary_qk_input_grad_kernel(kernels::RotaryQKParams p, const T* cossin, const T* dy, T* dx) {
  const index_t n = p.batch * p.seq * p.rank * p.d_state;
  for (index_t i = global_thread(); i < n; i += grid_stride()) dx[i] = rotary_qk_input_grad(p, cossin, dy, dx[i], i);
}

template <class T>
__global__ void rotary_qk_bias_grad_kernel(kernels::RotaryQKParams p, const T* cossin, const T* dy, T* dbias) {
  const index_t n = p.heads * p.rank * p.d_state;
  for (index_t i = global_thread(); i < n; i += grid_stride())
    dbias[i] = rotary_qk_bias_grad(p, cossin, dy, dbias[i], i);
}

template <class T>
__global__ void rotary_qk_cossin_grad_kernel(kernels::RotaryQKParams p, kernels::RotaryQKArgs<T> a, const T* dy,
                                             T* dcossin) {
  const index_t n = p.batch * p.seq * p.heads * p.n_angles * 2;
  for (index_t i = global_thread(); i < n; i += grid_stride())
    dcossin[i] = rotary_qk_cossin_grad(p, a, dy, dcossin[i], i);
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
  const index_t dbias_n = p.heads * p.rank * p.d_state;
  if (g.bias && dbias_n > 0) {
    rotary_qk_bias_grad_kernel<T><<<grid_for(dbias_n), kThreads, 0, kStream>>>(p, a.cossin, g.dy, g.bias);
    MEGACPP_CUDA_CHECK_LAUNCH(rotary_qk_bias_grad_kernel);
  }
  const index_t dcs_n = p.batch * p.seq * p.heads * p.n_angles * 2;
  if (g.cossin && dcs_n > 0) {
    rotary_qk_cossin_grad_kernel<T><<<grid_for(dcs_n), kThreads, 0, kStream>>>(p, a, g.dy, g.cossin);
    MEGACPP_CUDA_CHECK_LAUNCH(rotary_qk_cossin_grad_kernel);
  }
}

}  // namespace megacpp::cuda
