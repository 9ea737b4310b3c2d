// CUDA backend: Mamba-3's data-dependent rotary angles and the rotation of B and C (contract,
// equations and the formulas shared with decoding, advance_angle and rotate_pair:
// megacpp/core/kernels/ssm_rotary.hpp; CPU reference: cpu/detail/ssm/rotary.hpp). The kernels;
// their launches: rotary_launch.cuh.
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
// theta and G are running sums along a row, one per walk w = (b * heads + h) * S + s. The row is
// cut into runs of consecutive tokens (token_runs.cuh) and each walk is a three-pass scan over them:
//   1. every run walked from 0 on its own thread (theta forward, G in reverse), restarting at each
//      document start (kernels::starts_document, the CPU's rule): the run's end, and whether a
//      document starts inside it;
//   2. one thread per walk carries the ends along the row's runs (in reverse for G): what enters a
//      run is what left the one before, unless a document started in that one (then only its end);
//   3. every run walked again from what enters it, writing cossin (G).
// Pass 3 is the CPU's walk from a carried start; the carry adds a run's end in one step where the
// CPU adds its tokens one by one, so results differ from the CPU's by rounding only. A row of one
// run (up to kMinTokenRun tokens) is pass 3 alone from 0: the CPU's walk, step for step. dbias, a sum over
// every token, is token_runs.cuh's two-pass sum. Every other output element is computed by one
// thread summing in the CPU kernel's order, starting from the gradient's old value where the CPU
// adds term by term. No atomics, a fixed order: bitwise reproducible. The per-element and per-run
// computations are MEGACPP_HD functions, so the same code runs in host loops: the CUDA emulation
// (tests/cuda_emulation/test_rotary.cpp) runs these kernels against SsmRotary<Cpu>.
#pragma once
#include "megacpp/backends/cuda/detail/guard.cuh"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "megacpp/backends/cuda/detail/check.cuh"
#include "megacpp/backends/cuda/detail/token_runs.cuh"
#include "megacpp/core/config.hpp"
#include "megacpp/core/kernels/ssm_rotary.hpp"

