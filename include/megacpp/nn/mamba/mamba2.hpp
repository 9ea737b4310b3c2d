// megacpp/nn/mamba/mamba2.hpp: the Mamba-2 (SSD) mixer with its doc-aware causal conv1d.
//
// Mamba-2 (Dao & Gu, "Transformers are SSMs", arXiv 2405.21060), as state-spaces/mamba
// mamba_ssm/modules/mamba2_simple.py computes it (docs/recipe.md "Mixers": the conv variant):
//
//   [z, xBC, dd_dt] = in_proj(u)
//   xBC = silu(conv1d(xBC))          causal depthwise, kernel 4, taps never cross documents
//   [x, B, C] = xBC                  B, C: (ngroups, N), head h reads group h / (heads / ngroups)
//   dt = softplus(dd_dt + dt_bias)   A = -exp(A_log)
//   H_t = exp(A dt_t) H_{t-1} + dt_t x_t B_t^T,   y_t = H_t C_t + D x_t      (ssd_minimal.py)
//   out = out_proj(RMSNorm(y * silu(z)) * norm)                              (gated RMSNorm,
//                                                                             norm_before_gate=False)
// The scan is chunked_scan with gamma = dt and no trapezoid shift; the state is zero at every
// document's first token.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/rmsnorm.hpp"
#include "megacpp/autograd/ops/shape.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/ssm_step.hpp"
#include "megacpp/nn/linear.hpp"
#include "megacpp/nn/mamba/chunked_scan.hpp"
#include "megacpp/nn/mamba/config.hpp"
#include "megacpp/nn/mamba/conv1d.hpp"
#include "megacpp/nn/mamba/decode.hpp"
#include "megacpp/nn/mamba/elementwise.hpp"
#include "megacpp/nn/mamba/sequential_scan.hpp"
#include "megacpp/autograd/module.hpp"

namespace megacpp {

/// The Mamba-2 mixer: x (batch, seq, d_model) and the batch's documents -> (batch, seq, d_model).
template <class T, Backend B>
struct Mamba2 {
  using value_type = T;    ///< element type of parameters and activations
  using backend_type = B;  ///< backend the layer runs on
  using V = Var<T, B>;     ///< the activation type

  Mamba2Config config;     ///< dimensions the layer was built with
  Linear<T, B> in_proj;    ///< (2 d_inner + 2 G N + heads, d_model): [z, x, B, C, dd_dt]
  Param<T, B> conv_weight; ///< (conv_dim, d_conv), conv_dim = d_inner + 2 G N
  Param<T, B> conv_bias;   ///< (conv_dim)
  Param<T, B> dt_bias;     ///< (heads)
  Param<T, B> A_log;       ///< (heads): A = -exp(A_log)
  Param<T, B> D;           ///< (heads): skip connection, init 1
  Param<T, B> norm;        ///< (d_inner): gain of the gated RMSNorm
  Linear<T, B> out_proj;   ///< (d_model, d_inner)

  Mamba2() = default;
  /// Builds the layer; throws megacpp::Error when the dimensions do not give a head layout.
  Mamba2(const Mamba2Config& cfg, Rng& rng) : config(cfg) {
    config.validate("Mamba2");
    const index_t di = config.d_inner(), H = heads(), G = config.ngroups, N = config.d_state, K = config.d_conv;
    in_proj = Linear<T, B>(config.d_model, 2 * di + 2 * G * N + H, rng);
    // PyTorch's Conv1d default for a depthwise filter (fan_in = K): U(-1/sqrt(K), 1/sqrt(K)).
    const double bound = 1.0 / std::sqrt(static_cast<double>(K));
    // Depthwise filters are small per-channel vectors, not hidden matrices: AdamW (Role::scalar).
    conv_weight = Param<T, B>(rand_uniform<T, B>({config.conv_dim(), K}, rng, -bound, bound), Role::scalar);
    conv_bias = Param<T, B>(rand_uniform<T, B>({config.conv_dim()}, rng, -bound, bound), Role::bias);
    std::vector<T> dtb(static_cast<std::size_t>(H)), alog(static_cast<std::size_t>(H));
    for (auto& b : dtb) b = static_cast<T>(detail::sample_dt_bias(rng, config.dt_min, config.dt_max, config.dt_init_floor));
    for (auto& a : alog) a = static_cast<T>(std::log(rng.uniform(config.A_init_min, config.A_init_max)));
    dt_bias = Param<T, B>(Tensor<T, B>::from_host({H}, dtb), Role::scalar);
    A_log = Param<T, B>(Tensor<T, B>::from_host({H}, alog), Role::scalar);
    D = Param<T, B>::filled({H}, Role::scalar, T(1));
    norm = Param<T, B>::filled({di}, Role::norm_gain, T(1));
    out_proj = Linear<T, B>(di, config.d_model, rng, config.zero_init_out_proj ? LinearInit::zeros : LinearInit::normal);
  }

