// megacpp/nn/m2rnn/m2rnn.hpp: the M2RNN mixer, M2RNN<T, B>, and its decode cache.
//
// M2RNN, "Non-Linear RNNs with Matrix-Valued States for Scalable Language Modeling" (Mishra, Tan,
// Stoica, Gonzalez, Dao; arXiv 2603.14360), as the authors' layer computes it
// (open-lm-engine/lm-engine lm_engine/hf_models/modeling_utils/sequence_mixer_blocks/m2rnn.py,
// class M2RNN, with SoftplusDecayGate from decay_gate.py), per token and head (docs/m2rnn.md):
//
//   [qkv, f_in, g] = in_proj(u)                       qkv: heads (2 K + V), f_in: heads, g: heads V
//   [q, k, v] = silu(conv1d(qkv))                     causal depthwise, taps never cross documents
//   f = exp(-exp(A_log) softplus(f_in + dt_bias))     the decay gate, in (0, 1)
//   H_t = f H_{t-1} + (1 - f) tanh(H_{t-1} W + k v^T),   y = H_t^T q     (recurrence.hpp)
//   y += D v                                          (use_residual)
//   out = out_proj(RMSNorm(y silu(g)) g_norm)
//
// Document safety (docs/masking.md): the conv taps stop at a document start (causal_conv1d) and the
// recurrence resets H there; every other op acts per token. Decoding keeps the conv window and H
// per row, in backend memory, and zeroes both when a row starts a new document; its step runs the
// CausalConv1d contract on the window (conv_window_step) and the M2RNNStep contract on H.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "megacpp/autograd/grad_mode.hpp"
#include "megacpp/autograd/module.hpp"
#include "megacpp/autograd/ops/elementwise.hpp"
#include "megacpp/autograd/ops/rmsnorm.hpp"
#include "megacpp/autograd/ops/shape.hpp"
#include "megacpp/core/kernels/documents.hpp"
#include "megacpp/core/kernels/m2rnn_step.hpp"
#include "megacpp/nn/cache_shape.hpp"
#include "megacpp/nn/linear.hpp"
#include "megacpp/nn/m2rnn/config.hpp"
#include "megacpp/nn/m2rnn/recurrence.hpp"
#include "megacpp/nn/mamba/config.hpp"
#include "megacpp/nn/mamba/conv1d.hpp"
#include "megacpp/nn/mamba/elementwise.hpp"

namespace megacpp {

/// M2RNN decode cache, one entry per row of the batch.
template <class T, Backend B>
struct M2RNNCache {
  Tensor<T, B> conv;   ///< (batch, conv_kernel - 1, conv_dim): the last conv inputs, oldest first
  Tensor<T, B> state;  ///< (batch, heads, K, V): H
  DocumentLayout<B> window_docs;  ///< (batch, conv_kernel): each row's window and new token as one document

  /// A zeroed cache (every row at the start of a document).
  static M2RNNCache zeros(index_t batch, index_t width, index_t conv_dim, index_t heads, index_t k_dim, index_t v_dim) {
    return {Tensor<T, B>::zeros({batch, width - 1, conv_dim}), Tensor<T, B>::zeros({batch, heads, k_dim, v_dim}),
            DocumentLayout<B>::single_document(batch, width)};
  }
  /// Rows the cache holds.
  index_t batch() const { return state.defined() ? state.shape()[0] : 0; }
  /// Starts a new document in `row`: the conv window and the state are zeroed.
  void reset(index_t row) {
    check(row >= 0 && row < batch(), "M2RNNCache::reset", "row ", row, " out of range for batch ", batch());
    for (Tensor<T, B>* t : {&conv, &state}) {
      Tensor<T, B> r = t->rows(row, row + 1);
      if (r.numel()) r.fill(T(0));
    }
  }
};

/// The M2RNN mixer: x (batch, seq, d_model) and the batch's documents -> (batch, seq, d_model).
template <class T, Backend B>
struct M2RNN {
  using value_type = T;    ///< element type of parameters and activations
  using backend_type = B;  ///< backend the layer runs on
  using V = Var<T, B>;     ///< the activation type

