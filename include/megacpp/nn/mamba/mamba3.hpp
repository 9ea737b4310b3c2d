// megacpp/nn/mamba/mamba3.hpp: the Mamba-3 mixer, Mamba3<T, B, SISO> and Mamba3<T, B, MIMO<R>>.
//
// Mamba-3 (Lahoti, Li, Chen, Wang, Bick, Kolter, Dao, Gu; arXiv 2603.15569), as the reference
// state-spaces/mamba mamba_ssm/modules/mamba3.py computes it (checked against commit e9594ce),
// per token and head (docs/mamba3.md):
//
//   [z, x, B, C, dd_dt, dd_A, trap, angle] = in_proj(u)
//   dt     = softplus(dd_dt + dt_bias)                 A = min(-phi(dd_A), -A_floor)   (phi: AAct, a_activation.hpp)
//   alpha  = exp(A dt)      lambda = sigmoid(trap)     gamma = lambda dt    beta = (1 - lambda) dt alpha
//   theta_t = theta_{t-1} + pi tanh(angle_t) dt_t      (rotary.hpp; 0 before a document's first token)
//   k = rotate(RMSNorm(B) + B_bias, theta)             q = rotate(RMSNorm(C) + C_bias, theta)
//   H_t = alpha H_{t-1} + beta x_{t-1} k_{t-1}^T + gamma x_t k_t^T      (trapezoidal discretisation)
//   y_t = H_t q_t + D x_t
//   out = out_proj(y * silu(z))                        (is_outproj_norm: out_proj(RMSNorm_P(y) * norm * silu(z)))
//
// MIMO<R> (the reference's `mamba3_MIMO_step_ref`): x and z become R copies per head,
// x_r = x * mimo_x[h, r], z_r = z * mimo_z[h, r]; B and C carry R rows; H sums the R outer
// products; y_r = H q_r + D x_r, and y = sum_r mimo_o[h, r] * y_r * silu(z_r) (with is_outproj_norm,
// y_r is first RMS-normalised over each head's P channels and scaled by norm, as the reference does).
// No conv1d (the trapezoid and the B/C biases replace it). Document masking (docs/recipe.md "Document masking") lives in
// the scan (state and the trapezoid's previous-token term zero at each document's first token)
// and in rotary_angles (theta restarts); every other op acts per token.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/reduce.hpp"
#include "megacpp/autograd/ops/rmsnorm.hpp"
#include "megacpp/autograd/ops/shape.hpp"
#include "megacpp/core/kernels/ssm_rotary.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/ssm_step.hpp"
#include "megacpp/nn/linear.hpp"
#include "megacpp/nn/mamba/a_activation.hpp"
#include "megacpp/nn/mamba/chunked_scan.hpp"
#include "megacpp/nn/mamba/config.hpp"
#include "megacpp/nn/mamba/decode.hpp"
#include "megacpp/nn/mamba/elementwise.hpp"
#include "megacpp/nn/mamba/rotary.hpp"
#include "megacpp/nn/mamba/sequential_scan.hpp"
#include "megacpp/autograd/module.hpp"

namespace megacpp {

namespace detail {
// `count` copies of x along a new axis inserted at `axis`: (..., d, ...) -> (..., count, d, ...).
// Built on concat, whose backward sums the copies' gradients.
template <class T, Backend B>
Var<T, B> repeat_new_axis(const Var<T, B>& x, int axis, index_t count) {
  Shape s;
  for (int i = 0; i < x.rank(); ++i) {
    if (i == axis) s.push_back(1);
    s.push_back(x.shape()[i]);
  }
  if (axis == x.rank()) s.push_back(1);
  const Var<T, B> one = reshape(x, s);
  return count == 1 ? one : concat(std::vector<Var<T, B>>(static_cast<std::size_t>(count), one), axis);
}
}  // namespace detail

/// The Mamba-3 mixer: x (batch, seq, d_model) and the batch's documents -> (batch, seq, d_model).
/// `Policy` is SISO or MIMO<R>; `AAct` is the A activation phi, HeavyTailA (the reference's) or SoftplusA.
template <class T, Backend B, class Policy = SISO, class AAct = HeavyTailA>
struct Mamba3 {
  static_assert(MambaAActivation<AAct>, "megacpp_mamba3_a_activation: AAct must be HeavyTailA, SoftplusA or a struct "
                                        "with `name` and a static template phi(const Var<T, B>&)");
  using value_type = T;        ///< element type of parameters and activations
  using backend_type = B;      ///< backend the layer runs on
  using policy_type = Policy;  ///< SISO or MIMO<R>
  using a_activation = AAct;   ///< HeavyTailA or SoftplusA
  using V = Var<T, B>;         ///< the activation type
  static constexpr index_t R = Policy::rank;  ///< MIMO rank (1 for SISO)