  /// Number of SSM heads, d_inner / headdim.
  index_t heads() const { return config.heads(); }

  /// u (batch, seq, d_model) -> (batch, seq, d_model); no state or conv tap crosses a document of `docs`.
  V forward(const V& u, const DocumentLayout<B>& docs) const {
    check(u.rank() == 3 && u.shape()[2] == config.d_model, "Mamba2::forward", "input must be (batch, seq, ",
          config.d_model, "), got ", u.shape());
    check(docs.batch == u.shape()[0] && docs.seq == u.shape()[1], "Mamba2::forward", "document layout (", docs.batch,
          ", ", docs.seq, ") does not match input ", u.shape());
    const index_t batch = u.shape()[0], seq = u.shape()[1], di = config.d_inner(), H = heads(), G = config.ngroups,
                  N = config.d_state, P = config.headdim;
    const V zxbcdt = in_proj.forward(u);
    const V z = slice(zxbcdt, -1, 0, di);
    const V xBC = silu(causal_conv1d(slice(zxbcdt, -1, di, 2 * di + 2 * G * N), conv_weight.var, conv_bias.var, docs));
    const V dt = softplus(slice(zxbcdt, -1, 2 * di + 2 * G * N, 2 * di + 2 * G * N + H) + dt_bias.var);
    ScanInputs<T, B> in;
    in.v = reshape(slice(xBC, -1, 0, di), Shape{batch, seq, H, 1, P});
    in.k = reshape(slice(xBC, -1, di, di + G * N), Shape{batch, seq, G, 1, N});
    in.q = reshape(slice(xBC, -1, di + G * N, di + 2 * G * N), Shape{batch, seq, G, 1, N});
    in.log_alpha = dt * (-exp(A_log.var));  // A dt, A = -exp(A_log) broadcast over (batch, seq)
    in.gamma = dt;
    in.D = D.var;
    const V y = config.scan == ScanKind::chunked ? chunked_scan(in, docs, config.chunk_size) : sequential_scan(in, docs);
    return output(reshape(y, Shape{batch, seq, di}), z);
  }

  /// A zeroed decode cache for `batch` rows.
  Mamba2Cache<T, B> make_cache(index_t batch) const {
    return Mamba2Cache<T, B>::zeros(batch, config.d_conv, config.conv_dim(), heads(), config.d_state, config.headdim);
  }