  M2RNNConfig config;        ///< dimensions the layer was built with (heads resolved)
  Linear<T, B> in_proj;      ///< (conv_dim + heads + heads V, d_model): [q, k, v, f_in, g]
  Param<T, B> conv_weight;   ///< (conv_dim, conv_kernel), conv_dim = heads (2 K + V)
  Param<T, B> conv_bias;     ///< (conv_dim)
  Param<T, B> state_weight;  ///< (heads, V, V): W, init the identity (the reference's reset_parameters)
  Param<T, B> A_log;         ///< (heads): A = exp(A_log), A uniform in [A_init_min, A_init_max] at init
  Param<T, B> dt_bias;       ///< (heads): softplus(dt_bias) is dt at init, log-uniform in [dt_min, dt_max]
  Param<T, B> D;             ///< (heads, V): skip connection y += D v, init 1
  Param<T, B> g_norm;        ///< (heads V): gain of the RMSNorm before out_proj
  Linear<T, B> out_proj;     ///< (d_model, heads V)

  M2RNN() = default;
  /// Builds the layer; throws megacpp::Error when the configuration is invalid.
  M2RNN(const M2RNNConfig& cfg, Rng& rng) : config(cfg) {
    config.validate("M2RNN");
    config.heads = config.n_heads();
    const index_t H = config.heads, Vd = config.v_head_dim, C = config.conv_dim(), Kc = config.conv_kernel;
    in_proj = Linear<T, B>(config.d_model, C + H + config.inner(), rng);
    // PyTorch's Conv1d default for a depthwise filter (fan_in = width), as Mamba-2.
    const double bound = 1.0 / std::sqrt(static_cast<double>(Kc));
    conv_weight = Param<T, B>(rand_uniform<T, B>({C, Kc}, rng, -bound, bound), Role::scalar);
    conv_bias = Param<T, B>(rand_uniform<T, B>({C}, rng, -bound, bound), Role::bias);
    std::vector<T> eye(static_cast<std::size_t>(H * Vd * Vd), T(0));
    for (index_t h = 0; h < H; ++h)
      for (index_t a = 0; a < Vd; ++a) eye[static_cast<std::size_t>((h * Vd + a) * Vd + a)] = T(1);
    // A stack of per-head V x V matrices, not one hidden matrix: AdamW (Role::scalar).
    state_weight = Param<T, B>(Tensor<T, B>::from_host({H, Vd, Vd}, eye), Role::scalar);
    std::vector<T> alog(static_cast<std::size_t>(H)), dtb(alog.size());
    // A = 0 (log -inf) is a measure-zero draw of U(0, 16); the floor keeps A_log finite.
    for (auto& a : alog) a = static_cast<T>(std::log(std::max(1e-4, rng.uniform(config.A_init_min, config.A_init_max))));
    for (auto& b : dtb) b = static_cast<T>(detail::sample_dt_bias(rng, config.dt_min, config.dt_max, config.dt_init_floor));
    A_log = Param<T, B>(Tensor<T, B>::from_host({H}, alog), Role::scalar);
    dt_bias = Param<T, B>(Tensor<T, B>::from_host({H}, dtb), Role::scalar);
    D = Param<T, B>::filled({H, Vd}, Role::scalar, T(1));
    g_norm = Param<T, B>::filled({config.inner()}, Role::norm_gain, T(1));
    out_proj = Linear<T, B>(config.inner(), config.d_model, rng,
                            config.zero_init_out_proj ? LinearInit::zeros : LinearInit::normal);
  }

  /// Number of recurrent heads.
  index_t heads() const { return config.heads; }

  /// u (batch, seq, d_model) -> (batch, seq, d_model); no state or conv tap crosses a document of `docs`.
  V forward(const V& u, const DocumentLayout<B>& docs) const {
    check(u.rank() == 3 && u.shape()[2] == config.d_model, "M2RNN::forward", "input must be (batch, seq, ", config.d_model,
          "), got ", u.shape());
    check(docs.batch == u.shape()[0] && docs.seq == u.shape()[1], "M2RNN::forward", "document layout (", docs.batch, ", ",
          docs.seq, ") does not match input ", u.shape());
    const index_t batch = u.shape()[0], seq = u.shape()[1], H = heads(), K = config.k_head_dim, Vd = config.v_head_dim,
                  C = config.conv_dim();
    const V proj = in_proj.forward(u);
    const V qkv = silu(causal_conv1d(slice(proj, -1, 0, C), conv_weight.var, conv_bias.var, docs));
    const V q = reshape(slice(qkv, -1, 0, H * K), Shape{batch, seq, H, K});
    const V k = reshape(slice(qkv, -1, H * K, 2 * H * K), Shape{batch, seq, H, K});
    const V v = reshape(slice(qkv, -1, 2 * H * K, C), Shape{batch, seq, H, Vd});
    const V f = decay(slice(proj, -1, C, C + H));
    const V y = m2rnn_recurrence(q, k, v, f, state_weight.var, docs, config.gradient_clipping, config.checkpoint_every) + v * D.var;
    return output(reshape(y, Shape{batch, seq, config.inner()}), slice(proj, -1, C + H, C + H + config.inner()));
  }