  Mamba3Config config;    ///< dimensions the layer was built with (chunk_size resolved)
  Linear<T, B> in_proj;   ///< (2 d_inner + 2 R N + 3 heads + S, d_model): [z, x, B, C, dd_dt, dd_A, trap, angle]
  Param<T, B> dt_bias;    ///< (heads): softplus(dt_bias) is dt at init, log-uniform in [dt_min, dt_max]
  Param<T, B> B_norm;     ///< (N): RMSNorm gain on B
  Param<T, B> C_norm;     ///< (N): RMSNorm gain on C
  Param<T, B> B_bias;     ///< (heads, R, N): added to RMSNorm(B), init 1
  Param<T, B> C_bias;     ///< (heads, R, N): added to RMSNorm(C), init 1
  Param<T, B> D;          ///< (heads): skip connection, init 1
  Param<T, B> mimo_x;     ///< (heads, R, P), MIMO only: x up-projection, init 1 / R
  Param<T, B> mimo_z;     ///< (heads, R, P), MIMO only: z up-projection, init 1
  Param<T, B> mimo_o;     ///< (heads, R, P), MIMO only: output down-projection, init 1 / R
  Param<T, B> norm;       ///< (d_inner), config.is_outproj_norm only: gain of the per-head RMSNorm before the gate, init 1
  Linear<T, B> out_proj;  ///< (d_model, d_inner)

  Mamba3() = default;
  /// Builds the layer; throws megacpp::Error when the dimensions do not give a head layout.
  Mamba3(const Mamba3Config& cfg, Rng& rng) : config(cfg) {
    config.validate("Mamba3");
    if (config.chunk_size == 0) config.chunk_size = Policy::default_chunk_size;
    const index_t di = config.d_inner(), H = heads(), N = config.d_state, P = config.headdim;
    in_proj = Linear<T, B>(config.d_model, 2 * di + 2 * R * N + 3 * H + n_angles(), rng);
    std::vector<T> bias(static_cast<std::size_t>(H));
    for (auto& b : bias) b = static_cast<T>(detail::sample_dt_bias(rng, config.dt_min, config.dt_max, config.dt_init_floor));
    dt_bias = Param<T, B>(Tensor<T, B>::from_host({H}, bias), Role::scalar);
    B_norm = Param<T, B>::filled({N}, Role::norm_gain, T(1));
    C_norm = Param<T, B>::filled({N}, Role::norm_gain, T(1));
    B_bias = Param<T, B>::filled({H, R, N}, Role::scalar, T(1));
    C_bias = Param<T, B>::filled({H, R, N}, Role::scalar, T(1));
    D = Param<T, B>::filled({H}, Role::scalar, T(1));
    if constexpr (R > 1) {
      mimo_x = Param<T, B>::filled({H, R, P}, Role::scalar, T(1) / T(R));
      mimo_z = Param<T, B>::filled({H, R, P}, Role::scalar, T(1));
      mimo_o = Param<T, B>::filled({H, R, P}, Role::scalar, T(1) / T(R));
    }
    if (config.is_outproj_norm) norm = Param<T, B>::filled({di}, Role::norm_gain, T(1));
    out_proj = Linear<T, B>(di, config.d_model, rng, config.zero_init_out_proj ? LinearInit::zeros : LinearInit::normal);
  }

  /// Number of SSM heads, d_inner / headdim.
  index_t heads() const { return config.heads(); }
  /// Rotary angles per head (S): pairs (2i, 2i+1), i < S, of B and C rotate.
  index_t n_angles() const { return config.n_angles(); }