namespace megacpp::cuda {

// ---- angles -------------------------------------------------------------------------------------

// advance_angle's wrap into [0, 2 pi) (core/kernels/ssm_rotary.hpp), for the carry of a run's end.
template <class T>
MEGACPP_HD T wrap_angle(T theta) {
  using std::floor;
  return theta - static_cast<T>(2 * kernels::kPi) * floor(theta / static_cast<T>(2 * kernels::kPi));
}

// The walk's coordinates: w = (b * heads + h) * S + s.
struct RotaryWalk {
  index_t b, h, s;
  MEGACPP_HD RotaryWalk(const kernels::RotaryAnglesParams& p, index_t w)
      : b(w / (p.heads * p.n_angles)), h((w / p.n_angles) % p.heads), s(w % p.n_angles) {}
};

// theta over run k of walk w from `theta` (what enters the run), restarting at each document start;
// writes cossin when `cossin` is not null. Returns the theta leaving the run; sets `restarted` when
// a document starts inside the run.
template <class T>
MEGACPP_HD T rotary_angles_run(const kernels::RotaryAnglesParams& p, const TokenRuns& runs, const std::int32_t* doc_ids,
                               const T* angle, const T* dt, T* cossin, index_t w, index_t k, T theta, bool& restarted) {
  using std::cos, std::sin, std::tanh;  // the element type's overloads (device ones under nvcc)
  const index_t S = p.n_angles, H = p.heads;
  const RotaryWalk at(p, w);
  const std::int32_t* row_ids = doc_ids + at.b * p.seq;
  for (index_t t = runs.begin(k); t < runs.end(k, p.seq); ++t) {
    if (kernels::starts_document(row_ids, t)) {
      theta = T(0);
      restarted = true;
    }
    const index_t bt = at.b * p.seq + t;
    theta = kernels::advance_angle<T>(theta, tanh(angle[bt * S + at.s]), dt[bt * H + at.h]);
    if (cossin) {
      T* out = cossin + ((bt * H + at.h) * S + at.s) * 2;
      out[0] = cos(theta);
      out[1] = sin(theta);
    }
  }
  return theta;
}

// G over run k of walk w in reverse from `later` (G's sum over the tokens after the run, within
// the document running on past it), cleared after each document's first token; writes G when not
// null. Returns what leaves the run towards its start; sets `restarted` when a document starts
// inside the run.
template <class T>
MEGACPP_HD T rotary_theta_grad_run(const kernels::RotaryAnglesParams& p, const TokenRuns& runs,
                                   const std::int32_t* doc_ids, const T* cossin, const T* dcossin, T* G, index_t w,
                                   index_t k, T later, bool& restarted) {
  const index_t S = p.n_angles, H = p.heads;
  const RotaryWalk at(p, w);
  const std::int32_t* row_ids = doc_ids + at.b * p.seq;
  for (index_t t = runs.end(k, p.seq) - 1; t >= runs.begin(k); --t) {
    const index_t i = ((at.b * p.seq + t) * H + at.h) * S + at.s;
    const T c = cossin[2 * i], sn = cossin[2 * i + 1];
    later += -sn * dcossin[2 * i] + c * dcossin[2 * i + 1];
    if (G) G[i] = later;
    if (kernels::starts_document(row_ids, t)) {
      later = T(0);
      restarted = true;
    }
  }
  return later;
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

// Pass 1 of the angles: ends[i] and restarts[i] of run item i = k * walks + w (w fastest:
// neighbouring threads read neighbouring angles of a token).
template <class T>
__global__ void rotary_angle_runs_kernel(kernels::RotaryAnglesParams p, TokenRuns runs, const std::int32_t* doc_ids,
                                         kernels::RotaryAnglesArgs<T> a, T* ends, std::uint8_t* restarts) {
  const index_t walks = p.batch * p.heads * p.n_angles, n = runs.count * walks;
  for (index_t i = global_thread(); i < n; i += grid_stride()) {
    bool restarted = false;
    ends[i] = rotary_angles_run<T>(p, runs, doc_ids, a.angle, a.dt, nullptr, i % walks, i / walks, T(0), restarted);
    restarts[i] = restarted ? 1 : 0;
  }
}

// Pass 2: per walk, ends[i] replaced by the theta entering run i, the runs taken in row order.
template <class T>
__global__ void rotary_angle_carry_kernel(kernels::RotaryAnglesParams p, TokenRuns runs, T* ends,
                                          const std::uint8_t* restarts) {
  const index_t walks = p.batch * p.heads * p.n_angles;
  for (index_t w = global_thread(); w < walks; w += grid_stride()) {
    T theta = 0;
    for (index_t k = 0; k < runs.count; ++k) {
      const index_t i = k * walks + w;
      const T end = ends[i];
      ends[i] = theta;
      theta = restarts[i] != 0 ? end : wrap_angle(theta + end);
    }
  }
}

// Pass 3: cossin of every run item from the theta entering it (entering null: every run from 0,
// a row of one run).
template <class T>
__global__ void rotary_angles_kernel(kernels::RotaryAnglesParams p, TokenRuns runs, const std::int32_t* doc_ids,
                                     kernels::RotaryAnglesArgs<T> a, const T* entering) {
  const index_t walks = p.batch * p.heads * p.n_angles, n = runs.count * walks;
  for (index_t i = global_thread(); i < n; i += grid_stride()) {
    bool restarted = false;
    rotary_angles_run<T>(p, runs, doc_ids, a.angle, a.dt, a.cossin, i % walks, i / walks, entering ? entering[i] : T(0),
                         restarted);
  }
}

// Pass 1 of G: sums[i] (what leaves run item i = k * walks + w towards the row's start, from 0)
// and restarts[i].
template <class T>
__global__ void rotary_theta_grad_runs_kernel(kernels::RotaryAnglesParams p, TokenRuns runs, const std::int32_t* doc_ids,
                                              const T* cossin, const T* dcossin, T* sums, std::uint8_t* restarts) {
  const index_t walks = p.batch * p.heads * p.n_angles, n = runs.count * walks;
  for (index_t i = global_thread(); i < n; i += grid_stride()) {
    bool restarted = false;
    sums[i] = rotary_theta_grad_run<T>(p, runs, doc_ids, cossin, dcossin, nullptr, i % walks, i / walks, T(0), restarted);
    restarts[i] = restarted ? 1 : 0;
  }
}

// Pass 2 of G: per walk, sums[i] replaced by what enters run i from the tokens after it, the runs
// taken from the row's end.
template <class T>
__global__ void rotary_theta_grad_carry_kernel(kernels::RotaryAnglesParams p, TokenRuns runs, T* sums,
                                               const std::uint8_t* restarts) {
  const index_t walks = p.batch * p.heads * p.n_angles;
  for (index_t w = global_thread(); w < walks; w += grid_stride()) {
    T later = 0;
    for (index_t k = runs.count - 1; k >= 0; --k) {
      const index_t i = k * walks + w;
      const T leaving = sums[i];
      sums[i] = later;
      later = restarts[i] != 0 ? leaving : later + leaving;
    }
  }
}

// Pass 3 of G: G (batch, seq, heads, S) of every run item from what enters it (entering null:
// every run from 0, a row of one run).
template <class T>
__global__ void rotary_theta_grad_kernel(kernels::RotaryAnglesParams p, TokenRuns runs, const std::int32_t* doc_ids,
                                         const T* cossin, const T* dcossin, const T* entering, T* G) {
  const index_t walks = p.batch * p.heads * p.n_angles, n = runs.count * walks;
  for (index_t i = global_thread(); i < n; i += grid_stride()) {
    bool restarted = false;
    rotary_theta_grad_run<T>(p, runs, doc_ids, cossin, dcossin, G, i % walks, i / walks, entering ? entering[i] : T(0),
                             restarted);
  }
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

// dbias's term of token bt (b * seq + t) in column c = (h * R + r) * N + n: du[b, t, h, r, n], for
// token_runs.cuh's sum over every token in row order.
template <class T>
struct RotaryBiasGradTerm {
  kernels::RotaryQKParams p;
  const T* cossin;
  const T* dy;
  MEGACPP_HD T operator()(index_t bt, index_t c) const {
    const index_t hr = c / p.d_state;
    return rotary_qk_du(p, cossin, dy, bt, hr / p.rank, hr % p.rank, c % p.d_state);
  }
};

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
__global__ void rotary_qk_cossin_grad_kernel(kernels::RotaryQKParams p, kernels::RotaryQKArgs<T> a, const T* dy,
                                             T* dcossin) {
  const index_t n = p.batch * p.seq * p.heads * p.n_angles * 2;
  for (index_t i = global_thread(); i < n; i += grid_stride())
    dcossin[i] = rotary_qk_cossin_grad(p, a, dy, dcossin[i], i);
}

}  // namespace megacpp::cuda