  /// A zeroed decode cache for `batch` rows.
  M2RNNCache<T, B> make_cache(index_t batch) const {
    return M2RNNCache<T, B>::zeros(batch, config.conv_kernel, config.conv_dim(), heads(), config.k_head_dim,
                                   config.v_head_dim);
  }

  /// One decode step: u (batch, d_model) -> (batch, d_model); rows with new_document[b] start a new
  /// document (cache reset first). Runs the conv window (CausalConv1d) and the recurrence (M2RNNStep)
  /// on the cache in place, in backend memory; no gradients.
  V step(const V& u, M2RNNCache<T, B>& cache, const std::vector<bool>& new_document = {}) const {
    NoGrad no_grad;
    check(u.rank() == 2 && u.shape()[1] == config.d_model, "M2RNN::step", "input must be (batch, ", config.d_model,
          "), got ", u.shape());
    const index_t batch = u.shape()[0], H = heads(), K = config.k_head_dim, Vd = config.v_head_dim, C = config.conv_dim(),
                  W = config.conv_kernel;
    detail::check_cache_shape("M2RNN::step", "conv", cache.conv.shape(), Shape{batch, W - 1, C});
    detail::check_cache_shape("M2RNN::step", "state", cache.state.shape(), Shape{batch, H, K, Vd});
    check(new_document.empty() || static_cast<index_t>(new_document.size()) == batch, "M2RNN::step", "new_document has ",
          new_document.size(), " entries for batch ", batch);
    for (index_t b = 0; b < static_cast<index_t>(new_document.size()); ++b)
      if (new_document[static_cast<std::size_t>(b)]) cache.reset(b);

    const V proj = in_proj.forward(u);  // (batch, C + H + heads V)
    const V qkv = silu(conv_window_step(cache.conv, cache.window_docs, slice(proj, -1, 0, C), conv_weight.var, conv_bias.var));
    const V q = slice(qkv, -1, 0, H * K), k = slice(qkv, -1, H * K, 2 * H * K), v = slice(qkv, -1, 2 * H * K, C);
    const V f = decay(slice(proj, -1, C, C + H));  // (batch, heads)
    const kernels::M2RNNStepParams p{batch, H, K, Vd};
    p.validate("M2RNN::step");
    Tensor<T, B> y({batch, H, Vd});
    const kernels::M2RNNStepArgs<T> a{q.value().data(), k.value().data(), v.value().data(), f.value().data(),
                                      state_weight.value().data(), cache.state.data(), y.data()};
    kernels::M2RNNStep<B>::step(p, a);
    const V yv = V(std::move(y)) + reshape(v, Shape{batch, H, Vd}) * D.var;  // y += D v
    return output(reshape(yv, Shape{batch, config.inner()}), slice(proj, -1, C + H, C + H + config.inner()));
  }

  /// Visits in_proj.weight, conv_weight, conv_bias, state_weight, A_log, dt_bias, D, g_norm, out_proj.weight.
  template <class Visitor>
  void for_each_param(Visitor&& visit, const std::string& prefix = "") {
    in_proj.for_each_param(visit, child_name(prefix, "in_proj"));
    visit(child_name(prefix, "conv_weight"), conv_weight);
    visit(child_name(prefix, "conv_bias"), conv_bias);
    visit(child_name(prefix, "state_weight"), state_weight);
    visit(child_name(prefix, "A_log"), A_log);
    visit(child_name(prefix, "dt_bias"), dt_bias);
    visit(child_name(prefix, "D"), D);
    visit(child_name(prefix, "g_norm"), g_norm);
    out_proj.for_each_param(visit, child_name(prefix, "out_proj"));
  }

 private:
  // f = exp(-A softplus(f_in + dt_bias)), A = exp(A_log) (SoftplusDecayGate, final_exponential).
  // f_in: (..., heads).
  V decay(const V& f_in) const { return exp(-(softplus(f_in + dt_bias.var) * exp(A_log.var))); }

  // out_proj(RMSNorm(y silu(g)) g_norm); y, g: (..., heads V).
  V output(const V& y, const V& g) const { return out_proj.forward(rmsnorm(y * silu(g), g_norm.var, config.norm_eps)); }
};

}  // namespace megacpp