  /// u (batch, seq, d_model) -> (batch, seq, d_model); no state crosses a document boundary of `docs`.
  V forward(const V& u, const DocumentLayout<B>& docs) const {
    check_input("Mamba3::forward", u);
    check(docs.batch == u.shape()[0] && docs.seq == u.shape()[1], "Mamba3::forward", "document layout (", docs.batch,
          ", ", docs.seq, ") does not match input ", u.shape());
    const Branches br = project(u);
    const V cossin = rotary_angles(br.angle, br.dt, docs);  // (batch, seq, heads, S, 2)
    ScanInputs<T, B> in;
    in.k = rotary_qk(br.Bn, B_bias.var, cossin);  // (batch, seq, heads, R, N)
    in.q = rotary_qk(br.Cn, C_bias.var, cossin);
    in.v = br.v;
    in.log_alpha = br.log_alpha;
    in.gamma = br.gamma;
    in.shift = br.shift;
    in.D = D.var;
    const V y = config.scan == ScanKind::chunked ? chunked_scan(in, docs, config.chunk_size) : sequential_scan(in, docs);
    return output(y, br.z);
  }

  /// A zeroed decode cache for `batch` rows.
  Mamba3Cache<T, B> make_cache(index_t batch) const {
    return Mamba3Cache<T, B>::zeros(batch, heads(), R, config.d_state, config.headdim, n_angles());
  }

  /// One decode step: u (batch, d_model), the token after the cache's last -> (batch, d_model).
  /// Rows with new_document[b] start a new document (their cache is reset first); an empty vector
  /// means no row does. Runs the literal recurrence through the SsmStep kernel (the cache never
  /// leaves backend memory); does not record gradients.
  V step(const V& u, Mamba3Cache<T, B>& cache, const std::vector<bool>& new_document = {}) const {
    NoGrad no_grad;
    check(u.rank() == 2 && u.shape()[1] == config.d_model, "Mamba3::step", "input must be (batch, ", config.d_model,
          "), got ", u.shape());
    const index_t batch = u.shape()[0], H = heads(), N = config.d_state, P = config.headdim, S = n_angles();
    detail::check_cache_shape("Mamba3::step", "state", cache.state.shape(), Shape{batch, H, N, P});
    detail::check_cache_shape("Mamba3::step", "angle", cache.angle.shape(), Shape{batch, H, S});
    detail::check_cache_shape("Mamba3::step", "k_prev", cache.k_prev.shape(), Shape{batch, H, R, N});
    detail::check_cache_shape("Mamba3::step", "v_prev", cache.v_prev.shape(), Shape{batch, H, R, P});
    check(new_document.empty() || static_cast<index_t>(new_document.size()) == batch, "Mamba3::step", "new_document has ",
          new_document.size(), " entries for batch ", batch);
    for (index_t b = 0; b < static_cast<index_t>(new_document.size()); ++b)
      if (new_document[static_cast<std::size_t>(b)]) cache.reset(b);

    const Branches br = project(reshape(u, Shape{batch, 1, config.d_model}));
    const kernels::SsmStepParams p{batch, H, R, N, P, S};
    p.validate("Mamba3::step");
    Tensor<T, B> y(Shape{batch, 1, H, R, P});
    kernels::SsmStepArgs<T> a;
    a.b = br.Bn.value().data();
    a.c = br.Cn.value().data();
    a.b_bias = B_bias.value().data();
    a.c_bias = C_bias.value().data();
    a.angle = br.angle.value().data();
    a.dt = br.dt.value().data();
    a.v = br.v.value().data();
    a.log_alpha = br.log_alpha.value().data();
    a.gamma = br.gamma.value().data();
    a.shift = br.shift.value().data();
    a.D = D.value().data();
    a.state = cache.state.data();
    a.theta = cache.angle.data();
    a.k_prev = cache.k_prev.data();
    a.v_prev = cache.v_prev.data();
    a.y = y.data();
    kernels::SsmStep<B>::step(p, a);
    const V yv(std::move(y));
    return reshape(output(yv, br.z), Shape{batch, config.d_model});
  }

  /// Visits in_proj.weight, dt_bias, B_norm, C_norm, B_bias, C_bias, D, (mimo_x, mimo_z, mimo_o), (norm),
  /// out_proj.weight.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    in_proj.for_each_param(visit, child_name(prefix, "in_proj"));
    visit(child_name(prefix, "dt_bias"), dt_bias);
    visit(child_name(prefix, "B_norm"), B_norm);
    visit(child_name(prefix, "C_norm"), C_norm);
    visit(child_name(prefix, "B_bias"), B_bias);
    visit(child_name(prefix, "C_bias"), C_bias);
    visit(child_name(prefix, "D"), D);
    if constexpr (R > 1) {
      visit(child_name(prefix, "mimo_x"), mimo_x);
      visit(child_name(prefix, "mimo_z"), mimo_z);
      visit(child_name(prefix, "mimo_o"), mimo_o);
    }
    if (config.is_outproj_norm) visit(child_name(prefix, "norm"), norm);
    out_proj.for_each_param(visit, child_name(prefix, "out_proj"));
  }