  /// One decode step: u (batch, d_model) -> (batch, d_model); rows with new_document[b] start a new
  /// document (cache reset first). Runs the conv window (CausalConv1d) and the recurrence (SsmStep)
  /// on the cache in place, in backend memory; no gradients.
  V step(const V& u, Mamba2Cache<T, B>& cache, const std::vector<bool>& new_document = {}) const {
    NoGrad no_grad;
    check(u.rank() == 2 && u.shape()[1] == config.d_model, "Mamba2::step", "input must be (batch, ", config.d_model,
          "), got ", u.shape());
    const index_t batch = u.shape()[0], di = config.d_inner(), H = heads(), G = config.ngroups, N = config.d_state,
                  P = config.headdim, K = config.d_conv, C = config.conv_dim();
    detail::check_cache_shape("Mamba2::step", "conv", cache.conv.shape(), Shape{batch, K - 1, C});
    detail::check_cache_shape("Mamba2::step", "state", cache.state.shape(), Shape{batch, H, N, P});
    check(new_document.empty() || static_cast<index_t>(new_document.size()) == batch, "Mamba2::step", "new_document has ",
          new_document.size(), " entries for batch ", batch);
    for (index_t b = 0; b < static_cast<index_t>(new_document.size()); ++b)
      if (new_document[static_cast<std::size_t>(b)]) cache.reset(b);

    const V zxbcdt = in_proj.forward(u);  // (batch, d_in_proj)
    const V z = slice(zxbcdt, -1, 0, di);
    const V xBC = silu(conv_window_step(cache.conv, cache.window_docs, slice(zxbcdt, -1, di, di + C), conv_weight.var,
                                        conv_bias.var));
    const V dt = softplus(slice(zxbcdt, -1, di + C, di + C + H) + dt_bias.var);  // (batch, heads)
    const V x = slice(xBC, -1, 0, di), Bk = slice(xBC, -1, di, di + G * N), Cq = slice(xBC, -1, di + G * N, C);
    const V log_alpha = dt * (-exp(A_log.var));
    // The SsmStep contract with Mamba-2's terms: no angles, no biases, gamma = dt and no trapezoid
    // term (shift 0); the previous-token buffers it keeps for that term are scratch here.
    const kernels::SsmStepParams p{batch, H, 1, N, P, 0, G};
    p.validate("Mamba2::step");
    const Tensor<T, B> no_bias = Tensor<T, B>::zeros({H, 1, N}), no_shift = Tensor<T, B>::zeros({batch, H});
    Tensor<T, B> no_angles({batch, H, 0}), k_prev = Tensor<T, B>::zeros({batch, H, 1, N}),
        v_prev = Tensor<T, B>::zeros({batch, H, 1, P}), y({batch, H, 1, P});
    kernels::SsmStepArgs<T> a;
    a.b = Bk.value().data();
    a.c = Cq.value().data();
    a.b_bias = no_bias.data();
    a.c_bias = no_bias.data();
    a.dt = dt.value().data();
    a.v = x.value().data();
    a.log_alpha = log_alpha.value().data();
    a.gamma = dt.value().data();
    a.shift = no_shift.data();
    a.D = D.value().data();
    a.state = cache.state.data();
    a.theta = no_angles.data();
    a.k_prev = k_prev.data();
    a.v_prev = v_prev.data();
    a.y = y.data();
    kernels::SsmStep<B>::step(p, a);
    return output(reshape(V(std::move(y)), Shape{batch, di}), z);
  }

  /// Visits in_proj.weight, conv_weight, conv_bias, dt_bias, A_log, D, norm, out_proj.weight.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    in_proj.for_each_param(visit, child_name(prefix, "in_proj"));
    visit(child_name(prefix, "conv_weight"), conv_weight);
    visit(child_name(prefix, "conv_bias"), conv_bias);
    visit(child_name(prefix, "dt_bias"), dt_bias);
    visit(child_name(prefix, "A_log"), A_log);
    visit(child_name(prefix, "D"), D);
    visit(child_name(prefix, "norm"), norm);
    out_proj.for_each_param(visit, child_name(prefix, "out_proj"));
  }

 private:
  // out_proj(RMSNorm(y * silu(z)) * norm), the RMSNorm over each of the ngroups groups of channels
  // (mamba2.py: group_size = d_inner / ngroups). y, z: (..., d_inner).
  V output(const V& y, const V& z) const {
    const V gated = y * silu(z);
    if (config.ngroups == 1) return out_proj.forward(rmsnorm(gated, norm.var, config.norm_eps));
    Shape grouped = gated.shape();
    grouped.set(-1, config.ngroups);
    grouped.push_back(config.d_inner() / config.ngroups);
    const V normed = reshape(rmsnorm(reshape(gated, grouped), config.norm_eps), gated.shape()) * norm.var;
    return out_proj.forward(normed);
  }
};

}  // namespace megacpp
