/// \file
/// megacpp/core/kernels/ssm_rotary.hpp: the SsmRotary kernel contract (Mamba-3's
/// data-dependent rotary angles) and the angle and rotation formulas training and decoding share.
///
/// Mamba-3 (Lahoti et al., arXiv 2603.15569; state-spaces/mamba mamba_ssm/modules/mamba3.py and
/// tests/ops/triton/test_mamba3_siso.py `mamba3_siso_step_ref`) makes the SSM state complex by
/// rotating B and C with cumulative, data-dependent angles:
///
///   theta_t = theta_{t-1} + pi * tanh(angle_t) * dt_t     (per head: dt is per head)
///   theta_t <- theta_t - 2 pi floor(theta_t / 2 pi)          (kept in [0, 2 pi), as the reference)
///   theta before the first token of a document = 0          (nothing crosses documents)
///
/// and pairs (2i, 2i+1) of B and C (i < n_angles; the other entries are not rotated) turn by
/// theta_i: y_{2i} = u_{2i} cos - u_{2i+1} sin, y_{2i+1} = u_{2i} sin + u_{2i+1} cos, with
/// u = RMSNorm(B) + bias_h. (The reference's MIMO kernel pairs i with i + N/2 instead; which pairs
/// rotate is a layout convention of the weights, and megacpp uses the pairwise layout throughout.)
///
/// Two kernels: angles (cossin (batch, seq, heads, S, 2) = (cos, sin) of theta from the raw
/// angle projections (batch, seq, S), shared by all heads, and dt (batch, seq, heads)) and qk
/// (y (batch, seq, heads, R, N) = rotate(x + bias_h) with x (batch, seq, R, N) shared by every
/// head, bias (heads, R, N)). Backwards add into every gradient that is not null.
#pragma once

#include <cmath>
#include <cstdint>

#include "megacpp/core/config.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/kernel.hpp"

namespace megacpp::kernels {

/// pi, for the angle advance (double: converted once per use to the element type).
inline constexpr double kPi = 3.14159265358979323846;

/// theta_t = wrap(prev + pi tanh(a) dt) into [0, 2 pi): the one formula the training kernel and
/// decoding share (the caller passes tanh(a), which the kernels compute once per token).
template <class T>
MEGACPP_HD T advance_angle(T prev, T tanh_a, T dt) {
  using std::floor;
  const T theta = prev + static_cast<T>(kPi) * tanh_a * dt;
  return theta - static_cast<T>(2 * kPi) * floor(theta / static_cast<T>(2 * kPi));
}

/// (y0, y1) = (u0 cos - u1 sin, u0 sin + u1 cos): one pair turned by an angle.
template <class T>
MEGACPP_HD void rotate_pair(T u0, T u1, T cos_theta, T sin_theta, T& y0, T& y1) {
  y0 = u0 * cos_theta - u1 * sin_theta;
  y1 = u0 * sin_theta + u1 * cos_theta;
}

/// Sizes of the angle kernels.
struct RotaryAnglesParams {
  index_t batch = 0;     ///< rows
  index_t seq = 0;       ///< tokens per row
  index_t heads = 0;     ///< SSM heads (dt is per head)
  index_t n_angles = 0;  ///< S: rotated pairs
};

/// Sizes of the rotation kernels.
struct RotaryQKParams {
  index_t batch = 0;     ///< rows
  index_t seq = 0;       ///< tokens per row
  index_t heads = 0;     ///< SSM heads
  index_t rank = 0;      ///< R: rows of B and C per token
  index_t d_state = 0;   ///< N (2 n_angles <= N)
  index_t n_angles = 0;  ///< S
};

/// Data of the angle kernels (backend memory).
template <class T>
struct RotaryAnglesArgs {
  const T* angle = nullptr;  ///< (batch, seq, S): raw angle projections
  const T* dt = nullptr;     ///< (batch, seq, heads)
  T* cossin = nullptr;       ///< forward: written; (batch, seq, heads, S, 2)
};

/// Gradients of the angle kernels: from dcossin, added into dangle and ddt (each may be null).
template <class T>
struct RotaryAnglesGrads {
  const T* cossin = nullptr;   ///< the forward's output
  const T* dcossin = nullptr;  ///< dL/dcossin
  T* angle = nullptr;          ///< += dL/dangle
  T* dt = nullptr;             ///< += dL/ddt
};

/// Data of the rotation kernels (backend memory).
template <class T>
struct RotaryQKArgs {
  const T* x = nullptr;       ///< (batch, seq, R, N)
  const T* bias = nullptr;    ///< (heads, R, N)
  const T* cossin = nullptr;  ///< (batch, seq, heads, S, 2)
  T* y = nullptr;             ///< forward: written; (batch, seq, heads, R, N)
};

/// Gradients of the rotation kernels: from dy, added into x, bias, cossin (each may be null).
template <class T>
struct RotaryQKGrads {
  const T* dy = nullptr;  ///< dL/dy
  T* x = nullptr;         ///< += dL/dx
  T* bias = nullptr;      ///< += dL/dbias
  T* cossin = nullptr;    ///< += dL/dcossin
};

/// Mamba-3's rotary kernels of backend B (contract: this file); CPU: megacpp/backends/cpu/ssm/.
template <class B>
struct SsmRotary {
  static constexpr bool available = false;  ///< B has no rotary kernels
  /// cossin from angle and dt; theta restarts at every document start of `docs`.
  template <class T>
  static void angles_forward(const RotaryAnglesParams&, const DocumentLayout<B>&, const RotaryAnglesArgs<T>&) {
    require<SsmRotary>();
  }
  /// Backward of angles_forward (`args.cossin` unused).
  template <class T>
  static void angles_backward(const RotaryAnglesParams&, const DocumentLayout<B>&, const RotaryAnglesArgs<T>&,
                              const RotaryAnglesGrads<T>&) {
    require<SsmRotary>();
  }
  /// y = rotate(x + bias_h, cossin).
  template <class T>
  static void qk_forward(const RotaryQKParams&, const RotaryQKArgs<T>&) {
    require<SsmRotary>();
  }
  /// Backward of qk_forward (`args.y` unused).
  template <class T>
  static void qk_backward(const RotaryQKParams&, const RotaryQKArgs<T>&, const RotaryQKGrads<T>&) {
    require<SsmRotary>();
  }
};

}  // namespace megacpp::kernels