 private:
  // The per-token quantities in_proj and the elementwise ops give (shared by forward and step).
  struct Branches {
    V z;          // (batch, seq, d_inner)
    V v;          // (batch, seq, heads, R, P): x, up-projected for MIMO
    V Bn, Cn;     // (batch, seq, R, N): RMSNorm(B), RMSNorm(C)
    V dt;         // (batch, seq, heads)
    V log_alpha;  // A dt
    V gamma;      // lambda dt
    V shift;      // (1 - lambda) dt
    V angle;      // (batch, seq, S): raw angle projections
  };

  void check_input(const char* who, const V& u) const {
    check(u.rank() == 3 && u.shape()[2] == config.d_model, who, "input must be (batch, seq, ", config.d_model, "), got ",
          u.shape());
  }

  Branches project(const V& u) const {
    const index_t batch = u.shape()[0], seq = u.shape()[1], di = config.d_inner(), H = heads(), N = config.d_state,
                  P = config.headdim, S = n_angles();
    const V zxbc = in_proj.forward(u);  // (batch, seq, d_in_proj)
    index_t at = 0;
    auto take = [&](index_t width) {
      const V part = slice(zxbc, -1, at, at + width);
      at += width;
      return part;
    };
    Branches br;
    br.z = take(di);
    const V x = reshape(take(di), Shape{batch, seq, H, 1, P});
    br.Bn = rmsnorm(reshape(take(R * N), Shape{batch, seq, R, N}), B_norm.var, config.norm_eps);
    br.Cn = rmsnorm(reshape(take(R * N), Shape{batch, seq, R, N}), C_norm.var, config.norm_eps);
    const V dd_dt = take(H), dd_A = take(H), trap = take(H);
    br.angle = take(S);
    br.dt = softplus(dd_dt + dt_bias.var);
    const V A = clamp_max(-AAct::phi(dd_A), -config.A_floor);
    br.log_alpha = A * br.dt;
    const V lambda = sigmoid(trap);
    br.gamma = lambda * br.dt;
    br.shift = br.dt - br.gamma;
    if constexpr (R > 1) br.v = detail::repeat_new_axis(reshape(x, Shape{batch, seq, H, P}), 3, R) * mimo_x.var;
    else br.v = x;
    return br;
  }

  // y (batch, seq, heads, R, P) -> out_proj(y * silu(z)) (batch, seq, d_model); MIMO gates each
  // rank with its own z_r and sums the ranks through mimo_o. With is_outproj_norm, y is first
  // RMS-normalised over each (head, rank)'s P channels and scaled by norm (the reference's
  // RMSNormGated(d_inner, group_size=headdim, norm_before_gate=True)).
  V output(const V& y_raw, const V& z) const {
    const index_t batch = y_raw.shape()[0], seq = y_raw.shape()[1], di = config.d_inner(), H = heads(),
                  P = config.headdim;
    const V y = config.is_outproj_norm
                    ? rmsnorm(y_raw, config.norm_eps) * detail::repeat_new_axis(reshape(norm.var, Shape{H, P}), 1, R)
                    : y_raw;
    V gated;
    if constexpr (R > 1) {
      const V zr = detail::repeat_new_axis(reshape(z, Shape{batch, seq, H, P}), 3, R) * mimo_z.var;
      gated = reshape(sum(y * silu(zr) * mimo_o.var, 3), Shape{batch, seq, di});
    } else {
      gated = reshape(y, Shape{batch, seq, di}) * silu(z);
    }
    return out_proj.forward(gated);
  }
};

/// Mamba-3 SISO mixer (the reference default).
template <class T, Backend B>
using Mamba3SISO = Mamba3<T, B, SISO>;
/// Mamba-3 MIMO mixer of rank R (default 4).
template <class T, Backend B, index_t R = 4>
using Mamba3MIMO = Mamba3<T, B, MIMO<R>>;

}  // namespace megacpp
