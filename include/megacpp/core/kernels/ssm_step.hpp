/// \file
/// megacpp/core/kernels/ssm_step.hpp: the SsmStep kernel contract, one decode step of Mamba-3's
/// recurrence for every (row, head) (the caches: megacpp/nn/mamba/decode.hpp).
///
/// Decoding feeds one token per row. Per row b and head h, from the token's projections (Lahoti
/// et al., "Mamba-3", arXiv 2603.15569; state-spaces/mamba, mamba_ssm/modules/mamba3.py's step):
///
///   theta_s  = wrap(theta_s + pi tanh(angle_s) dt)                      s < S   (advance_angle)
///   k_r      = rot_theta(B_r + B_bias_{h,r}),  q_r = rot_theta(C_r + C_bias_{h,r})   pairs (2s, 2s+1), s < S
///   alpha    = exp(log_alpha),  beta = shift alpha
///   H[n, p]  = alpha H[n, p] + sum_r (beta k_prev_r[n] v_prev_r[p] + gamma k_r[n] v_r[p])    r in order
///   y_r[p]   = D v_r[p] + sum_n q_r[n] H[n, p]                                                n in order
///   k_prev <- k,  v_prev <- v
///
/// (state is stored (N, P), as the scan contract's; R = 1 is SISO, R > 1 MIMO with v up-projected
/// per rank.) B and C come in `groups` groups of heads, head h reading group h / (heads / groups):
/// Mamba-3 has one, Mamba-2 its ngroups; Mamba-2 (mamba_ssm/modules/mamba2.py's step) is the case
/// S = 0, zero biases and shift 0 (no trapezoid term: beta = 0). Every element of H, y and v_prev
/// is a function of its own column p only, so a backend may run the columns in parallel:
/// ssm_step_column is that column, written once for every backend (MEGACPP_HD), each element's
/// operations in the order above. The cache rows are
/// independent: a row's outputs never read another row's cache, which keeps decoding's
/// document-masking invariant (docs/recipe.md).
#pragma once

#include <cmath>

#include "megacpp/core/config.hpp"
#include "megacpp/core/error.hpp"
#include "megacpp/core/kernels/kernel.hpp"
#include "megacpp/core/kernels/ssm_rotary.hpp"

namespace megacpp::kernels {

/// The sizes of one step.
struct SsmStepParams {
  index_t batch = 0;     ///< rows, one new token each
  index_t heads = 0;     ///< SSM heads
  index_t rank = 1;      ///< R: 1 (SISO) or the MIMO rank
  index_t d_state = 0;   ///< N
  index_t head_dim = 0;  ///< P
  index_t angles = 0;    ///< S: rotated pairs per head (2 S <= N)
  index_t groups = 1;    ///< G: groups of heads sharing B and C (heads % groups == 0)

  /// Throws unless the sizes are positive (angles >= 0), the angles fit the state and the groups
  /// divide the heads.
  void validate(const char* op) const {
    check(batch > 0 && heads > 0 && rank > 0 && d_state > 0 && head_dim > 0 && angles >= 0 && 2 * angles <= d_state,
          op, "batch, heads, rank, d_state, head_dim must be positive and 0 <= 2 angles <= d_state, got ", batch, ", ",
          heads, ", ", rank, ", ", d_state, ", ", head_dim, ", angles ", angles);
    check(groups > 0 && heads % groups == 0, op, "groups must be positive and divide heads ", heads, ", got ", groups);
  }
  /// Offset of row b's B (or C) values for head h: (b, h / (heads / groups), 0, 0) of (batch, G, R, N).
  MEGACPP_HD index_t group_offset(index_t b, index_t h) const {
    return (b * groups + h / (heads / groups)) * rank * d_state;
  }
};

/// The data of one step (backend memory). The caches are read and updated in place.
template <class T>
struct SsmStepArgs {
  const T* b = nullptr;          ///< (batch, G, R, N): the token's B, shared by each group's heads
  const T* c = nullptr;          ///< (batch, G, R, N): its C, likewise
  const T* b_bias = nullptr;     ///< (heads, R, N)
  const T* c_bias = nullptr;     ///< (heads, R, N)
  const T* angle = nullptr;      ///< (batch, S): the raw angle projections
  const T* dt = nullptr;         ///< (batch, heads)
  const T* v = nullptr;          ///< (batch, heads, R, P)
  const T* log_alpha = nullptr;  ///< (batch, heads): A dt
  const T* gamma = nullptr;      ///< (batch, heads): lambda dt
  const T* shift = nullptr;      ///< (batch, heads): (1 - lambda) dt
  const T* D = nullptr;          ///< (heads): the skip connection
  T* state = nullptr;            ///< (batch, heads, N, P): H, updated
  T* theta = nullptr;            ///< (batch, heads, S): the angles, updated
  T* k_prev = nullptr;           ///< (batch, heads, R, N): the previous token's k, replaced by this one's
  T* v_prev = nullptr;           ///< (batch, heads, R, P): its v, likewise
  T* y = nullptr;                ///< (batch, heads, R, P): written
};

/// Element n of rank r of the token's rotated k (or q): x + bias, pair n / 2 turned by theta when
/// n < 2 S, in rotate_pair's arithmetic. `x` and `bias` point at the rank's N values.
template <class T>
MEGACPP_HD T rotated_element(const T* x, const T* bias, index_t n, index_t angles, const T* cos_theta,
                             const T* sin_theta) {
  if (n >= 2 * angles) return x[n] + bias[n];
  const index_t pair = n / 2;
  T y0, y1;
  rotate_pair(x[2 * pair] + bias[2 * pair], x[2 * pair + 1] + bias[2 * pair + 1], cos_theta[pair], sin_theta[pair], y0,
              y1);
  return n % 2 == 0 ? y0 : y1;
}

/// Column p of one (row, head)'s step: state[:, p] updated, y[:, p] written, v_prev[:, p] replaced
/// by v[:, p]. k_prev is read (the caller replaces it once every column is done). q and k are the
/// rotated (R, N); v, v_prev, y are (R, P); state is (N, P).
template <class T>
MEGACPP_HD void ssm_step_column(index_t R, index_t N, index_t P, index_t p, T* state, const T* k_prev, T* v_prev,
                                const T* q, const T* k, const T* v, T alpha, T beta, T gamma, T D, T* y) {
  for (index_t n = 0; n < N; ++n) {
    T s = state[n * P + p] * alpha;
    for (index_t r = 0; r < R; ++r) {
      const T kb = beta * k_prev[r * N + n];
      const T kg = gamma * k[r * N + n];
      s += kb * v_prev[r * P + p] + kg * v[r * P + p];
    }
    state[n * P + p] = s;
  }
  for (index_t r = 0; r < R; ++r) {
    T acc = D * v[r * P + p];
    for (index_t n = 0; n < N; ++n) acc += q[r * N + n] * state[n * P + p];
    y[r * P + p] = acc;
    v_prev[r * P + p] = v[r * P + p];
  }
}

/// The decode step of Mamba-3's recurrence on backend B (contract: this file); CPU:
/// megacpp/backends/cpu/detail/ssm/step.hpp.
template <class B>
struct SsmStep {
  static constexpr bool available = false;  ///< B has no Mamba-3 decode step
  /// Advances every row's angles, state and previous-token buffers by one token; writes y.
  template <class T>
  static void step(const SsmStepParams&, const SsmStepArgs<T>&) {
    require<SsmStep>();
  }
};

}  // namespace megacpp::kernels
